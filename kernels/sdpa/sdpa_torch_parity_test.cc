// PyTorch parity: runs every implementation on several cases (bool mask,
// additive mask, causal, custom scale, GQA, dropout 0), writes inputs and Loom's
// out/dq/dk/dv to $TEST_TMPDIR (cases.json + data.bin, raw f32), then runs
// kernels/sdpa/torch_parity.py with /usr/bin/python3, which recomputes the
// written-out attention with torch 1.13 autograd and fails when any
// ||loom - torch|| / ||torch|| >= 1e-5.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "kernels/sdpa/sdpa.h"
#include "kernels/sdpa/sdpa_test_util.h"

namespace loom::kernels::sdpa {
namespace {

struct PCase {
  std::string name;
  int64_t B, H, Hkv, T, S, D, Dv;
  bool causal;
  int mask;  // 0 none, 1 bool [B,1,T,S], 2 additive [T,S]
  double scale;  // 0: default
};

class Writer {
 public:
  explicit Writer(const std::string& path) : f_(fopen(path.c_str(), "wb")) {}
  ~Writer() {
    if (f_) fclose(f_);
  }
  bool ok() const { return f_ != nullptr; }
  void Close() {
    if (f_) fclose(f_);
    f_ = nullptr;
  }
  // Appends t as f32; returns "[offset_floats, numel, [shape]]" JSON.
  std::string Put(const Tensor& t) {
    Tensor f = t.To(DType::kF32);
    std::string j = absl::StrCat("{\"offset\": ", offset_, ", \"shape\": [", absl::StrJoin(t.shape(), ", "), "]}");
    fwrite(f.data<float>(), sizeof(float), f.numel(), f_);
    offset_ += f.numel();
    return j;
  }

 private:
  FILE* f_;
  int64_t offset_ = 0;
};

TEST(SdpaTorchParity, MatchesWrittenOutAttention) {
  ASSERT_EQ(access("/usr/bin/python3", X_OK), 0) << "/usr/bin/python3 not found (scripts/setup.sh installs it)";
  const char* tmp = getenv("TEST_TMPDIR");
  std::string dir = tmp ? tmp : "/tmp";
  std::vector<PCase> cases = {
      {"bool_mask", 2, 4, 4, 37, 53, 32, 32, false, 1, 0},
      {"additive_mask_scale", 1, 4, 2, 37, 53, 32, 16, false, 2, 0.2},
      {"causal", 1, 4, 4, 70, 70, 64, 64, true, 0, 0},
      {"causal_T_lt_S", 1, 2, 1, 40, 90, 16, 16, true, 0, 0},
      {"gqa_scale", 1, 8, 2, 65, 129, 48, 24, false, 0, 0.37},
      {"plain_multi_tile", 1, 2, 2, 200, 200, 64, 64, false, 0, 0},
      {"bool_mask_causal", 1, 2, 2, 33, 33, 16, 16, true, 1, 0},
  };
  Writer w(dir + "/data.bin");
  ASSERT_TRUE(w.ok());
  std::vector<std::string> jcases;
  for (size_t ci = 0; ci < cases.size(); ++ci) {
    const PCase& c = cases[ci];
    Tensor q = testing::Random({c.B, c.H, c.T, c.D}, DType::kF32, 10 * ci + 1, -2, 2);
    Tensor k = testing::Random({c.B, c.Hkv, c.S, c.D}, DType::kF32, 10 * ci + 2, -2, 2);
    Tensor v = testing::Random({c.B, c.Hkv, c.S, c.Dv}, DType::kF32, 10 * ci + 3);
    Tensor dout = testing::Random({c.B, c.H, c.T, c.Dv}, DType::kF32, 10 * ci + 4);
    Tensor mask;
    if (c.mask == 1) {
      mask = testing::RandomBoolMask({c.B, 1, c.T, c.S}, 10 * ci + 5, 0.7f);
      for (int64_t i = 0; i < mask.numel(); i += c.S) mask.SetDouble(i, 1.0);  // no fully masked rows
    } else if (c.mask == 2) {
      mask = testing::Random({c.T, c.S}, DType::kF32, 10 * ci + 5, -3, 1);
    }
    const Tensor* mp = mask.defined() ? &mask : nullptr;
    kernels::Attrs attrs{{"is_causal", c.causal}};
    if (c.scale != 0) attrs.Set("scale", c.scale);
    SdpaParams p = testing::ParamsFor(q, k, v, mp, attrs);
    std::string j = absl::StrCat("{\"name\": \"", c.name, "\", \"causal\": ", c.causal ? "true" : "false",
                                 ", \"scale\": ", c.scale != 0 ? absl::StrCat(c.scale) : "null",
                                 ", \"mask_kind\": ", c.mask, ", \"q\": ", w.Put(q), ", \"k\": ", w.Put(k),
                                 ", \"v\": ", w.Put(v), ", \"dout\": ", w.Put(dout));
    if (mp) absl::StrAppend(&j, ", \"mask\": ", w.Put(mask));
    std::vector<std::string> impls;
    for (SdpaImpl impl : {SdpaImpl::kFlash, SdpaImpl::kMemEff, SdpaImpl::kMath}) {
      if (!CanRun(impl, p).ok()) continue;
      testing::Fwd f = testing::RunFwd(impl, p, q, k, v, mp);
      testing::Bwd g = testing::RunBwd(impl, p, dout, q, k, v, f, mp);
      impls.push_back(absl::StrCat("{\"impl\": \"", SdpaImplName(impl), "\", \"out\": ", w.Put(f.out),
                                   ", \"lse\": ", w.Put(f.lse), ", \"dq\": ", w.Put(g.dq), ", \"dk\": ", w.Put(g.dk),
                                   ", \"dv\": ", w.Put(g.dv), "}"));
    }
    absl::StrAppend(&j, ", \"results\": [", absl::StrJoin(impls, ", "), "]}");
    jcases.push_back(j);
  }
  w.Close();
  {
    FILE* jf = fopen((dir + "/cases.json").c_str(), "w");
    ASSERT_NE(jf, nullptr);
    std::string all = absl::StrCat("[", absl::StrJoin(jcases, ",\n"), "]\n");
    fwrite(all.data(), 1, all.size(), jf);
    fclose(jf);
  }
  std::string cmd = absl::StrCat("/usr/bin/python3 kernels/sdpa/torch_parity.py ", dir, " 2>&1");
  FILE* pipe = popen(cmd.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string output;
  char buf[512];
  while (fgets(buf, sizeof(buf), pipe)) output += buf;
  int status = pclose(pipe);
  printf("%s", output.c_str());
  ASSERT_FALSE(WIFEXITED(status) && WEXITSTATUS(status) == 77)
      << "torch unavailable (scripts/setup.sh installs python3-torch): " << output;
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << output;
  EXPECT_NE(output.find("PARITY OK"), std::string::npos) << output;
}

}  // namespace
}  // namespace loom::kernels::sdpa
