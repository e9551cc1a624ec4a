// `loom data prepare`: text files -> token shards and the tokenizer that made
// them.
//
//   PrepareOptions o;
//   o.inputs = {"wiki.txt"};
//   o.out_dir = "data/wiki";
//   o.train_type = "bpe";  o.vocab_size = 8000;   // or o.tokenizer: a .model, GPT-2 files, ...
//   LOOM_ASSIGN_OR_RETURN(PrepareSummary s, Prepare(o, /*progress=*/nullptr));
//
// Documents. Each input file is read in the order given and cut into
// documents by `documents`: "file" (a whole file is one document),
// "blank-line" (documents are separated by one or more empty lines) or
// "line=TEXT" (by lines equal to TEXT, e.g. "line=%" for fortune files). The
// separating lines belong to no document; empty documents are dropped. In
// the token stream every document is preceded by the tokenizer's end-of-text
// id (as llm.c's data scripts do), so documents are separated by it; the
// byte tokenizer has no such id and concatenates documents as they are.
//
// Split. With val_fraction > 0 a document goes to validation when a seeded
// hash of its index falls under val_fraction: the split depends on (inputs,
// documents, seed, val_fraction) only.
//
// Shards. The tokens of each split fill shards of shard_tokens tokens (the
// last one shorter), a document running on into the next shard, in llm.c's
// format: a 256-int32 little-endian header (magic, version, token count),
// then the ids. While every id fits 16 bits (vocab_size <= 65536) the ids
// are uint16 under GPT-2's header (magic 20240520, version 1); beyond that
// uint32 under Llama 3's (magic 20240801, version 7). With format "raw" the
// shards hold the ids alone (no header), as `data.format: tokens` with
// `data.tokens_dtype` reads them. Files: OUT/train_000000.bin ...,
// OUT/val_000000.bin ..., the tokenizer folder (loom-tokenizer.json and its
// files, tokenizer.h) and dataset.json (counts, shards, format, dtype).
//
// Threads. Documents are encoded in batches of about batch_bytes of text on
// `threads` threads; within a batch the documents are cut into contiguous
// groups by size and the groups' tokens are joined in document order, so the
// output is byte-identical for any thread count. A training run of
// SentencePiece uses kSentencePieceTrainThreads regardless of `threads`.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/loom/v1/job.pb.h"

namespace loom::runtime::data {

struct PrepareOptions {
  std::vector<std::string> inputs;
  std::string out_dir;
  // The tokenizer to load (kind and files, or a tokenizer folder)...
  v1::TokenizerSpec tokenizer;
  // ...or to train on the inputs: "bpe" or "unigram" SentencePiece.
  std::string train_type;
  int vocab_size = 0;
  int64_t train_sentences = 1000000;  // lines SentencePiece samples to train on
  std::string documents = "file";
  double val_fraction = 0;
  uint64_t seed = 0;
  int64_t shard_tokens = 100000000;
  std::string dtype = "auto";  // "auto", "u16" or "u32"
  std::string format = "llmc";  // or "raw": ids without a header
  int threads = 1;
  int64_t batch_bytes = 16 << 20;
};

struct PrepareSummary {
  int64_t documents[2] = {0, 0};  // train, validation
  int64_t tokens[2] = {0, 0};
  std::vector<std::string> shards[2];
  int64_t text_bytes = 0;
  double encode_seconds = 0;  // reading, encoding and writing shards
  double train_seconds = 0;   // training the tokenizer, when it was trained
  std::string dtype;          // "u16" or "u32"
  std::string tokenizer;      // the tokenizer's one-line description
};

// Called after each batch with (text bytes encoded so far, total bytes,
// tokens so far).
using PrepareProgress = std::function<void(int64_t done, int64_t total, int64_t tokens)>;

// Errors that the caller should fix (bad options, unreadable or empty
// inputs, a bad tokenizer, a vocabulary too large for `dtype`) are
// InvalidArgument and name the flag or file; failing to write is Internal.
absl::StatusOr<PrepareSummary> Prepare(const PrepareOptions& options, const PrepareProgress& progress);

// The shard file prefixes of the two splits: train_000000.bin, val_000000.bin.
inline constexpr const char* kSplitNames[2] = {"train", "val"};

}  // namespace loom::runtime::data
