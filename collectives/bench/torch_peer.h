// The PyTorch side of `loom bench collectives`: writes the embedded
// torch_gloo_bench.py to a temporary file and runs it with Debian's
// /usr/bin/python3 (override: LOOM_BENCH_PYTHON), bounded by `timeout`.
// Missing python or torch is not an error: `status` says why and no rows come.
#pragma once

#include <string>
#include <vector>

#include "collectives/bench/bench_config.h"
#include "collectives/bench/bench_result.h"

namespace loom::collectives::bench {

struct TorchRun {
  bool available = false;
  std::string status;            // "torch 1.13.0" or the reason it did not run
  std::vector<BenchRow> rows;    // impl "torch:gloo"
  std::string error;             // the script failed after torch imported
};

TorchRun RunTorchPeer(const BenchConfig& c, int ranks);

}  // namespace loom::collectives::bench
