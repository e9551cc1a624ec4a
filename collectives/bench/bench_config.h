// Configuration of `loom bench collectives`: flags, defaults and the size
// sweep. Parsing never exits; bad input comes back as InvalidArgument whose
// message names the flag (the command turns it into exit code 2).
//
//   loom bench collectives [--backends=gloo,ucx,tcp] [--ranks=2,4]
//       [--ops=all_reduce,all_gather,reduce_scatter] [--min-bytes=1K]
//       [--max-bytes=4M] [--step=4] [--iters=N] [--warmup=N] [--full]
//       [--torch=auto|0|1] [--json] [--timeout=SECONDS] [--bucket-bytes=4M]
//       [--piece-bytes=1M] [--channels=N] [--gloo-native-min-bytes=SIZE]
//
// Sizes take K/M/G suffixes (powers of 1024). Defaults are the fast sweep
// (backend gloo, 2 ranks, 1 KiB..4 MiB x4, iterations sized by bytes); --full
// is backends gloo,ucx,tcp at 2 and 4 ranks from 1 KiB to 256 MiB, with a
// 900 s limit per run. Backend cuda:gloo (CUDA buffers staged through
// pinned host memory, --bucket-bytes per bucket, its all_reduce in
// --piece-bytes pieces) brings gloo along and adds
// pinned D2H / H2D rows to its all_reduce table. Flags given
// explicitly override what --full sets, whatever their order.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace loom::collectives::bench {

enum class TorchMode { kAuto, kOff, kOn };

struct BenchConfig {
  std::vector<std::string> backends = {"gloo"};
  std::vector<int> ranks = {2};
  std::vector<std::string> ops = {"all_reduce", "all_gather", "reduce_scatter"};
  int64_t min_bytes = 1 << 10;
  int64_t max_bytes = 4 << 20;
  int step = 4;
  int iters = 0;    // 0: chosen per size (see ItersFor)
  int warmup = 2;
  bool full = false;
  bool json = false;
  TorchMode torch = TorchMode::kAuto;
  int timeout_s = 300;  // per (backend, ranks) run and per torch run
  int64_t bucket_bytes = 4 << 20;  // cuda:gloo: ProcessGroupOptions::staging_bucket_bytes
  int64_t piece_bytes = 1 << 20;   // cuda:gloo: ProcessGroupOptions::staging_piece_bytes
  std::string staging_path = "auto";  // cuda:gloo: ProcessGroupOptions::staging_path
  int channels = 0;  // ProcessGroupOptions::channels (1..8; 0: automatic)
  int64_t gloo_native_min_bytes = -1;  // ProcessGroupOptions::gloo_native_min_bytes (-1: automatic)
  // Each (ranks) sweep runs every backend this many times, alternating
  // (backend A, B, A, B, ...), and keeps each row's fastest round: backends
  // compared in one table then saw the same machine state.
  int rounds = 1;
};

// `args` are the words after "collectives" (flags only).
absl::StatusOr<BenchConfig> ParseBenchFlags(const std::vector<std::string>& args);

// Flags that reproduce `c` exactly (handed to the worker processes).
std::vector<std::string> ToFlags(const BenchConfig& c);

// The sweep: min, min*step, ... <= max.
std::vector<int64_t> Sizes(const BenchConfig& c);

// Timed iterations for one size: --iters if given, else about 256 MiB of
// traffic (fast sweep: 64 MiB), clamped to [5, 200].
int ItersFor(const BenchConfig& c, int64_t bytes);

// "1K" -> 1024, "256M", "1G", "4096". InvalidArgument on anything else.
absl::StatusOr<int64_t> ParseBytes(const std::string& s);
std::string FormatBytes(int64_t b);  // "1 KiB", "256 MiB", "100 B"

// Bus-bandwidth factor (nccl-tests): all_reduce 2(n-1)/n, others (n-1)/n.
double BusFactor(const std::string& op, int n);

extern const char kBenchUsage[];

}  // namespace loom::collectives::bench
