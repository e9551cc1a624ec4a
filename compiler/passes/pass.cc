#include "compiler/passes/pass.h"

#include "absl/strings/str_cat.h"
#include "base/status.h"
#include "compiler/ir/verifier.h"

namespace loom::compiler::passes {

absl::StatusOr<std::vector<PassReport>> PassPipeline::Run(ir::Graph& g) {
  std::vector<PassReport> reports;
  for (auto& p : passes_) {
    const std::string ctx = absl::StrCat("pass ", p->name());
    auto changed = p->Run(g);
    if (!changed.ok()) return Annotate(changed.status(), ctx);
    absl::Status s = ir::Verify(g);
    if (!s.ok()) return Annotate(s, absl::StrCat(ctx, " left an invalid graph"));
    reports.push_back({std::string(p->name()), *changed});
  }
  return reports;
}

}  // namespace loom::compiler::passes
