#!/usr/bin/env python3
"""An independent GPT-2 byte-level BPE in plain Python, for checking Loom's
C++ tokenizer (runtime/data/gpt2_tokenizer.h). Debian has no `tokenizers`
or `transformers`, and the real GPT-2 files cannot be downloaded here, so the
tests make a small vocabulary with this script and compare encodings.

Unlike the C++ side, which matches GPT-2's pattern by hand, this script runs
the pattern itself through Python's `re`, with \\p{L}, \\p{N} and \\s spelled
out as character classes (`re` has no \\p{...}): letters and numbers from
unicodedata's general categories, white space as Unicode's White_Space list.
Bytes that are not UTF-8 become lone surrogates (surrogateescape), which no
class contains, as the C++ side treats them.

    gpt2_reference.py make-vocab OUT_DIR MERGES CORPUS...
        trains MERGES merges on the corpus files; writes vocab.json,
        merges.txt, tokenizer.json (merges as "a b") and
        tokenizer-pairs.json (merges as ["a", "b"])
    gpt2_reference.py encode VOCAB MERGES FILE...
        prints one JSON list of ids per file
"""
import json
import os
import re
import sys
import unicodedata

WHITE_SPACE = [(0x09, 0x0D), (0x20, 0x20), (0x85, 0x85), (0xA0, 0xA0), (0x1680, 0x1680), (0x2000, 0x200A),
               (0x2028, 0x2029), (0x202F, 0x202F), (0x205F, 0x205F), (0x3000, 0x3000)]


def category_ranges(prefix):
    out, start = [], None
    for cp in range(0x110000):
        inside = unicodedata.category(chr(cp)).startswith(prefix)
        if inside and start is None:
            start = cp
        if not inside and start is not None:
            out.append((start, cp - 1))
            start = None
    if start is not None:
        out.append((start, 0x10FFFF))
    return out


def char_class(ranges):
    return "".join("\\U%08x-\\U%08x" % (lo, hi) for lo, hi in ranges)


def gpt2_pattern():
    L, N, S = char_class(category_ranges("L")), char_class(category_ranges("N")), char_class(WHITE_SPACE)
    return re.compile(
        r"'s|'t|'re|'ve|'m|'ll|'d"
        r"| ?[" + L + r"]+"
        r"| ?[" + N + r"]+"
        r"| ?[^" + S + L + N + r"]+"
        r"|[" + S + r"]+(?![^" + S + r"])"
        r"|[" + S + r"]+")


def byte_alphabet():
    """byte -> the character that stands for it in the vocabulary."""
    printable = set(range(0x21, 0x7F)) | set(range(0xA1, 0xAD)) | set(range(0xAE, 0x100))
    table, extra = {}, 0
    for b in range(256):
        if b in printable:
            table[b] = chr(b)
        else:
            table[b] = chr(0x100 + extra)
            extra += 1
    return table


def pieces(pattern, data):
    """The pre-tokenized pieces of `data` (bytes), each as alphabet symbols."""
    alphabet = byte_alphabet()
    text = data.decode("utf-8", "surrogateescape")
    for piece in pattern.findall(text):
        yield [alphabet[b] for b in piece.encode("utf-8", "surrogateescape")]


def bpe(symbols, ranks):
    """Merges the best-ranked neighbouring pair, every occurrence, until none is left."""
    word = list(symbols)
    while len(word) > 1:
        best = None
        for pair in zip(word, word[1:]):
            if pair in ranks and (best is None or ranks[pair] < ranks[best]):
                best = pair
        if best is None:
            break
        merged, i = [], 0
        while i < len(word):
            if i + 1 < len(word) and (word[i], word[i + 1]) == best:
                merged.append(word[i] + word[i + 1])
                i += 2
            else:
                merged.append(word[i])
                i += 1
        word = merged
    return word


def train(pattern, corpus, num_merges):
    counts = {}
    for data in corpus:
        for p in pieces(pattern, data):
            counts[tuple(p)] = counts.get(tuple(p), 0) + 1
    words = [[list(w), c] for w, c in counts.items()]
    merges = []
    for _ in range(num_merges):
        pairs = {}
        for w, c in words:
            for pair in zip(w, w[1:]):
                pairs[pair] = pairs.get(pair, 0) + c
        if not pairs:
            break
        best = min(pairs, key=lambda p: (-pairs[p], p))
        merges.append(best)
        ranks = {best: 0}
        for entry in words:
            entry[0] = bpe(entry[0], ranks)
    return merges


def make_vocab(out_dir, num_merges, corpus_files):
    pattern = gpt2_pattern()
    corpus = [open(f, "rb").read() for f in corpus_files]
    merges = train(pattern, corpus, num_merges)
    # Byte symbols in code point order, then the merged tokens, then <|endoftext|>.
    vocab = {}
    for s in sorted(byte_alphabet().values()):
        vocab[s] = len(vocab)
    for a, b in merges:
        vocab.setdefault(a + b, len(vocab))
    vocab["<|endoftext|>"] = len(vocab)
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump(vocab, f, ensure_ascii=False)
    with open(os.path.join(out_dir, "merges.txt"), "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n")
        for a, b in merges:
            f.write("%s %s\n" % (a, b))
    for name, form in (("tokenizer.json", lambda a, b: a + " " + b), ("tokenizer-pairs.json", lambda a, b: [a, b])):
        doc = {
            "version": "1.0",
            "added_tokens": [{"id": vocab["<|endoftext|>"], "content": "<|endoftext|>", "special": True}],
            "normalizer": None,
            "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
            "decoder": {"type": "ByteLevel"},
            "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                      "end_of_word_suffix": "", "fuse_unk": False, "vocab": vocab,
                      "merges": [form(a, b) for a, b in merges]},
        }
        with open(os.path.join(out_dir, name), "w", encoding="utf-8") as f:
            json.dump(doc, f, ensure_ascii=False)
    print("%d merges, %d ids" % (len(merges), len(vocab)))


def encode(vocab_path, merges_path, files):
    pattern = gpt2_pattern()
    vocab = json.load(open(vocab_path, encoding="utf-8"))
    ranks = {}
    for line in open(merges_path, encoding="utf-8").read().split("\n")[1:]:
        if line:
            a, b = line.split(" ")
            ranks[(a, b)] = len(ranks)
    for path in files:
        ids = []
        for p in pieces(pattern, open(path, "rb").read()):
            ids.extend(vocab[s] for s in bpe(p, ranks))
        print(json.dumps(ids))


def main():
    if len(sys.argv) >= 5 and sys.argv[1] == "make-vocab":
        make_vocab(sys.argv[2], int(sys.argv[3]), sys.argv[4:])
    elif len(sys.argv) >= 5 and sys.argv[1] == "encode":
        encode(sys.argv[2], sys.argv[3], sys.argv[4:])
    else:
        print(__doc__)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
