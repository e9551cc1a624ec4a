// Host-side tests of the pointwise generator: index plans against a brute-force
// index walk, generated loads/stores per dtype, spec validation, NVRTC
// compilation of every op (really runs NVRTC when the build has the toolkit)
// and the disk cache. Launching is covered by :pointwise_gpu_check on a GPU.
#include "kernels/cuda/codegen/pointwise.h"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <set>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/testing/full_sweep.h"
#include "kernels/cuda/codegen/op_cases.h"
#include "kernels/cuda/codegen/pointwise_internal.h"
#include "gtest/gtest.h"
#include "kernels/registry.h"

namespace loom::kernels::cuda::codegen {
namespace {

using Ints = std::vector<int64_t>;

std::vector<int64_t> Contig(const Ints& shape) {
  Strides s = ContiguousStrides(shape);
  return {s.begin(), s.end()};
}

// A one-op body over n inputs.
PwBody Body(const std::string& op, int n, const kernels::Attrs& attrs = {}) { return SingleOpBody(op, attrs, n); }

std::string TempDir(const std::string& name) {
  const char* t = std::getenv("TEST_TMPDIR");
  std::string d = absl::StrCat(t ? t : "/tmp", "/pw_", name, "_", ::getpid());
  return d;
}

// ---- BroadcastStrides --------------------------------------------------------

TEST(BroadcastStrides, TrailingAligned) {
  EXPECT_EQ(BroadcastStrides({5}, {3, 4, 5}), (Ints{0, 0, 1}));
  EXPECT_EQ(BroadcastStrides({4, 1}, {3, 4, 5}), (Ints{0, 1, 0}));
  EXPECT_EQ(BroadcastStrides({3, 4, 5}, {3, 4, 5}), (Ints{20, 5, 1}));
  EXPECT_EQ(BroadcastStrides({}, {3, 4}), (Ints{0, 0}));
  EXPECT_EQ(BroadcastStrides({3, 1, 5}, {3, 4, 5}), (Ints{5, 0, 1}));
  EXPECT_EQ(BroadcastStrides({1}, {}), (Ints{}));
}

// ---- Index plan vs brute force ------------------------------------------------

// Offset of output linear index i for (shape, strides, offset), walking the index.
int64_t BruteOffset(const Ints& shape, const Ints& strides, int64_t offset, int64_t i) {
  int64_t off = offset;
  for (int d = static_cast<int>(shape.size()) - 1; d >= 0; --d) {
    off += (i % shape[d]) * strides[d];
    i /= shape[d];
  }
  return off;
}

TEST(IndexPlan, MatchesBruteForceOnRandomLayouts) {
  std::mt19937 rng(7);
  PwBody body = CopyBody();  // unused by the plan
  for (int trial = 0; trial < 400; ++trial) {
    const int rank = static_cast<int>(rng() % 5);
    Ints shape(rank);
    for (int64_t& s : shape) s = 1 + rng() % 5;
    PwSpec spec;
    spec.body = &body;
    spec.out_shape = shape;
    if (rng() % 3 == 0) {  // a strided (sliced) output
      Ints big = shape;
      for (int64_t& s : big) s += rng() % 2;
      spec.out_strides = Contig(big);
      spec.out_offset = rng() % 4;
    }
    const int nin = 1 + rng() % 3;
    for (int k = 0; k < nin; ++k) {
      PwOperand op;
      op.offset = rng() % 5;
      switch (rng() % 4) {
        case 0: op.strides = Contig(shape); break;                       // contiguous
        case 1: {                                                       // broadcast
          Ints in = shape;
          for (int64_t& s : in)
            if (rng() % 2) s = 1;
          int drop = rank ? rng() % (rank + 1) : 0;
          in.erase(in.begin(), in.begin() + drop);
          op.strides = BroadcastStrides(in, shape);
          break;
        }
        case 2: {  // permuted: a contiguous tensor of reversed shape
          Ints rev(shape.rbegin(), shape.rend());
          Ints rs = Contig(rev);
          op.strides.assign(rs.rbegin(), rs.rend());
          break;
        }
        default: {  // sliced
          Ints big = shape;
          for (int64_t& s : big) s += rng() % 3;
          op.strides = Contig(big);
        }
      }
      spec.inputs.push_back(op);
    }
    IndexPlan plan = MakeIndexPlan(spec);
    const int64_t n = NumElements(shape);
    std::vector<Ints> strides = {spec.out_strides.empty() ? Contig(shape) : spec.out_strides};
    std::vector<int64_t> offsets = {spec.out_offset};
    for (auto& op : spec.inputs) {
      strides.push_back(op.strides);
      offsets.push_back(op.offset);
    }
    for (int t = 0; t <= nin; ++t)
      for (int64_t i = 0; i < n; ++i)
        ASSERT_EQ(PlanOffset(plan, t, i), BruteOffset(shape, strides[t], offsets[t], i))
            << "trial " << trial << " tensor " << t << " index " << i << " shape " << ShapeToString(shape);
  }
}

TEST(IndexPlan, MergesContiguousDimsAndClassifiesAccess) {
  PwBody body = CopyBody();
  PwSpec spec;
  spec.body = &body;
  spec.out_shape = {4, 6, 8};
  spec.inputs = {{DType::kF32, Contig({4, 6, 8})},
                 {DType::kF32, BroadcastStrides({8}, {4, 6, 8})},
                 {DType::kF32, {0, 0, 0}, 3}};
  IndexPlan plan = MakeIndexPlan(spec);
  EXPECT_EQ(plan.dims, (Ints{24, 8}));
  EXPECT_EQ(plan.access[0], IndexPlan::Access::kLinear);
  EXPECT_EQ(plan.access[1], IndexPlan::Access::kLinear);
  EXPECT_EQ(plan.access[2], IndexPlan::Access::kStrided);
  EXPECT_EQ(plan.access[3], IndexPlan::Access::kScalar);
  spec.inputs.resize(1);
  EXPECT_EQ(MakeIndexPlan(spec).dims, (Ints{192}));
}

// ---- Generated source -----------------------------------------------------------

TEST(Source, LoadsAndStoresPerDType) {
  const Ints shape = {8, 16};
  PwBody body = Body("add", 2, {});
  PwSpec spec;
  spec.body = &body;
  spec.out_shape = shape;
  spec.inputs = {{DType::kBF16, Contig(shape)}, {DType::kF16, Contig(shape)}};
  spec.out_dtype = DType::kBF16;
  auto gen = GeneratePointwiseSource(spec);
  ASSERT_TRUE(gen.ok()) << gen.status();
  EXPECT_TRUE(absl::StrContains(gen->source, "const unsigned short* __restrict__ in0")) << gen->source;
  EXPECT_TRUE(absl::StrContains(gen->source, "loom_bf2f(v0.v[e])")) << gen->source;
  EXPECT_TRUE(absl::StrContains(gen->source, "loom_h2f(v1.v[e])")) << gen->source;
  EXPECT_TRUE(absl::StrContains(gen->source, "vo.v[e] = loom_f2bf(r)")) << gen->source;
  EXPECT_TRUE(absl::StrContains(gen->source, "out[i] = loom_f2bf(r)")) << gen->source;
  EXPECT_TRUE(absl::StrContains(gen->source, "LoomVec<unsigned short, 8, 16> v0")) << gen->source;
  EXPECT_TRUE(gen->vectorizable);
  EXPECT_EQ(gen->vec_width, 8);
  EXPECT_TRUE(absl::StrContains(gen->source, gen->name));
  EXPECT_EQ(gen->numel, 128);

  spec.inputs = {{DType::kF32, Contig(shape)}, {DType::kF32, BroadcastStrides({16}, shape)}};
  spec.out_dtype = DType::kF16;
  gen = GeneratePointwiseSource(spec);
  ASSERT_TRUE(gen.ok()) << gen.status();
  EXPECT_TRUE(absl::StrContains(gen->source, "const float* __restrict__ in1")) << gen->source;
  EXPECT_TRUE(absl::StrContains(gen->source, "loom_f2h(r)")) << gen->source;
  EXPECT_TRUE(absl::StrContains(gen->source, "% 16u")) << gen->source;  // the broadcast index
  EXPECT_TRUE(absl::StrContains(gen->source, "LoomVec<float, 8, 16> v0")) << gen->source;  // f16 out: W = 8

  // Permuted input: strided index math on both dims, no vector load for it.
  spec.inputs = {{DType::kF32, {1, 8}}, {DType::kF32, Contig(shape)}};
  spec.out_dtype = DType::kF32;
  gen = GeneratePointwiseSource(spec);
  ASSERT_TRUE(gen.ok()) << gen.status();
  EXPECT_FALSE(absl::StrContains(gen->source, "> v0 =")) << gen->source;
  EXPECT_TRUE(absl::StrContains(gen->source, "LoomVec<float, 4, 16> v1")) << gen->source;
  EXPECT_EQ(gen->vec_width, 4);
  EXPECT_TRUE(absl::StrContains(gen->source, "(int)((i) % 16u) * (8)")) << gen->source;
  EXPECT_TRUE(absl::StrContains(gen->source, "(int)((i) / 16u) * (1)")) << gen->source;
}

TEST(Source, SameDTypeCopyMovesRawElements) {
  const Ints shape = {5, 7};
  PwBody body = CopyBody();
  PwSpec spec;
  spec.body = &body;
  spec.out_shape = shape;
  spec.inputs = {{DType::kI32, {1, 5}}};  // a transpose
  spec.out_dtype = DType::kI32;
  auto gen = GeneratePointwiseSource(spec);
  ASSERT_TRUE(gen.ok()) << gen.status();
  EXPECT_FALSE(absl::StrContains(gen->source, "(float)")) << gen->source;
  EXPECT_TRUE(absl::StrContains(gen->source, "const int x0 = in0[")) << gen->source;
  // A cast goes through float and rounds once.
  PwBody b16 = CopyBody();
  spec.body = &b16;
  spec.inputs = {{DType::kBF16, Contig(shape)}};
  spec.out_dtype = DType::kF32;
  gen = GeneratePointwiseSource(spec);
  ASSERT_TRUE(gen.ok()) << gen.status();
  EXPECT_TRUE(absl::StrContains(gen->source, "loom_bf2f(")) << gen->source;
}

TEST(Source, VectorPathNeedsAlignedLinearTensors) {
  const Ints shape = {4, 64};
  PwBody body = Body("add", 2, {});
  PwSpec spec;
  spec.body = &body;
  spec.out_shape = shape;
  spec.inputs = {{DType::kBF16, Contig(shape), 8}, {DType::kF32, BroadcastStrides({64}, shape)}};
  spec.out_dtype = DType::kBF16;
  auto gen = GeneratePointwiseSource(spec);
  ASSERT_TRUE(gen.ok()) << gen.status();
  ASSERT_TRUE(gen->vectorizable);
  ASSERT_EQ(gen->vec_width, 8);
  alignas(64) static char buf[4096];
  const std::vector<DType> dts = {DType::kBF16, DType::kF32};
  // in0 at element offset 8 (16 bytes): aligned; in1 is strided (no requirement).
  EXPECT_EQ(ChooseVectorPath(*gen, {buf, buf + 4}, dts, buf + 1024, DType::kBF16), 1);
  EXPECT_EQ(ChooseVectorPath(*gen, {buf + 2, buf}, dts, buf + 1024, DType::kBF16), 0);  // in0 misaligned
  EXPECT_EQ(ChooseVectorPath(*gen, {buf, buf}, dts, buf + 1032, DType::kBF16), 0);      // out misaligned
}

TEST(Source, FloatLiteralsAreExact) {
  EXPECT_EQ(FloatLiteral(-1.5), "(-1.5f)");
  EXPECT_EQ(FloatLiteral(2), "(2.0f)");
  float back = std::strtof(FloatLiteral(0.1).substr(1).c_str(), nullptr);
  EXPECT_EQ(back, 0.1f);
}

// Every elementwise op in the registry (what the fusion pass and the CUDA plan
// send here) has a case in op_cases.h and generates source.
TEST(Coverage, EveryRegisteredElementwiseOpIsSupported) {
  std::set<std::string> covered;
  for (const PwOpCase& c : AllPwOpCases()) covered.insert(c.op);
  int n = 0;
  for (const std::string& name : kernels::OpRegistry::Global().Names()) {
    const kernels::OpDef* def = kernels::OpRegistry::Global().Find(name);
    if (!def->elementwise || name.rfind("test.", 0) == 0) continue;
    ++n;
    EXPECT_TRUE(covered.count(name)) << "elementwise op '" << name << "' has no pointwise codegen case";
  }
  EXPECT_GE(n, 22);
}

// ---- Validation -------------------------------------------------------------------

void ExpectInvalid(const PwSpec& spec, const std::string& needle) {
  auto gen = GeneratePointwiseSource(spec);
  ASSERT_FALSE(gen.ok()) << "expected an error naming " << needle;
  EXPECT_EQ(gen.status().code(), absl::StatusCode::kInvalidArgument) << gen.status();
  EXPECT_TRUE(absl::StrContains(gen.status().message(), needle)) << gen.status();
  auto k = PointwiseKernel::Compile(spec);
  ASSERT_FALSE(k.ok());
  EXPECT_EQ(k.status().code(), absl::StatusCode::kInvalidArgument) << k.status();
}

TEST(Validation, BadSpecsNameTheField) {
  const Ints shape = {4, 4};
  PwBody body = Body("mul", 2, {});
  PwSpec good;
  good.body = &body;
  good.out_shape = shape;
  good.inputs = {{DType::kF32, Contig(shape)}, {DType::kF32, Contig(shape)}};
  ASSERT_TRUE(GeneratePointwiseSource(good).ok());

  PwSpec s = good;
  s.inputs[1].strides = {1};
  ExpectInvalid(s, "inputs[1].strides");
  s = good;
  s.out_strides = {4, 1, 1};
  ExpectInvalid(s, "out_strides");
  s = good;
  s.out_strides = {0, 1};
  ExpectInvalid(s, "out_strides");
  s = good;
  s.inputs[0].dtype = DType::kF64;
  ExpectInvalid(s, "inputs[0].dtype");
  s = good;
  s.out_dtype = DType::kF64;
  ExpectInvalid(s, "out_dtype");
  s = good;
  s.inputs.pop_back();
  ExpectInvalid(s, "inputs");
  s = good;
  s.body = nullptr;
  ExpectInvalid(s, "body");
  s = good;
  s.inputs[0].strides = {-4, 1};
  ExpectInvalid(s, "inputs[0].strides");

  // An op the generator does not know (a registry op that is not pointwise).
  PwBody unknown = Body("matmul", 2);
  s = good;
  s.body = &unknown;
  ExpectInvalid(s, "matmul");

  // Integer arithmetic would run in f32: refused, naming the node. A
  // comparison of integer inputs compares them exactly, as 64-bit integers;
  // one of an integer with a computed float value is refused.
  {
    PwBody ints = Body("add", 2);
    s = good;
    s.body = &ints;
    s.inputs = {{DType::kI64, Contig(shape)}, {DType::kI64, Contig(shape)}};
    s.out_dtype = DType::kI64;
    ExpectInvalid(s, "body.nodes[0] (add): integer add is not supported");
    PwBody less = Body("less", 2);
    s.body = &less;
    s.out_dtype = DType::kBool;
    auto gen = GeneratePointwiseSource(s);
    ASSERT_TRUE(gen.ok()) << gen.status();
    EXPECT_NE(gen->source.find("(x0i < x1i)"), std::string::npos) << gen->source;
    EXPECT_NE(gen->source.find("const long long x1i = (long long)("), std::string::npos) << gen->source;
    PwBody mixed;
    mixed.num_inputs = 2;
    mixed.nodes = {{"neg", {1}, {}}, {"less", {0, 2}, {}}};
    mixed.output = 3;
    s.body = &mixed;
    ExpectInvalid(s, "body.nodes[0] (neg): integer neg is not supported");
  }
  // A node reading a value defined after it, and an output out of range.
  PwBody later;
  later.num_inputs = 2;
  later.nodes = {{"add", {0, 3}, {}}, {"neg", {0}, {}}};
  later.output = 3;
  s = good;
  s.body = &later;
  ExpectInvalid(s, "body.nodes[0] (add): input value %3 is not defined before use");
  PwBody past = Body("mul", 2);
  past.output = 5;
  s = good;
  s.body = &past;
  ExpectInvalid(s, "output value 5");
  PwBody copy_of_1 = CopyBody();
  copy_of_1.num_inputs = 2;
  copy_of_1.output = 1;
  s = good;
  s.body = &copy_of_1;
  ExpectInvalid(s, "an empty body must return its input 0");

  // A bad attribute value.
  PwBody gelu = Body("gelu", 1);
  gelu.nodes[0].attrs.Set("approximate", std::string("fast"));
  s = good;
  s.body = &gelu;
  s.inputs.pop_back();
  ExpectInvalid(s, "approximate");
}

// ---- NVRTC ----------------------------------------------------------------------------

// A build with the CUDA toolkit must open NVRTC; a build without it (no
// toolkit, or LOOM_NO_CUDA) has nothing to compile with and skips.
class NvrtcTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!BuiltWithCuda()) GTEST_SKIP() << "needs a GPU: built without the CUDA toolkit (no NVRTC)";
    ASSERT_TRUE(NvrtcAvailable()) << NvrtcInfo();
  }
};

// Source generation needs no toolkit. Compile runs NVRTC where the build has
// it and is Unavailable, never a crash, where it does not.
TEST(PointwiseBuild, SourceIsAlwaysGeneratedAndCompileFollowsTheBuild) {
  const Ints shape = {4, 4};
  PwBody body = Body("relu", 1, {});
  PwSpec spec;
  spec.body = &body;
  spec.out_shape = shape;
  spec.inputs = {{DType::kF32, Contig(shape)}};
  EXPECT_TRUE(GeneratePointwiseSource(spec).ok());
  CodegenOptions o;
  o.cache_dir = TempDir("build");
  auto k = PointwiseKernel::Compile(spec, o);
  if (NvrtcAvailable()) {
    ASSERT_TRUE(k.ok()) << k.status();
    EXPECT_FALSE((*k)->cubin().empty());
  } else {
    ASSERT_FALSE(k.ok());
    EXPECT_EQ(k.status().code(), absl::StatusCode::kUnavailable);
  }
}

// Every op x {f32, bf16} (second input broadcast), fill, and casts between
// f16 / i32 / i64 / bf16 / f32. By default all generated kernels compile as one
// NVRTC program (fast) plus a few through PointwiseKernel::Compile; with
// LOOM_FULL=1 every kernel goes through Compile on its own.
TEST_F(NvrtcTest, EveryOpCompilesForF32AndBF16) {
  const Ints shape = {6, 10};
  const bool full = loom::testing::FullSweep();
  std::vector<PwBody> bodies;  // kept alive for the specs
  bodies.reserve(256);
  std::vector<std::pair<std::string, PwSpec>> specs;
  for (const PwOpCase& c : AllPwOpCases()) {
    for (DType dt : {DType::kF32, DType::kBF16}) {
      bodies.push_back(Body(c.op, c.num_inputs, c.attrs));
      PwSpec spec;
      spec.body = &bodies.back();
      spec.out_shape = shape;
      spec.out_dtype = PwOpWritesBool(c.op) ? DType::kBool : dt;
      for (int k = 0; k < c.num_inputs; ++k)
        spec.inputs.push_back({(c.bool_inputs >> k) & 1u ? DType::kBool : dt,
                               k == 1 ? BroadcastStrides({10}, shape) : Contig(shape)});
      specs.push_back({absl::StrCat(c.label, " ", DTypeName(dt)), spec});
    }
  }
  bodies.push_back(Body("fill", 0, kernels::Attrs{{"shape", Ints{6, 10}}, {"value", 0.1}}));
  {
    PwSpec spec;
    spec.body = &bodies.back();
    spec.out_shape = shape;
    spec.out_dtype = DType::kF16;
    specs.push_back({"fill f16", spec});
  }
  for (DType in : {DType::kF16, DType::kI32, DType::kI64, DType::kBF16})
    for (DType out : {DType::kF32, DType::kI64, DType::kBF16}) {
      bodies.push_back(CopyBody());
      PwSpec spec;
      spec.body = &bodies.back();
      spec.out_shape = shape;
      spec.inputs = {{in, {1, 6}}};
      spec.out_dtype = out;
      specs.push_back({absl::StrCat("cast ", DTypeName(in), "->", DTypeName(out)), spec});
    }
  // Rank 0 and zero-size outputs.
  bodies.push_back(Body("mul", 2, {}));
  {
    PwSpec spec;
    spec.body = &bodies.back();
    spec.inputs = {{DType::kF32, {}}, {DType::kBF16, {}, 3}};
    specs.push_back({"rank0 mul", spec});
  }
  bodies.push_back(Body("exp", 1, {}));
  {
    PwSpec spec;
    spec.body = &bodies.back();
    spec.out_shape = {0, 5};
    spec.inputs = {{DType::kF32, {5, 1}}};
    specs.push_back({"empty exp", spec});
  }
  ASSERT_GT(specs.size(), 70u);

  std::string program;
  std::set<std::string> names;  // bool-only ops give the same kernel in both rows
  for (const auto& [label, spec] : specs) {
    auto gen = GeneratePointwiseSource(spec);
    ASSERT_TRUE(gen.ok()) << label << ": " << gen.status();
    if (names.insert(gen->name).second) program += gen->source;
  }
  auto cubin = NvrtcCompileSource(program, "all_ops", "sm_90");
  ASSERT_TRUE(cubin.ok()) << cubin.status();
  EXPECT_GT(cubin->size(), 10000u);

  CodegenOptions o;
  o.cache_dir = TempDir("all_ops");
  for (size_t i = 0; i < specs.size(); ++i) {
    if (!full && i % 16 != 0) continue;
    auto kern = PointwiseKernel::Compile(specs[i].second, o);
    ASSERT_TRUE(kern.ok()) << specs[i].first << ": " << kern.status();
    EXPECT_FALSE((*kern)->cubin().empty());
    EXPECT_EQ((*kern)->numel(), NumElements(specs[i].second.out_shape));
  }
}

TEST_F(NvrtcTest, FusedChainWithLargeIndexSpaceCompiles) {
  // add -> gelu -> mul over a tensor past 2^31 elements uses 64-bit indexing.
  const Ints shape = {1 << 16, 1 << 16};
  PwBody g;
  g.num_inputs = 3;
  g.nodes = {
      {"add", {0, 1}, {}}, {"gelu", {3}, kernels::Attrs{{"approximate", std::string("tanh")}}}, {"mul", {4, 2}, {}}};
  g.output = 5;
  PwSpec spec;
  spec.body = &g;
  spec.out_shape = shape;
  spec.out_dtype = DType::kBF16;
  spec.inputs = {{DType::kBF16, Contig(shape)},
                 {DType::kF32, BroadcastStrides({1 << 16}, shape)},
                 {DType::kBF16, Contig(shape)}};
  CodegenOptions o;
  o.cache_dir = TempDir("fused");
  auto k = PointwiseKernel::Compile(spec, o);
  ASSERT_TRUE(k.ok()) << k.status();
  EXPECT_TRUE(absl::StrContains((*k)->source(), "unsigned long long n = 4294967296ull"))
      << (*k)->source();
  EXPECT_TRUE(absl::StrContains((*k)->source(), "tanhf(")) << (*k)->source();
}

TEST_F(NvrtcTest, CacheHitAndCorruptEntryRecompiles) {
  const Ints shape = {3, 33};
  PwBody body = Body("silu", 1, {});
  PwSpec spec;
  spec.body = &body;
  spec.out_shape = shape;
  spec.inputs = {{DType::kBF16, Contig(shape)}};
  spec.out_dtype = DType::kBF16;
  CodegenOptions o;
  o.cache_dir = TempDir("cache") + "/nested/dir";
  auto first = PointwiseKernel::Compile(spec, o);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_FALSE((*first)->from_cache());
  const std::string path = (*first)->cache_path();
  ASSERT_FALSE(path.empty());
  auto second = PointwiseKernel::Compile(spec, o);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_TRUE((*second)->from_cache());
  EXPECT_EQ((*second)->cubin(), (*first)->cubin());
  EXPECT_EQ((*second)->name(), (*first)->name());

  // A flipped payload byte, a truncated file and garbage: each recompiles.
  std::string good;
  {
    std::ifstream f(path, std::ios::binary);
    good.assign(std::istreambuf_iterator<char>(f), {});
  }
  ASSERT_EQ(DecodeCacheEntry(good), (*first)->cubin());
  std::string flipped = good;
  flipped[flipped.size() / 2] ^= 0x5a;
  for (const std::string& bad : {flipped, good.substr(0, good.size() / 3), std::string("junk"), std::string()}) {
    {
      std::ofstream f(path, std::ios::binary | std::ios::trunc);
      f << bad;
    }
    auto again = PointwiseKernel::Compile(spec, o);
    ASSERT_TRUE(again.ok()) << again.status();
    EXPECT_FALSE((*again)->from_cache());
    EXPECT_EQ((*again)->cubin(), (*first)->cubin());
    auto hit = PointwiseKernel::Compile(spec, o);  // the entry was rewritten
    ASSERT_TRUE(hit.ok());
    EXPECT_TRUE((*hit)->from_cache());
  }
  // A different arch is a different entry.
  o.arch = "sm_80";
  auto other = PointwiseKernel::Compile(spec, o);
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_FALSE((*other)->from_cache());
  EXPECT_NE((*other)->cache_path(), path);
}

TEST_F(NvrtcTest, WithoutNvrtcAShippedCacheEntryIsUsed) {
  const Ints shape = {5, 9};
  PwBody body = Body("gelu", 1, {});
  PwSpec spec;
  spec.body = &body;
  spec.out_shape = shape;
  spec.inputs = {{DType::kBF16, Contig(shape)}};
  spec.out_dtype = DType::kBF16;
  CodegenOptions o;
  o.cache_dir = TempDir("shipped");
  auto built = PointwiseKernel::Compile(spec, o);  // fills the cache with NVRTC
  ASSERT_TRUE(built.ok()) << built.status();
  SetNvrtcDisabledForTesting(true);
  auto loaded = PointwiseKernel::Compile(spec, o);
  spec.out_dtype = DType::kF32;  // a kernel nobody compiled
  auto missing = PointwiseKernel::Compile(spec, o);
  SetNvrtcDisabledForTesting(false);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_TRUE((*loaded)->from_cache());
  EXPECT_EQ((*loaded)->cubin(), (*built)->cubin());
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kUnavailable) << missing.status();
}

TEST_F(NvrtcTest, UnwritableCacheStillCompiles) {
  const Ints shape = {7};
  PwBody body = Body("exp", 1, {});
  PwSpec spec;
  spec.body = &body;
  spec.out_shape = shape;
  spec.inputs = {{DType::kF32, Contig(shape)}};
  CodegenOptions o;
  o.cache_dir = "/proc/loom_cannot_write_here";
  auto k = PointwiseKernel::Compile(spec, o);
  ASSERT_TRUE(k.ok()) << k.status();
  EXPECT_TRUE((*k)->cache_path().empty());
}

}  // namespace
}  // namespace loom::kernels::cuda::codegen
