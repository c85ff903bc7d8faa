// tiktoken's side of the tokenizer tests (the reference the C decoder must match).
//   node test/tiktoken_helper.mjs encode TEXT_OUT IDS_OUT    writes a varied text and its GPT-2 ids
//   node test/tiktoken_helper.mjs reencode DECODED SHARD     exits 0 iff encoding DECODED gives SHARD's tokens
import fs from "node:fs";
import path from "node:path";
import { createRequire } from "node:module";
import { fileURLToPath } from "node:url";

// tiktoken is installed under data/, not next to this file.
const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const { get_encoding } = createRequire(path.join(root, "data", "package.json"))("tiktoken");
const enc = get_encoding("gpt2");
const [mode, a, b] = process.argv.slice(2);

if (mode === "encode") {
  // Things byte-level BPE has to get exactly right: multi-byte UTF-8 split across
  // tokens, runs of whitespace, contractions, digits, and text that looks special.
  const text = [
    "Hello world! It's a test: don't, won't, they'll, we've, I'd, you're.",
    "Digits 0123456789 and 3.14159, -42, 1e-9, 2024-05-20.",
    "Whitespace:   three spaces,\ttab,\t\t\ttabs,\n\n\nnewlines,  \n  \r\n mixed.",
    "Ünïcödé: café naïve Øresund, Ελληνικά, русский, 日本語のテキスト, 한국어, עברית, العربية.",
    "Emoji: 👍🏽 👩‍👩‍👧‍👦 🇺🇸 and combining e\u0301 vs \u00e9; zero width\u200bjoiner.",
    "Text that looks special: <|endoftext|> is just text here.",
    "    def f(x):\n        return x ** 2  # code\n",
    "",
  ].join("\n");
  fs.writeFileSync(a, text);
  fs.writeFileSync(b, Array.from(enc.encode_ordinary(text)).join(" ") + "\n");
} else if (mode === "reencode") {
  const text = fs.readFileSync(a, "utf8");
  const buf = fs.readFileSync(b);
  const n = buf.readInt32LE(8);
  const want = new Uint16Array(n);
  for (let i = 0; i < n; i++) want[i] = buf.readUInt16LE(1024 + 2 * i);
  // The shard's own end-of-text tokens come back as the literal "<|endoftext|>".
  const got = enc.encode(text, "all");
  let same = got.length === n;
  for (let i = 0; same && i < n; i++) same = got[i] === want[i];
  console.log(`re-encoded ${got.length} tokens, shard has ${n}: ${same ? "identical" : "DIFFERENT"}`);
  process.exit(same ? 0 : 1);
} else {
  console.error("usage: tiktoken_helper.mjs encode|reencode A B");
  process.exit(2);
}
enc.free();
