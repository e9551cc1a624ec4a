// fp64 CPU reference of scaled dot-product attention with the layouts and
// contract of flash_attention.h (GQA, causal top-left, scale), forward and
// backward. Plain loops, O(B H Tq Tk D): for checks on small shapes.
#pragma once

#include <cstdint>
#include <vector>

namespace loom::cuda::ref {

struct SdpaShape {
  int64_t batch = 1, heads = 1, kv_heads = 1, seq_q = 1, seq_k = 1, head_dim = 1;
  bool causal = false;
  double scale = 1.0;
};

// o [B,H,Tq,D], lse [B,H,Tq] (natural log).
void SdpaForward(const SdpaShape& s, const std::vector<double>& q, const std::vector<double>& k,
                 const std::vector<double>& v, std::vector<double>* o, std::vector<double>* lse);
// Gradients for upstream dout (dk, dv summed over each kv head's query heads).
void SdpaBackward(const SdpaShape& s, const std::vector<double>& q, const std::vector<double>& k,
                  const std::vector<double>& v, const std::vector<double>& dout, std::vector<double>* dq,
                  std::vector<double>* dk, std::vector<double>* dv);

}  // namespace loom::cuda::ref
