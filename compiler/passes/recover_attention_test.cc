#include "compiler/passes/recover_attention.h"

#include <cmath>
#include <limits>
#include <string>

#include "compiler/ir/text.h"
#include "compiler/testing/recover_test_util.h"
#include "gtest/gtest.h"

namespace loom::compiler::passes {
namespace {

using testing::CausalAdditiveMask;
using testing::CausalBoolMask;
using testing::ExpectRecovered;
using testing::ExpectUnchanged;
using testing::ScalarF32;

const double kInf = std::numeric_limits<double>::infinity();

// nanoGPT's attention as torch 1.13 exports it: k^T as one permute of the
// [B, T, H, D] projection, scale by 1/sqrt(D), masked_fill(bias == 0, -inf).
TEST(RecoverAttentionTest, CausalMaskedFillAsTorchExportsIt) {
  recover::ConstantTable consts = {{"drop", CausalBoolMask(4, 4, false)}, {"ninf", ScalarF32(-kInf)}};
  recover::MatchLog log;
  ExpectRecovered(RecoverAttention(&consts, &log),
                  R"IR(graph @g(%q: f32[1, 2, 4, 8], %kx: f32[1, 4, 2, 8], %v: f32[1, 2, 4, 8], %drop: bool[1, 1, 4, 4] const, %ninf: f32[] const) {
  %0 = permute(%kx) {dims=[0, 2, 3, 1]} : f32[1, 2, 8, 4]
  %1 = matmul(%q, %0) : f32[1, 2, 4, 4]
  %2 = scale(%1) {s=0.35355338454246521} : f32[1, 2, 4, 4]
  %3 = where(%drop, %ninf, %2) : f32[1, 2, 4, 4]
  %4 = softmax(%3) {axis=3} : f32[1, 2, 4, 4]
  %5 = matmul(%4, %v) : f32[1, 2, 4, 8]
  return %5
}
)IR",
                  R"IR(graph @g(%q: f32[1, 2, 4, 8], %kx: f32[1, 4, 2, 8], %v: f32[1, 2, 4, 8], %drop: bool[1, 1, 4, 4] const, %ninf: f32[] const) {
  %0 = permute(%kx) {dims=[0, 2, 1, 3]} : f32[1, 2, 4, 8]
  %1, %2 = sdpa(%q, %0, %v) {is_causal=true} : f32[1, 2, 4, 8], f32[1, 2, 4]
  return %1
}
)IR",
                  consts);
  ASSERT_EQ(log.size(), 1u);
  EXPECT_EQ(log[0], "attention: q f32[1, 2, 4, 8], scale 0.353553 (1/sqrt(D)), mask where(%drop -> -inf) causal "
                    "-> sdpa{is_causal=true}");
}

// Hugging Face GPT-2: divide by sqrt(D), where(causal, scores, finfo.min),
// then the padding mask added.
TEST(RecoverAttentionTest, FiniteFillCausalThenAdditiveMask) {
  recover::ConstantTable consts = {{"keep", CausalBoolMask(4, 4, true)},
                                   {"c", ScalarF32(std::sqrt(8.0))},
                                   {"fmin", ScalarF32(-std::numeric_limits<float>::max())}};
  ExpectRecovered(RecoverAttention(&consts),
                  R"IR(graph @g(%q: f32[1, 2, 4, 8], %k: f32[1, 2, 4, 8], %v: f32[1, 2, 4, 8], %am: f32[1, 1, 1, 4], %keep: bool[1, 1, 4, 4] const, %c: f32[] const, %fmin: f32[] const) {
  %0 = permute(%k) {dims=[0, 1, 3, 2]} : f32[1, 2, 8, 4]
  %1 = matmul(%q, %0) : f32[1, 2, 4, 4]
  %2 = div(%1, %c) : f32[1, 2, 4, 4]
  %3 = where(%keep, %2, %fmin) : f32[1, 2, 4, 4]
  %4 = add(%3, %am) : f32[1, 2, 4, 4]
  %5 = softmax(%4) {axis=-1} : f32[1, 2, 4, 4]
  %6 = matmul(%5, %v) : f32[1, 2, 4, 8]
  return %6
}
)IR",
                  R"IR(graph @g(%q: f32[1, 2, 4, 8], %k: f32[1, 2, 4, 8], %v: f32[1, 2, 4, 8], %am: f32[1, 1, 1, 4], %keep: bool[1, 1, 4, 4] const, %c: f32[] const, %fmin: f32[] const) {
  %0, %1 = sdpa(%q, %k, %v, %am) {is_causal=true} : f32[1, 2, 4, 8], f32[1, 2, 4]
  return %0
}
)IR",
                  consts);
}

// A BERT-style padding mask (a known additive constant, not causal) and an
// explicit scale that is not 1/sqrt(D); the product already has trans_b.
TEST(RecoverAttentionTest, AdditivePaddingMaskAndOtherScale) {
  Tensor pad = Tensor::MustEmpty({1, 1, 1, 4}, DType::kF32);
  for (int i = 0; i < 4; ++i) pad.SetDouble(i, i == 3 ? -10000.0 : 0.0);
  recover::ConstantTable consts = {{"pad", pad}};
  ExpectRecovered(RecoverAttention(&consts),
                  R"IR(graph @g(%q: f32[1, 2, 4, 8], %k: f32[1, 2, 4, 8], %v: f32[1, 2, 4, 8], %pad: f32[1, 1, 1, 4] const) {
  %0 = matmul(%q, %k) {trans_b=true} : f32[1, 2, 4, 4]
  %1 = scale(%0) {s=0.5} : f32[1, 2, 4, 4]
  %2 = add(%pad, %1) : f32[1, 2, 4, 4]
  %3 = softmax(%2) {axis=3} : f32[1, 2, 4, 4]
  %4 = matmul(%3, %v) : f32[1, 2, 4, 8]
  return %4
}
)IR",
                  R"IR(graph @g(%q: f32[1, 2, 4, 8], %k: f32[1, 2, 4, 8], %v: f32[1, 2, 4, 8], %pad: f32[1, 1, 1, 4] const) {
  %0, %1 = sdpa(%q, %k, %v, %pad) {scale=0.5} : f32[1, 2, 4, 8], f32[1, 2, 4]
  return %0
}
)IR",
                  consts);
}

// masked_fill with a known mask that is not causal: sdpa's boolean mask is
// its negation, made as a new constant.
TEST(RecoverAttentionTest, NonCausalDropMaskBecomesKeepConstant) {
  Tensor drop = Tensor::MustEmpty({1, 1, 4, 4}, DType::kBool);
  for (int i = 0; i < 16; ++i) drop.SetDouble(i, i % 4 == 2 ? 1.0 : 0.0);  // key 2 hidden from every query
  recover::ConstantTable consts = {{"drop", drop}, {"ninf", ScalarF32(-kInf)}};
  ExpectRecovered(RecoverAttention(&consts),
                  R"IR(graph @g(%q: f32[1, 2, 4, 8], %k: f32[1, 2, 4, 8], %v: f32[1, 2, 4, 8], %drop: bool[1, 1, 4, 4] const, %ninf: f32[] const) {
  %0 = permute(%k) {dims=[0, 1, 3, 2]} : f32[1, 2, 8, 4]
  %1 = matmul(%q, %0) : f32[1, 2, 4, 4]
  %2 = scale(%1) {s=0.35355338454246521} : f32[1, 2, 4, 4]
  %3 = where(%drop, %ninf, %2) : f32[1, 2, 4, 4]
  %4 = softmax(%3) {axis=3} : f32[1, 2, 4, 4]
  %5 = matmul(%4, %v) : f32[1, 2, 4, 8]
  return %5
}
)IR",
                  R"IR(graph @g(%q: f32[1, 2, 4, 8], %k: f32[1, 2, 4, 8], %v: f32[1, 2, 4, 8], %drop: bool[1, 1, 4, 4] const, %ninf: f32[] const, %"drop/keep": bool[1, 1, 4, 4] const) {
  %0, %1 = sdpa(%q, %k, %v, %"drop/keep") : f32[1, 2, 4, 8], f32[1, 2, 4]
  return %0
}
)IR",
                  consts);
  ASSERT_EQ(consts.count("drop/keep"), 1u);
  EXPECT_EQ(consts.at("drop/keep").GetDouble(2), 0.0);
  EXPECT_EQ(consts.at("drop/keep").GetDouble(3), 1.0);
}

// Masks computed at run time: a keep mask passes through, a drop mask is
// negated by a node; no scale at all is scale 1.
TEST(RecoverAttentionTest, RuntimeMasksAndNoScale) {
  recover::ConstantTable consts = {{"ninf", ScalarF32(-kInf)}};
  ExpectRecovered(RecoverAttention(&consts),
                  R"IR(graph @g(%q: f32[1, 2, 4, 8], %k: f32[1, 2, 4, 8], %v: f32[1, 2, 4, 8], %keep: bool[1, 1, 4, 4], %drop: bool[1, 2, 4, 4], %ninf: f32[] const) {
  %0 = matmul(%q, %k) {trans_b=true} : f32[1, 2, 4, 4]
  %1 = where(%keep, %0, %ninf) : f32[1, 2, 4, 4]
  %2 = softmax(%1) {axis=3} : f32[1, 2, 4, 4]
  %3 = matmul(%2, %v) : f32[1, 2, 4, 8]
  %4 = matmul(%q, %k) {trans_b=true} : f32[1, 2, 4, 4]
  %5 = where(%drop, %ninf, %4) : f32[1, 2, 4, 4]
  %6 = softmax(%5) {axis=3} : f32[1, 2, 4, 4]
  %7 = matmul(%6, %v) : f32[1, 2, 4, 8]
  return %3, %7
}
)IR",
                  R"IR(graph @g(%q: f32[1, 2, 4, 8], %k: f32[1, 2, 4, 8], %v: f32[1, 2, 4, 8], %keep: bool[1, 1, 4, 4], %drop: bool[1, 2, 4, 4], %ninf: f32[] const) {
  %0, %1 = sdpa(%q, %k, %v, %keep) {scale=1.0} : f32[1, 2, 4, 8], f32[1, 2, 4]
  %2 = logical_not(%drop) : bool[1, 2, 4, 4]
  %3, %4 = sdpa(%q, %k, %v, %2) {scale=1.0} : f32[1, 2, 4, 8], f32[1, 2, 4]
  return %0, %3
}
)IR",
                  consts);
}

// An additive causal constant (0 on and below the diagonal, -inf above).
TEST(RecoverAttentionTest, AdditiveCausalConstant) {
  recover::ConstantTable consts = {{"causal", CausalAdditiveMask(4, 4, -kInf)}};
  ExpectRecovered(RecoverAttention(&consts),
                  R"IR(graph @g(%q: f32[1, 2, 4, 8], %k: f32[1, 2, 4, 8], %v: f32[1, 2, 4, 8], %causal: f32[4, 4] const) {
  %0 = matmul(%q, %k) {trans_b=true} : f32[1, 2, 4, 4]
  %1 = scale(%0) {s=0.35355338454246521} : f32[1, 2, 4, 4]
  %2 = add(%1, %causal) : f32[1, 2, 4, 4]
  %3 = softmax(%2) {axis=3} : f32[1, 2, 4, 4]
  %4 = matmul(%3, %v) : f32[1, 2, 4, 8]
  return %4
}
)IR",
                  R"IR(graph @g(%q: f32[1, 2, 4, 8], %k: f32[1, 2, 4, 8], %v: f32[1, 2, 4, 8], %causal: f32[4, 4] const) {
  %0, %1 = sdpa(%q, %k, %v) {is_causal=true} : f32[1, 2, 4, 8], f32[1, 2, 4]
  return %0
}
)IR",
                  consts);
}

// The decomposed attention of the first test with one piece changed.
std::string Attention(const std::string& fill_line, const std::string& softmax_axis, const std::string& ret,
                      const std::string& mask_type = "bool[1, 1, 4, 4]") {
  return R"IR(graph @g(%q: f32[1, 2, 4, 8], %k: f32[1, 2, 4, 8], %v: f32[1, 2, 4, 8], %m: )IR" + mask_type +
         R"IR( const, %fill: f32[] const) {
  %0 = matmul(%q, %k) {trans_b=true} : f32[1, 2, 4, 4]
  %1 = scale(%0) {s=0.35355338454246521} : f32[1, 2, 4, 4]
  %2 = )IR" + fill_line + R"IR( : f32[1, 2, 4, 4]
  %3 = softmax(%2) {axis=)IR" + softmax_axis + R"IR(} : f32[1, 2, 4, 4]
  %4 = matmul(%3, %v) : f32[1, 2, 4, 8]
  return )IR" + ret + R"IR(
}
)IR";
}

TEST(RecoverAttentionTest, NearMisses) {
  recover::ConstantTable consts = {{"m", CausalBoolMask(4, 4, false)}, {"fill", ScalarF32(-kInf)}};
  const std::string fill = "where(%m, %fill, %1)";
  // The control case matches (so the near misses below are near).
  {
    recover::ConstantTable c = consts;
    auto g = ir::ParseGraph(Attention(fill, "3", "%4"));
    ASSERT_TRUE(g.ok()) << g.status();
    EXPECT_TRUE(*RecoverAttention(&c).Run(*g));
  }
  // Softmax over the query axis.
  ExpectUnchanged(RecoverAttention(&consts), Attention(fill, "2", "%4"));
  // The attention weights are returned too.
  ExpectUnchanged(RecoverAttention(&consts), Attention(fill, "3", "%4, %3"));
  // The fill goes where the mask is false: a kept upper triangle is not causal,
  // and with a finite fill no boolean mask is exact.
  recover::ConstantTable finite = {{"m", CausalBoolMask(4, 4, false)}, {"fill", ScalarF32(-1e4)}};
  ExpectUnchanged(RecoverAttention(&finite), Attention("where(%m, %1, %fill)", "3", "%4"));
  // A finite fill above -1e4 is not taken as masking even when causal.
  recover::ConstantTable weak = {{"m", CausalBoolMask(4, 4, false)}, {"fill", ScalarF32(-100.0)}};
  ExpectUnchanged(RecoverAttention(&weak), Attention(fill, "3", "%4"));
  // A mask shifted by one key (query t sees keys <= t + 1) with a finite fill.
  Tensor shifted = Tensor::MustEmpty({1, 1, 4, 4}, DType::kBool);
  for (int i = 0; i < 16; ++i) shifted.SetDouble(i, (i % 4) > (i / 4) + 1 ? 1.0 : 0.0);
  recover::ConstantTable off = {{"m", shifted}, {"fill", ScalarF32(-1e4)}};
  ExpectUnchanged(RecoverAttention(&off), Attention(fill, "3", "%4"));
  // A mask broadcast over heads that is not causal, with a finite fill: no exact form.
  Tensor heads = Tensor::MustEmpty({1, 2, 4, 4}, DType::kBool);
  for (int i = 0; i < 32; ++i) heads.SetDouble(i, i < 16 ? ((i % 4) > (i / 4 % 4) ? 1.0 : 0.0) : 0.0);
  recover::ConstantTable per_head = {{"m", heads}, {"fill", ScalarF32(-1e4)}};
  ExpectUnchanged(RecoverAttention(&per_head), Attention(fill, "3", "%4", "bool[1, 2, 4, 4]"));
}

TEST(RecoverAttentionTest, MoreNearMisses) {
  recover::ConstantTable consts = {{"ninf", ScalarF32(-kInf)}};
  // Dropout between the softmax and the second product.
  ExpectUnchanged(RecoverAttention(&consts), R"IR(graph @g(%q: f32[1, 2, 4, 8], %k: f32[1, 2, 4, 8], %v: f32[1, 2, 4, 8]) {
  %0 = matmul(%q, %k) {trans_b=true} : f32[1, 2, 4, 4]
  %1 = softmax(%0) {axis=3} : f32[1, 2, 4, 4]
  %2 = dropout(%1) {p=0.10000000000000001} : f32[1, 2, 4, 4]
  %3 = matmul(%2, %v) : f32[1, 2, 4, 8]
  return %3
}
)IR");
  // The built-in families' attention with dropout (compiler/models): keep
  // mask, scale, softmax, dropout keyed by the step, product. Without the
  // dropout this is a boolean-mask match (Masks, in the header).
  ExpectUnchanged(RecoverAttention(&consts), R"IR(graph @g(%q: f32[1, 2, 4, 8], %k: f32[1, 2, 4, 8], %v: f32[1, 2, 4, 8], %keep: bool[4, 4], %step: f32[], %ninf: f32[] const) {
  %0 = matmul(%q, %k) {trans_b=true} : f32[1, 2, 4, 4]
  %1 = scale(%0) {s=0.35355339059327379} : f32[1, 2, 4, 4]
  %2 = where(%keep, %1, %ninf) : f32[1, 2, 4, 4]
  %3 = softmax(%2) {axis=-1} : f32[1, 2, 4, 4]
  %4 = dropout(%3, %step) {p=0.20000000000000001, seed=7} : f32[1, 2, 4, 4]
  %5 = matmul(%4, %v) : f32[1, 2, 4, 8]
  return %5
}
)IR");
  // Keys and values broadcast over heads (one head for two queries' heads).
  ExpectUnchanged(RecoverAttention(&consts), R"IR(graph @g(%q: f32[1, 2, 4, 8], %k: f32[1, 1, 4, 8], %v: f32[1, 1, 4, 8]) {
  %0 = matmul(%q, %k) {trans_b=true} : f32[1, 2, 4, 4]
  %1 = softmax(%0) {axis=3} : f32[1, 2, 4, 4]
  %2 = matmul(%1, %v) : f32[1, 2, 4, 8]
  return %2
}
)IR");
  // A boolean (non-causal) where followed by an additive mask: two masks.
  ExpectUnchanged(RecoverAttention(&consts), R"IR(graph @g(%q: f32[1, 2, 4, 8], %k: f32[1, 2, 4, 8], %v: f32[1, 2, 4, 8], %keep: bool[1, 1, 4, 4], %am: f32[1, 1, 1, 4], %ninf: f32[] const) {
  %0 = matmul(%q, %k) {trans_b=true} : f32[1, 2, 4, 4]
  %1 = where(%keep, %0, %ninf) : f32[1, 2, 4, 4]
  %2 = add(%1, %am) : f32[1, 2, 4, 4]
  %3 = softmax(%2) {axis=3} : f32[1, 2, 4, 4]
  %4 = matmul(%3, %v) : f32[1, 2, 4, 8]
  return %4
}
)IR");
}

}  // namespace
}  // namespace loom::compiler::passes
