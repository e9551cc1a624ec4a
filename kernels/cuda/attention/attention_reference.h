// fp64 CPU reference of scaled dot-product attention with the layouts and
// contract of flash_attention.h (GQA, causal top-left, scale) and of the SDPA
// dispatcher (attention mask, dropout), forward and backward. Plain loops, O(B H Tq Tk D): for checks on small shapes.
#pragma once

#include <cstdint>
#include <vector>

namespace loom::kernels::cuda::attention::ref {

struct SdpaShape {
  int64_t batch = 1, heads = 1, kv_heads = 1, seq_q = 1, seq_k = 1, head_dim = 1;
  bool causal = false;
  double scale = 1.0;
  // attn_mask expanded to [B, H, Tq, Tk] (empty: none): mask_bool selects
  // PyTorch's boolean form (nonzero = attend), else the values are added to
  // the scaled scores (-inf masks out). A row with every key masked gives
  // o = 0, lse = -inf and no gradient.
  std::vector<double> mask;
  bool mask_bool = false;
  // Dropout on the probabilities with sdpa_dropout.h's keep mask.
  double dropout_p = 0;
  uint64_t dropout_seed = 0, dropout_offset = 0;
};

// o [B,H,Tq,D], lse [B,H,Tq] (natural log).
void SdpaForward(const SdpaShape& s, const std::vector<double>& q, const std::vector<double>& k,
                 const std::vector<double>& v, std::vector<double>* o, std::vector<double>* lse);
// Gradients for upstream dout (dk, dv summed over each kv head's query heads).
void SdpaBackward(const SdpaShape& s, const std::vector<double>& q, const std::vector<double>& k,
                  const std::vector<double>& v, const std::vector<double>& dout, std::vector<double>* dq,
                  std::vector<double>* dk, std::vector<double>* dv);

}  // namespace loom::kernels::cuda::attention::ref
