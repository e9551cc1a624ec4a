// Executes the generated kernels on the host: every kernel of the GPU check's
// matrix (check_util.h) is generated, all of them are compiled as one C++
// translation unit by the host compiler (a shim maps the CUDA builtins:
// __global__, blockIdx, __uint_as_float, and the bf16/f16 conversions with the
// same round-to-nearest-even), loaded with dlopen, and run with an emulated
// grid of 2 blocks x 3 threads (so the grid-stride loop and the vector tail are
// exercised), once on the vector path where alignment allows it and once on the
// scalar path. Outputs are checked against the f64 references exactly as the
// GPU check does. Needs no GPU and no NVRTC; fails without a host C++ compiler
// (scripts/setup.sh installs build-essential).
#include <dlfcn.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/codegen/host_exec_util.h"
#include "kernels/cuda/codegen/check_util.h"
#include "kernels/cuda/codegen/pointwise.h"
#include "kernels/cuda/codegen/pointwise_internal.h"
#include "gtest/gtest.h"

namespace loom::kernels::cuda::codegen {
namespace {

constexpr char kShim[] = R"(// Host shim for generated pointwise kernels.
#define LOOM_PW_HOST 1
#include <math.h>
#include <stdint.h>
#include <string.h>
#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(n)
#define __align__(n) alignas(n)
#define __restrict__ __restrict
struct LoomDim3 { unsigned int x, y, z; };
extern "C" {
LoomDim3 gridDim = {1, 1, 1}, blockDim = {1, 1, 1}, blockIdx = {0, 0, 0}, threadIdx = {0, 0, 0};
}
static inline float __uint_as_float(unsigned int u) { float f; memcpy(&f, &u, 4); return f; }
static inline float __int_as_float(int u) { float f; memcpy(&f, &u, 4); return f; }
static inline float loom_bf2f(unsigned short h) { return __uint_as_float(((unsigned int)h) << 16); }
static inline unsigned short loom_f2bf(float f) {
  unsigned int u; memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (unsigned short)(u >> 16);
}
static inline float loom_h2f(unsigned short h) { _Float16 x; memcpy(&x, &h, 2); return (float)x; }
static inline unsigned short loom_f2h(float f) { _Float16 x = (_Float16)f; unsigned short h; memcpy(&h, &x, 2); return h; }
)";

struct Dim3 {
  unsigned int x, y, z;
};


using K0 = void (*)(void*, int);
using K1 = void (*)(const void*, void*, int);
using K2 = void (*)(const void*, const void*, void*, int);
using K3 = void (*)(const void*, const void*, const void*, void*, int);

TEST(HostExec, EveryCaseMatchesTheF64Reference) {
  const std::string cxx = FindHostCompiler();
  ASSERT_FALSE(cxx.empty()) << "no host C++ compiler at /usr/bin/{g++,c++,clang++}";

  // Generate every instance and its source.
  std::vector<PwCheckCase> cases = AllCheckCases();
  struct Item {
    PwCheckInstance inst;
    GeneratedKernel gen;
  };
  std::vector<Item> items;
  std::string tu = kShim;
  std::set<std::string> names;
  uint64_t seed = 1;
  for (const PwCheckCase& c : cases)
    for (DType dt : {DType::kF32, DType::kBF16})
      for (const char* layout : kCheckLayouts) {
        if (!LayoutApplies(c, layout)) continue;
        auto inst = MakeCheckInstance(c, dt, layout, ++seed);
        ASSERT_TRUE(inst.ok()) << c.label << " " << layout << ": " << inst.status();
        auto gen = GeneratePointwiseSource(inst->spec);
        ASSERT_TRUE(gen.ok()) << c.label << " " << layout << ": " << gen.status();
        if (names.insert(gen->name).second) tu += gen->source;
        items.push_back({std::move(*inst), std::move(*gen)});
      }

  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = absl::StrCat(tmp ? tmp : "/tmp", "/pw_host_exec_", ::getpid());
  ASSERT_EQ(std::system(absl::StrCat("mkdir -p '", dir, "'").c_str()), 0);
  const std::string src = dir + "/kernels.cc", so = dir + "/kernels.so", log = dir + "/cc.log";
  {
    std::ofstream f(src);
    f << tu;
  }
  const std::string cmd =
      absl::StrCat(cxx, " -std=c++17 -O0 -w -fPIC -shared -o '", so, "' '", src, "' > '", log, "' 2>&1");
  ASSERT_EQ(std::system(cmd.c_str()), 0) << "host compile failed:\n" << ReadWholeFile(log).substr(0, 4000);
  void* h = ::dlopen(so.c_str(), RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(h, nullptr) << ::dlerror();
  auto* grid = static_cast<Dim3*>(::dlsym(h, "gridDim"));
  auto* block = static_cast<Dim3*>(::dlsym(h, "blockDim"));
  auto* bidx = static_cast<Dim3*>(::dlsym(h, "blockIdx"));
  auto* tidx = static_cast<Dim3*>(::dlsym(h, "threadIdx"));
  ASSERT_TRUE(grid && block && bidx && tidx);
  grid->x = 2;
  block->x = 3;

  int vector_runs = 0, runs = 0;
  for (const Item& it : items) {
    void* fn = ::dlsym(h, it.gen.name.c_str());
    ASSERT_NE(fn, nullptr) << it.gen.name;
    std::vector<const void*> ptrs;
    for (const Tensor& s : it.inst.in_storage) ptrs.push_back(s.raw_data());
    for (int pass = 0; pass < 2; ++pass) {
      auto out = Tensor::Empty(it.inst.out_storage_shape, it.inst.out_dtype);
      ASSERT_TRUE(out.ok());
      std::memset(out->raw_data(), 0xFF, out->nbytes());
      std::vector<DType> in_dtypes;
      for (const PwOperand& op : it.inst.spec.inputs) in_dtypes.push_back(op.dtype);
      int vec = pass == 0 ? ChooseVectorPath(it.gen, ptrs, in_dtypes, out->raw_data(), it.inst.out_dtype) : 0;
      if (pass == 1 && !it.gen.vectorizable) continue;  // the scalar path already ran
      vector_runs += vec;
      ++runs;
      void* o = out->raw_data();
      for (unsigned b = 0; b < grid->x; ++b)
        for (unsigned t = 0; t < block->x; ++t) {
          bidx->x = b;
          tidx->x = t;
          switch (ptrs.size()) {
            case 0: reinterpret_cast<K0>(fn)(o, vec); break;
            case 1: reinterpret_cast<K1>(fn)(ptrs[0], o, vec); break;
            case 2: reinterpret_cast<K2>(fn)(ptrs[0], ptrs[1], o, vec); break;
            case 3: reinterpret_cast<K3>(fn)(ptrs[0], ptrs[1], ptrs[2], o, vec); break;
            default: FAIL() << "too many inputs";
          }
        }
      PwCheckResult r = EvaluateCheck(it.inst, *out);
      EXPECT_TRUE(r.pass) << it.inst.label << " " << it.inst.dtype << " " << it.inst.layout << " vec=" << vec
                          << ": rel_err " << r.err << " tol " << it.inst.tol << " " << r.detail << "\n"
                          << it.gen.source;
    }
  }
  ::dlclose(h);
  std::printf("host-executed %d kernel runs (%d on the vector path), %zu distinct kernels\n", runs, vector_runs,
              names.size());
  EXPECT_GT(vector_runs, 50);
  EXPECT_GT(runs, 250);
}

}  // namespace
}  // namespace loom::kernels::cuda::codegen
