// CompileAll (nvrtc_cache.h): many generated kernels compiled at once, each
// distinct source once, on several threads. The parallel compile gives every
// kernel the same CUBIN, cache file and name as the serial one and as
// CompileCached one by one; a source NVRTC refuses fails the call naming its
// kernel; the disk cache round-trips (a second call loads every source, a
// corrupt entry is compiled again). Needs NVRTC (a build with the CUDA
// toolkit); without it the tests skip.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kernels/cuda/codegen/nvrtc_cache.h"
#include "kernels/cuda/codegen/pointwise.h"
#include "kernels/cuda/codegen/rowwise.h"

namespace loom::kernels::cuda::codegen {
namespace {

std::string TempDir(const std::string& name) {
  const char* t = std::getenv("TEST_TMPDIR");
  return absl::StrCat(t ? t : "/tmp", "/compile_all_", name, "_", ::getpid());
}

class CompileAllTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!BuiltWithCuda()) GTEST_SKIP() << "needs a GPU: built without the CUDA toolkit (no NVRTC)";
    ASSERT_TRUE(NvrtcAvailable()) << NvrtcInfo();
  }

  // Jobs as the executor makes them: pointwise kernels over a few shapes, each
  // shape twice (identical regions of two layers), and two row-wise kernels.
  std::vector<CompileJob> Jobs() {
    bodies_.clear();
    kernels_.clear();
    std::vector<CompileJob> jobs;
    for (const char* op : {"relu", "gelu", "silu"})
      for (int64_t cols : {8, 24})
        for (int copy = 0; copy < 2; ++copy) {
          bodies_.push_back(std::make_unique<PwBody>(SingleOpBody(op, {}, 1)));
          PwSpec spec;
          spec.body = bodies_.back().get();
          spec.out_shape = {4, cols};
          spec.out_dtype = DType::kBF16;
          spec.inputs = {{DType::kBF16, {cols, 1}, 0}};
          auto k = PointwiseKernel::Uncompiled(spec);
          EXPECT_TRUE(k.ok()) << k.status();
          jobs.push_back((*k)->job());
          kernels_.push_back(std::move(*k));
        }
    LnSpec ln;
    ln.cols = 64;
    ln.dtype = DType::kBF16;
    auto r1 = RowwiseKernel::Uncompiled(GenerateLayerNorm(ln));
    auto r2 = RowwiseKernel::Uncompiled(GenerateAdamW(AdamWSpec{}));
    EXPECT_TRUE(r1.ok() && r2.ok());
    jobs.push_back((*r1)->job());
    jobs.push_back((*r2)->job());
    return jobs;
  }

  std::vector<std::unique_ptr<PwBody>> bodies_;
  std::vector<std::unique_ptr<PointwiseKernel>> kernels_;
};

TEST_F(CompileAllTest, ParallelGivesTheSerialKernelsEachSourceOnce) {
  const std::vector<CompileJob> jobs = Jobs();
  ASSERT_EQ(jobs.size(), 14u);
  CodegenOptions serial_o, parallel_o;
  serial_o.cache_dir = TempDir("serial");
  parallel_o.cache_dir = TempDir("parallel");
  CompileAllStats ss, ps;
  auto serial = CompileAll(jobs, serial_o, 1, &ss);
  auto parallel = CompileAll(jobs, parallel_o, 4, &ps);
  ASSERT_TRUE(serial.ok()) << serial.status();
  ASSERT_TRUE(parallel.ok()) << parallel.status();
  EXPECT_EQ(ss.jobs, 14);
  EXPECT_EQ(ss.distinct, 8) << "6 pointwise sources (3 ops x 2 shapes, each twice) and 2 row-wise";
  EXPECT_EQ(ss.compiled, 8);
  EXPECT_EQ(ss.cache_hits, 0);
  EXPECT_EQ(ss.threads, 1);
  EXPECT_EQ(ps.distinct, 8);
  EXPECT_EQ(ps.compiled, 8) << "each distinct source compiled once";
  EXPECT_EQ(ps.threads, 4);
  EXPECT_GT(ps.nvrtc_seconds, 0.0);
  ASSERT_EQ(serial->size(), jobs.size());
  ASSERT_EQ(parallel->size(), jobs.size());
  for (size_t i = 0; i < jobs.size(); ++i) {
    SCOPED_TRACE(jobs[i].name);
    EXPECT_FALSE((*parallel)[i].cubin.empty());
    EXPECT_EQ((*parallel)[i].cubin, (*serial)[i].cubin);
    // The same file name in each folder: the hash of (version, arch, source).
    const std::string& sp = (*serial)[i].cache_path;
    const std::string& pp = (*parallel)[i].cache_path;
    ASSERT_FALSE(sp.empty());
    EXPECT_EQ(pp.substr(pp.rfind('/')), sp.substr(sp.rfind('/')));
    // And what CompileCached gives for the job on its own.
    auto one = CompileCached(jobs[i].source, jobs[i].name, jobs[i].version, serial_o, jobs[i].who);
    ASSERT_TRUE(one.ok()) << one.status();
    EXPECT_EQ(one->cubin, (*parallel)[i].cubin);
    EXPECT_EQ(one->cache_path, sp);
  }
  // The two copies of a region share one source and so one CUBIN; another
  // shape has another.
  EXPECT_EQ(jobs[0].source, jobs[1].source);
  EXPECT_EQ((*parallel)[0].cubin, (*parallel)[1].cubin);
  EXPECT_NE((*parallel)[0].cubin, (*parallel)[2].cubin);
}

TEST_F(CompileAllTest, CacheRoundTripAndCorruptEntry) {
  const std::vector<CompileJob> jobs = Jobs();
  CodegenOptions o;
  o.cache_dir = TempDir("roundtrip");
  CompileAllStats first, second, third;
  auto a = CompileAll(jobs, o, 0, &first);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(first.compiled, 8);
  EXPECT_GE(first.threads, 1);
  auto b = CompileAll(jobs, o, 0, &second);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(second.cache_hits, 8);
  EXPECT_EQ(second.compiled, 0);
  EXPECT_EQ(second.nvrtc_seconds, 0.0);
  for (size_t i = 0; i < jobs.size(); ++i) {
    EXPECT_TRUE((*b)[i].from_cache);
    EXPECT_EQ((*b)[i].cubin, (*a)[i].cubin);
  }
  // A truncated entry is compiled again and rewritten.
  const std::string path = (*a)[0].cache_path;
  { std::ofstream(path, std::ios::binary | std::ios::trunc) << "LOOMCBN1 short"; }
  auto c = CompileAll(jobs, o, 2, &third);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(third.compiled, 1);
  EXPECT_EQ(third.cache_hits, 7);
  EXPECT_FALSE((*c)[0].from_cache);
  EXPECT_EQ((*c)[0].cubin, (*a)[0].cubin);
}

TEST_F(CompileAllTest, NvrtcErrorNamesTheKernel) {
  std::vector<CompileJob> jobs = Jobs();
  jobs.push_back({"extern \"C\" __global__ void loom_broken_a() { this is not cuda; }", "loom_broken_a", "t-1", "test"});
  jobs.push_back(jobs.back());  // a second kernel of the same source
  jobs.back().name = "loom_broken_b";
  jobs.push_back({"extern \"C\" __global__ void loom_broken_c() { int x = ; }", "loom_broken_c", "t-1", "test"});
  for (int threads : {1, 3}) {
    CodegenOptions o;
    o.cache_dir = TempDir(absl::StrCat("errors", threads));
    CompileAllStats st;
    auto r = CompileAll(jobs, o, threads, &st);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInternal);
    const std::string msg(r.status().message());
    // The first failing job in job order, whatever thread failed first.
    EXPECT_EQ(msg.rfind("kernel loom_broken_a (and 1 other kernels of its source): ", 0), 0u) << msg;
    EXPECT_NE(msg.find("NVRTC failed to compile loom_broken_a"), std::string::npos) << msg;
    EXPECT_EQ(st.distinct, 10);
    EXPECT_EQ(st.compiled, 8) << "the good sources still compiled (and are cached)";
  }
}

TEST(CompileAll, NoJobs) {
  CompileAllStats st;
  auto r = CompileAll({}, CodegenOptions{}, 4, &st);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->empty());
  EXPECT_EQ(st.distinct, 0);
}

}  // namespace
}  // namespace loom::kernels::cuda::codegen
