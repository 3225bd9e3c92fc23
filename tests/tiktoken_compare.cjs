// tests/tiktoken_compare.cjs: bin/tokenizer against the npm tiktoken package (the reference),
// run by tests/it_tokenizer_tiktoken.sh:
//   node tests/tiktoken_compare.cjs TIKTOKEN_DIR UCD_DIR TOKENIZER WORK_DIR SEED
// 1. Pieces. For each of tiktoken's patterns (gpt2, cl100k_base, o200k_base), both sides encode
//    the same texts with a probe vocabulary that holds every substring of those texts as a
//    token (plus the 256 bytes), so every piece of the pre-tokenizer is one token and the ids
//    name the pieces exactly: a split that differs always shows, which real vocabularies do not
//    promise (two splits can merge to the same ids). The texts: every code point at either
//    edge of a range of each general category and of White_Space, and the code points just
//    outside, each in contexts where the classes the patterns test (\s, \p{L}, \p{N}, Lu/Lt,
//    Ll, Lm/Lo, M, the rest) split differently; the cases issue 10 listed; random short
//    strings (seeded).
// 2. Ids. Every encoding bin/tokenizer claims, with its real vocabulary, on random longer
//    strings (seeded) and the same listed cases.
// One line per check, the seed on any failure (FT_FUZZ_SEED=S repeats a run), and a closing
// "N passed, M failed". Runs in a few seconds. With FT_TIKTOKEN_ALL=1 the piece check runs on
// every code point instead of the category edges (minutes; not part of make test).
"use strict";
const fs = require("fs");
const path = require("path");
const { execFileSync } = require("child_process");
const { pathToFileURL } = require("url");

const [tkDir, ucdDir, tokBin, work, seedArg] = process.argv.slice(2);
const SEED = Number(seedArg) >>> 0;
const { Tiktoken, get_encoding } = require(path.resolve(tkDir, "tiktoken.cjs"));
const ENCODINGS = ["gpt2", "r50k_base", "p50k_base", "p50k_edit", "cl100k_base", "o200k_base"];
const PATTERNS = ["gpt2", "cl100k_base", "o200k_base"];
const N_RANDOM_SHORT = 2000, N_RANDOM_LONG = 200;

let passed = 0, failed = 0;
function check(ok, what, detail) {
  if (ok) passed++;
  else {
    failed++;
    console.log(`FAIL: ${what} (seed ${SEED}: FT_FUZZ_SEED=${SEED} repeats it)\n${detail}`);
  }
}

// splitmix32: a seeded generator, so a failing run can be repeated
let rs = SEED;
function rand() {
  rs = (rs + 0x9e3779b9) >>> 0;
  let z = rs;
  z = Math.imul(z ^ (z >>> 16), 0x85ebca6b) >>> 0;
  z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35) >>> 0;
  return ((z ^ (z >>> 16)) >>> 0) / 4294967296;
}
const pick = (a) => a[Math.floor(rand() * a.length)];

const GC = ["Uppercase_Letter", "Lowercase_Letter", "Titlecase_Letter", "Modifier_Letter", "Other_Letter",
  "Nonspacing_Mark", "Spacing_Mark", "Enclosing_Mark", "Decimal_Number", "Letter_Number", "Other_Number",
  "Connector_Punctuation", "Dash_Punctuation", "Open_Punctuation", "Close_Punctuation", "Initial_Punctuation",
  "Final_Punctuation", "Other_Punctuation", "Math_Symbol", "Currency_Symbol", "Modifier_Symbol", "Other_Symbol",
  "Space_Separator", "Line_Separator", "Paragraph_Separator", "Control", "Format", "Private_Use", "Unassigned"];
const isScalar = (cp) => cp >= 0 && cp <= 0x10ffff && !(cp >= 0xd800 && cp <= 0xdfff);
const U = (cp) => "U+" + cp.toString(16).toUpperCase().padStart(4, "0");
const showText = (t) => Array.from(t, (c) => (c >= " " && c <= "~" ? c : U(c.codePointAt(0)))).join(" ");

// The cases issue 10 listed (letters and digits added in Unicode 15 and 16, U+180E), and
// case folding in the contractions.
const LISTED = [
  "\u1c89's", "\u{105c0}'re", "\u{10ec2}'ll", "\u{10d40}123", "1\u{10d40}23", " \u180ea", "a\u180e b", "\u180e\u180e x",
  "IT'ſ it'S he'K we'LL 'ſ 'Re 'vE", "\u1c89\u1c8a'S", "x\u{1e5d0}\u{1e5d1}\u{1e5d2}\u{1e5d3}9",
];

// Contexts around a code point X whose split tells the classes the patterns test apart: "aX"
// (\p{L}; and o200k's Ll-like class, which takes "a"), "1X" (\p{N}), "!X" ([^\s\p{L}\p{N}]),
// "X  b" (\s: X joins the spaces), "XAX" (o200k's Lu-like class, which takes "A").
const CONTEXTS = [(x) => `a${x}`, (x) => `1${x}`, (x) => `!${x}`, (x) => `${x}  b`, (x) => `${x}A${x}`];

async function loadRanges(rel) {
  return (await import(pathToFileURL(path.resolve(ucdDir, rel, "ranges.mjs")).href)).default;
}

// Code points to probe: both edges of every range and their outside neighbours.
async function boundaryCases(pools) {
  const cps = new Map(); // code point -> category it was found at the edge of
  const dirs = GC.map((g) => "General_Category/" + g).concat(["Binary_Property/White_Space"]);
  for (const dir of dirs) {
    const ranges = await loadRanges(dir);
    pools.push(ranges);
    for (const r of ranges)
      for (const cp of [r.begin - 1, r.begin, r.end - 1, r.end])
        if (isScalar(cp) && !cps.has(cp)) cps.set(cp, dir.split("/")[1]);
  }
  const cases = [];
  for (const [cp, cat] of cps) {
    const x = String.fromCodePoint(cp);
    CONTEXTS.forEach((ctx, k) => cases.push({ name: `${cat} edge ${U(cp)} context ${k}`, text: ctx(x) }));
  }
  return { cases, n: cps.size };
}

// A random string of n code points, drawn from pools that hit every class and the characters
// the patterns name (apostrophe, contraction letters and their foldings, \r \n / space).
function randomText(n, pools) {
  const special = [..."'''sStTrReEvVmMlLdD \r\n/", "\u017f", "\u212a", "\u180e", "\u200b", "\u0085", "\u00a0", "\u3000"];
  let s = "";
  for (let i = 0; i < n; i++) {
    const u = rand();
    let cp;
    if (u < 0.25) cp = 0x20 + Math.floor(rand() * 95);
    else if (u < 0.45) { s += pick(special); continue; }
    else if (u < 0.9) {
      const r = pick(pick(pools));
      cp = r.begin + Math.floor(rand() * (r.end - r.begin));
    } else cp = Math.floor(rand() * 0x110000);
    if (!isScalar(cp)) cp = 0xfffd;
    s += String.fromCodePoint(cp);
  }
  return s;
}

function writeDocs(file, cases) {
  fs.writeFileSync(file, cases.map((c) => JSON.stringify({ text: c.text })).join("\n") + "\n");
}

// Our ids for each case, through `tokenizer ids --docs jsonl`.
function ours(vocab, cases, tag) {
  const docs = path.join(work, `${tag}.jsonl`), out = path.join(work, `${tag}.ids`);
  writeDocs(docs, cases);
  execFileSync(tokBin, ["ids", "--vocab", vocab, "--docs", "jsonl", "--out", out, docs], { stdio: ["ignore", "ignore", "inherit"] });
  const lines = fs.readFileSync(out, "utf8").split("\n");
  return cases.map((_, i) => (lines[i] ? lines[i].split(" ").map(Number) : []));
}

function compare(what, cases, mine, enc, show) {
  const diffs = [];
  cases.forEach((c, i) => {
    const want = Array.from(enc.encode(c.text, [], []));
    const got = mine[i];
    if (got.length === want.length && got.every((x, k) => x === want[k])) return;
    diffs.push(`  ${c.name}\n    text: ${showText(c.text)}\n    ours:     ${show(got)}\n    tiktoken: ${show(want)}`);
  });
  console.log(`${what}: ${cases.length} texts, ${diffs.length} differ`);
  check(diffs.length === 0, `${what}: ${diffs.length} texts differ, the first ones:`, diffs.slice(0, 5).join("\n"));
}

// A vocabulary holding the 256 bytes and every substring of the texts (at code point edges).
function probeVocab(cases) {
  const tokens = new Map();
  for (let b = 0; b < 256; b++) tokens.set(Buffer.from([b]).toString("latin1"), b);
  for (const c of cases) {
    const chars = Array.from(c.text);
    for (let i = 0; i < chars.length; i++) {
      let sub = "";
      for (let j = i; j < chars.length; j++) {
        sub += chars[j];
        const key = Buffer.from(sub, "utf8").toString("latin1");
        if (!tokens.has(key)) tokens.set(key, tokens.size);
      }
    }
  }
  const byId = [];
  for (const [k, id] of tokens) byId[id] = k;
  return { ranks: "! 0 " + byId.map((k) => Buffer.from(k, "latin1").toString("base64")).join(" "), byId };
}

// Check 1 for one list of texts, under each pattern.
function checkPieces(cases) {
  const probe = probeVocab(cases);
  const showPieces = (ids) => JSON.stringify(ids.map((id) => (probe.byId[id] === undefined ? `#${id}` : Buffer.from(probe.byId[id], "latin1").toString("utf8"))));
  for (const name of PATTERNS) {
    const pat = JSON.parse(fs.readFileSync(path.join(tkDir, "encoders", name + ".json"), "utf8")).pat_str;
    const file = path.join(work, `probe_${name}.json`);
    fs.writeFileSync(file, JSON.stringify({ pat_str: pat, special_tokens: {}, bpe_ranks: probe.ranks }));
    const enc = new Tiktoken(probe.ranks, {}, pat);
    compare(`pieces, ${name} pattern`, cases, ours(file, cases, `pieces_${name}`), enc, showPieces);
    enc.free();
  }
}

async function main() {
  fs.mkdirSync(work, { recursive: true });
  console.log(`seed ${SEED}`);
  const pools = [];
  const edges = await boundaryCases(pools);
  if (process.env.FT_TIKTOKEN_ALL === "1") {
    const CHUNK = 1 << 15;
    for (let lo = 0; lo < 0x110000; lo += CHUNK) {
      const cases = [];
      for (let cp = lo; cp < lo + CHUNK; cp++)
        if (isScalar(cp)) CONTEXTS.forEach((ctx, k) => cases.push({ name: `${U(cp)} context ${k}`, text: ctx(String.fromCodePoint(cp)) }));
      console.log(`code points ${U(lo)}..${U(lo + CHUNK - 1)}`);
      checkPieces(cases);
    }
    console.log(`${passed} passed, ${failed} failed`);
    process.exitCode = failed ? 1 : 0;
    return;
  }
  const listed = LISTED.map((text, k) => ({ name: `listed case ${k}`, text }));
  const shortRandom = [];
  for (let i = 0; i < N_RANDOM_SHORT; i++) shortRandom.push({ name: `random short ${i}`, text: randomText(1 + Math.floor(rand() * 10), pools) });
  console.log(`pieces: ${edges.n} code points at category edges x ${CONTEXTS.length} contexts, ${listed.length} listed, ${N_RANDOM_SHORT} random`);
  checkPieces(edges.cases.concat(listed, shortRandom));
  const longRandom = listed.slice();
  for (let i = 0; i < N_RANDOM_LONG; i++) longRandom.push({ name: `random ${i}`, text: randomText(10 + Math.floor(rand() * 70), pools) });
  for (const name of ENCODINGS) {
    const enc = get_encoding(name);
    compare(`ids, ${name}`, longRandom, ours(name, longRandom, `ids_${name}`), enc, (ids) => JSON.stringify(ids));
    enc.free();
  }
  console.log(`${passed} passed, ${failed} failed`);
  process.exitCode = failed ? 1 : 0;
}
main().catch((e) => {
  console.log(`FAIL: ${e.message} (seed ${SEED})`);
  console.log(`${passed} passed, ${failed + 1} failed`);
  process.exitCode = 1;
});
