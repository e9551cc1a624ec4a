// `loom bench collectives`: nccl-tests style all_reduce / all_gather /
// reduce_scatter bandwidth of Loom's CPU backends, with torch.distributed's
// Gloo side by side in the same invocation and this machine's single-thread
// memcpy bandwidth as the ceiling. See bench_config.h for the flags and
// docs/collectives.md ("Benchmark") for how to read the output.
//
// The command spawns the ranks itself (launcher.h: fork+exec of this binary
// in a hidden worker mode, store hosted here, secret via the environment).
// Exit codes: 0 all runs completed and every result checked out, 1 a run
// failed or a result was wrong, 2 bad flag (the message names it).
#pragma once

#include <string>
#include <vector>

namespace loom::collectives::bench {

// `args`: the words after "collectives".
int RunCollectivesBench(const std::vector<std::string>& args);

// `loom bench <what> ...`: dispatches "collectives" (the only benchmark so far).
int RunBenchCommand(const std::vector<std::string>& args);

}  // namespace loom::collectives::bench
