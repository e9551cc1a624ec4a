// `loom plan` (RunPlanCommand) and tp: auto resolution: the table, --json,
// bad flags (exit 2 naming the flag), impossible layouts, and plan.txt /
// plan.json in the run folder.
#include "runtime/plan/planner_command.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "compiler/import/onnx/testing/onnx_test_util.h"
#include "compiler/models/models.h"
#include "parallel/graph_planner.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "parallel/trainer.h"
#include "runtime/jobspec/jobspec.h"

namespace loom::runtime::plan {
namespace {

using parallel::Hardware;
using parallel::Layout;
using parallel::LayoutName;

std::string TmpDir() {
  const char* t = std::getenv("TEST_TMPDIR");
  return t ? t : "/tmp";
}

std::string WriteSpec(const std::string& name, const std::string& yaml) {
  std::string path = TmpDir() + "/" + name;
  std::ofstream(path) << yaml;
  return path;
}

const char kGpt[] =
    "name: plan-test\n"
    "model: {family: gpt, n_layer: 2, n_head: 4, d_model: 128, seq_len: 64, vocab: 256}\n"
    "train: {batch_size: 8}\n";

struct Result {
  int rc;
  std::string out, err;
};

Result RunPlan(std::vector<std::string> args) {
  std::ostringstream out, err;
  int rc = RunPlanCommand(args, out, err);
  return {rc, out.str(), err.str()};
}

TEST(PlanCommand, PrintsTheRankedTable) {
  std::string spec = WriteSpec("gpt.yaml", kGpt);
  Result r = RunPlan({spec, "--world", "4"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("rank layout"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("dp=2 tp=2 zero=0"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("dp=1 tp=4 zero=0 sp"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("choice: "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("fits in memory"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("fastest estimated step"), std::string::npos) << r.out;
}

// With activation checkpointing the plan comes from the compiled programs,
// which recompute the blocks: less activation memory than without it, at
// every built-in tp layout.
TEST(PlanCommand, ActivationCheckpointingPlansFromTheCompiledProgram) {
  auto plain = jobspec::ParseJobSpecYaml(kGpt);
  ASSERT_TRUE(plain.ok()) << plain.status();
  jobspec::ApplyDefaults(*plain);
  v1::JobSpec blocks = *plain;
  blocks.mutable_train()->set_activation_checkpointing("blocks");
  Hardware hw = DefaultHardware(*plain);
  hw.world = 1;
  auto a = PlanJob(*plain, hw), b = PlanJob(blocks, hw);
  ASSERT_TRUE(a.ok() && b.ok()) << a.status() << " " << b.status();
  ASSERT_EQ(b->ranked.size(), 1u);
  EXPECT_NE(b->model_summary.find("activation checkpointing blocks"), std::string::npos) << b->model_summary;
  // The same compiled estimate without checkpointing, for a like-for-like
  // comparison (the plain plan's own figure comes from the coefficients).
  parallel::GraphModel g;
  auto fwd = compiler::models::BuildForward(plain->model(), compiler::models::TrainingOptions(*plain));
  ASSERT_TRUE(fwd.ok()) << fwd.status();
  g.forward = *fwd;
  g.model = plain->model();
  g.train = plain->train();
  auto compiled = parallel::EstimateCompiled(g, plain->train().batch_size(), hw, Layout{1, 1, 0, false, {}});
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  std::printf("activations: %lld bytes without (coefficients), %lld without (compiled), %lld with blocks\n",
              static_cast<long long>(a->ranked[0].memory.activations),
              static_cast<long long>(compiled->memory.activations),
              static_cast<long long>(b->ranked[0].memory.activations));
  EXPECT_LT(b->ranked[0].memory.activations, compiled->memory.activations);
  EXPECT_LT(b->ranked[0].memory.activations, a->ranked[0].memory.activations);
  hw.world = 4;
  auto four = PlanJob(blocks, hw);
  ASSERT_TRUE(four.ok()) << four.status();
  std::string names;
  for (const auto& c : four->ranked) names += LayoutName(c.layout) + "; ";
  EXPECT_NE(names.find("dp=2 tp=2 zero=0"), std::string::npos) << names;
  EXPECT_NE(names.find("dp=1 tp=4 zero=0"), std::string::npos) << names;
}

// train.grad_accum_steps: the table has an accum column and a line naming
// the micro-batches; the JSON carries the accumulators in each total; the
// compiled-program plan (activation checkpointing) counts them too.
TEST(PlanCommand, GradientAccumulatorsAreShownAndCounted) {
  const std::string model = "model: {family: gpt, n_layer: 2, n_head: 4, d_model: 128, seq_len: 64, vocab: 256}\n";
  std::string spec = WriteSpec("accum.yaml", model + "train: {batch_size: 8, grad_accum_steps: 4}\n");
  Result r = RunPlan({spec, "--world", "2"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("gradient accumulation: 4 micro-batches of 2 per update"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("   accum "), std::string::npos) << r.out;
  Result j = RunPlan({spec, "--world", "2", "--json"});
  ASSERT_EQ(j.rc, 0) << j.err;
  nlohmann::json plan = nlohmann::json::parse(j.out);
  EXPECT_EQ(plan["inputs"]["grad_accum_steps"], 4);
  for (const auto& c : plan["candidates"]) {
    const auto& m = c["memory"];
    EXPECT_GT(m["accumulators"].get<int64_t>(), 0) << c["layout"];
    EXPECT_EQ(m["total"].get<int64_t>(), m["parameters"].get<int64_t>() + m["gradients"].get<int64_t>() +
                                             m["optimizer"].get<int64_t>() + m["activations"].get<int64_t>() +
                                             m["workspace"].get<int64_t>() + m["accumulators"].get<int64_t>())
        << c["layout"];
  }
  auto parsed =
      jobspec::ParseJobSpecYaml(model + "train: {batch_size: 8, grad_accum_steps: 4, activation_checkpointing: blocks}\n");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  jobspec::ApplyDefaults(*parsed);
  Hardware hw = DefaultHardware(*parsed);
  hw.world = 1;
  auto blocks = PlanJob(*parsed, hw);
  ASSERT_TRUE(blocks.ok()) << blocks.status();
  EXPECT_EQ(blocks->batch, 8);
  EXPECT_EQ(blocks->ranked[0].memory.accumulators, blocks->ranked[0].memory.parameters);
}

// What `loom plan` predicts for one rank's training step arena (gradients +
// activations: from the compiled program under blocks / selective, from the
// fitted coefficients without checkpointing) against the arena the Trainer's
// compiled program gets (Trainer::ArenaBytes, the lowered program's plan),
// within 15% for every mode.
TEST(PlanCommand, PredictedArenaWithin15PercentOfTheCompiledOne) {
  for (const char* mode : {"none", "blocks", "selective"}) {
    auto spec = jobspec::ParseJobSpecYaml(absl::StrCat(
        "model: {family: gpt, n_layer: 6, n_head: 4, d_model: 128, seq_len: 128, vocab: 256}\n"
        "train: {batch_size: 4, activation_checkpointing: ",
        mode, "}\n"));
    ASSERT_TRUE(spec.ok()) << spec.status();
    jobspec::ApplyDefaults(*spec);
    Hardware hw = DefaultHardware(*spec);
    auto plan = PlanJob(*spec, hw);
    ASSERT_TRUE(plan.ok()) << plan.status();
    const parallel::MemoryEstimate& m = plan->ranked.at(0).memory;
    const double predicted = static_cast<double>(m.gradients + m.activations);
    auto trainer = parallel::Trainer::Create(*spec);
    ASSERT_TRUE(trainer.ok()) << trainer.status();
    const double arena = static_cast<double>((*trainer)->ArenaBytes());
    const double err = (predicted - arena) / arena;
    std::printf("%-9s arena %.1f MiB, loom plan %.1f MiB (%+.1f%%)\n", mode, arena / (1 << 20),
                predicted / (1 << 20), 100 * err);
    EXPECT_LT(std::abs(err), 0.15) << mode << ": predicted " << predicted << " compiled " << arena;
  }
}

TEST(PlanCommand, JsonParses) {
  std::string spec = WriteSpec("gpt.yaml", kGpt);
  Result r = RunPlan({spec, "--world=8", "--nproc-per-node", "4", "--memory-gib", "2", "--flops-tflops", "1",
                  "--intra-gbps", "400", "--inter-gbps", "25", "--json"});
  ASSERT_EQ(r.rc, 0) << r.err;
  nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["inputs"]["world"], 8);
  EXPECT_EQ(j["inputs"]["nproc_per_node"], 4);
  EXPECT_DOUBLE_EQ(j["inputs"]["inter_bandwidth"].get<double>(), 25e9 / 8);
  EXPECT_EQ(j["winner"], 0);
  ASSERT_GT(j["candidates"].size(), 1u);
  const auto& best = j["candidates"][0];
  EXPECT_EQ(best["dp"].get<int>() * best["tp"].get<int>(), 8);
  EXPECT_EQ(best["memory"]["total"].get<int64_t>(),
            best["memory"]["parameters"].get<int64_t>() + best["memory"]["gradients"].get<int64_t>() +
                best["memory"]["optimizer"].get<int64_t>() + best["memory"]["activations"].get<int64_t>() +
                best["memory"]["workspace"].get<int64_t>());
  EXPECT_EQ(j["choice"], best["layout"]);
}

TEST(PlanCommand, BadFlagsExit2NamingTheFlag) {
  std::string spec = WriteSpec("gpt.yaml", kGpt);
  struct Case {
    std::vector<std::string> args;
    std::string want;
  };
  for (const Case& c : std::vector<Case>{
           {{spec, "--world", "zero"}, "--world: expected a positive integer, got 'zero'"},
           {{spec, "--world", "-2"}, "--world: expected a positive integer, got '-2'"},
           {{spec, "--nproc-per-node=0"}, "--nproc-per-node: expected a positive integer, got '0'"},
           {{spec, "--memory-gib", "lots"}, "--memory-gib: expected a positive number, got 'lots'"},
           {{spec, "--flops-tflops", "0"}, "--flops-tflops: expected a positive number, got '0'"},
           {{spec, "--intra-gbps", "nan"}, "--intra-gbps: expected a positive number, got 'nan'"},
           {{spec, "--inter-gbps"}, "--inter-gbps: missing value"},
           {{spec, "--frobnicate"}, "unknown flag --frobnicate"},
           {{spec, "--wrold", "2"}, "unknown flag --wrold (did you mean --world?)"},
           {{}, "missing JOB.yaml"},
           {{"/nonexistent/job.yaml"}, "/nonexistent/job.yaml"},
       }) {
    Result r = RunPlan(c.args);
    EXPECT_EQ(r.rc, 2) << c.want;
    EXPECT_NE(r.err.find(c.want), std::string::npos) << r.err;
  }
}

TEST(PlanCommand, ImpossibleLayoutsFailEarly) {
  std::string bad = WriteSpec("bad.yaml", std::string(kGpt) + "parallel: {tp: 3}\n");
  Result r = RunPlan({bad});
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("parallel.tp: must divide model.n_head = 4 (got 3)"), std::string::npos) << r.err;
  std::string two = WriteSpec("two.yaml", std::string(kGpt) + "parallel: {dp: 2, tp: 2}\n");
  r = RunPlan({WriteSpec("four.yaml", std::string(kGpt) + "parallel: {tp: 4}\n"), "--world", "6"});
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("parallel.tp: does not divide the world size 6 (got 4)"), std::string::npos) << r.err;
  r = RunPlan({two, "--world", "8"});
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("parallel.dp: dp x tp must equal the world size 8"), std::string::npos) << r.err;
  // A world size no layout can use: 3 ranks, 4 heads, batch 8.
  r = RunPlan({WriteSpec("gpt.yaml", kGpt), "--world", "3"});
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("no legal layout for world size 3"), std::string::npos) << r.err;
  // Nothing fits: the table is printed, the exit code is 1.
  r = RunPlan({WriteSpec("gpt.yaml", kGpt), "--memory-gib", "0.0001"});
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.out.find("no layout fits"), std::string::npos) << r.out;
}

TEST(AutoLayout, ResolvesAndWritesThePlan) {
  auto spec = jobspec::LoadJobSpec(WriteSpec("auto.yaml", std::string(kGpt) + "parallel: {dp: 4, tp: auto}\n"));
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_TRUE(spec->parallel().tp_auto());
  Hardware hw = DefaultHardware(*spec);
  EXPECT_EQ(hw.world, 4);
  auto plan = ResolveAutoLayout(*spec, hw);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_TRUE(*plan);
  const Layout& l = (*plan)->best()->layout;
  EXPECT_FALSE(spec->parallel().tp_auto());
  EXPECT_EQ(spec->parallel().dp(), l.dp);
  EXPECT_EQ(spec->parallel().tp(), l.tp);
  EXPECT_EQ(l.dp * l.tp, 4);
  EXPECT_TRUE(jobspec::ValidateJobSpec(*spec).ok());

  const std::string dir = TmpDir() + "/run-auto";
  ASSERT_TRUE(WritePlan(**plan, dir).ok());
  std::ifstream txt(dir + "/plan.txt"), js(dir + "/plan.json");
  std::stringstream t, j;
  t << txt.rdbuf();
  j << js.rdbuf();
  EXPECT_NE(t.str().find("choice: " + LayoutName(l)), std::string::npos) << t.str();
  EXPECT_EQ(nlohmann::json::parse(j.str())["choice"], LayoutName(l));

  // A spec without tp: auto is left alone.
  auto fixed = jobspec::LoadJobSpec(WriteSpec("fixed.yaml", kGpt));
  ASSERT_TRUE(fixed.ok());
  auto none = ResolveAutoLayout(*fixed, DefaultHardware(*fixed));
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(*none);

  // An explicit zero stage is kept; nothing fitting is an error before any process starts.
  auto z = jobspec::LoadJobSpec(WriteSpec("z.yaml", std::string(kGpt) + "parallel: {dp: 4, tp: auto, zero_stage: 2}\n"));
  ASSERT_TRUE(z.ok());
  auto zp = ResolveAutoLayout(*z, DefaultHardware(*z));
  ASSERT_TRUE(zp.ok());
  EXPECT_TRUE(z->parallel().dp() == 1 || z->parallel().zero_stage() == 2);
  auto small = jobspec::LoadJobSpec(WriteSpec("s.yaml", std::string(kGpt) + "parallel: {tp: auto}\n"));
  ASSERT_TRUE(small.ok());
  Hardware tiny = DefaultHardware(*small);
  tiny.memory_bytes = 1000;
  auto fail = ResolveAutoLayout(*small, tiny);
  ASSERT_FALSE(fail.ok());
  EXPECT_NE(std::string(fail.status().message()).find("parallel.tp: auto: no layout fits"), std::string::npos)
      << fail.status();
}

// An imported model under tp: auto: the layout is chosen from compiled
// programs and, when it has tp > 1, the spec takes the plan it was
// estimated with (every rank of a job resolves the same one).
TEST(AutoLayout, AnImportedModelGetsTheProposedTpPlan) {
  compiler::import::onnx::testing::ModelBuilder mb(17);
  mb.Input("ids", DType::kI64, {-1, 8});
  mb.Initializer("emb", Tensor::FromVector({32, 8}, std::vector<double>(256, 0.01), DType::kF32));
  mb.Initializer("head", Tensor::FromVector({8, 32}, std::vector<double>(256, 0.02), DType::kF32));
  mb.Node("Gather", {"emb", "ids"}, {"h"});
  mb.Node("MatMul", {"h", "head"}, {"logits"});
  mb.Output("logits");
  const std::string model = TmpDir() + "/auto_lm.onnx";
  std::ofstream(model, std::ios::binary) << mb.Bytes();
  // batch 1: no dp > 1 is legal, so a world of 2 must be tp=2.
  auto spec = jobspec::LoadJobSpec(WriteSpec(
      "onnx_auto.yaml", "model: {onnx: " + model + ", seq_len: 8, vocab: 32}\ndata: {format: tokens}\n"
                        "train: {batch_size: 1}\nparallel: {tp: auto}\n"));
  ASSERT_TRUE(spec.ok()) << spec.status();
  auto plan = ResolveAutoLayout(*spec, DefaultHardware(*spec), 2);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_TRUE(*plan);
  EXPECT_EQ(spec->parallel().tp(), 2);
  EXPECT_EQ(spec->parallel().dp(), 1);
  ASSERT_EQ(spec->parallel().tp_plan_size(), 2) << jobspec::ToYaml(*spec);
  EXPECT_EQ(spec->parallel().tp_plan(0).pattern(), "emb");
  EXPECT_EQ(spec->parallel().tp_plan(0).style(), "vocab");
  EXPECT_EQ(spec->parallel().tp_plan(1).pattern(), "head");
  EXPECT_EQ(spec->parallel().tp_plan(1).style(), "colwise");
  EXPECT_TRUE(jobspec::ValidateJobSpec(*spec).ok());
  const std::string table = parallel::FormatPlanTable(**plan);
  EXPECT_NE(table.find("compiled per-rank program"), std::string::npos) << table;
  EXPECT_NE(table.find("skipped dp=2 tp=1: train.batch_size"), std::string::npos) << table;
}

}  // namespace
}  // namespace loom::runtime::plan
