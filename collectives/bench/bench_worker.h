// The per-rank side of `loom bench collectives` (hidden worker mode).
//
// One process per rank, started by the launcher with role "loom:<backend>".
// For every op and size of the sweep: fill a pattern, run once and check every
// element, warm up, barrier, time `iters` calls (each waited), refill, run and
// check again. Every rank publishes, under "res/<op index>/<size index>/<rank>"
// in the launcher's store, "<microseconds per op> <wrong elements>", so the
// launcher reports the slowest rank's time and every rank's check. Backend
// cuda:gloo runs the ops on device buffers ("cpu:gloo,cuda:gloo") and, for
// all_reduce, appends "<d2h us> <h2d us>": pinned copies of the buffer timed
// with every rank copying at once, then the timed ops' staging phases per op,
// "<to-host wait us> <inner us> <to-device wait us> <run us> <algorithm's
// to-host wait us>" (StagedBackend::Stats).
#pragma once

#include <cstdint>
#include <string>

#include "collectives/bench/bench_config.h"

namespace loom::collectives::bench {

// Elements (f32) for `op` at `bytes` over n ranks: all_gather / reduce_scatter
// round down to a multiple of n (the full buffer). 0 = skipped size.
int64_t ElementsFor(const std::string& op, int64_t bytes, int n);

std::string ResultKey(int op_index, int size_index, int rank);

// Runs in a launched child; returns its exit code.
int RunBenchWorker(const std::string& backend, const BenchConfig& config);

}  // namespace loom::collectives::bench
