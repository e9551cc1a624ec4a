"""Small datasets for the tests/byom models, in the formats Loom's data path
reads (docs/user-guide.md, "Data"):

  make_data.py --model gpt|gptj|bert|mlp --out DIR

  gpt, gptj  DIR/tokens.u16: raw u16 ids in [0, VOCAB) with a learnable
             pattern (each id mostly follows from the one before);
  bert       DIR/tokens.u16: documents of 3 to SEQ ids in [2, VOCAB), each
             padded with PAD (0) to SEQ ids, so every mlm window of SEQ ids
             is one document and its padding;
  mlp        DIR/x.npy (f32 [N, FEATURES]) and DIR/y.npy (i64 [N]): the class
             of a fixed random linear map's largest output, for data.kind pairs.
Only numpy and the sizes in models.py are used.
"""
import argparse
import os

import numpy as np

import models

N_TOKENS = 8192  # two split groups of 4096 tokens: training and validation windows both exist
N_RECORDS = 1024


def causal_tokens(rng):
    t = np.empty(N_TOKENS, dtype=np.uint16)
    t[0] = 1
    for i in range(1, N_TOKENS):
        t[i] = (t[i - 1] * 5 + 3) % models.VOCAB if rng.random() < 0.8 else rng.integers(0, models.VOCAB)
    return t


def padded_documents(rng):
    docs = []
    for _ in range(N_TOKENS // models.SEQ):
        n = int(rng.integers(3, models.SEQ + 1))
        doc = np.full(models.SEQ, models.BERT_PAD, dtype=np.uint16)
        doc[:n] = rng.integers(2, models.VOCAB, n)
        docs.append(doc)
    return np.concatenate(docs)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True, choices=["gpt", "gptj", "bert", "mlp"])
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    rng = np.random.default_rng(11)
    if a.model == "mlp":
        x = rng.standard_normal((N_RECORDS, models.MLP_FEATURES)).astype(np.float32)
        w = rng.standard_normal((models.MLP_FEATURES, models.MLP_CLASSES))
        np.save(os.path.join(a.out, "x.npy"), x)
        np.save(os.path.join(a.out, "y.npy"), np.argmax(x @ w, axis=1).astype(np.int64))
        return
    tokens = padded_documents(rng) if a.model == "bert" else causal_tokens(rng)
    tokens.tofile(os.path.join(a.out, "tokens.u16"))


if __name__ == "__main__":
    main()
