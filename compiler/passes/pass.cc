#include "compiler/passes/pass.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "base/status.h"
#include "compiler/ir/verifier.h"

namespace loom::compiler::passes {

absl::StatusOr<std::vector<PassReport>> PassPipeline::Run(ir::Graph& g) {
  std::vector<PassReport> reports;
  for (auto& p : passes_) {
    const std::string ctx = absl::StrCat("pass ", p->name());
    const auto t0 = std::chrono::steady_clock::now();
    auto changed = p->Run(g);
    if (!changed.ok()) return Annotate(changed.status(), ctx);
    absl::Status s = ir::Verify(g);
    if (!s.ok()) return Annotate(s, absl::StrCat(ctx, " left an invalid graph"));
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    reports.push_back({std::string(p->name()), *changed, seconds});
  }
  return reports;
}

}  // namespace loom::compiler::passes
