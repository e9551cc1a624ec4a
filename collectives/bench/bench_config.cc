#include "collectives/bench/bench_config.h"

#include <algorithm>
#include <iterator>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/flags.h"

namespace loom::collectives::bench {
namespace {

absl::Status Bad(const std::string& flag, const std::string& why, const std::string& value) {
  return absl::InvalidArgumentError(absl::StrCat("--", flag, ": ", why, ", got '", value, "'"));
}

absl::StatusOr<int> ParseInt(const std::string& flag, const std::string& v, int lo, int hi) {
  int x = 0;
  if (!absl::SimpleAtoi(v, &x) || x < lo || x > hi) {
    return Bad(flag, absl::StrCat("expected an integer in [", lo, ", ", hi, "]"), v);
  }
  return x;
}

std::vector<std::string> List(const std::string& v) {
  std::vector<std::string> out;
  for (absl::string_view p : absl::StrSplit(v, ',', absl::SkipEmpty())) out.emplace_back(p);
  return out;
}

// --backends: cuda:gloo brings gloo along (the CPU Gloo busbw it is measured against).
absl::StatusOr<std::vector<std::string>> ParseBackends(const std::string& value) {
  std::vector<std::string> v = List(value);
  for (const std::string& b : v) {
    if (b != "gloo" && b != "ucx" && b != "tcp" && b != "cuda:gloo") {
      return Bad("backends", "expected a list of gloo, ucx, tcp, cuda:gloo", value);
    }
  }
  if (v.empty()) return Bad("backends", "expected at least one backend", value);
  if (std::count(v.begin(), v.end(), "cuda:gloo") && !std::count(v.begin(), v.end(), "gloo")) v.push_back("gloo");
  return v;
}

}  // namespace

const char kBenchUsage[] =
    "usage: loom bench collectives [flags]\n"
    "  nccl-tests style all_reduce / all_gather / reduce_scatter bandwidth of Loom's CPU\n"
    "  backends, side by side with torch.distributed Gloo (Debian's /usr/bin/python3).\n"
    "  --backends=gloo,ucx,tcp   Loom backends to run (default gloo); cuda:gloo stages CUDA\n"
    "                            buffers through pinned host memory (adds gloo, and pinned\n"
    "                            D2H/H2D rows, to its all_reduce table)\n"
    "  --bucket-bytes=4M         cuda:gloo's staging bucket (ProcessGroupOptions)\n"
    "  --piece-bytes=1M          cuda:gloo's all_reduce piece: its copies and messages\n"
    "                            (ProcessGroupOptions::staging_piece_bytes)\n"
    "  --staging-path=auto       cuda:gloo's all_reduce: auto, shm (each rank reduces from\n"
    "                            the others' staging buffers in shared memory) or ring\n"
    "                            (the inner Gloo ring; ProcessGroupOptions::staging_path)\n"
    "  --channels=N              connections a large op is sliced over, 1..8 (tcp, gloo,\n"
    "                            ucx; ProcessGroupOptions); 0 or absent: automatic\n"
    "  --gloo-native-min-bytes=64M   gloo: the size from which libgloo's own algorithms\n"
    "                            run (ProcessGroupOptions; 0: always); absent: automatic\n"
    "  --ranks=2,4               process counts (default 2)\n"
    "  --ops=all_reduce,all_gather,reduce_scatter\n"
    "  --min-bytes=1K --max-bytes=4M --step=4   the size sweep (K/M/G suffixes; step 2 or 4)\n"
    "  --iters=N --warmup=N      timed / untimed iterations per size (default: by size, 2)\n"
    "  --rounds=N                run the backends N times, alternating, and keep each\n"
    "                            row's fastest round (default 1)\n"
    "  --full                    backends gloo,ucx,tcp, ranks 2,4, 1K..256M, timeout 900\n"
    "  --torch=auto|0|1          run the PyTorch peer (auto: when torch imports)\n"
    "  --json                    print one JSON document instead of the tables\n"
    "  --timeout=SECONDS         limit per (backend, ranks) run (default 300, --full 900)\n"
    "exit: 0 ok, 1 a run or a result check failed, 2 bad flag\n";

absl::StatusOr<int64_t> ParseBytes(const std::string& s) {
  if (s.empty()) return absl::InvalidArgumentError("empty size");
  int64_t mult = 1;
  std::string num = s;
  std::string suffix;
  while (!num.empty() && !std::isdigit(static_cast<unsigned char>(num.back()))) {
    suffix.insert(suffix.begin(), num.back());
    num.pop_back();
  }
  if (suffix == "K" || suffix == "k" || suffix == "KiB") mult = 1 << 10;
  else if (suffix == "M" || suffix == "MiB") mult = 1 << 20;
  else if (suffix == "G" || suffix == "GiB") mult = int64_t{1} << 30;
  else if (!suffix.empty() && suffix != "B") return absl::InvalidArgumentError("bad size suffix");
  int64_t x = 0;
  if (!absl::SimpleAtoi(num, &x) || x <= 0 || x > (int64_t{4} << 30) / mult) {
    return absl::InvalidArgumentError("expected a positive size up to 4G");
  }
  return x * mult;
}

std::string FormatBytes(int64_t b) {
  if (b >= (1 << 20) && b % (1 << 20) == 0) return absl::StrCat(b >> 20, " MiB");
  if (b >= (1 << 10) && b % (1 << 10) == 0) return absl::StrCat(b >> 10, " KiB");
  return absl::StrCat(b, " B");
}

namespace {

// The integer flags: name, range, field.
struct IntFlag {
  const char* name;
  int min, max;
  int BenchConfig::*field;
};
IntFlag* FindIntFlag(const std::string& name) {
  static IntFlag flags[] = {{"iters", 1, 100000, &BenchConfig::iters},
                            {"warmup", 0, 100000, &BenchConfig::warmup},
                            {"timeout", 1, 86400, &BenchConfig::timeout_s},
                            {"rounds", 1, 100, &BenchConfig::rounds},
                            {"channels", 0, 8, &BenchConfig::channels}};
  for (IntFlag& f : flags)
    if (name == f.name) return &f;
  return nullptr;
}

}  // namespace

absl::StatusOr<BenchConfig> ParseBenchFlags(const std::vector<std::string>& args) {
  BenchConfig c;
  // Pass 1: --full sets the defaults that explicit flags then override.
  for (const std::string& a : args) {
    if (a == "--full" || a == "--full=1" || a == "--full=true") {
      c.full = true;
      c.backends = {"gloo", "ucx", "tcp"};
      c.ranks = {2, 4};
      c.max_bytes = 256 << 20;
      c.timeout_s = 900;
    }
  }
  static const char* kValueFlags[] = {"backends", "ranks", "ops",   "min-bytes", "max-bytes",
                                      "step",     "iters", "warmup", "timeout",   "torch", "bucket-bytes", "rounds",
                                      "channels", "gloo-native-min-bytes", "piece-bytes", "staging-path"};
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a.rfind("--", 0) != 0) {
      return absl::InvalidArgumentError(absl::StrCat("unexpected argument '", a, "'"));
    }
    std::string name = a.substr(2), value;
    bool has_value = false;
    if (size_t eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      has_value = true;
    }
    std::replace(name.begin(), name.end(), '_', '-');
    const bool takes_value =
        std::find(std::begin(kValueFlags), std::end(kValueFlags), name) != std::end(kValueFlags);
    if (takes_value && !has_value && i + 1 < args.size() && args[i + 1].rfind("--", 0) != 0) {
      value = args[++i];  // --name value
      has_value = true;
    }
    auto need = [&]() -> absl::Status {
      if (!has_value || value.empty()) return Bad(name, "needs a value (--" + name + "=...)", value);
      return absl::OkStatus();
    };
    if (name == "full") {
      continue;
    } else if (name == "json") {
      if (has_value && value != "1" && value != "0" && value != "true" && value != "false") {
        return Bad(name, "expected 0 or 1", value);
      }
      c.json = !has_value || value == "1" || value == "true";
    } else if (name == "backends") {
      if (auto s = need(); !s.ok()) return s;
      auto b = ParseBackends(value);
      if (!b.ok()) return b.status();
      c.backends = *b;
    } else if (name == "ranks") {
      if (auto s = need(); !s.ok()) return s;
      c.ranks.clear();
      for (const std::string& r : List(value)) {
        auto n = ParseInt(name, r, 1, 64);
        if (!n.ok()) return Bad(name, "expected a list of rank counts in [1, 64]", value);
        c.ranks.push_back(*n);
      }
      if (c.ranks.empty()) return Bad(name, "expected at least one rank count", value);
    } else if (name == "ops") {
      if (auto s = need(); !s.ok()) return s;
      c.ops = List(value);
      for (const std::string& o : c.ops) {
        if (o != "all_reduce" && o != "all_gather" && o != "reduce_scatter") {
          return Bad(name, "expected a list of all_reduce, all_gather, reduce_scatter", value);
        }
      }
      if (c.ops.empty()) return Bad(name, "expected at least one op", value);
    } else if (name == "gloo-native-min-bytes") {
      if (auto s = need(); !s.ok()) return s;
      auto b = value == "0" ? absl::StatusOr<int64_t>(0) : ParseBytes(value);
      if (!b.ok()) return Bad(name, std::string(b.status().message()), value);
      c.gloo_native_min_bytes = *b;
    } else if (name == "min-bytes" || name == "max-bytes" || name == "bucket-bytes" || name == "piece-bytes") {
      if (auto s = need(); !s.ok()) return s;
      auto b = ParseBytes(value);
      if (!b.ok()) return Bad(name, std::string(b.status().message()), value);
      (name == "min-bytes"      ? c.min_bytes
       : name == "max-bytes"    ? c.max_bytes
       : name == "bucket-bytes" ? c.bucket_bytes
                                : c.piece_bytes) = *b;
    } else if (name == "staging-path") {
      if (auto s = need(); !s.ok()) return s;
      if (value != "auto" && value != "shm" && value != "ring") return Bad(name, "expected auto, shm or ring", value);
      c.staging_path = value;
    } else if (name == "step") {
      if (auto s = need(); !s.ok()) return s;
      auto v = ParseInt(name, value, 2, 4);
      if (!v.ok() || *v == 3) return Bad(name, "expected 2 or 4", value);
      c.step = *v;
    } else if (IntFlag* f = FindIntFlag(name); f != nullptr) {
      if (auto st = need(); !st.ok()) return st;
      auto v = ParseInt(name, value, f->min, f->max);
      if (!v.ok()) return v.status();
      c.*(f->field) = *v;
    } else if (name == "torch") {
      if (auto s = need(); !s.ok()) return s;
      if (value == "auto") c.torch = TorchMode::kAuto;
      else if (value == "0" || value == "false") c.torch = TorchMode::kOff;
      else if (value == "1" || value == "true") c.torch = TorchMode::kOn;
      else return Bad(name, "expected auto, 0 or 1", value);
    } else {
      std::string nearest;
      size_t best = std::max<size_t>(2, name.size() / 3) + 1;
      std::vector<std::string> known = {"full", "json"};
      known.insert(known.end(), std::begin(kValueFlags), std::end(kValueFlags));
      for (const std::string& k : known) {
        if (const size_t d = EditDistance(name, k); d < best) best = d, nearest = k;
      }
      return absl::InvalidArgumentError(
          absl::StrCat("unknown flag --", name, nearest.empty() ? "" : absl::StrCat(" (did you mean --", nearest, "?)")));
    }
  }
  if (c.min_bytes > c.max_bytes) {
    return Bad("min-bytes", absl::StrCat("must not exceed --max-bytes (", c.max_bytes, ")"),
               std::to_string(c.min_bytes));
  }
  return c;
}

std::vector<std::string> ToFlags(const BenchConfig& c) {
  std::vector<std::string> f = {
      absl::StrCat("--backends=", absl::StrJoin(c.backends, ",")),
      absl::StrCat("--ranks=", absl::StrJoin(c.ranks, ",")),
      absl::StrCat("--ops=", absl::StrJoin(c.ops, ",")),
      absl::StrCat("--min-bytes=", c.min_bytes),
      absl::StrCat("--max-bytes=", c.max_bytes),
      absl::StrCat("--step=", c.step),
      absl::StrCat("--iters=", c.iters == 0 ? 0 : c.iters),
      absl::StrCat("--warmup=", c.warmup),
      absl::StrCat("--timeout=", c.timeout_s),
      absl::StrCat("--bucket-bytes=", c.bucket_bytes),
      absl::StrCat("--piece-bytes=", c.piece_bytes),
      absl::StrCat("--staging-path=", c.staging_path),
      absl::StrCat("--rounds=", c.rounds),
      absl::StrCat("--channels=", c.channels),
  };
  if (c.iters == 0) f.erase(f.begin() + 6);
  if (c.gloo_native_min_bytes >= 0) f.push_back(absl::StrCat("--gloo-native-min-bytes=", c.gloo_native_min_bytes));
  if (c.full) f.push_back("--full");
  return f;
}

std::vector<int64_t> Sizes(const BenchConfig& c) {
  std::vector<int64_t> v;
  for (int64_t s = c.min_bytes; s <= c.max_bytes; s *= c.step) v.push_back(s);
  return v;
}

int ItersFor(const BenchConfig& c, int64_t bytes) {
  if (c.iters > 0) return c.iters;
  int64_t budget = c.full ? (int64_t{256} << 20) : (int64_t{64} << 20);
  int64_t it = budget / std::max<int64_t>(bytes, 1);
  return static_cast<int>(std::clamp<int64_t>(it, 5, 200));
}

double BusFactor(const std::string& op, int n) {
  if (n <= 1) return 1.0;
  return op == "all_reduce" ? 2.0 * (n - 1) / n : double(n - 1) / n;
}

}  // namespace loom::collectives::bench
