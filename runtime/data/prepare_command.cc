#include "runtime/data/prepare_command.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <optional>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/flags.h"
#include "runtime/data/prepare.h"

namespace loom::runtime::data {
namespace {

int Fail(int code, absl::string_view msg) {
  std::fprintf(stderr, "loom data prepare: %s\n", std::string(msg).c_str());
  return code;
}

// The flags of `loom data prepare`, bound to `o` and `progress`.
FlagSet PrepareFlags(PrepareOptions* o, bool* progress, int64_t* seed) {
  FlagSet fs("loom data prepare", "",
             "Text files -> a tokenizer and token shards (llm.c format by default), a validation split and\n"
             "dataset.json, ready for data.path / data.val / data.tokenizer.");
  fs.Repeated("input", &o->inputs, "FILE...", "text files, folders or globs (every argument up to the next flag)")
      .Greedy()
      .String("out", &o->out_dir, "DIR", "the output folder")
      .String("tokenizer", o->tokenizer.mutable_kind(), "bytes|sentencepiece|gpt2", "the tokenizer kind")
      .String("train-tokenizer", &o->train_type, "bpe|unigram", "train a SentencePiece tokenizer on the input")
      .Int("vocab-size", &o->vocab_size, "N", "vocabulary of the trained tokenizer")
      .Int64("train-sentences", &o->train_sentences, "N", "lines SentencePiece samples to train on")
      .String("model", o->tokenizer.mutable_model(), "FILE.model", "an existing SentencePiece model")
      .String("vocab", o->tokenizer.mutable_vocab(), "vocab.json", "GPT-2 vocabulary (with --merges)")
      .String("merges", o->tokenizer.mutable_merges(), "merges.txt", "GPT-2 merges (with --vocab)")
      .String("tokenizer-json", o->tokenizer.mutable_json(), "tokenizer.json", "a Hugging Face tokenizer.json")
      .String("tokenizer-dir", o->tokenizer.mutable_dir(), "DIR", "a folder a previous prepare wrote")
      .String("documents", &o->documents, "file|blank-line|line=TEXT", "where documents end")
      .Double("val-fraction", &o->val_fraction, "F", "the share of documents for validation")
      .Int64("seed", seed, "S", "the validation split's seed", 0)
      .Int64("shard-tokens", &o->shard_tokens, "N", "tokens per shard")
      .String("dtype", &o->dtype, "auto|u16|u32", "the shards' id type")
      .String("format", &o->format, "llmc|raw", "llm.c shards (with a header) or raw ids")
      .Int("threads", &o->threads, "N", "encoding threads (default: the number of CPUs)")
      .Bool("progress", progress, "a progress bar on stderr (on when stderr is a terminal)");
  return fs;
}

std::string Millions(double n) { return n >= 1e6 ? absl::StrFormat("%.2fM", n / 1e6) : absl::StrFormat("%.0f", n); }

// A one-line bar redrawn in place on stderr.
void DrawProgress(int64_t done, int64_t total, int64_t tokens, std::chrono::steady_clock::time_point start) {
  const double frac = total > 0 ? static_cast<double>(done) / total : 1;
  const double s = std::max(1e-9, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  const int width = 30, filled = static_cast<int>(frac * width);
  std::fprintf(stderr, "\r[%s%s] %5.1f%% %.1f/%.1f MB, %s tokens/s", std::string(filled, '#').c_str(),
               std::string(width - filled, '.').c_str(), 100 * frac, done / 1e6, total / 1e6,
               Millions(tokens / s).c_str());
  std::fflush(stderr);
}

void PrintSummary(const PrepareOptions& o, const PrepareSummary& s) {
  auto shards = [](const std::vector<std::string>& v) {
    return v.empty() ? std::string("no shard")
                     : absl::StrCat(v.size(), v.size() == 1 ? " shard" : " shards", " (", v.front(),
                                    v.size() > 1 ? absl::StrCat(" .. ", v.back()) : "", ")");
  };
  std::printf("tokenizer: %s%s\n", s.tokenizer.c_str(),
              s.train_seconds > 0 ? absl::StrFormat(", trained in %.1f s", s.train_seconds).c_str() : "");
  std::printf("documents: %lld (%lld train, %lld validation; --documents %s)\n",
              static_cast<long long>(s.documents[0] + s.documents[1]), static_cast<long long>(s.documents[0]),
              static_cast<long long>(s.documents[1]), o.documents.c_str());
  std::printf("tokens: %lld train in %s, %lld validation in %s; %s ids, %s\n",
              static_cast<long long>(s.tokens[0]), shards(s.shards[0]).c_str(), static_cast<long long>(s.tokens[1]),
              shards(s.shards[1]).c_str(), s.dtype.c_str(),
              o.format == "raw" ? "raw (no header)" : "llm.c format");
  const double secs = std::max(1e-9, s.encode_seconds);
  std::printf("encoded %.1f MB in %.2f s on %d thread%s: %s tokens/s, %.1f MB/s\n", s.text_bytes / 1e6,
              s.encode_seconds, o.threads, o.threads == 1 ? "" : "s",
              Millions((s.tokens[0] + s.tokens[1]) / secs).c_str(), s.text_bytes / 1e6 / secs);
  std::printf("wrote %s (shards, loom-tokenizer.json and the tokenizer's files, dataset.json)\n", o.out_dir.c_str());
}

}  // namespace

int RunDataCommand(const std::vector<std::string>& args) {
  PrepareOptions o;
  o.threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  bool progress = false;
  int64_t seed = static_cast<int64_t>(o.seed);
  FlagSet fs = PrepareFlags(&o, &progress, &seed);
  if (args.empty() || args[0] == "--help" || args[0] == "-h") {
    (args.empty() ? std::cerr : std::cout) << fs.Usage();
    return args.empty() ? 2 : 0;
  }
  if (args[0] != "prepare") return fs.UsageError(absl::StrCat("unknown subcommand '", args[0], "' (prepare)"));
  if (std::optional<int> rc = fs.Parse({args.begin() + 1, args.end()})) return *rc;
  o.seed = static_cast<uint64_t>(seed);
  progress = progress || isatty(fileno(stderr));
  const auto start = std::chrono::steady_clock::now();
  PrepareProgress bar;
  if (progress) bar = [&](int64_t done, int64_t total, int64_t tokens) { DrawProgress(done, total, tokens, start); };
  auto summary = Prepare(o, bar);
  if (progress) std::fprintf(stderr, "\n");
  if (!summary.ok()) return Fail(absl::IsInvalidArgument(summary.status()) ? 2 : 1, summary.status().message());
  PrintSummary(o, *summary);
  return 0;
}

}  // namespace loom::runtime::data
