// Impossible layouts are refused with a message naming the field and value
// (job-spec validation runs the same rules: runtime/jobspec/jobspec_test.cc).
#include "parallel/parallel_check.h"

#include "gtest/gtest.h"

namespace loom::parallel {
namespace {

v1::ModelSpec Model(int n_head, int n_kv_head) {
  v1::ModelSpec m;
  m.set_family(n_kv_head == n_head ? "gpt" : "llama");
  m.set_n_layer(2);
  m.set_n_head(n_head);
  m.set_n_kv_head(n_kv_head);
  m.set_d_model(64);
  m.set_seq_len(32);
  m.set_vocab(256);
  return m;
}

v1::ModelSpec WithVocab(v1::ModelSpec m, int vocab) {
  m.set_vocab(vocab);
  return m;
}
v1::ModelSpec WithFfn(v1::ModelSpec m, int ffn) {
  m.set_ffn_hidden(ffn);
  return m;
}
v1::ModelSpec WithSeq(v1::ModelSpec m, int seq_len) {
  m.set_seq_len(seq_len);
  return m;
}

std::string Error(const absl::Status& s) { return std::string(s.message()); }

TEST(ParallelCheck, AcceptsLegalLayouts) {
  EXPECT_TRUE(CheckParallelLayout(Model(4, 4), 8, {2, 2, 3, true}, 4).ok());
  EXPECT_TRUE(CheckParallelLayout(Model(8, 2), 8, {4, 2, 1, false}, 8).ok());
  EXPECT_TRUE(CheckParallelLayout(Model(4, 4), 8, {1, 1, 0, false}).ok());
  // tp = 1 splits nothing; sequence parallel off leaves seq_len whole.
  EXPECT_TRUE(CheckParallelLayout(WithFfn(WithVocab(Model(4, 4), 250), 170), 8, {2, 1, 0, false}).ok());
  EXPECT_TRUE(CheckParallelLayout(WithSeq(Model(4, 4), 30), 8, {1, 4, 0, false}).ok());
}

TEST(ParallelCheck, EachRuleNamesTheFieldAndValue) {
  struct Case {
    v1::ModelSpec model;
    int64_t batch;
    ParallelLayout layout;
    int world;
    std::string want;
  };
  const std::vector<Case> cases = {
      {Model(12, 12), 8, {1, 5, 0, false}, 0, "parallel.tp: must divide model.n_head = 12 (got 5)"},
      {Model(8, 2), 8, {1, 4, 0, false}, 0, "parallel.tp: must divide model.n_kv_head = 2 (got 4)"},
      {Model(4, 4), 8, {4, 2, 0, false}, 4, "parallel.dp: dp x tp must equal the world size 4 (got dp=4, tp=2: 8)"},
      {Model(4, 4), 8, {1, 4, 0, false}, 6, "parallel.tp: does not divide the world size 6 (got 4)"},
      {Model(4, 4), 8, {2, 1, 4, false}, 0, "parallel.zero_stage: expected 0, 1, 2 or 3 (got 4)"},
      {Model(4, 4), 8, {2, 1, -1, false}, 0, "parallel.zero_stage: expected 0, 1, 2 or 3 (got -1)"},
      {Model(4, 4), 8, {4, 1, 0, true}, 0, "parallel.sequence_parallel: needs parallel.tp > 1 (got tp=1)"},
      {Model(4, 4), 8, {3, 1, 0, false}, 0, "train.batch_size: must be divisible by parallel.dp = 3 (got 8)"},
      {Model(4, 4), 8, {0, 1, 0, false}, 0, "parallel.dp: must be positive (got 0)"},
      {Model(4, 4), 8, {1, 0, 0, false}, 0, "parallel.tp: must be positive or auto (got 0)"},
      {WithVocab(Model(4, 4), 250), 8, {1, 4, 0, false}, 0,
       "parallel.tp: must divide model.vocab = 250 (vocab-parallel) (got 4)"},
      {WithFfn(Model(4, 4), 170), 8, {1, 4, 0, false}, 0, "parallel.tp: must divide model.ffn_hidden = 170 (got 4)"},
      {WithSeq(Model(4, 4), 30), 8, {1, 4, 0, true}, 0,
       "parallel.tp: must divide model.seq_len = 30 (sequence parallel) (got 4)"},
  };
  for (const Case& c : cases) {
    absl::Status s = CheckParallelLayout(c.model, c.batch, c.layout, c.world);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.want;
    EXPECT_EQ(Error(s), c.want);
  }
  EXPECT_EQ(Error(CheckWorldSize(0, 1, 1)), "world size: must be positive (got 0)");
}

// An imported model has no head count to divide; its tp needs a plan.
TEST(ParallelCheck, ImportedModelsTakeATpPlanInsteadOfHeadRules) {
  v1::ModelSpec onnx = Model(4, 4);
  onnx.set_family("onnx");
  const std::vector<TpRule> plan = {{"*.qkv.weight", "colwise"}};
  EXPECT_TRUE(CheckParallelLayout(onnx, 8, {1, 8, 0, false, plan}, 8).ok());  // 8 does not divide n_head = 4: unused
  EXPECT_EQ(Error(CheckParallelLayout(onnx, 8, {1, 2, 0, false}, 2)),
            "parallel.tp_plan: tp = 2 needs a plan for an ONNX model (parameter-name patterns and their styles), or "
            "tp: auto; `loom plan JOB.yaml` proposes one (got none)");
  EXPECT_EQ(Error(CheckParallelLayout(onnx, 8, {1, 2, 0, false, {{"", "colwise"}}})),
            "parallel.tp_plan: a pattern is empty (got '': colwise)");
  EXPECT_EQ(Error(CheckParallelLayout(Model(4, 4), 8, {1, 2, 0, false, plan})),
            "parallel.tp_plan: applies to imported models (model.onnx); gpt uses its built-in tensor-parallel plan "
            "(got 1 rules)");
  EXPECT_TRUE(CheckParallelLayout(onnx, 8, {4, 1, 3, false}, 4).ok());  // dp and ZeRO need no plan
}

}  // namespace
}  // namespace loom::parallel
