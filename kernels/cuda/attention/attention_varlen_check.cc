// Packed variable-length flash attention (flash_varlen.h) against the fp64
// reference run per sequence: a row of the attention check table.
#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/rng.h"
#include "base/status.h"
#include "base/tensor.h"
#include "kernels/cuda/attention/attention_checks.h"
#include "kernels/cuda/attention/attention_reference.h"
#include "kernels/cuda/attention/flash_varlen.h"
#include "kernels/cuda/device_runtime.h"

namespace loom::kernels::cuda::attention {
namespace {

using Vec = std::vector<double>;

// Rows [r0, r0 + n) of a packed [total, X, D] buffer, as [1, X, n, D].
Vec Unpack(const Vec& packed, int64_t r0, int64_t n, int64_t x, int64_t d) {
  Vec out(n * x * d);
  for (int64_t t = 0; t < n; ++t)
    for (int64_t h = 0; h < x; ++h)
      for (int64_t e = 0; e < d; ++e) out[(h * n + t) * d + e] = packed[((r0 + t) * x + h) * d + e];
  return out;
}

struct Acc {  // sum of squared errors and of squared reference values
  double num = 0, den = 0;
  bool finite = true;
  void Add(const Vec& out, const Vec& ref) {
    for (size_t i = 0; i < ref.size(); ++i) {
      if (!std::isfinite(out[i])) finite = false;
      num += (out[i] - ref[i]) * (out[i] - ref[i]), den += ref[i] * ref[i];
    }
  }
  double Rel() const { return !finite ? INFINITY : den == 0 ? (num == 0 ? 0 : INFINITY) : std::sqrt(num / den); }
};

}  // namespace

absl::StatusOr<CheckResult> RunVarlenCheck(DeviceRuntime* rt, uint64_t seed, DType dt, int64_t heads,
                                           int64_t kv_heads, int64_t d, bool causal,
                                           const std::vector<int64_t>& lens_q, const std::vector<int64_t>& lens_k) {
  FlashVarlenArgs a;
  a.dtype = dt, a.heads = heads, a.kv_heads = kv_heads, a.head_dim = d, a.causal = causal;
  a.cu_seqlens_q = {0}, a.cu_seqlens_k = {0};
  for (size_t b = 0; b < lens_q.size(); ++b) {
    a.cu_seqlens_q.push_back(a.cu_seqlens_q.back() + lens_q[b]);
    a.cu_seqlens_k.push_back(a.cu_seqlens_k.back() + lens_k[b]);
  }
  const int64_t tq = a.cu_seqlens_q.back(), tk = a.cu_seqlens_k.back();
  Philox rng(seed, 4242);
  uint64_t ctr = 0;
  auto random = [&](const std::vector<int64_t>& shape, Vec* host) {
    return CheckRandom(rt, rng, &ctr, shape, dt, host);
  };
  auto poisoned = [&](const std::vector<int64_t>& shape, DType t) { return CheckPoisoned(rt, shape, t); };
  Vec q, k, v, dout;
  LOOM_ASSIGN_OR_RETURN(Tensor gq, random({tq, heads, d}, &q));
  LOOM_ASSIGN_OR_RETURN(Tensor gk, random({tk, kv_heads, d}, &k));
  LOOM_ASSIGN_OR_RETURN(Tensor gv, random({tk, kv_heads, d}, &v));
  LOOM_ASSIGN_OR_RETURN(Tensor gdo, random({tq, heads, d}, &dout));
  LOOM_ASSIGN_OR_RETURN(Tensor go, poisoned({tq, heads, d}, dt));
  LOOM_ASSIGN_OR_RETURN(Tensor glse, poisoned({tq * heads}, DType::kF32));
  LOOM_ASSIGN_OR_RETURN(Tensor gdq, poisoned({tq, heads, d}, dt));
  LOOM_ASSIGN_OR_RETURN(Tensor gdk, poisoned({tk, kv_heads, d}, dt));
  LOOM_ASSIGN_OR_RETURN(Tensor gdv, poisoned({tk, kv_heads, d}, dt));
  a.q = gq.raw_data(), a.k = gk.raw_data(), a.v = gv.raw_data(), a.dout = gdo.raw_data();
  a.o = go.raw_data(), a.lse = glse.data<float>(), a.dq = gdq.raw_data(), a.dk = gdk.raw_data();
  a.dv = gdv.raw_data();
  LOOM_ASSIGN_OR_RETURN(Tensor ws, poisoned({(FlashVarlenBwdWorkspaceBytes(a) + 3) / 4}, DType::kF32));
  a.workspace = ws.raw_data();
  a.stream = rt->compute_stream();
  LOOM_RETURN_IF_ERROR(FlashAttentionVarlenForward(a));
  LOOM_RETURN_IF_ERROR(FlashAttentionVarlenBackward(a));
  LOOM_RETURN_IF_ERROR(rt->SynchronizeCompute());
  std::vector<Vec> got(5);
  int i = 0;
  for (const Tensor* t : {&go, &glse, &gdq, &gdk, &gdv}) {
    LOOM_ASSIGN_OR_RETURN(Tensor h, ToHost(*t));
    got[i++] = h.ToVector();
  }
  Acc eo, e_lse, edq, edk, edv;
  for (size_t b = 0; b < lens_q.size(); ++b) {
    const int64_t q0 = a.cu_seqlens_q[b], k0 = a.cu_seqlens_k[b], nq = lens_q[b], nk = lens_k[b];
    if (nq == 0) continue;
    ref::SdpaShape s;
    s.heads = heads, s.kv_heads = kv_heads, s.seq_q = nq, s.seq_k = nk, s.head_dim = d, s.causal = causal;
    s.scale = 1.0 / std::sqrt(static_cast<double>(d));
    const Vec rq = Unpack(q, q0, nq, heads, d), rk = Unpack(k, k0, nk, kv_heads, d);
    const Vec rv = Unpack(v, k0, nk, kv_heads, d), rdo = Unpack(dout, q0, nq, heads, d);
    Vec ro, rlse, rdq, rdk, rdv;
    ref::SdpaForward(s, rq, rk, rv, &ro, &rlse);
    ref::SdpaBackward(s, rq, rk, rv, rdo, &rdq, &rdk, &rdv);
    eo.Add(Unpack(got[0], q0, nq, heads, d), ro);
    e_lse.Add(Vec(got[1].begin() + heads * q0, got[1].begin() + heads * (q0 + nq)), rlse);
    edq.Add(Unpack(got[2], q0, nq, heads, d), rdq);
    edk.Add(Unpack(got[3], k0, nk, kv_heads, d), rdk);
    edv.Add(Unpack(got[4], k0, nk, kv_heads, d), rdv);
  }
  CheckResult r;
  std::string lens;
  for (size_t b = 0; b < lens_q.size(); ++b) absl::StrAppend(&lens, b ? "," : "", lens_q[b], "/", lens_k[b]);
  r.name = absl::StrCat("flash_attention varlen fwd+bwd", causal ? " causal" : "", kv_heads != heads ? " gqa" : "");
  r.dtype = std::string(DTypeName(dt));
  r.shape = absl::StrCat("H", heads, "/", kv_heads, " D", d, " Tq/Tk ", lens);
  r.tol = 1e-2;
  const std::pair<const char*, const Acc*> outs[] = {{"o", &eo}, {"lse", &e_lse}, {"dq", &edq}, {"dk", &edk}, {"dv", &edv}};
  for (const auto& [name, acc] : outs) {
    r.rel_err = std::max(r.rel_err, acc->Rel());
    absl::StrAppend(&r.detail, r.detail.empty() ? "" : " ", name, "=", absl::StrFormat("%.2e", acc->Rel()));
  }
  r.pass = std::isfinite(r.rel_err) && r.rel_err <= r.tol;
  return r;
}

}  // namespace loom::kernels::cuda::attention
