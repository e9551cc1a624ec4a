// CudaExecutor without a GPU: the options it plans with, and Create building
// every launch (pointwise and row-wise kernels generated and, where NVRTC
// exists, compiled) so that the only error left is the missing device. The
// plan itself is tested pass by pass (plan_*_test.cc).
#include "compiler/cuda/cuda_executor.h"

#include <dirent.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "compiler/cuda/plan.h"
#include "compiler/cuda/plan_test_util.h"
#include "compiler/ir/text.h"
#include "gtest/gtest.h"

namespace loom::compiler::cuda {
namespace {

void UseTestKernelCache() {
  if (const char* tmp = std::getenv("TEST_TMPDIR")) setenv("LOOM_KERNEL_CACHE", tmp, 1);
}

// Without a device Create fails with Unavailable after building everything;
// with one it succeeds.
void ExpectBuilt(const absl::StatusOr<std::unique_ptr<CudaExecutor>>& e) {
  if (e.ok()) {
    std::printf("a GPU is present: %s", (*e)->Describe().c_str());
    return;
  }
  EXPECT_EQ(e.status().code(), absl::StatusCode::kUnavailable) << e.status();
}

TEST(CudaOptions, ExtraFusionsSwitchesEveryFusionPass) {
  const PlanOptions on = PlanOptionsFor(CudaOptions{});
  EXPECT_TRUE(on.compose_copies && on.fold_residual_grad && on.add_layernorm && on.attn_views &&
              on.fuse_cross_entropy);
  CudaOptions basic;
  basic.extra_fusions = false;
  const PlanOptions off = PlanOptionsFor(basic);
  EXPECT_FALSE(off.compose_copies || off.fold_residual_grad || off.add_layernorm || off.attn_views ||
               off.fuse_cross_entropy);
  // And the plan it gives: no composed copies, no folded residual adds.
  auto p = PlanCuda(GptJoint(1), true, off);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(CountOp(*p, LaunchKind::kCopy, "slice+reshape+permute"), 0);
  EXPECT_EQ(CountOp(*p, LaunchKind::kLayerNormBackward, "layernorm_backward+add"), 0);
  EXPECT_EQ(CountOp(*p, LaunchKind::kGemm, "matmul+gelu_backward"), 1) << "the GEMM epilogues stay";
}

TEST(CudaOptions, GemmEpiloguesReachThePlan) {
  EXPECT_TRUE(PlanOptionsFor(CudaOptions{}).gemm_epilogues);
  CudaOptions o;
  o.gemm_epilogues = false;
  EXPECT_FALSE(PlanOptionsFor(o).gemm_epilogues);
  EXPECT_TRUE(PlanOptionsFor(o).compose_copies) << "apart from extra_fusions";
  auto p = PlanCuda(GptJoint(1), true, PlanOptionsFor(o));
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(CountOp(*p, LaunchKind::kGemm, "matmul+gelu_backward"), 0);
  EXPECT_EQ(CountOp(*p, LaunchKind::kGemm, "matmul+add+gelu"), 0);
}

TEST(CudaOptions, DeterministicReachesThePlan) {
  EXPECT_FALSE(PlanOptionsFor(CudaOptions{}).deterministic);
  CudaOptions o;
  o.deterministic = true;
  EXPECT_TRUE(PlanOptionsFor(o).deterministic);
  o.extra_fusions = false;
  EXPECT_TRUE(PlanOptionsFor(o).deterministic) << "not a fusion: extra_fusions leaves it alone";
}

TEST(CudaExecutor, CreateBuildsEveryLaunchWithoutADevice) {
  UseTestKernelCache();
  ir::Graph g = GptJoint(1);
  for (bool bf16 : {false, true}) {
    CudaOptions o;
    o.bf16 = bf16;
    ExpectBuilt(CudaExecutor::Create(g, o));
    o.extra_fusions = false;
    o.attention = AttnRoute::kFlash;
    ExpectBuilt(CudaExecutor::Create(g, o));
    o.deterministic = true;  // the sorted embedding backward and its scratch
    ExpectBuilt(CudaExecutor::Create(g, o));
  }
  CudaOptions lean;  // bf16 gradients and states, split weights (the tied wte stays plain)
  lean.bf16 = true;
  lean.memory = CudaOptions::Memory::kLean;
  ExpectBuilt(CudaExecutor::Create(g, lean));
  lean.bf16 = false;  // the policy is a bf16 matter: refused by name in an f32 plan
  auto f32 = CudaExecutor::Create(g, lean);
  ASSERT_FALSE(f32.ok());
  EXPECT_EQ(f32.status().code(), absl::StatusCode::kInvalidArgument) << f32.status();
}

// D 64: flash attention on strided views, o aliased by its permute.
TEST(CudaExecutor, CreateBuildsTheStridedAttentionPlan) {
  UseTestKernelCache();
  CudaOptions o;
  o.bf16 = true;
  ExpectBuilt(CudaExecutor::Create(GptJoint(1, 256), o));
}

// A forward-only program (evaluation, inference) runs its attention without
// lse, which nothing reads; a training program's backward reads every lse.
TEST(CudaExecutor, ForwardOnlyAttentionRunsWithoutLse) {
  UseTestKernelCache();
  v1::ModelSpec spec;
  spec.set_family("llama");
  spec.set_n_layer(3);
  spec.set_n_head(4);
  spec.set_n_kv_head(2);
  spec.set_d_model(256);
  spec.set_seq_len(64);
  spec.set_vocab(256);
  for (AttnRoute route : {AttnRoute::kDispatch, AttnRoute::kFlash}) {
    CudaBuildStats fwd_only, joint;
    CudaOptions o;
    o.bf16 = true;
    o.attention = route;
    o.stats = &fwd_only;
    ExpectBuilt(CudaExecutor::Create(ModelForwardOnly(spec, 4), o));
    ASSERT_GT(fwd_only.launches, 0) << "no launches planned: was the executor built without the CUDA toolkit?";
    EXPECT_EQ(fwd_only.inference_attention, 3);
    o.stats = &joint;
    ExpectBuilt(CudaExecutor::Create(ModelJoint(spec, 4), o));
    EXPECT_EQ(joint.inference_attention, 0);
  }
}

// CudaOptions::kernel_cache and ::stats: a fresh folder gets one cache file
// per distinct source; a second Create (4 compile threads instead of 1)
// loads them all and generates the same kernels.
TEST(CudaExecutor, StatsAndKernelCacheFolder) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = absl::StrCat(tmp ? tmp : "/tmp", "/exec_kernels_", ::getpid());
  ir::Graph g = LlamaJoint(256);
  CudaBuildStats first, second;
  CudaOptions o;
  o.bf16 = true;
  o.kernel_cache = dir;
  o.stats = &first;
  o.compile_threads = 1;
  auto e1 = CudaExecutor::Create(g, o);
  ExpectBuilt(e1);
  // The CUDA toolkit is part of the machine's image (the build links the
  // real executor, which builds dry without a GPU); a build without it plans
  // no launches and fails here.
  ASSERT_GT(first.launches, 0) << "no launches planned: was the executor built without the CUDA toolkit?";
  EXPECT_EQ(first.dry, !e1.ok());
  EXPECT_GT(first.kernels, 0);
  EXPECT_GT(first.distinct_sources, 0);
  EXPECT_LT(first.distinct_sources, first.kernels) << "the layers' identical regions share sources";
  EXPECT_EQ(first.nvrtc_compiles, first.distinct_sources);
  EXPECT_EQ(first.cache_hits, 0);
  EXPECT_EQ(first.compile_threads, 1);
  int files = 0;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (struct dirent* ent = ::readdir(d))
      files += absl::EndsWith(ent->d_name, ".cubin") ? 1 : 0;
    ::closedir(d);
  }
  EXPECT_EQ(files, first.distinct_sources);
  o.stats = &second;
  o.compile_threads = 4;
  ExpectBuilt(CudaExecutor::Create(g, o));
  EXPECT_EQ(second.kernels, first.kernels);
  EXPECT_EQ(second.distinct_sources, first.distinct_sources);
  EXPECT_EQ(second.cache_hits, first.distinct_sources);
  EXPECT_EQ(second.nvrtc_compiles, 0);
  EXPECT_EQ(second.launches, first.launches);
}

TEST(CudaOptions, LeanMemoryReachesThePlan) {
  const MemoryPolicy standard = PlanOptionsFor(CudaOptions{}).memory;
  EXPECT_FALSE(standard.bf16_param_grads || standard.bf16_adam_states || standard.split_master);
  CudaOptions o;
  o.memory = CudaOptions::Memory::kLean;
  const MemoryPolicy lean = PlanOptionsFor(o).memory;
  EXPECT_TRUE(lean.bf16_param_grads && lean.bf16_adam_states && lean.split_master);
}

// The device memory of the lean policy, counted by a dry build
// (CudaBuildStats::memory): the training state of a 40-layer Llama (C 5120,
// F 13824, 40 heads, 8 kv heads, V 32000: 11.3B parameters) at T 2048,
// batch 8 (16,384 tokens a step), block checkpointing. An H200 holds about
// 139 GiB for a process (PyTorch's 8.8B run of the capacity issue fits at
// 130.8 GiB); 4 GiB are left for what the executor does not count (the CUDA
// context, cuBLASLt's and cuDNN's workspaces), so the lean build must stay
// within 135 GiB, while the standard one (f32 states and gradients, bf16
// shadows) needs more than the whole card.
TEST(CudaMemory, LeanFitsAnElevenBillionLlamaOnOneH200AndStandardDoesNot) {
  UseTestKernelCache();
  v1::ModelSpec spec;
  spec.set_family("llama");
  spec.set_n_layer(40);
  spec.set_n_head(40);
  spec.set_n_kv_head(8);
  spec.set_d_model(5120);
  spec.set_ffn_hidden(13824);
  spec.set_seq_len(2048);
  spec.set_vocab(32000);
  const ir::Graph g = ModelJoint(spec, 8, /*checkpoint_blocks=*/true);
  CudaBuildStats standard, lean;
  CudaOptions o;
  o.bf16 = true;
  o.stats = &standard;
  ExpectBuilt(CudaExecutor::Create(g, o));
  o.stats = &lean;
  o.memory = CudaOptions::Memory::kLean;
  ExpectBuilt(CudaExecutor::Create(g, o));
  const double gib = double(1 << 30), params = standard.memory.params / 4.0;
  EXPECT_GT(params, 11.3e9);
  EXPECT_EQ(lean.memory.params, standard.memory.params) << "split parameters keep their 4 bytes";
  EXPECT_EQ(lean.memory.shadows, 0) << "every GEMM weight's shadow is its own hi plane";
  EXPECT_GT(standard.memory.shadows, params * 2 * 0.95);
  EXPECT_EQ(2 * lean.memory.states, standard.memory.states);
  // Parameter gradients: f32 in the standard arena, bf16 in the lean one.
  EXPECT_LT(lean.memory.arena, standard.memory.arena - params * 2 * 0.9);
  std::printf("device GiB: standard %.2f (arena %.2f), lean %.2f (arena %.2f)\n", standard.memory.total / gib,
              standard.memory.arena / gib, lean.memory.total / gib, lean.memory.arena / gib);
  EXPECT_LE(lean.memory.total, 135 * gib);
  EXPECT_GT(standard.memory.total, 139 * gib);
  // The optimizer state offloaded to pinned host memory: off the device.
  CudaBuildStats off;
  o.stats = &off;
  o.offload_optimizer_state = true;
  ExpectBuilt(CudaExecutor::Create(g, o));
  EXPECT_EQ(off.memory.states, 0);
  EXPECT_EQ(off.memory.host_states, lean.memory.states);
  EXPECT_EQ(lean.memory.host_states, 0);
  EXPECT_LE(off.memory.total, lean.memory.total - lean.memory.states);
  std::printf("lean with the optimizer state on the host: device %.2f GiB, host %.2f GiB\n", off.memory.total / gib,
              off.memory.host_states / gib);
}

// PlannedMemory, which the executor checks against the GPU's free memory
// before it allocates anything, counts what the build then allocates; a step
// that does not fit is ResourceExhausted naming its needs and the options
// that need less.
TEST(CudaMemory, PlannedMemoryIsWhatTheBuildAllocatesAndAShortfallSaysWhy) {
  UseTestKernelCache();
  const ir::Graph g = LlamaJoint(128, 2);
  for (bool lean : {false, true})
    for (bool offload : {false, true}) {
      CudaOptions o;
      o.bf16 = true;
      if (lean) o.memory = CudaOptions::Memory::kLean;
      o.offload_optimizer_state = offload;
      auto built = DryBuild(g, o);
      ASSERT_TRUE(built.ok()) << built.status();
      auto plan = PlanCuda(g, true, PlanOptionsFor(o));
      ASSERT_TRUE(plan.ok()) << plan.status();
      const DeviceMemory need = PlannedMemory(g, *plan, offload);
      const DeviceMemory& got = built->memory;
      EXPECT_EQ(need.params, got.params);
      EXPECT_EQ(need.shadows, got.shadows);
      EXPECT_EQ(need.states, got.states);
      EXPECT_EQ(need.other_inputs, got.other_inputs);
      EXPECT_EQ(need.arena, got.arena);
      EXPECT_EQ(need.host_states, got.host_states);
      EXPECT_EQ(need.total, need.params + need.shadows + need.states + need.other_inputs + need.arena);
      EXPECT_LE(need.total, got.total) << "the build adds the scratch and its tables";
      EXPECT_TRUE(CheckDeviceMemory(need, need.total).ok());
      const absl::Status short_by_one = CheckDeviceMemory(need, need.total - 1);
      EXPECT_EQ(short_by_one.code(), absl::StatusCode::kResourceExhausted);
      for (const char* word : {"needs", "GiB free", "train.memory: lean", "train.offload_optimizer_state",
                               "--dump=cuda"})
        EXPECT_NE(std::string(short_by_one.message()).find(word), std::string::npos) << word << ": " << short_by_one;
    }
}

// CudaOptions::arena_offset_bytes moves the arena that far into a larger
// allocation: the build allocates exactly that much more, and an offset that
// is negative or not a multiple of 256 is refused naming the option.
// arena_guard_bytes makes the arena itself larger.
TEST(CudaMemory, ArenaOffsetAddsItsBytesAndRefusesBadValues) {
  UseTestKernelCache();
  const ir::Graph g = LlamaJoint(128, 2);
  CudaOptions o;
  o.bf16 = true;
  auto plain = DryBuild(g, o);
  ASSERT_TRUE(plain.ok()) << plain.status();
  o.arena_offset_bytes = int64_t{3} << 30;
  auto moved = DryBuild(g, o);
  ASSERT_TRUE(moved.ok()) << moved.status();
  EXPECT_EQ(moved->memory.total - plain->memory.total, int64_t{3} << 30);
  EXPECT_EQ(moved->memory.arena, plain->memory.arena) << "the arena itself is the plan's";
  o.arena_offset_bytes = 0;
  o.arena_guard_bytes = 4096;
  auto guarded = DryBuild(g, o);
  ASSERT_TRUE(guarded.ok()) << guarded.status();
  EXPECT_GT(guarded->memory.arena, plain->memory.arena) << "guards take arena bytes";
  for (int64_t bad : {int64_t{-256}, int64_t{100}}) {
    o.arena_offset_bytes = bad;
    auto r = DryBuild(g, o);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(std::string(r.status().message()).find("arena_offset_bytes"), std::string::npos) << r.status();
  }
}

class LlamaCreate : public ::testing::TestWithParam<int> {};

// d_model 128 (D 32: the math attention kernel) and 256 (D 64: flash with
// strided operands, GQA); rmsnorm and rope have their kernels.
TEST_P(LlamaCreate, PlansAndBuilds) {
  UseTestKernelCache();
  ir::Graph g = LlamaJoint(GetParam());
  for (bool bf16 : {false, true}) {
    auto p = PlanCuda(g, bf16);
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_GT(CountOp(*p, LaunchKind::kRmsNorm), 0);
    EXPECT_GT(CountOp(*p, LaunchKind::kRmsNormBackward), 0);
    EXPECT_GT(CountOp(*p, LaunchKind::kRope), 0);
    CudaOptions o;
    o.bf16 = bf16;
    ExpectBuilt(CudaExecutor::Create(g, o));
  }
}
INSTANTIATE_TEST_SUITE_P(DModel, LlamaCreate, ::testing::Values(128, 256));

TEST(CudaExecutor, UnsupportedOpIsNamedWithoutADevice) {
  auto g = ir::ParseGraph(R"IR(graph @g(%x: f32[4, 8]) {
  %0 = softmax(%x) : f32[4, 8]
  return %0
}
)IR");
  ASSERT_TRUE(g.ok()) << g.status();
  auto e = CudaExecutor::Create(*g, CudaOptions{});
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(std::string(e.status().message()).find("softmax"), std::string::npos) << e.status();
}

TEST(PlanCuda, SteppedSlicesAreRefusedByName) {
  for (const char* body : {"%0 = slice(%x) {axis=1, start=0, length=4, step=2} : f32[4, 4]",
                           "%0 = slice_backward(%x) {axis=1, start=7, full_len=17, step=-1} : f32[4, 17]"}) {
    auto g = ir::ParseGraph(absl::StrCat("graph @g(%x: f32[4, 8]) {\n  ", body, "\n  return %0\n}\n"));
    ASSERT_TRUE(g.ok()) << g.status();
    for (bool bf16 : {false, true}) {
      auto p = PlanCuda(*g, bf16);
      ASSERT_FALSE(p.ok()) << body;
      EXPECT_EQ(p.status().code(), absl::StatusCode::kUnimplemented);
      EXPECT_NE(std::string(p.status().message()).find("a step other than 1"), std::string::npos) << p.status();
    }
  }
}

}  // namespace
}  // namespace loom::compiler::cuda
