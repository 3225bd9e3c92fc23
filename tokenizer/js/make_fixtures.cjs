// tokenizer/js/make_fixtures.cjs: reference token ids from the npm tiktoken package, committed
// as tests/fixtures/tiktoken_<encoding>.json so tests need no node (make tokenizer-fixtures).
//   node make_fixtures.cjs TIKTOKEN_PKG_DIR BROWN_TXT NLP_JSONL OUT_DIR
// Each case: the text, "ids" = encode(text, [], []) (special-token text is ordinary text) and
// "ids_special" = encode(text, "all") (special-token text becomes the special token).
"use strict";
const fs = require("fs");
const path = require("path");
const [pkg, brownPath, nlpPath, outDir] = process.argv.slice(2);
const tiktoken = require(path.resolve(pkg, "tiktoken.cjs"));
const version = JSON.parse(fs.readFileSync(path.join(pkg, "package.json"), "utf8")).version;

const tricky = [
  ["empty", ""],
  ["one_space", " "],
  ["one_newline", "\n"],
  ["contractions", "Hello, world! It's a test. I'm sure they'll've done it; we'd've. DON'T SHOUT, YOU'RE, WE'VE, THEY'LL, SHE'D; 'tis 'twas"],
  ["numbers", "Numbers: 1 12 123 1234 12345 3.14159 -42 1,000,000 2024-01-01 0x1F 007 ٣٤٥ Ⅻ ½"],
  ["whitespace", "Whitespace:   three spaces,\ttab,\t\ttwo tabs, trailing   \n\n\nnewlines\r\nCRLF  \n  indented\n \n\t\n"],
  ["unicode", "Unicode: café naïve résumé Ελληνικά русский 中文字符 日本語のテキスト 한국어 العربية עברית हिन्दी ภาษาไทย e\u0301 ﬁ"],
  ["emoji", "Emoji: 😀 👍🏽 👨‍👩‍👧‍👦 🇺🇸 ❤️ ✨🚀 a😀b"],
  ["specials", "Specials: <|endoftext|> in the middle <|endoftext|><|endoftext|> and <|fim_prefix|>x<|fim_suffix|> <|endofprompt|> <|endoftext"],
  ["code", "def f(x):\n    return x**2 + 1  # comment\n\nif __name__ == '__main__':\n\tprint(f(3))\n"],
  ["punctuation", "... !!! ??? --- ''' \"\"\" ((())) [[[ ]]] {{{ }}} @@@ ### $$$ %%% ^^^ &&& *** «» “quoted” ‘single’ — –"],
  ["case_folding", "IT'S it'S It'ſ he'K we'LL"],
  ["unicode_space", "NEL\u0085and NBSP\u00a0and ideographic\u3000space, zero-width\u200bspace, line\u2028sep \u0085\u0085x"],
  ["edges", "  leading and trailing spaces  "],
  ["long_letters", "a".repeat(150) + " " + "ab".repeat(90)],
  ["long_digits", "1234567890".repeat(20)],
  ["long_spaces", " ".repeat(300) + "x" + "\n".repeat(120)],
  ["long_punct", "-=".repeat(80) + "!?" .repeat(60)],
  // letters and digits Unicode added in 15 and 16, and U+180E (no longer \s since Unicode 6.3):
  // a pre-tokenizer with older Unicode tables splits these differently (issue 10)
  ["letter16_s", "\u1c89's"],
  ["letter16_re", "\u{105c0}'re"],
  ["letter16_ll", "\u{10ec2}'ll"],
  ["digit16_first", "\u{10d40}123"],
  ["digit16_second", "1\u{10d40}23"],
  ["u180e", " \u180ea a\u180e b \u180e\u180e x"],
  // o200k's upper/lower letter classes, marks, and its [\r\n/]* tail
  ["case_runs", "HelloWorld ABCdef aBC DEF's CamelCASEWord x\u01c5y \u02b0A\u02b0 \u0301x a\u0301b ( \u0301"],
  ["paths", "see /usr/local/bin/ and C:\\dir\\x.txt;\n// comment\n/x/ !/\n/"],
];

function cases() {
  const out = tricky.map(([name, text]) => ({ name, text }));
  const brown = fs.readFileSync(brownPath, "utf8").split("\n").filter((l) => l.length);
  for (const i of [0, 137, 250, 499]) out.push({ name: `brown_${i}`, text: brown[i].slice(0, 1500) });
  const nlp = fs.readFileSync(nlpPath, "utf8").split("\n").filter((l) => l.length).map((l) => JSON.parse(l).text);
  const nonAscii = nlp.filter((t) => /[^\x00-\x7f]/.test(t)).slice(0, 12);
  const digits = nlp.filter((t) => /\d{4}/.test(t) && /'/.test(t)).slice(0, 6);
  nlp.slice(0, 12).concat(nonAscii, digits).forEach((text, k) => out.push({ name: `nlp_${k}`, text }));
  return out;
}

const all = cases();
for (const name of ["gpt2", "r50k_base", "p50k_base", "p50k_edit", "cl100k_base", "o200k_base"]) {
  const enc = tiktoken.get_encoding(name);
  const lines = all.map((c) => "  " + JSON.stringify({
    name: c.name, text: c.text,
    ids: Array.from(enc.encode(c.text, [], [])),
    ids_special: Array.from(enc.encode(c.text, "all")),
  }));
  enc.free();
  const body = `{"generator": "tokenizer/js/make_fixtures.cjs", "tiktoken": "${version}", "encoding": "${name}", "cases": [\n` +
    lines.join(",\n") + "\n]}\n";
  const out = path.join(outDir, `tiktoken_${name}.json`);
  fs.writeFileSync(out + ".tmp", body);
  fs.renameSync(out + ".tmp", out);
  console.error(`${out}: ${all.length} cases, ${body.length} bytes`);
}
