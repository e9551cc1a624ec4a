#include "bench/cuda/compile_bench_flags.h"

#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/status.h"

namespace loom::bench::cuda {
namespace {

absl::Status Bad(absl::string_view flag, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(flag, ": ", why));
}

// A non-negative integer flag "--name=value"; false when `arg` is not it.
absl::StatusOr<bool> Count(absl::string_view arg, absl::string_view name, int lo, int hi, int* out) {
  const std::string prefix = absl::StrCat("--", name, "=");
  if (!absl::StartsWith(arg, prefix)) return false;
  absl::string_view v = arg.substr(prefix.size());
  int x = 0;
  if (!absl::SimpleAtoi(v, &x) || x < lo || x > hi)
    return Bad(absl::StrCat("--", name), absl::StrCat("expected an integer in [", lo, ", ", hi, "], got '", v, "'"));
  *out = x;
  return true;
}

}  // namespace

absl::StatusOr<CompileBenchFlags> ParseCompileBenchFlags(int argc, const char* const* argv) {
  CompileBenchFlags f;
  std::vector<const char*> model = {argc > 0 ? argv[0] : "compile_bench"};
  static const char* const kTrainOnly[] = {"--data", "--torch", "--warmup", "--steps", "--loss-tol", "--no-graph",
                                           "--profile"};
  for (int i = 1; i < argc; ++i) {
    absl::string_view a = argv[i];
    const std::string name(a.substr(0, a.find('=')));
    LOOM_ASSIGN_OR_RETURN(bool threads, Count(a, "compile-threads", 0, 1024, &f.compile_threads));
    LOOM_ASSIGN_OR_RETURN(bool warm, Count(a, "warm", 0, 100, &f.warm));
    if (threads || warm) continue;
    if (absl::StartsWith(a, "--kernel-cache=")) {
      f.kernel_cache = std::string(a.substr(15));
      if (f.kernel_cache.empty()) return Bad("--kernel-cache", "expected a folder, got ''");
      continue;
    }
    if (a == "--no-cold") {
      f.cold = false;
      continue;
    }
    if (a == "--dry") {
      f.dry = true;
      continue;
    }
    for (const char* t : kTrainOnly)
      if (name == t) return Bad(name, "a train_bench flag; compile_bench does not train");
    model.push_back(argv[i]);
  }
  if (!f.cold && f.warm == 0) return Bad("--warm", "0 with --no-cold leaves nothing to run");
  LOOM_ASSIGN_OR_RETURN(f.model, ParseModelFlags(static_cast<int>(model.size()), model.data()));
  return f;
}

}  // namespace loom::bench::cuda
