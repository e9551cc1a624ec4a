#include "compiler/testing/recover_test_util.h"

#include <cmath>
#include <limits>
#include <vector>

#include "base/rng.h"
#include "base/status.h"
#include "compiler/executor.h"
#include "compiler/ir/text.h"
#include "compiler/ir/verifier.h"
#include "gtest/gtest.h"

namespace loom::compiler::testing {
namespace {

absl::StatusOr<std::vector<Tensor>> RunWith(const ir::Graph& g, const passes::recover::ConstantTable& consts) {
  std::vector<Tensor> in;
  for (size_t k = 0; k < g.inputs().size(); ++k) {
    const ir::GraphInput& gi = g.inputs()[k];
    const ir::TensorMeta& m = g.meta(gi.value);
    if (gi.kind == ir::InputKind::kConst) {
      auto it = consts.find(gi.name);
      if (it == consts.end()) return absl::NotFoundError("no value for const input " + gi.name);
      in.push_back(it->second);
      continue;
    }
    Tensor t = Tensor::Zeros(m.shape, m.dtype);
    uint64_t stream = 0;
    for (char c : gi.name) stream = stream * 131 + static_cast<unsigned char>(c);
    Philox rng(7, stream);
    for (int64_t i = 0; i < t.numel(); ++i) {
      if (IsFloating(m.dtype)) t.SetDouble(i, rng.Normal(static_cast<uint64_t>(i)));
      else if (m.dtype == DType::kBool) t.SetDouble(i, i % 2);
      else t.SetDouble(i, static_cast<double>(rng.Bits(static_cast<uint64_t>(i)) % 4));
    }
    in.push_back(t);
  }
  LOOM_ASSIGN_OR_RETURN(Executor exec, Executor::Create(g));
  LOOM_ASSIGN_OR_RETURN(std::vector<Tensor> out, exec.Run(in));
  std::vector<Tensor> copies;
  for (const Tensor& t : out) copies.push_back(t.Clone());
  return copies;
}

}  // namespace

double MaxRelativeDifference(const ir::Graph& before, const ir::Graph& after,
                             const passes::recover::ConstantTable& consts, std::string* why) {
  const double inf = std::numeric_limits<double>::infinity();
  auto want = RunWith(before, consts);
  auto got = RunWith(after, consts);
  if (!want.ok() || !got.ok()) {
    *why = std::string(!want.ok() ? want.status().message() : got.status().message());
    return inf;
  }
  if (want->size() != got->size()) return inf;
  double worst = 0;
  for (size_t i = 0; i < want->size(); ++i) {
    if (!(kernels::MetaOf((*want)[i]) == kernels::MetaOf((*got)[i]))) return inf;
    worst = std::max(worst, RelativeError((*got)[i], (*want)[i]));
  }
  return worst;
}

void ExpectRecovered(passes::Pass&& pass, absl::string_view before, absl::string_view expected,
                     const passes::recover::ConstantTable& consts, double tol) {
  auto g = ir::ParseGraph(before);
  ASSERT_TRUE(g.ok()) << g.status();
  ir::Graph after = *g;
  auto changed = pass.Run(after);
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_TRUE(*changed) << pass.name();
  ASSERT_TRUE(ir::Verify(after).ok()) << ir::Verify(after);
  const std::string text = ir::PrintGraph(after);
  EXPECT_EQ(text, std::string(expected));
  auto again = ir::ParseGraph(text);
  ASSERT_TRUE(again.ok()) << again.status();
  std::string why;
  EXPECT_LE(MaxRelativeDifference(*g, after, consts, &why), tol) << why;
}

void ExpectUnchanged(passes::Pass&& pass, absl::string_view text) {
  auto g = ir::ParseGraph(text);
  ASSERT_TRUE(g.ok()) << g.status();
  auto changed = pass.Run(*g);
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_FALSE(*changed) << pass.name();
  EXPECT_EQ(ir::PrintGraph(*g), std::string(text));
}

Tensor CausalBoolMask(int64_t T, int64_t S, bool keep_lower) {
  Tensor m = Tensor::MustEmpty({1, 1, T, S}, DType::kBool);
  for (int64_t i = 0; i < T * S; ++i) m.SetDouble(i, ((i % S) <= (i / S)) == keep_lower ? 1.0 : 0.0);
  return m;
}

Tensor CausalAdditiveMask(int64_t T, int64_t S, double fill) {
  Tensor m = Tensor::MustEmpty({T, S}, DType::kF32);
  for (int64_t i = 0; i < T * S; ++i) m.SetDouble(i, (i % S) <= (i / S) ? 0.0 : fill);
  return m;
}

Tensor ScalarF32(double v) {
  Tensor t = Tensor::MustEmpty({}, DType::kF32);
  t.SetDouble(0, v);
  return t;
}

}  // namespace loom::compiler::testing
