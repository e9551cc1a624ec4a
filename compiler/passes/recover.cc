#include "compiler/passes/recover.h"

#include <vector>

#include "base/status.h"
#include "compiler/passes/dce.h"
#include "compiler/passes/pass.h"
#include "compiler/passes/recover_attention.h"
#include "compiler/passes/recover_gelu.h"
#include "compiler/passes/recover_linear.h"
#include "compiler/passes/recover_norms.h"
#include "compiler/passes/recover_positions.h"

namespace loom::compiler::passes {

absl::StatusOr<recover::MatchLog> RecoverFastOps(ir::Graph& g, recover::ConstantTable& consts) {
  recover::MatchLog log;
  PassPipeline p;
  p.Add<RecoverPositions>(&consts, &log)
      .Add<RecoverLinear>(&log)
      .Add<RecoverNorms>(&consts, &log)
      .Add<RecoverGelu>(&consts, &log)
      .Add<RecoverAttention>(&consts, &log)
      .Add<DeadCodeElimination>();
  LOOM_RETURN_IF_ERROR(p.Run(g).status());
  const std::vector<int> uses = g.UseCounts();
  std::vector<ir::GraphInput>& inputs = g.mutable_inputs();
  for (size_t i = inputs.size(); i-- > 0;) {
    if (inputs[i].kind != ir::InputKind::kConst || uses[inputs[i].value] > 0) continue;
    consts.erase(inputs[i].name);
    inputs.erase(inputs.begin() + static_cast<std::ptrdiff_t>(i));
  }
  return log;
}

}  // namespace loom::compiler::passes
