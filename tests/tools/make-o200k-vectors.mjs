#!/usr/bin/env node
// Writes tests/data/o200k_vectors.json: token ids of the o200k vocabulary (gpt-4o's, and with the
// harmony special tokens gpt-oss's) for a varied corpus, from two tokenizers outside npullm that
// must agree before anything is written:
//   - js-tiktoken (the JavaScript port of OpenAI's tiktoken), encoding "o200k_base";
//   - gpt-tokenizer (an independent JavaScript BPE), encoding "o200k_harmony".
// Plain texts are encoded by both without special tokens; the harmony texts (chat markup such as
// "<|start|>user<|message|>...") by js-tiktoken given gpt-oss's special tokens, every one allowed,
// checked against gpt-tokenizer on the text between them. The special tokens' texts and ids are
// read back from gpt-tokenizer (decode of each id past the ranks).
// tests/genai/test_o200k_tokenizer.cpp builds npullm's byte-level BPE tokenizer from js-tiktoken's
// ranks file (the same vocabulary a gpt-oss GGUF carries, tokenizer.ggml.pre = "gpt-4o") and checks
// every case id for id.
//
//   npm install --prefix build/test-data js-tiktoken@1.0.21 gpt-tokenizer@4.0.0
//   node tests/tools/make-o200k-vectors.mjs [NODE_MODULES_PARENT] [SHARED_DIR]
import { createRequire } from "node:module";
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const repo = path.resolve(here, "..", "..");
const modulesParent = path.resolve(process.argv[2] ?? process.env.NPULLM_TEST_DATA ?? path.join(repo, "build", "test-data"));
const shared = path.resolve(process.argv[3] ?? process.env.NPULLM_SHARED_DIR ?? path.join(repo, "..", "shared"));

const require = createRequire(path.join(modulesParent, "package.json"));
const load = async (spec) => import(pathToFileURL(require.resolve(spec)).href);
const jsTiktoken = await load("js-tiktoken");
const o200kRanks = (await load("js-tiktoken/ranks/o200k_base")).default;
const harmony = await load("gpt-tokenizer/encoding/o200k_harmony");
const versionOf = (name) =>
  JSON.parse(fs.readFileSync(path.join(modulesParent, "node_modules", name, "package.json"), "utf8")).version;


// Every id past the ranks is a special token of o200k_harmony (gpt-oss's vocabulary: 201088):
// the named ones (<|start|>, <|channel|>, ...) and "<|reserved_ID|>" for the rest.
const nRanks = Object.keys(o200kRanks.bpe_ranks.split(" ")).length - 2;
// (gpt-tokenizer's vocabularySize counts one more than the ids it can decode: the first id it
// cannot decode ends the vocabulary.)
const special_tokens = {};
let nVocab = nRanks;
for (;; ++nVocab) {
  let text;
  try {
    text = harmony.decode([nVocab]);
  } catch {
    break;
  }
  // The reserved ids are all "<|reserved_ID|>"; only the named ones are listed.
  if (text === `<|reserved_${nVocab}|>`) continue;
  if (text.startsWith("<|reserved_")) throw new Error(`id ${nVocab} decodes to ${text}`);
  special_tokens[text] = nVocab;
}

// js-tiktoken with gpt-oss's special tokens (o200k_harmony): the named ones and the reserved ids.
const harmonySpecials = { ...special_tokens };
for (let id = nRanks; id < nVocab; ++id) if (!Object.values(special_tokens).includes(id)) harmonySpecials[`<|reserved_${id}|>`] = id;
const tiktoken = new jsTiktoken.Tiktoken(o200kRanks, harmonySpecials);

// llama.cpp's tokenizer test texts (the same for every vocabulary), then texts aimed at o200k's
// pattern: case runs inside words, contractions as suffixes, three-digit groups, "/" after
// punctuation, CR/LF runs, marks, CJK, emoji, code.
const ggmlTexts = fs
  .readFileSync(path.join(shared, "models", "vocab", "ggml-vocab-llama-bpe.gguf.inp"), "utf8")
  .split("\n__ggml_vocab_test__\n")
  .filter((t, i, all) => i < all.length - 1 || t !== "");
const extra = [
  "Hello world",
  "HelloWorld helloWorld HELLOworld XMLHttpRequest getHTTPResponseCode",
  "I'M SURE THEY'LL GO, they'Re sure it'S 'd 's don't WON'T y'all o'clock",
  "1 12 123 1234 12345 1234567890 3.14159 -42 +7 1e10 0x1F 2026-11-29",
  "line one\nline two\r\nline three\n\n\n  indented\n\r\n\r\n",
  "tabs\tand\t\tmore\t   \t end",
  "path/to/file.txt https://example.com/a/b?c=d&e=f ./run.sh --flag=/x/",
  "))/ ;/\n/ ...//\n// comment\n/* block */",
  "def f(x):\n    return x ** 2  # square\n\nprint(f(3))\n",
  "for (int i = 0; i < n; ++i) { sum += a[i] * b[i]; }\n",
  "{\"key\": [1, 2, 3], \"nested\": {\"a\": null, \"b\": true}}",
  "Grüße aus Köln! naïve café résumé Ångström ﬁnance",
  "e\u0301 a\u0300\u0301 n\u0303 combining marks",
  "日本語のテキストと漢字、ひらがな、カタカナ。中文句子，还有标点！한국어 문장입니다.",
  "Привет, мир! Ελληνικά κείμενα. עברית. العربية. हिन्दी पाठ। ไทย",
  "emoji 🙂🦙👩‍💻🏳️‍🌈 flags 🇫🇷🇯🇵 keycap 1️⃣ and ✨sparkles✨",
  "\u00a0nbsp\u00a0 and\u2009thin\u2003em\u3000ideographic spaces",
  "MixedCASE mIxEd ALLCAPS lower Title Case ǅungla ǈ",
  "    four spaces\n\tand a tab\n  \n",
  "a",
  " ",
  "The quick brown fox jumps over the lazy dog. THE QUICK BROWN FOX!",
  "$100.00 £50 €20 ¥1000 ₹500 — em–en dashes … ellipsis «quotes» “curly” ‘single’",
  "x".repeat(300),
  "ab".repeat(100) + " " + "1".repeat(20),
];
// Chat markup as gpt-oss's template renders it: special tokens between ordinary text.
const harmonyTexts = [
  "<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\nKnowledge cutoff: 2024-06\nCurrent date: 2026-11-29\n\nReasoning: medium\n\n# Valid channels: analysis, commentary, final. Channel must be included for every message.<|end|><|start|>user<|message|>What is 2+2?<|end|><|start|>assistant",
  "<|channel|>analysis<|message|>The user asks 2+2. Answer 4.<|end|><|start|>assistant<|channel|>final<|message|>2 + 2 = 4.<|return|>",
  "<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>{\"city\": \"Paris\"}<|call|>",
  "<|startoftext|>text<|endoftext|> <|endofprompt|><|constrain|>json<|reserved_200017|>",
];

function agree(text) {
  const a = tiktoken.encode(text, [], []);
  const b = harmony.encode(text, { disallowedSpecial: new Set() });
  if (JSON.stringify(a) !== JSON.stringify(b))
    throw new Error(`js-tiktoken and gpt-tokenizer disagree on ${JSON.stringify(text)}:\n${a}\n${b}`);
  return a;
}

const cases = [];
for (const text of [...ggmlTexts, ...extra]) cases.push({ text, special: false, ids: agree(text) });
// Harmony texts: js-tiktoken with the harmony special tokens added, every special token allowed;
// checked against gpt-tokenizer on the text between the special tokens (gpt-tokenizer 4.0.0's own
// special-token matching finds <|start|> but not <|message|>, so it is not used for them).
const specialPattern = new RegExp(
  Object.keys(special_tokens).map((t) => t.replace(/[|]/g, "\\|")).concat(["<\\|reserved_\\d+\\|>"]).join("|"), "g");
for (const text of harmonyTexts) {
  const ids = tiktoken.encode(text, "all");
  const expected = [];
  let last = 0;
  for (const m of text.matchAll(specialPattern)) {
    expected.push(...harmony.encode(text.slice(last, m.index), { disallowedSpecial: new Set() }));
    expected.push(m[0].startsWith("<|reserved_") ? Number(m[0].slice(11, -2)) : special_tokens[m[0]]);
    last = m.index + m[0].length;
  }
  expected.push(...harmony.encode(text.slice(last), { disallowedSpecial: new Set() }));
  if (JSON.stringify(ids) !== JSON.stringify(expected))
    throw new Error(`js-tiktoken and gpt-tokenizer disagree on ${JSON.stringify(text)}:\n${ids}\n${expected}`);
  cases.push({ text, special: true, ids });
}

const doc = {
  source: `js-tiktoken ${versionOf("js-tiktoken")} (o200k_base) and gpt-tokenizer ${versionOf("gpt-tokenizer")} ` +
          "(o200k_harmony), agreeing on every plain text; made by tests/tools/make-o200k-vectors.mjs",
  n_ranks: nRanks,
  n_vocab: nVocab,
  special_tokens,
  cases,
};
const out = path.join(repo, "tests", "data", "o200k_vectors.json");
fs.writeFileSync(out, JSON.stringify(doc, null, 0).replace(/\{"text"/g, '\n{"text"') + "\n");
console.log(`wrote ${out}: ${cases.length} cases, ${nRanks} ranks, ${nVocab} tokens`);
