// The compile benchmark's flags (compile_bench_flags.h): its own flags, the
// model flags it shares with train_bench, and train_bench's run flags refused
// by name.
#include "bench/cuda/compile_bench_flags.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace loom::bench::cuda {
namespace {

absl::StatusOr<CompileBenchFlags> Parse(std::vector<std::string> args) {
  std::vector<const char*> argv = {"compile_bench"};
  for (const std::string& a : args) argv.push_back(a.c_str());
  return ParseCompileBenchFlags(static_cast<int>(argv.size()), argv.data());
}

void ExpectBad(std::vector<std::string> args, const std::string& flag) {
  absl::StatusOr<CompileBenchFlags> f = Parse(args);
  ASSERT_FALSE(f.ok()) << args.back();
  EXPECT_EQ(f.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(std::string(f.status().message()).rfind(flag + ":", 0), 0u) << f.status();
}

TEST(CompileBenchFlags, Defaults) {
  absl::StatusOr<CompileBenchFlags> f = Parse({});
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->model.preset, "gpt2-124m");
  EXPECT_EQ(f->kernel_cache, "");
  EXPECT_EQ(f->compile_threads, 0);
  EXPECT_EQ(f->warm, 1);
  EXPECT_TRUE(f->cold);
  EXPECT_FALSE(f->model.f32);
}

TEST(CompileBenchFlags, OwnAndModelFlags) {
  absl::StatusOr<CompileBenchFlags> f =
      Parse({"--kernel-cache=/tmp/kc", "--compile-threads=3", "--warm=2", "--no-cold", "--preset=llama-1b",
             "--n_layer=2", "--f32", "--attention=flash", "--no-fusions", "--deterministic"});
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->kernel_cache, "/tmp/kc");
  EXPECT_EQ(f->compile_threads, 3);
  EXPECT_EQ(f->warm, 2);
  EXPECT_FALSE(f->cold);
  EXPECT_EQ(f->model.preset, "custom");  // a shape flag on top of the preset
  EXPECT_EQ(f->model.spec.family(), "llama");
  EXPECT_EQ(f->model.spec.n_layer(), 2);
  EXPECT_EQ(f->model.spec.d_model(), 2048);
  EXPECT_TRUE(f->model.f32 && f->model.flash && !f->model.fusions && f->model.deterministic);
}

TEST(CompileBenchFlags, BadValuesNameTheFlag) {
  ExpectBad({"--compile-threads=-1"}, "--compile-threads");
  ExpectBad({"--compile-threads=two"}, "--compile-threads");
  ExpectBad({"--warm=x"}, "--warm");
  ExpectBad({"--warm=0", "--no-cold"}, "--warm");
  ExpectBad({"--kernel-cache="}, "--kernel-cache");
  ExpectBad({"--preset=gpt5"}, "--preset");
  ExpectBad({"--n_layer=0"}, "--n_layer");
  ExpectBad({"--bogus"}, "--bogus");
}

TEST(CompileBenchFlags, TrainBenchRunFlagsAreRefused) {
  for (const char* flag : {"--data", "--torch", "--warmup", "--steps", "--loss-tol"})
    ExpectBad({std::string(flag) + "=1"}, flag);
  ExpectBad({"--no-graph"}, "--no-graph");
  ExpectBad({"--profile"}, "--profile");
}

}  // namespace
}  // namespace loom::bench::cuda
