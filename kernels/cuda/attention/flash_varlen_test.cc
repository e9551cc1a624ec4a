// Packed variable-length flash attention without a GPU: offsets are checked
// (the field named), each sequence becomes one strided flash call at the right
// rows, with its own lengths and the packed strides, and empty sequences are
// skipped. The numerics run in attention_check on the GPU machine.
#include "kernels/cuda/attention/flash_varlen.h"

#include <string>

#include "gtest/gtest.h"

namespace loom::kernels::cuda::attention {
namespace {

FlashVarlenArgs Valid() {
  static char buf[1 << 16];
  FlashVarlenArgs a;
  a.heads = 4, a.kv_heads = 2, a.head_dim = 64;
  a.cu_seqlens_q = {0, 5, 5, 37};
  a.cu_seqlens_k = {0, 9, 12, 40};
  a.q = a.k = a.v = a.dout = buf;
  a.o = a.dq = a.dk = a.dv = a.workspace = buf;
  a.lse = reinterpret_cast<float*>(buf);
  return a;
}

void ExpectBad(const FlashVarlenArgs& a, const char* word) {
  absl::Status s = FlashVarlenValidate(a, true);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(std::string(s.message()).find(word), std::string::npos) << s;
}

TEST(FlashVarlen, Validation) {
  EXPECT_TRUE(FlashVarlenValidate(Valid(), true).ok()) << FlashVarlenValidate(Valid(), true);
  FlashVarlenArgs a = Valid();
  a.cu_seqlens_q = {1, 5, 5, 37};
  ExpectBad(a, "cu_seqlens_q");
  a = Valid();
  a.cu_seqlens_k = {0, 9, 8, 40};
  ExpectBad(a, "cu_seqlens_k");
  a = Valid();
  a.cu_seqlens_k = {0, 9, 40};
  ExpectBad(a, "cu_seqlens_k");
  a = Valid();
  a.cu_seqlens_k = {0, 0, 12, 40};  // sequence 0 has queries but no keys
  ExpectBad(a, "sequence 0");
  a = Valid();
  a.cu_seqlens_q = {0, 0};
  a.cu_seqlens_k = {0, 3};
  ExpectBad(a, "empty");
  a = Valid();
  a.head_dim = 96;  // flash's own check, named with the sequence
  ExpectBad(a, "head_dim");
  a = Valid();
  a.workspace = nullptr;
  EXPECT_TRUE(FlashVarlenValidate(a, false).ok());
  ExpectBad(a, "workspace");
}

TEST(FlashVarlen, OneStridedCallPerSequence) {
  FlashVarlenArgs a = Valid();
  const char* base = static_cast<const char*>(a.q);
  FlashAttnArgs f = FlashVarlenSequence(a, 2);
  EXPECT_EQ(f.batch, 1);
  EXPECT_EQ(f.seq_q, 32);
  EXPECT_EQ(f.seq_k, 28);
  // Rows 5.. of q [total_q, 4, 64] bf16 and rows 12.. of k [total_k, 2, 64].
  EXPECT_EQ(static_cast<const char*>(f.q) - base, 5 * 4 * 64 * 2);
  EXPECT_EQ(static_cast<const char*>(f.k) - base, 12 * 2 * 64 * 2);
  EXPECT_EQ(static_cast<const char*>(f.dv) - base, 12 * 2 * 64 * 2);
  EXPECT_EQ(f.lse - a.lse, 4 * 5);
  EXPECT_EQ(f.q_strides.row, 4 * 64);
  EXPECT_EQ(f.q_strides.head, 64);
  EXPECT_EQ(f.k_strides.row, 2 * 64);
  EXPECT_EQ(f.dk_strides.row, 2 * 64);
  EXPECT_TRUE(FlashAttentionValidate(f, true).ok()) << FlashAttentionValidate(f, true);
  // Sequence 1 has no queries: nothing to run forward.
  EXPECT_EQ(FlashVarlenSequence(a, 1).seq_q, 0);
  // The workspace covers the largest sequence.
  EXPECT_EQ(FlashVarlenBwdWorkspaceBytes(a), FlashAttentionBwdWorkspaceBytes(f));
}

}  // namespace
}  // namespace loom::kernels::cuda::attention
