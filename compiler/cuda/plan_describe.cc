// Names and text of a CUDA plan: LaunchKindName, GemmEpilogueName,
// CudaPlan::Bytes and CudaPlan::Describe (one line per launch).
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "compiler/cuda/plan.h"

namespace loom::compiler::cuda {

const char* LaunchKindName(LaunchKind k) {
  switch (k) {
    case LaunchKind::kGemm: return "gemm";
    case LaunchKind::kPointwise: return "pointwise";
    case LaunchKind::kCopy: return "copy";
    case LaunchKind::kSliceBackward: return "slice_backward";
    case LaunchKind::kConcat: return "concat";
    case LaunchKind::kFill: return "fill";
    case LaunchKind::kEmbedding: return "embedding";
    case LaunchKind::kEmbeddingBackward: return "embedding_backward";
    case LaunchKind::kEmbeddingBackwardSorted: return "embedding_backward_sorted";
    case LaunchKind::kSumTo: return "sum_to";
    case LaunchKind::kLayerNorm: return "layernorm";
    case LaunchKind::kLayerNormBackward: return "layernorm_backward";
    case LaunchKind::kRmsNorm: return "rmsnorm";
    case LaunchKind::kRmsNormBackward: return "rmsnorm_backward";
    case LaunchKind::kRope: return "rope";
    case LaunchKind::kCrossEntropy: return "cross_entropy";
    case LaunchKind::kCrossEntropyBackward: return "cross_entropy_backward";
    case LaunchKind::kCrossEntropyFused: return "cross_entropy_fused";
    case LaunchKind::kSdpa: return "sdpa";
    case LaunchKind::kSdpaBackward: return "sdpa_backward";
    case LaunchKind::kGradNorm: return "grad_norm";
    case LaunchKind::kAdamW: return "adamw_multi_tensor";
    case LaunchKind::kCopyBack: return "copy_back";
    case LaunchKind::kCollective: return "collective";
    case LaunchKind::kVocabOnehot: return "vocab_onehot";
    case LaunchKind::kRowReduce: return "row_reduce";
  }
  return "?";
}

const char* GemmEpilogueName(GemmEpilogue e) {
  switch (e) {
    case GemmEpilogue::kNone: return "none";
    case GemmEpilogue::kBias: return "bias";
    case GemmEpilogue::kBiasGeluAux: return "bias_gelu_aux";
    case GemmEpilogue::kDGelu: return "dgelu";
  }
  return "?";
}

DeviceMemory PlannedMemory(const ir::Graph& g, const CudaPlan& p, bool offload_optimizer_state) {
  DeviceMemory m;
  for (size_t k = 0; k < g.inputs().size(); ++k) {
    const int64_t bytes = p.Bytes(g.inputs()[k].value);
    const ir::InputKind kind = g.inputs()[k].kind;
    if (kind == ir::InputKind::kState && offload_optimizer_state) {
      m.host_states += bytes;
      continue;
    }
    (kind == ir::InputKind::kParam ? m.params : kind == ir::InputKind::kState ? m.states : m.other_inputs) += bytes;
    if (!p.split[k] && p.shadow[k] >= 0) m.shadows += p.Bytes(p.shadow[k]);
  }
  m.arena = p.arena_bytes;
  m.total = m.params + m.shadows + m.states + m.other_inputs + m.arena;
  return m;
}

absl::Status CheckDeviceMemory(const DeviceMemory& need, int64_t free_bytes) {
  if (need.total <= free_bytes) return absl::OkStatus();
  auto gib = [](int64_t b) { return absl::StrFormat("%.2f", b / double(1 << 30)); };
  return absl::ResourceExhaustedError(absl::StrCat(
      "device memory: the training step needs ", gib(need.total), " GiB (parameters ", gib(need.params),
      ", bf16 shadows ", gib(need.shadows), ", optimizer state ", gib(need.states), ", arena ", gib(need.arena),
      ") and the GPU has ", gib(free_bytes), " GiB free; less is needed with train.memory: lean, "
      "train.offload_optimizer_state, train.activation_checkpointing or a smaller train.batch_size "
      "(loom compile JOB.yaml --dump=cuda prints each one's figures)"));
}

int64_t CudaPlan::Bytes(int v) const {
  return NumElements(metas[v].shape) * static_cast<int64_t>(DTypeSize(metas[v].dtype));
}

std::string CudaPlan::Describe() const {
  std::string s;
  auto vals = [&](const std::vector<int>& vs) {
    std::vector<std::string> p;
    for (int v : vs) p.push_back(absl::StrCat("%", v, ":", DTypeName(metas[v].dtype)));
    return absl::StrJoin(p, ",");
  };
  for (size_t i = 0; i < launches.size(); ++i) {
    const Launch& l = launches[i];
    absl::StrAppend(&s, i, ": ", LaunchKindName(l.kind), " ", l.op);
    if (l.kind == LaunchKind::kGemm) {
      const GemmPlan& m = l.gemm;
      absl::StrAppend(&s, " ", DTypeName(m.ab_dtype), "->", DTypeName(m.d_dtype), " m=", m.m, " n=", m.n,
                      " k=", m.k, " tA=", m.trans_a, " tB=", m.trans_b, " epi=", GemmEpilogueName(m.epilogue),
                      m.accumulate ? " acc" : "");
      if (m.batch > 1) absl::StrAppend(&s, " batch=", m.batch);
    }
    absl::StrAppend(&s, " (", vals(l.inputs), ") -> (", vals(l.outputs), ")");
    if (!l.attn.empty()) {
      std::vector<std::string> vs;
      for (const AttnView& a : l.attn)
        vs.push_back(absl::StrCat("%", a.value, "+", a.offset, "[", absl::StrJoin(a.strides, ","), "]"));
      absl::StrAppend(&s, " views ", absl::StrJoin(vs, " "));
    }
    int64_t bytes = 0;
    for (int v : l.inputs) bytes += Bytes(v);
    for (int v : l.outputs) bytes += Bytes(v);
    absl::StrAppend(&s, " ", bytes, "B\n");
  }
  absl::StrAppend(&s, "arena ", arena_bytes, " bytes (live bound ", live_bytes_bound, ")\n");
  return s;
}

}  // namespace loom::compiler::cuda
