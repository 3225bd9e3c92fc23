// tests/live/screenshot.cjs URL OUT.png [PROMPT]: opens bin/live's page in Debian's chromium
// (headless, playwright-core), asks the samples box for four latents of PROMPT when a sampler
// service is alive, and writes a screenshot of the whole page (the README's is made this way
// during `make demo`: DEMO_SCREENSHOT=docs/live-demo.png make demo).
'use strict';
const path = require('path');
const fs = require('fs');
const { chromium } = require(path.resolve('build/npm/playwright-core/package'));
const [url, out, prompt] = process.argv.slice(2);
(async () => {
  const profile = fs.mkdtempSync(path.join(require('os').tmpdir(), 'live-shot-'));
  const ctx = await chromium.launchPersistentContext(profile, {
    executablePath: '/usr/bin/chromium', headless: true, viewport: { width: 1400, height: 1000 },
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
      '--disable-component-update', '--disable-sync'],
  });
  const page = await ctx.newPage();
  await page.goto(url);
  await page.waitForSelector('#chart-loss canvas', { timeout: 60000 });
  if (prompt && await page.$('#health tr[data-kind="sampler"][data-status="alive"]')) {
    await page.fill('#prompt', prompt);
    await page.fill('#n', '4');
    await page.fill('#temperature', '0');
    await page.click('#sample-go');
    await page.waitForSelector('#sample-out .sample', { timeout: 60000 }).catch(() => {});
  }
  await new Promise((r) => setTimeout(r, 1000));
  await page.screenshot({ path: out, fullPage: true });
  await ctx.close();
  fs.rmSync(profile, { recursive: true, force: true });
  console.log('screenshot: ' + out);
})().catch((e) => { console.error('screenshot: ' + e.message); process.exit(1); });
