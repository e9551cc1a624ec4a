// Tests of the recovery passes (compiler/passes/recover_*.h): the IR text
// before and the exact text expected after, plus a numerical check that the
// rewritten graph computes what the decomposed one did.
//
//   passes::recover::ConstantTable consts = {{"mask", CausalMask(8, 8)}};
//   ExpectRecovered(RecoverAttention(&consts), kBefore, kAfter, consts);
//   ExpectUnchanged(RecoverAttention(&consts), kNearMiss);
#pragma once

#include <string>

#include "absl/strings/string_view.h"
#include "base/tensor.h"
#include "compiler/ir/ir.h"
#include "compiler/passes/pass.h"
#include "compiler/passes/recover_util.h"

namespace loom::compiler::testing {

// Runs both graphs on the same inputs: floating inputs drawn N(0, 1) (seeded
// per input), integer inputs uniform in [0, 4), bool inputs alternating;
// const inputs from `consts` by name. Returns max over outputs of
// RelativeError(after, before); +inf when the outputs' types differ or a
// graph fails to run (with the reason in *why).
double MaxRelativeDifference(const ir::Graph& before, const ir::Graph& after,
                             const passes::recover::ConstantTable& consts, std::string* why);

// Parses `before`, runs `pass`, expects a change, the printed graph to be
// `expected`, and the two graphs to agree within `tol` (MaxRelativeDifference).
void ExpectRecovered(passes::Pass&& pass, absl::string_view before, absl::string_view expected,
                     const passes::recover::ConstantTable& consts = {}, double tol = 1e-5);
// Parses `text`, runs `pass`, expects no change and the same text back.
void ExpectUnchanged(passes::Pass&& pass, absl::string_view text);

// A [1, 1, T, S] constant: keep (true) where s <= t when `keep_lower`; its
// negation (true above the diagonal, as masked_fill's condition) otherwise.
Tensor CausalBoolMask(int64_t T, int64_t S, bool keep_lower);
// A [T, S] additive mask: 0 where s <= t, `fill` above the diagonal.
Tensor CausalAdditiveMask(int64_t T, int64_t S, double fill);
// A scalar f32 constant.
Tensor ScalarF32(double v);

}  // namespace loom::compiler::testing
