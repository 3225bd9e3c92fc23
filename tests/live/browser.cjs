// tests/live/browser.cjs: drives bin/live's page in Debian's chromium (headless, through
// playwright-core from npm) while tests/it_live.sh runs a short training run. Each check
// prints "ok DESC" or "FAIL: DESC"; the shell script counts them.
//
//   node tests/live/browser.cjs   (environment: LIVE_URL, LIVE_PORT, W, RUN, L0_PID, LIVE_PID,
//                                  EVAL_CMD, SAMPLER_CMD, RESTART_CMD: shell lines the script runs)
'use strict';
const path = require('path');
const fs = require('fs');
const { spawn, execSync } = require('child_process');
const { chromium } = require(path.resolve('build/npm/playwright-core/package'));

const env = process.env;
const W = env.W, RUN = env.RUN;
let failed = 0;
function check(desc, cond) {
  if (cond) console.log('ok ' + desc);
  else { failed++; console.log('FAIL: ' + desc); }
}
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
// polls fn() until it returns something truthy; the value, or null after ms
async function until(fn, ms) {
  const end = Date.now() + ms;
  for (;;) {
    let v = null;
    try { v = await fn(); } catch (e) { v = null; }
    if (v) return v;
    if (Date.now() > end) return null;
    await sleep(200);
  }
}
function sh(cmd) { // a background shell line of the test (its pid is written to W/pids)
  const p = spawn('bash', ['-c', cmd], { stdio: 'ignore', detached: false });
  fs.appendFileSync(path.join(W, 'pids'), p.pid + '\n');
  return p;
}

(async () => {
  const profile = fs.mkdtempSync(path.join(W, 'chromium-profile-'));
  const ctx = await chromium.launchPersistentContext(profile, {
    executablePath: '/usr/bin/chromium', headless: true, viewport: { width: 1400, height: 1300 },
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
      '--disable-component-update', '--disable-sync'],
  });
  const page = await ctx.newPage();
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  await page.goto(env.LIVE_URL);
  const points = () => page.evaluate(() => Number((document.getElementById('chart-loss') || {}).dataset?.points || 0));
  const status = (kind, name) => page.evaluate(([k, n]) => {
    const r = document.querySelector(`#health tr[data-kind="${k}"][data-name="${n}"]`);
    return r ? r.dataset.status : null;
  }, [kind, name]);

  // 1. the loss curve, growing while the run trains
  const p1 = await until(async () => { const p = await points(); return p >= 3 ? p : null; }, 60000);
  check(`the loss curve is drawn (${p1} points)`, p1 >= 3);
  check('uPlot was vendored and draws it', await page.evaluate(() => window.liveDebug.haveUplot && !!document.querySelector('#chart-loss canvas')));
  const p2 = await until(async () => { const p = await points(); return p >= (p1 || 0) + 5 ? p : null; }, 30000);
  check(`the loss curve grows while the run trains (${p1} then ${p2} points)`, p2 > p1);
  check('the trainer is shown alive, with its wait on data', (await status('trainer', RUN)) === 'alive' &&
    await page.evaluate((r) => /waited .* s on data/.test(document.querySelector(`#health tr[data-kind="trainer"][data-name="${r}"]`).textContent), RUN));
  check('the loaders are shown alive with their batches', (await status('loader', 'l0')) === 'alive' && (await status('loader', 'l1')) === 'alive');
  const runText = () => page.evaluate((r) => (document.querySelector(`#runs label[data-run="${r}"]`) || {}).textContent || '', RUN);
  const ckptShown = await until(async () => /checkpoint \d+ \(\d+ s ago\)/.test(await runText()), 60000);
  check(`the last checkpoint and its age are shown (${await runText()})`, !!ckptShown);

  // 2. an evaluator started mid-run adds its points
  sh(env.EVAL_CMD);
  const evp = await until(() => page.evaluate(() => {
    const c = document.getElementById('chart-eval-val_ce') || document.getElementById('chart-eval-val_ce_enc');
    return c && Number(c.dataset.points) >= 1 ? Number(c.dataset.points) : null;
  }), 60000);
  check(`an evaluator started mid-run adds its points (${evp})`, evp >= 1);
  const evAlive = await until(() => page.evaluate(() => document.querySelector('#health tr[data-kind="evaluator"][data-status="alive"]') !== null), 10000);
  check('the evaluator is shown alive', !!evAlive);

  // 3. a killed loader is shown gone within a few seconds
  process.kill(Number(env.L0_PID), 'SIGKILL');
  const t0 = Date.now();
  const gone = await until(async () => (await status('loader', 'l0')) === 'gone', 10000);
  const goneS = (Date.now() - t0) / 1000;
  check(`a killed loader is shown gone (after ${goneS.toFixed(1)} s)`, gone && goneS < 6);
  check('the other loader is still alive', (await status('loader', 'l1')) === 'alive');

  // 4. samples: the prompt through bin/live to a sampler service, four latents side by side
  sh(env.SAMPLER_CMD);
  const sAlive = await until(() => page.evaluate(() => document.querySelector('#health tr[data-kind="sampler"][data-status="alive"]') !== null), 60000);
  check('the sampler service is shown alive', !!sAlive);
  await page.fill('#prompt', 'K>');
  await page.fill('#n', '4');
  await page.fill('#temperature', '0');
  await page.fill('#max_new', '24');
  await page.click('#sample-go');
  const texts = await until(async () => {
    const t = await page.$$eval('#sample-out .sample u', (els) => els.map((e) => e.textContent));
    return t.length ? t : null;
  }, 60000);
  check(`a sample request returns text (${texts ? texts.length : 0} samples: ${JSON.stringify(texts)})`,
    texts && texts.length === 4 && texts.every((t) => t.length > 0));
  check('the samples are labelled by latent (a Free Transformer)', await page.$$eval('#sample-out .sample b', (els) => els.length === 4 && els[0].textContent === 'latent 0'));
  // the Log box: the programs' own lines (log/<program> events), the newest in view
  const logLines = await until(() => page.evaluate(() => {
    const el = document.getElementById('log'), t = el.textContent;
    return /^trainer: \S+ model, \d+ parameters/m.test(t) && /^trainer: checkpoint \S+ written \(step \d+\)$/m.test(t) &&
      /^evaluator: lv step \d+ val: /m.test(t) && el.scrollTop + el.clientHeight >= el.scrollHeight - 4 ? t.split('\n').length : null;
  }), 30000);
  check(`the Log box shows the trainer's start and checkpoints and the evaluator's results, the newest in view (${logLines} lines)`, !!logLines);
  const shot = path.join(W, 'live.png');
  await page.screenshot({ path: shot, fullPage: true });
  check('a screenshot was written (' + shot + ')', fs.existsSync(shot) && fs.statSync(shot).size > 10000);

  // 5. bin/live killed and restarted: the page reloads and shows the whole history (from disk)
  const before = await page.evaluate((r) => window.liveDebug.points(r, 'loss'), RUN);
  const seqBefore = await page.evaluate(() => window.liveDebug.seq());
  process.kill(Number(env.LIVE_PID), 'SIGKILL');
  await sleep(500);
  sh(env.RESTART_CMD);
  const back = await until(async () => {
    const s = await page.evaluate(() => ({ seq: window.liveDebug.seq(), conn: document.getElementById('conn').textContent }));
    return s.conn === 'live' && s.seq !== seqBefore ? s : null;
  }, 30000);
  const after = await page.evaluate((r) => window.liveDebug.points(r, 'loss'), RUN);
  const first = await page.evaluate(async (r) => (await (await fetch('/api/series?run=' + r + '&name=loss&points=1&to=1')).json()).points, RUN);
  const all = await page.evaluate(async (r) => (await (await fetch('/api/series?run=' + r + '&name=loss')).json()).points, RUN);
  const last = all.length ? all[all.length - 1][0] : 0;
  check(`a restarted bin/live is picked up by the open page (${JSON.stringify(back)})`, !!back);
  // As many points as before -- unless the run went past the 2048-point cap meanwhile: then the
  // documented rule (docs/live.md, Memory) thinned the older three quarters, leaving at least 1280.
  const thinned = last > 2048;
  check(`the restarted one has the whole history from disk (${before} points before, ${after} after, last step ${last}${thinned ? ', thinned by the 2048-point rule' : ''}, first ${JSON.stringify(first)})`,
    (after >= before || (thinned && after >= 1280)) && first.length === 1 && first[0][0] === 1);
  check('no error in the page', errors.length === 0 || (console.log(errors.join('\n')), false));
  await ctx.close();
  fs.rmSync(profile, { recursive: true, force: true });
})().catch((e) => { failed++; console.log('FAIL: ' + (e && e.stack || e)); }).finally(() => process.exit(failed ? 1 : 0));
