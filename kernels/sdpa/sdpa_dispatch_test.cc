// Table test of SelectSdpaImpl: auto choices and overrides (including overrides
// that cannot run, which must be InvalidArgument naming why).
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "kernels/sdpa/sdpa.h"

namespace loom::kernels::sdpa {
namespace {

struct Row {
  const char* name;
  DType dtype;
  int64_t T, S, D;
  DType mask;  // kI32 = no mask
  kernels::Attrs attrs;
  const char* want;      // impl name, or "" when an error is expected
  const char* reason_has;  // substring of the reason / error message
};

TEST(SdpaDispatch, Table) {
  const DType none = DType::kI32;
  std::vector<Row> rows = {
      {"f32 large plain", DType::kF32, 1024, 1024, 64, none, {}, "flash", "f32 without a mask"},
      {"f32 causal", DType::kF32, 512, 512, 64, none, {{"is_causal", true}}, "flash", "causal tiles"},
      {"f32 dropout", DType::kF32, 512, 512, 64, none, {{"dropout_p", 0.1}}, "flash", "dropout"},
      {"f32 bool mask", DType::kF32, 512, 512, 64, DType::kBool, {}, "memeff", "bool mask"},
      {"f32 additive mask", DType::kF32, 512, 512, 64, DType::kF32, {}, "memeff", "additive mask"},
      {"f64", DType::kF64, 512, 512, 64, none, {}, "math", "f64"},
      {"tiny", DType::kF32, 5, 7, 8, none, {}, "memeff", "small"},
      {"tiny with mask", DType::kF32, 5, 7, 8, DType::kBool, {}, "memeff", "small"},
      {"f64 with mask", DType::kF64, 512, 512, 64, DType::kF32, {}, "math", "f64"},
      {"huge head dim", DType::kF32, 512, 512, 320, none, {}, "memeff", "flash limit"},
      {"override math", DType::kF32, 1024, 1024, 64, none, {{"impl", std::string("math")}}, "math", "requested"},
      {"override memeff", DType::kF32, 64, 64, 8, none, {{"impl", std::string("memeff")}}, "memeff", "requested"},
      {"override flash f64", DType::kF64, 64, 64, 8, none, {{"impl", std::string("flash")}}, "flash", "requested"},
      {"flash with mask", DType::kF32, 512, 512, 64, DType::kBool, {{"impl", std::string("flash")}}, "",
       "flash takes no mask"},
      {"flash with big D", DType::kF32, 512, 512, 300, none, {{"impl", std::string("flash")}}, "", "flash limit"},
      {"unknown impl", DType::kF32, 512, 512, 64, none, {{"impl", std::string("cudnn")}}, "", "impl: unknown"},
  };
  for (const Row& r : rows) {
    SCOPED_TRACE(r.name);
    std::vector<kernels::TensorMeta> m = {
        {r.dtype, {2, 4, r.T, r.D}}, {r.dtype, {2, 2, r.S, r.D}}, {r.dtype, {2, 2, r.S, r.D}}};
    if (r.mask != none) m.push_back({r.mask, {r.T, r.S}});
    auto p = MakeSdpaParams(m, r.attrs);
    absl::StatusOr<SdpaSelection> sel = p.ok() ? SelectSdpaImpl(*p) : absl::StatusOr<SdpaSelection>(p.status());
    if (std::string(r.want).empty()) {
      ASSERT_FALSE(sel.ok());
      EXPECT_EQ(sel.status().code(), absl::StatusCode::kInvalidArgument);
      EXPECT_NE(std::string(sel.status().message()).find(r.reason_has), std::string::npos) << sel.status();
      continue;
    }
    ASSERT_TRUE(sel.ok()) << sel.status();
    EXPECT_EQ(SdpaImplName(sel->impl), r.want);
    EXPECT_NE(sel->reason.find(r.reason_has), std::string::npos) << sel->reason;
    EXPECT_EQ(sel->ToString().rfind(absl::StrCat("sdpa: picked ", r.want, " because "), 0), 0u) << sel->ToString();
  }
}

TEST(SdpaDispatch, NonCpuDevice) {
  std::vector<kernels::TensorMeta> m = {
      {DType::kF32, {1, 1, 64, 8}}, {DType::kF32, {1, 1, 64, 8}}, {DType::kF32, {1, 1, 64, 8}}};
  auto p = MakeSdpaParams(m, {{"impl", std::string("flash")}});
  ASSERT_TRUE(p.ok());
  p->device = Device::CUDA(0);
  auto sel = SelectSdpaImpl(*p);
  ASSERT_FALSE(sel.ok());
  EXPECT_NE(std::string(sel.status().message()).find("cuda:0"), std::string::npos);
}

}  // namespace
}  // namespace loom::kernels::sdpa
