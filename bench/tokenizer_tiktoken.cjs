// bench/tokenizer_tiktoken.cjs: the reference side of bench/bench_tokenizer.sh.
//   node bench/tokenizer_tiktoken.cjs TIKTOKEN_PKG_DIR ENCODING TEXT_FILE REPEAT IDS_OUT
// Encodes the whole file with the npm tiktoken package (WASM) REPEAT times, prints
// {"mb_s": median MB/s, "n_tokens": N} on stdout and writes the ids, space-separated, to
// IDS_OUT so the caller can compare them with ours. MB = 1e6 bytes of UTF-8.
"use strict";
const fs = require("fs");
const path = require("path");
const [pkg, name, file, repeatStr, idsOut] = process.argv.slice(2);
const { get_encoding } = require(path.resolve(pkg, "tiktoken.cjs"));
const enc = get_encoding(name);
const buf = fs.readFileSync(file);
const text = buf.toString("utf8");
const times = [];
let ids;
for (let r = 0; r < Number(repeatStr); r++) {
  const t0 = process.hrtime.bigint();
  ids = enc.encode(text);
  times.push(Number(process.hrtime.bigint() - t0) / 1e9);
}
times.sort((a, b) => a - b);
const med = times[Math.floor(times.length / 2)];
// Join in chunks: one giant join of millions of numbers is slow and memory-hungry.
const fd = fs.openSync(idsOut, "w");
const CH = 1 << 16;
for (let i = 0; i < ids.length; i += CH) {
  const part = Array.prototype.join.call(ids.subarray(i, i + CH), " ");
  fs.writeSync(fd, (i ? " " : "") + part);
}
fs.writeSync(fd, "\n");
fs.closeSync(fd);
enc.free();
console.log(JSON.stringify({ mb_s: buf.length / med / 1e6, n_tokens: ids.length, seconds: med }));
