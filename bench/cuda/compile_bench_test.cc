// The compile benchmark's flags (compile_bench_flags.h): its own flags, the
// model flags it shares with train_bench, and train_bench's run flags refused
// by name; and the binary on a small Llama here (dry: no GPU): the cold run
// compiles every distinct source, the warm run loads them all, bad flags exit 2.
#include "bench/cuda/compile_bench_flags.h"

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
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
  EXPECT_FALSE(f->dry);
  absl::StatusOr<CompileBenchFlags> dry = Parse({"--dry", "--memory=lean"});
  ASSERT_TRUE(dry.ok()) << dry.status();
  EXPECT_TRUE(dry->dry && dry->model.lean);
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


// ---- the binary --------------------------------------------------------------------

std::string TmpPath(const std::string& name) {
  const char* t = std::getenv("TEST_TMPDIR");
  return absl::StrCat(t != nullptr ? t : "/tmp", "/", name, "_", ::getpid());
}

// Runs compile_bench ARGS (time-limited); its exit code and output.
int RunBench(const std::string& args, std::string* output) {
  const std::string log = TmpPath("compile_bench.log");
  const std::string cmd = absl::StrCat("timeout 120 bench/cuda/compile_bench ", args, " >", log, " 2>&1");
  const int rc = std::system(cmd.c_str());
  std::ifstream in(log);
  std::stringstream ss;
  ss << in.rdbuf();
  *output = ss.str();
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

// The RESULT line of run `run`: its key=value fields.
std::map<std::string, std::string> Result(const std::string& output, const std::string& run) {
  for (absl::string_view line : absl::StrSplit(output, '\n')) {
    if (line.rfind("RESULT run=" + run + " ", 0) != 0) continue;
    std::map<std::string, std::string> kv;
    for (absl::string_view f : absl::StrSplit(line, ' ')) {
      const size_t eq = f.find('=');
      if (eq != absl::string_view::npos) kv[std::string(f.substr(0, eq))] = std::string(f.substr(eq + 1));
    }
    return kv;
  }
  return {};
}

int Int(const std::map<std::string, std::string>& kv, const std::string& key) {
  int v = -1;
  auto it = kv.find(key);
  return it != kv.end() && absl::SimpleAtoi(it->second, &v) ? v : -1;
}

constexpr char kSmallLlama[] =
    "--family=llama --n_layer=2 --n_head=4 --n_kv_head=2 --d_model=256 --ffn=512 --seq_len=64 --vocab=512 --batch=2";

TEST(CompileBenchBinary, ColdCompilesWarmLoads) {
  const std::string cache = TmpPath("kernels");
  std::string out;
  const int rc = RunBench(absl::StrCat(kSmallLlama, " --warm=1 --compile-threads=2 --kernel-cache=", cache), &out);
  // The build links the real executor (the CUDA toolkit is part of the
  // machine's image), which builds dry without a GPU; a stub build fails here.
  ASSERT_EQ(rc, 0) << out;
  const auto cold = Result(out, "cold"), warm = Result(out, "warm1");
  ASSERT_FALSE(cold.empty()) << out;
  ASSERT_FALSE(warm.empty()) << out;
  EXPECT_EQ(cold.at("preset"), "custom");
  const int distinct = Int(cold, "distinct");
  EXPECT_GT(distinct, 0) << out;
  EXPECT_GT(Int(cold, "kernels"), distinct) << "two identical layers share their kernels' sources";
  EXPECT_EQ(Int(cold, "nvrtc"), distinct) << out;
  EXPECT_EQ(Int(cold, "hits"), 0) << out;
  EXPECT_EQ(Int(cold, "threads"), 2) << out;
  EXPECT_EQ(Int(warm, "kernels"), Int(cold, "kernels"));
  EXPECT_EQ(Int(warm, "hits"), distinct) << out;
  EXPECT_EQ(Int(warm, "nvrtc"), 0) << out;
  EXPECT_NE(out.find("executor: kernels (cache / NVRTC)"), std::string::npos) << out;
  EXPECT_NE(out.find("pass memory-plan"), std::string::npos) << out;
  // The folder now holds entries: another cold run is refused, a warm one runs.
  EXPECT_EQ(RunBench(absl::StrCat(kSmallLlama, " --kernel-cache=", cache), &out), 2) << out;
  EXPECT_NE(out.find("--kernel-cache: "), std::string::npos) << out;
  ASSERT_EQ(RunBench(absl::StrCat(kSmallLlama, " --no-cold --kernel-cache=", cache), &out), 0) << out;
  EXPECT_EQ(Int(Result(out, "warm1"), "hits"), distinct) << out;
  EXPECT_TRUE(Result(out, "cold").empty()) << out;
}

TEST(CompileBenchBinary, BadFlagExitsTwoNamingIt) {
  std::string out;
  EXPECT_EQ(RunBench("--warm=-3", &out), 2) << out;
  EXPECT_NE(out.find("--warm: "), std::string::npos) << out;
  EXPECT_EQ(RunBench("--data=/x", &out), 2) << out;
  EXPECT_NE(out.find("--data: "), std::string::npos) << out;
}

}  // namespace
}  // namespace loom::bench::cuda
