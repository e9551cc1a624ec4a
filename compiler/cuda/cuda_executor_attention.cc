// CudaExecutor (cuda_executor_impl.h): attention launches. Flash-able ones
// (bf16, D 64/128, or the plan's strided views) go to Loom's flash kernels or
// the SDPA dispatcher (CudaOptions::attention); the rest (f32, other head
// dims) to the dispatcher's exact math kernels (kernels/cuda/attention/
// sdpa_math.h: f32 arithmetic, deterministic).
#include <cmath>

#include "absl/strings/str_cat.h"
#include "base/status.h"
#include "compiler/cuda/cuda_executor_impl.h"
#include "kernels/cuda/attention/flash_attention.h"
#include "kernels/cuda/attention/sdpa_dispatch.h"

namespace loom::compiler::cuda::cuda_executor_internal {

void Impl::MarkReadRoots() {
  read_roots_.assign(plan_.root.size(), 0);
  auto mark = [&](int v) {
    if (v >= 0 && v < static_cast<int>(plan_.root.size()) && plan_.root[v] >= 0) read_roots_[plan_.root[v]] = 1;
  };
  for (const Launch& l : plan_.launches)
    for (int v : l.inputs) mark(v);
  for (const ir::GraphOutput& out : g_.outputs()) mark(out.value);
  for (size_t v = 0; v < plan_.root.size(); ++v)
    if (plan_.root[v] >= 0 && plan_.input_of[plan_.root[v]] >= 0) read_roots_[plan_.root[v]] = 1;
}

bool Impl::UseFlash(const Launch& l) const {
  if (!l.attn.empty()) return true;  // strided views: planned for flash only
  const int q = l.kind == LaunchKind::kSdpa ? l.inputs[0] : l.inputs[1];
  const int64_t d = Sh(q).back();
  return Dt(q) == DType::kBF16 && (d == 64 || d == 128);
}

// Attention arguments for a flash-able launch: from the plan's strided views
// (Launch::attn) or from whole contiguous tensors; every pointer but the
// workspace is set.
loom::kernels::cuda::attention::SdpaArgs Impl::AttnCallArgs(const Launch& l) const {
  const bool bwd = l.kind == LaunchKind::kSdpaBackward;
  loom::kernels::cuda::attention::SdpaArgs a;
  a.causal = l.attrs.GetBool("is_causal", false);
  a.scale = l.attrs.Has("scale") ? static_cast<float>(l.attrs.GetFloat("scale", 0)) : 0.f;
  a.deterministic = o_.deterministic || attention_ == AttnRoute::kFlash;
  a.stream = stream_;
  // Views in operand order: forward q, k, v, o; backward dout, q, k, v, o, dq, dk, dv.
  std::vector<AttnView> w = l.attn;
  if (w.empty()) {
    auto whole = [&](int v) {
      AttnView x;
      x.value = v;
      x.shape = Sh(v);
      return x;  // offset 0, strides 0: contiguous
    };
    const std::vector<int>& in = l.inputs;
    const std::vector<int>& out = l.outputs;
    if (bwd) {
      w = {whole(in[0]), whole(in[1]), whole(in[2]), whole(in[3]), whole(in[4]),
           whole(out[0]), whole(out[1]), whole(out[2])};
    } else {
      w = {whole(in[0]), whole(in[1]), whole(in[2]), whole(out[0])};
    }
  }
  const int base = bwd ? 1 : 0;
  const AttnView& q = w[base];
  const AttnView& k = w[base + 1];
  a.dtype = Dt(q.value);
  a.batch = q.shape[0], a.heads = q.shape[1], a.seq_q = q.shape[2], a.head_dim = q.shape[3];
  a.kv_heads = k.shape[1], a.seq_k = k.shape[2];
  auto ptr = [&](const AttnView& v) {
    return static_cast<char*>(Ptr(v.value)) + v.offset * static_cast<int64_t>(DTypeSize(Dt(v.value)));
  };
  auto strides = [](const AttnView& v) {
    return v.strides.empty() ? loom::kernels::cuda::attention::FlashStrides{}
                             : loom::kernels::cuda::attention::FlashStrides{v.strides[0], v.strides[1], v.strides[2]};
  };
  a.q = ptr(w[base]), a.k = ptr(w[base + 1]), a.v = ptr(w[base + 2]), a.o = ptr(w[base + 3]);
  a.q_strides = strides(w[base]), a.k_strides = strides(w[base + 1]), a.v_strides = strides(w[base + 2]);
  a.o_strides = strides(w[base + 3]);
  const int lse = bwd ? l.inputs[5] : l.outputs[1];
  a.lse = bwd || IsRead(lse) ? static_cast<float*>(Ptr(lse)) : nullptr;  // null: an inference forward
  if (bwd) {
    a.dout = ptr(w[0]), a.dout_strides = strides(w[0]);
    a.dq = ptr(w[5]), a.dk = ptr(w[6]), a.dv = ptr(w[7]);
    a.dq_strides = strides(w[5]), a.dk_strides = strides(w[6]), a.dv_strides = strides(w[7]);
  }
  return a;
}

// One attention launch: Loom's flash kernels with their default variants
// (AttnRoute::kFlash), or the SDPA dispatcher, which times its candidates
// (flash variants, cuDNN) in the first, eager step and caches the pick;
// Describe() reports it.
void Impl::AddAttnCall(const loom::kernels::cuda::attention::SdpaArgs& a, bool backward) {
  if (attention_ == AttnRoute::kFlash) {
    const loom::kernels::cuda::attention::FlashAttnArgs f = loom::kernels::cuda::attention::FlashArgsFromSdpa(a);
    calls_.push_back([f, backward]() {
      return backward ? loom::kernels::cuda::attention::FlashAttentionBackward(f)
                      : loom::kernels::cuda::attention::FlashAttentionForward(f);
    });
    return;
  }
  attn_calls_.push_back({desc_.size(), a, backward});
  calls_.push_back([a, backward]() {
    loom::kernels::cuda::attention::SdpaDispatcher& d = loom::kernels::cuda::attention::SdpaDispatcher::Global();
    return backward ? d.Backward(a) : d.Forward(a);
  });
}

// A launch the flash kernels do not take (f32, other head dims): contiguous
// q, k, v, o (and gradients) for the dispatcher, whose only candidate there is
// the math kernel. The scale is explicit: the attribute, else 1/sqrt(D) in f32.
loom::kernels::cuda::attention::SdpaArgs Impl::MathCallArgs(const Launch& l) const {
  const bool bwd = l.kind == LaunchKind::kSdpaBackward;
  const auto& in = l.inputs;
  const auto& out = l.outputs;
  const int q = bwd ? in[1] : in[0], k = bwd ? in[2] : in[1], v = bwd ? in[3] : in[2];
  loom::kernels::cuda::attention::SdpaArgs a;
  a.dtype = Dt(q);
  a.batch = Sh(q)[0], a.heads = Sh(q)[1], a.seq_q = Sh(q)[2], a.head_dim = Sh(q)[3];
  a.kv_heads = Sh(k)[1], a.seq_k = Sh(k)[2];
  a.causal = l.attrs.GetBool("is_causal", false);
  const float scale = l.attrs.Has("scale") ? static_cast<float>(l.attrs.GetFloat("scale", 0)) : 0.f;
  a.scale = scale > 0 ? scale : 1.f / sqrtf(static_cast<float>(a.head_dim));
  a.deterministic = o_.deterministic;
  a.q = Ptr(q), a.k = Ptr(k), a.v = Ptr(v);
  a.stream = stream_;
  if (bwd) {
    a.dout = Ptr(in[0]);
    a.o = const_cast<void*>(Ptr(in[4]));
    a.lse = static_cast<float*>(Ptr(in[5]));
    a.dq = Ptr(out[0]), a.dk = Ptr(out[1]), a.dv = Ptr(out[2]);
  } else {
    a.o = Ptr(out[0]);
    a.lse = IsRead(out[1]) ? static_cast<float*>(Ptr(out[1])) : nullptr;
  }
  return a;
}

// The sdpa / sdpa_backward launches.
absl::Status Impl::BuildAttention(const Launch& l, std::string* desc) {
  const bool bwd = l.kind == LaunchKind::kSdpaBackward;
  if (!bwd && !IsRead(l.outputs[1])) {
    ++inference_attention_;
    *desc += " inference (no lse)";
  }
  if (UseFlash(l)) {
    loom::kernels::cuda::attention::SdpaArgs a = AttnCallArgs(l);
    a.workspace = scratch_;
    a.workspace_bytes = scratch_bytes_;
    *desc += attention_ == AttnRoute::kFlash ? " flash" : " dispatch";
    AddAttnCall(a, bwd);
    return absl::OkStatus();
  }
  loom::kernels::cuda::attention::SdpaArgs a = MathCallArgs(l);
  a.workspace = scratch_;
  a.workspace_bytes = scratch_bytes_;
  *desc += " math";
  attn_calls_.push_back({desc_.size(), a, bwd});
  calls_.push_back([a, bwd]() {
    loom::kernels::cuda::attention::SdpaDispatcher& d = loom::kernels::cuda::attention::SdpaDispatcher::Global();
    return bwd ? d.Backward(a) : d.Forward(a);
  });
  return absl::OkStatus();
}

}  // namespace loom::compiler::cuda::cuda_executor_internal
