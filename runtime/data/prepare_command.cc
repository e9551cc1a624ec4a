#include "runtime/data/prepare_command.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <map>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "runtime/data/prepare.h"

namespace loom::data {
namespace {

constexpr char kUsage[] =
    "usage: loom data prepare --input FILE... --out DIR\n"
    "    [--tokenizer bytes|sentencepiece|gpt2]\n"
    "    [--train-tokenizer bpe|unigram --vocab-size N [--train-sentences N]\n"
    "     | --model FILE.model | --vocab vocab.json --merges merges.txt\n"
    "     | --tokenizer-json tokenizer.json | --tokenizer-dir DIR]\n"
    "    [--documents file|blank-line|line=TEXT] [--val-fraction F] [--seed S]\n"
    "    [--shard-tokens N] [--dtype auto|u16|u32] [--format llmc|raw] [--threads N] [--progress]\n";

int Fail(int code, absl::string_view msg) {
  std::fprintf(stderr, "loom data prepare: %s\n", std::string(msg).c_str());
  if (code == 2 && !absl::StrContains(msg, "usage:")) std::fprintf(stderr, "%s", kUsage);
  return code;
}

template <typename T>
bool ParseNumber(const std::string& s, T* out) {
  if constexpr (std::is_floating_point_v<T>) {
    return absl::SimpleAtod(s, out);
  } else {
    return absl::SimpleAtoi(s, out);
  }
}

// Fills `o` from the flags; "" or the error (naming the flag).
std::string ParseFlags(const std::vector<std::string>& args, PrepareOptions* o, bool* progress) {
  std::map<std::string, std::string*> strings = {
      {"--out", &o->out_dir},
      {"--tokenizer", o->tokenizer.mutable_kind()},
      {"--model", o->tokenizer.mutable_model()},
      {"--vocab", o->tokenizer.mutable_vocab()},
      {"--merges", o->tokenizer.mutable_merges()},
      {"--tokenizer-json", o->tokenizer.mutable_json()},
      {"--tokenizer-dir", o->tokenizer.mutable_dir()},
      {"--train-tokenizer", &o->train_type},
      {"--documents", &o->documents},
      {"--dtype", &o->dtype},
      {"--format", &o->format},
  };
  for (size_t i = 0; i < args.size(); ++i) {
    std::string flag = args[i], value;
    const size_t eq = flag.find('=');
    const bool inline_value = absl::StartsWith(flag, "--") && eq != std::string::npos;
    if (inline_value) value = flag.substr(eq + 1), flag = flag.substr(0, eq);
    if (flag == "--progress") {
      *progress = true;
      continue;
    }
    if (flag == "--input") {  // every following argument up to the next flag
      if (inline_value) o->inputs.push_back(value);
      while (i + 1 < args.size() && !absl::StartsWith(args[i + 1], "--")) o->inputs.push_back(args[++i]);
      continue;
    }
    if (!absl::StartsWith(flag, "--")) return absl::StrCat("unexpected argument '", flag, "'");
    if (!inline_value) {
      if (i + 1 >= args.size()) return absl::StrCat(flag, ": missing its value");
      value = args[++i];
    }
    bool ok = true;
    if (auto it = strings.find(flag); it != strings.end()) {
      *it->second = value;
    } else if (flag == "--vocab-size") {
      ok = ParseNumber(value, &o->vocab_size);
    } else if (flag == "--threads") {
      ok = ParseNumber(value, &o->threads);
    } else if (flag == "--shard-tokens") {
      ok = ParseNumber(value, &o->shard_tokens);
    } else if (flag == "--train-sentences") {
      ok = ParseNumber(value, &o->train_sentences);
    } else if (flag == "--val-fraction") {
      ok = ParseNumber(value, &o->val_fraction);
    } else if (flag == "--seed") {
      ok = ParseNumber(value, &o->seed);
    } else {
      return absl::StrCat("unknown flag '", flag, "'");
    }
    if (!ok) return absl::StrCat(flag, ": expected a number, got '", value, "'");
  }
  return "";
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
  if (args.empty() || args[0] == "--help" || args[0] == "-h") {
    std::printf("%s", kUsage);
    return args.empty() ? 2 : 0;
  }
  if (args[0] != "prepare") return Fail(2, absl::StrCat("unknown subcommand '", args[0], "'\n", kUsage));
  PrepareOptions o;
  o.threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  bool progress = false;
  const std::vector<std::string> flags(args.begin() + 1, args.end());
  if (std::string err = ParseFlags(flags, &o, &progress); !err.empty()) return Fail(2, err);
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

}  // namespace loom::data
