// PlanCuda: storage dtypes, launch list with pattern fusions, arena plan.
// See plan.h for the contract.
#include "compiler/cuda/plan.h"

#include <algorithm>
#include <functional>
#include <map>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status.h"

namespace loom::compiler::cuda {
namespace {

int64_t RoundUp(int64_t x, int64_t a) { return (x + a - 1) / a * a; }

int64_t Prod(const Shape& s, size_t lo, size_t hi) {
  int64_t p = 1;
  for (size_t i = lo; i < hi; ++i) p *= s[i];
  return p;
}

std::vector<int> Producers(const Graph& g) {
  std::vector<int> prod(g.values().size(), -1);
  for (size_t i = 0; i < g.nodes().size(); ++i)
    for (int v : g.nodes()[i].outputs) prod[v] = static_cast<int>(i);
  return prod;
}

std::vector<std::vector<int>> Users(const Graph& g) {
  std::vector<std::vector<int>> users(g.values().size());
  for (size_t i = 0; i < g.nodes().size(); ++i)
    for (int v : g.nodes()[i].inputs) {
      auto& u = users[v];
      if (u.empty() || u.back() != static_cast<int>(i)) u.push_back(static_cast<int>(i));
    }
  return users;
}

std::vector<int64_t> Contig(absl::Span<const int64_t> shape) {
  std::vector<int64_t> st(shape.size(), 1);
  for (int i = static_cast<int>(shape.size()) - 2; i >= 0; --i) st[i] = st[i + 1] * shape[i + 1];
  return st;
}

int64_t NormAxis(int64_t axis, size_t rank) { return axis < 0 ? axis + static_cast<int64_t>(rank) : axis; }

std::vector<int64_t> Broadcast(absl::Span<const int64_t> in, absl::Span<const int64_t> out) {
  std::vector<int64_t> st(out.size(), 0);
  const std::vector<int64_t> c = Contig(in);
  const size_t lead = out.size() - in.size();
  for (size_t i = 0; i < in.size(); ++i) st[lead + i] = in[i] == 1 && out[lead + i] != 1 ? 0 : c[i];
  return st;
}

absl::Status Unsupported(const Graph& g, int node, absl::string_view why) {
  return absl::UnimplementedError(absl::StrCat("cuda lowering: op '", g.nodes()[node].op, "' (node ", node,
                                               "): ", why));
}

// add -> layernorm (PlanOptions::add_layernorm): node i is an `add`, or a fused
// node made of adds only, of 2..4 float operands that are [.., C] and
// broadcast only over leading dims, whose output is read as x by a layernorm
// with weight and bias of the same storage dtype policy. Returns that
// layernorm's node, or -1.
int AddLayerNormUser(const Graph& g, int i, const std::vector<std::vector<int>>& users,
                     const std::vector<int>& prod, const std::vector<TensorMeta>& metas) {
  const Node& n = g.nodes()[i];
  if (n.outputs.size() != 1 || n.inputs.size() < 2 || n.inputs.size() > 4) return -1;
  if (n.op == kFusedOp) {
    if (!n.subgraph || n.subgraph->outputs().size() != 1) return -1;
    for (const Node& b : n.subgraph->nodes())
      if (b.op != "add") return -1;
  } else if (n.op != "add") {
    return -1;
  }
  const int h = n.outputs[0];
  const Shape& os = g.meta(h).shape;
  const DType dt = metas[h].dtype;
  if (os.empty() || (dt != DType::kF32 && dt != DType::kBF16)) return -1;
  for (int v : n.inputs) {
    const Shape& s = g.meta(v).shape;
    size_t lead = 0;
    while (lead < s.size() && s[lead] == 1 && s.size() - lead > 1) ++lead;
    if (s.empty() || s.size() - lead > os.size() || !std::equal(s.begin() + lead, s.end(), os.end() - (s.size() - lead)))
      return -1;
    if (metas[v].dtype != DType::kF32 && metas[v].dtype != DType::kBF16) return -1;
  }
  for (int j : users[h]) {
    const Node& u = g.nodes()[j];
    if (u.op != "layernorm" || u.inputs.size() != 3 || u.inputs[0] != h || u.inputs[1] == h || u.inputs[2] == h)
      continue;
    if (prod[u.inputs[1]] >= i || prod[u.inputs[2]] >= i) continue;
    if (metas[u.outputs[0]].dtype != dt || metas[u.outputs[1]].dtype != DType::kF32 ||
        metas[u.outputs[2]].dtype != DType::kF32)
      continue;
    return j;
  }
  return -1;
}

}  // namespace

std::optional<std::vector<int64_t>> ViewStrides(absl::Span<const int64_t> old_shape,
                                                absl::Span<const int64_t> old_strides,
                                                absl::Span<const int64_t> shape) {
  std::vector<int64_t> st(shape.size(), 0);
  int64_t numel = 1;
  for (int64_t d : old_shape) numel *= d;
  if (numel == 0 || old_shape.empty()) {
    if (NumElements(shape) != numel) return std::nullopt;
    return Contig(shape);
  }
  int view_d = static_cast<int>(shape.size()) - 1;
  int64_t chunk_base = old_strides.back(), tensor_numel = 1, view_numel = 1;
  for (int td = static_cast<int>(old_shape.size()) - 1; td >= 0; --td) {
    tensor_numel *= old_shape[td];
    if (td == 0 || (old_shape[td - 1] != 1 && old_strides[td - 1] != tensor_numel * chunk_base)) {
      while (view_d >= 0 && (view_numel < tensor_numel || shape[view_d] == 1)) {
        st[view_d] = view_numel * chunk_base;
        view_numel *= shape[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return std::nullopt;
      if (td > 0) {
        chunk_base = old_strides[td - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  if (view_d != -1) return std::nullopt;
  return st;
}

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
  }
  return "?";
}

const char* GemmEpilogueName(GemmEpilogue e) {
  switch (e) {
    case GemmEpilogue::kNone: return "none";
    case GemmEpilogue::kBias: return "bias";
    case GemmEpilogue::kBiasGeluAux: return "bias_gelu_aux";
    case GemmEpilogue::kDGelu: return "dgelu";
    case GemmEpilogue::kDGeluBgrad: return "dgelu_bgrad";
  }
  return "?";
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
                      " k=", m.k, " tA=", m.trans_a, " tB=", m.trans_b, " epi=", GemmEpilogueName(m.epilogue));
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

std::vector<DType> StorageDTypes(const Graph& g, bool bf16) {
  const size_t nv = g.values().size();
  std::vector<DType> st(nv);
  for (size_t v = 0; v < nv; ++v) st[v] = g.meta(v).dtype;
  if (!bf16) return st;
  // Parameter gradients: adamw's grad operand, and (through adds) what sums into it.
  const std::vector<int> prod = Producers(g);
  std::vector<bool> pgrad(nv, false);
  std::vector<int> work;
  for (const Node& n : g.nodes())
    if (n.op == "adamw" && n.inputs.size() > 1 && !pgrad[n.inputs[1]]) {
      pgrad[n.inputs[1]] = true;
      work.push_back(n.inputs[1]);
    }
  while (!work.empty()) {
    int v = work.back();
    work.pop_back();
    if (prod[v] < 0) continue;
    const Node& n = g.nodes()[prod[v]];
    if (n.op != "add") continue;
    for (int u : n.inputs)
      if (!pgrad[u] && IsFloating(g.meta(u).dtype) && prod[u] >= 0) {
        pgrad[u] = true;
        work.push_back(u);
      }
  }
  for (const Node& n : g.nodes()) {
    for (size_t k = 0; k < n.outputs.size(); ++k) {
      const int v = n.outputs[k];
      const TensorMeta& m = g.meta(v);
      if (m.dtype != DType::kF32) continue;  // integers, f64, already 16-bit: unchanged
      if (n.op == "reshape") {
        st[v] = st[n.inputs[0]];
        continue;
      }
      const std::string& op = n.op;
      const bool keep32 =
          m.shape.empty() || pgrad[v] || op == "grad_norm" || op == "adamw" || op == "embedding_backward" ||
          op == "cross_entropy" || ((op == "layernorm" || op == "rmsnorm") && k > 0) ||
          (op == "sdpa" && k == 1) || ((op == "layernorm_backward" || op == "rmsnorm_backward") && k > 0);
      st[v] = keep32 ? DType::kF32 : DType::kBF16;
    }
  }
  return st;
}

absl::StatusOr<CudaPlan> PlanCuda(const Graph& g, bool bf16, const PlanOptions& options) {
  CudaPlan p;
  p.bf16 = bf16;
  const std::vector<DType> st = StorageDTypes(g, bf16);
  const int nv = static_cast<int>(g.values().size());
  for (int v = 0; v < nv; ++v) p.metas.push_back({st[v], g.meta(v).shape});
  p.root.assign(nv, -1);
  p.input_of.assign(nv, -1);
  for (size_t k = 0; k < g.inputs().size(); ++k) {
    const int v = g.inputs()[k].value;
    p.root[v] = v;
    p.input_of[v] = static_cast<int>(k);
  }
  p.shadow.assign(g.inputs().size(), -1);
  std::vector<bool> is_shadow(nv, false);
  const std::vector<int> prod = Producers(g);
  const std::vector<std::vector<int>> users = Users(g);
  std::vector<bool> is_output(nv, false);
  for (const GraphOutput& o : g.outputs()) is_output[o.value] = true;
  const int nn = static_cast<int>(g.nodes().size());
  std::vector<bool> done(nn, false);
  const DType cdt = bf16 ? DType::kBF16 : DType::kF32;

  auto new_value = [&](TensorMeta m) {
    const int id = static_cast<int>(p.metas.size());
    p.metas.push_back(std::move(m));
    p.root.push_back(id);
    p.input_of.push_back(-1);
    is_shadow.push_back(false);
    return id;
  };
  // `v` in storage dtype `dt`: itself, a param's bf16 shadow, or a cast.
  auto want = [&](int v, DType dt) -> int {
    if (p.metas[v].dtype == dt) return v;
    const int k = p.input_of[v];
    if (k >= 0 && p.root[v] == g.inputs()[k].value && g.inputs()[k].kind == InputKind::kParam &&
        dt == DType::kBF16 && p.metas[v].dtype == DType::kF32 && v == g.inputs()[k].value) {
      if (p.shadow[k] < 0) {
        p.shadow[k] = new_value({DType::kBF16, p.metas[v].shape});
        is_shadow[p.shadow[k]] = true;
      }
      return p.shadow[k];
    }
    const int t = new_value({dt, p.metas[v].shape});
    Launch c;
    c.kind = LaunchKind::kCopy;
    c.op = "cast";
    c.inputs = {v};
    c.outputs = {t};
    c.copies = {CopyGeom{p.metas[v].shape, 0, Contig(p.metas[v].shape), 0, {}}};
    p.launches.push_back(std::move(c));
    return t;
  };
  auto available_before = [&](int v, int node) { return prod[v] < node; };  // inputs: prod -1
  auto single_user = [&](int v) -> int {
    if (is_output[v] || users[v].size() != 1) return -1;
    const Node& u = g.nodes()[users[v][0]];
    int uses = 0;
    for (int x : u.inputs) uses += x == v;
    return uses == 1 ? users[v][0] : -1;
  };

  // ---- Strided flash-attention operands (options.attn_views) ----------------
  // A flash-eligible sdpa / sdpa_backward node: the executor runs flash
  // attention (bf16, D 64/128, no mask or dropout), which takes strides.
  auto flash_node = [&](int u) {
    const Node& an = g.nodes()[u];
    const bool fwd = an.op == "sdpa" && an.inputs.size() == 3;
    const bool bwd = an.op == "sdpa_backward" && an.inputs.size() == 6;
    if (!(fwd || bwd) || an.attrs.GetFloat("dropout_p", 0.0) != 0.0) return false;
    const Shape& os = g.meta(an.outputs[0]).shape;
    if (os.size() != 4 || (os[3] != 64 && os[3] != 128) || st[an.outputs[0]] != DType::kBF16) return false;
    for (int v : an.inputs)
      if (g.meta(v).shape.size() == 4 && st[v] != DType::kBF16) return false;
    if (bwd && (st[an.outputs[1]] != DType::kBF16 || st[an.outputs[2]] != DType::kBF16 ||
                st[an.inputs[5]] != DType::kF32))
      return false;
    return true;
  };
  const bool attn_views = options.attn_views && bf16;
  // v is read only by flash nodes, as q, k, v or dout (not as o or lse).
  auto feeds_flash_only = [&](int v) {
    if (is_output[v] || users[v].empty()) return false;
    for (int u : users[v]) {
      if (!flash_node(u)) return false;
      const Node& an = g.nodes()[u];
      for (size_t k = 4; k < an.inputs.size() && an.op == "sdpa_backward"; ++k)
        if (an.inputs[k] == v) return false;
    }
    return true;
  };
  // Flash's layout rules: the last dim contiguous, 16-byte aligned rows.
  auto flash_strides_ok = [](int64_t offset, const std::vector<int64_t>& s, int64_t d) {
    if (s.size() != 4 || s[3] != 1 || offset % 8 != 0 || s[2] < d) return false;
    for (int i = 0; i < 3; ++i)
      if (s[i] <= 0 || s[i] % 8 != 0) return false;
    return true;
  };
  // Values read through a strided window (never materialised, or o stored
  // [B, T, H, D]); anything else a flash node reads is contiguous.
  std::map<int, AttnView> attn_view;
  auto view_of = [&](int v) {
    auto it = attn_view.find(v);
    if (it != attn_view.end()) return it->second;
    return AttnView{v, g.meta(v).shape, 0, Contig(g.meta(v).shape)};
  };

  // Views folded into a later concat: reshape output -> (geometry, source).
  std::map<int, CopyGeom> deferred;
  std::map<int, int> deferred_src;

  // AdamW grouping.
  std::vector<int> adamw_nodes;
  for (int i = 0; i < nn; ++i)
    if (g.nodes()[i].op == "adamw") adamw_nodes.push_back(i);
  const int last_adamw = adamw_nodes.empty() ? -1 : adamw_nodes.back();

  size_t rooted = 0;  // launches whose outputs have their root set
  for (int i = 0; i < nn; ++i) {
    for (; rooted < p.launches.size(); ++rooted)
      for (int v : p.launches[rooted].outputs)
        if (p.root[v] < 0) p.root[v] = v;
    if (done[i]) continue;
    const Node& n = g.nodes()[i];
    const std::string& op = n.op;
    for (int v : n.outputs)
      if (g.meta(v).dtype == DType::kF64) return Unsupported(g, i, "f64 values are not supported on CUDA");
    Launch L;
    L.op = op;
    L.node = i;
    L.nodes = {i};
    L.attrs = n.attrs;
    const ops::OpDef* def = op == kFusedOp ? nullptr : ops::OpRegistry::Global().Find(op);

    if (op == "reshape") {
      const int in = n.inputs[0], out = n.outputs[0];
      if (p.root[in] < 0) return Unsupported(g, i, "input is not materialised");
      p.root[out] = p.root[in];
      p.input_of[out] = p.input_of[in];
      p.metas[out].dtype = p.metas[in].dtype;
      continue;
    }
    if (op == "matmul") {
      const int a = n.inputs[0], b = n.inputs[1], out = n.outputs[0];
      const Shape& A = g.meta(a).shape;
      const Shape& B = g.meta(b).shape;
      const bool ta = n.attrs.GetBool("trans_a", false), tb = n.attrs.GetBool("trans_b", false);
      const size_t ra = A.size(), rb = B.size();
      GemmPlan& m = L.gemm;
      m.ab_dtype = cdt;
      m.trans_a = ta;
      m.trans_b = tb;
      int d = out;
      const int su = single_user(out);
      if (ta && !tb && ra >= 3 && ra == rb && std::equal(A.begin(), A.end() - 2, B.begin()) && su >= 0 &&
          g.nodes()[su].op == "sum_to" &&
          g.meta(g.nodes()[su].outputs[0]).shape == Shape{A[ra - 1], B[rb - 1]}) {
        m.weight_grad = true;
        m.m = A[ra - 1];
        m.n = B[rb - 1];
        m.k = Prod(A, 0, ra - 1);
        d = g.nodes()[su].outputs[0];
        done[su] = true;
        L.nodes.push_back(su);
        L.op = "matmul+sum_to";
      } else if (rb == 2 && !ta && ra >= 2) {
        m.m = Prod(A, 0, ra - 1);
        m.k = A[ra - 1];
        m.n = tb ? B[0] : B[1];
      } else if (ra >= 2 && rb >= 2 && (ra == 2 || rb == 2 || (ra == rb && std::equal(A.begin(), A.end() - 2, B.begin())))) {
        const Shape& O = g.meta(out).shape;
        m.m = O[O.size() - 2];
        m.n = O[O.size() - 1];
        m.k = ta ? A[ra - 2] : A[ra - 1];
        m.batch = Prod(O, 0, O.size() - 2);
        m.stride_a = ra == 2 ? 0 : A[ra - 2] * A[ra - 1];
        m.stride_b = rb == 2 ? 0 : B[rb - 2] * B[rb - 1];
        m.stride_d = m.m * m.n;
      } else {
        return Unsupported(g, i, absl::StrCat("operand shapes ", ShapeToString(A), " x ", ShapeToString(B)));
      }
      std::vector<int> extra_in;
      std::vector<int> outs = {d};
      std::pair<int, int> bgrad_cast = {-1, -1};  // (bf16 temp, f32 sum_to output)
      if (!m.weight_grad && m.batch == 1 && su >= 0) {
        const Node& u = g.nodes()[su];
        if (u.op == "add" && st[u.outputs[0]] == cdt && g.meta(u.outputs[0]).shape == g.meta(out).shape) {
          const int bias = u.inputs[0] == out ? u.inputs[1] : u.inputs[0];
          if (g.meta(bias).shape == Shape{m.n} && available_before(bias, i) && p.root[bias] >= 0) {
            // Bias (+ GELU with aux) epilogue.
            const int pre = u.outputs[0];
            int gelu = -1;
            for (int w : users[pre]) {
              const Node& gn = g.nodes()[w];
              if (gn.op == "gelu" && gn.attrs.GetString("approximate", "none") == "tanh" && gelu < 0 &&
                  st[gn.outputs[0]] == cdt)
                gelu = w;
            }
            done[su] = true;
            L.nodes.push_back(su);
            extra_in.push_back(bias);
            if (gelu >= 0 && m.n % 8 == 0) {
              m.epilogue = GemmEpilogue::kBiasGeluAux;
              done[gelu] = true;
              L.nodes.push_back(gelu);
              outs = {g.nodes()[gelu].outputs[0], pre};
              L.op = "matmul+add+gelu";
            } else {
              m.epilogue = GemmEpilogue::kBias;
              outs = {pre};
              L.op = "matmul+add";
            }
          }
        } else if (u.op == "gelu_backward" && u.inputs[0] == out && u.inputs[1] != out &&
                   u.attrs.GetString("approximate", "none") == "tanh" && m.n % 8 == 0 &&
                   st[u.outputs[0]] == cdt && st[u.inputs[1]] == cdt && available_before(u.inputs[1], i) &&
                   p.root[u.inputs[1]] >= 0 && g.meta(u.inputs[1]).shape == g.meta(out).shape) {
          m.epilogue = GemmEpilogue::kDGelu;
          done[su] = true;
          L.nodes.push_back(su);
          extra_in.push_back(u.inputs[1]);
          outs = {u.outputs[0]};
          L.op = "matmul+gelu_backward";
          // The bias gradient (sum_to of the result over its rows) in the same GEMM.
          for (int w : options.bias_grad_in_gemm ? users[u.outputs[0]] : std::vector<int>{}) {
            const Node& sn = g.nodes()[w];
            if (sn.op != "sum_to" || done[w] || g.meta(sn.outputs[0]).shape != Shape{m.n}) continue;
            m.epilogue = GemmEpilogue::kDGeluBgrad;
            done[w] = true;
            L.nodes.push_back(w);
            L.op = "matmul+gelu_backward+sum_to";
            const int bo = sn.outputs[0];
            if (p.metas[bo].dtype == cdt) {
              outs.push_back(bo);
            } else {
              const int tmp = new_value({cdt, Shape{m.n}});
              outs.push_back(tmp);
              bgrad_cast = {tmp, bo};
            }
            break;
          }
        }
      }
      m.d_dtype = p.metas[outs[0]].dtype;
      if (m.d_dtype != cdt && !(cdt == DType::kBF16 && m.d_dtype == DType::kF32 && m.epilogue == GemmEpilogue::kNone))
        return Unsupported(g, i, absl::StrCat("output dtype ", DTypeName(m.d_dtype)));
      L.kind = LaunchKind::kGemm;
      L.inputs = {want(a, cdt), want(b, cdt)};
      for (int x : extra_in) L.inputs.push_back(want(x, cdt));
      L.outputs = outs;
      p.launches.push_back(std::move(L));
      if (bgrad_cast.first >= 0) {
        Launch c;
        c.kind = LaunchKind::kCopy;
        c.op = "cast";
        c.inputs = {bgrad_cast.first};
        c.outputs = {bgrad_cast.second};
        c.copies = {CopyGeom{Shape{m.n}, 0, {1}, 0, {}}};
        p.launches.push_back(std::move(c));
      }
      continue;
    }
    if (op == "adamw") {
      if (i != last_adamw) continue;  // emitted once, at the last adamw node
      const Node& n0 = g.nodes()[adamw_nodes[0]];
      L.kind = LaunchKind::kAdamW;
      L.nodes = adamw_nodes;
      L.attrs = n0.attrs;
      for (int j : adamw_nodes) {
        const Node& an = g.nodes()[j];
        for (int s = 4; s < 7; ++s)
          if (an.inputs[s] != n0.inputs[s])
            return Unsupported(g, j, "every adamw node must share grad_norm, lr and step");
        for (const char* key : {"beta1", "beta2", "eps", "max_norm"})
          if (an.attrs.GetFloat(key, -1) != n0.attrs.GetFloat(key, -1))
            return Unsupported(g, j, absl::StrCat("adamw nodes differ in attr ", key));
        for (int s : {0, 2, 3}) {
          const int v = an.inputs[s];
          if (p.input_of[v] < 0 || p.root[v] != v || p.metas[v].dtype != DType::kF32)
            return Unsupported(g, j, "param, m and v must be f32 graph inputs");
          for (int u : users[v])
            if (u > last_adamw) return Unsupported(g, u, "reads a parameter after its adamw update");
          const int o = an.outputs[s == 0 ? 0 : s == 2 ? 1 : 2];
          p.root[o] = v;
          p.input_of[o] = p.input_of[v];
        }
        const DType gdt = p.metas[an.inputs[1]].dtype;
        L.inputs.push_back(an.inputs[0]);
        L.inputs.push_back(gdt == DType::kF32 || gdt == DType::kBF16 ? an.inputs[1] : want(an.inputs[1], DType::kF32));
        L.inputs.push_back(an.inputs[2]);
        L.inputs.push_back(an.inputs[3]);
      }
      L.inputs.push_back(want(n0.inputs[4], DType::kF32));
      L.inputs.push_back(want(n0.inputs[5], DType::kF32));
      const DType sdt = p.metas[n0.inputs[6]].dtype;
      L.inputs.push_back(sdt == DType::kF32 || sdt == DType::kI32 || sdt == DType::kI64 ? n0.inputs[6]
                                                                                         : want(n0.inputs[6], DType::kF32));
      p.launches.push_back(std::move(L));
      continue;
    }

    const int out0 = n.outputs.empty() ? -1 : n.outputs[0];
    L.outputs = n.outputs;
    if (op == kFusedOp || (def && def->elementwise && n.outputs.size() == 1)) {
      L.kind = LaunchKind::kPointwise;
      L.inputs = n.inputs;
      // add -> layernorm: one generated launch (codegen/rowwise.h) writes the
      // sum (the next residual) and the norm; emitted here, at the add.
      if (const int j = options.add_layernorm ? AddLayerNormUser(g, i, users, prod, p.metas) : -1; j >= 0) {
        const Node& ln = g.nodes()[j];
        L.kind = LaunchKind::kLayerNorm;
        L.op = absl::StrCat(op, "+layernorm");
        L.node = j;
        L.nodes = {i, j};
        L.attrs = ln.attrs;
        L.inputs.push_back(want(ln.inputs[1], DType::kF32));
        L.inputs.push_back(want(ln.inputs[2], DType::kF32));
        L.outputs.insert(L.outputs.end(), ln.outputs.begin(), ln.outputs.end());
        done[j] = true;
      }
    } else if (op == "permute" || op == "slice" || op == "cast" || op == "broadcast_to") {
      const Shape& is = g.meta(n.inputs[0]).shape;
      const Shape& os = g.meta(out0).shape;
      CopyGeom cg{os, 0, Contig(is), 0, {}};
      if (op == "permute") {
        // Read only by flash attention (dout, or q/k/v in other graphs): a view.
        if (attn_views && feeds_flash_only(out0) && p.root[n.inputs[0]] >= 0 && !attn_view.count(n.inputs[0]) &&
            p.metas[n.inputs[0]].dtype == DType::kBF16) {
          std::vector<int64_t> ps;
          for (int64_t d : n.attrs.GetInts("dims")) ps.push_back(cg.src_strides[NormAxis(d, is.size())]);
          if (flash_strides_ok(0, ps, os.back())) {
            attn_view[out0] = AttnView{n.inputs[0], os, 0, ps};
            continue;
          }
        }
        // Deferred into a later concat: permute -> reshape -> concat becomes
        // one copy from the permute's source into the concat's window.
        const int r = single_user(out0);
        const int c = r >= 0 && g.nodes()[r].op == "reshape" ? single_user(g.nodes()[r].outputs[0]) : -1;
        if (options.compose_copies && c >= 0 && g.nodes()[c].op == "concat") {
          const Shape& cs = g.meta(g.nodes()[c].outputs[0]).shape;
          const int64_t ax = NormAxis(g.nodes()[c].attrs.GetInt("axis"), cs.size());
          auto st = ViewStrides(g.meta(g.nodes()[r].outputs[0]).shape, Contig(cs), os);
          if (st && ax < static_cast<int64_t>(cs.size())) {
            std::vector<int64_t> src;
            for (int64_t d : n.attrs.GetInts("dims")) src.push_back(cg.src_strides[NormAxis(d, is.size())]);
            deferred[g.nodes()[r].outputs[0]] = CopyGeom{os, 0, src, 0, *st};
            deferred_src[g.nodes()[r].outputs[0]] = n.inputs[0];
            done[r] = true;
            continue;
          }
        }
        std::vector<int64_t> ps;
        for (int64_t d : n.attrs.GetInts("dims")) ps.push_back(cg.src_strides[NormAxis(d, is.size())]);
        cg.src_strides = ps;
      } else if (op == "slice") {
        const int64_t ax = NormAxis(n.attrs.GetInt("axis"), is.size());
        int64_t start = n.attrs.GetInt("start");
        if (start < 0) start += is[ax];
        cg.src_offset = start * cg.src_strides[ax];
        // slice -> reshape -> permute (q, k, v out of the fused qkv): one copy.
        const int r = single_user(out0);
        const int pm = r >= 0 && g.nodes()[r].op == "reshape" ? single_user(g.nodes()[r].outputs[0]) : -1;
        if (options.compose_copies && pm >= 0 && g.nodes()[pm].op == "permute") {
          const Shape& rs = g.meta(g.nodes()[r].outputs[0]).shape;
          auto st = ViewStrides(os, cg.src_strides, rs);
          if (st) {
            std::vector<int64_t> ps;
            for (int64_t d : g.nodes()[pm].attrs.GetInts("dims")) ps.push_back((*st)[NormAxis(d, rs.size())]);
            cg.shape = g.meta(g.nodes()[pm].outputs[0]).shape;
            const int pm_out = g.nodes()[pm].outputs[0];
            if (attn_views && feeds_flash_only(pm_out) && p.metas[n.inputs[0]].dtype == DType::kBF16 &&
                p.root[n.inputs[0]] >= 0 && !attn_view.count(n.inputs[0]) &&
                flash_strides_ok(cg.src_offset, ps, cg.shape.back())) {
              // q/k/v read by flash straight out of the fused qkv output.
              attn_view[pm_out] = AttnView{n.inputs[0], cg.shape, cg.src_offset, ps};
              done[r] = done[pm] = true;
              continue;
            }
            cg.src_strides = ps;
            done[r] = done[pm] = true;
            L.nodes = {i, r, pm};
            L.op = "slice+reshape+permute";
            L.outputs = {g.nodes()[pm].outputs[0]};
          }
        }
      } else if (op == "broadcast_to") {
        cg.src_strides = Broadcast(is, os);
      }
      L.kind = LaunchKind::kCopy;
      L.inputs = n.inputs;
      L.copies = {cg};
    } else if (op == "slice_backward") {
      const Shape& os = g.meta(out0).shape;
      const std::vector<int64_t> ost = Contig(os);
      const int64_t ax = NormAxis(n.attrs.GetInt("axis"), os.size());
      int64_t start = n.attrs.GetInt("start");
      if (start < 0) start += os[ax];
      const Shape& is = g.meta(n.inputs[0]).shape;
      L.kind = LaunchKind::kSliceBackward;
      L.inputs = n.inputs;
      L.copies = {CopyGeom{is, 0, Contig(is), start * ost[ax], ost}};
    } else if (op == "concat") {
      const Shape& os = g.meta(out0).shape;
      const std::vector<int64_t> ost = Contig(os);
      const int64_t ax = NormAxis(n.attrs.GetInt("axis"), os.size());
      L.kind = LaunchKind::kConcat;
      int64_t pos = 0;
      for (int v : n.inputs) {
        auto it = deferred.find(v);
        if (it != deferred.end()) {
          CopyGeom cg = it->second;
          cg.dst_offset = pos * ost[ax];
          L.inputs.push_back(deferred_src.at(v));
          L.copies.push_back(cg);
          L.op = "permute+reshape+concat";
        } else {
          if (p.root[v] < 0) return Unsupported(g, i, "input is not materialised");
          const Shape& is = g.meta(v).shape;
          L.inputs.push_back(v);
          L.copies.push_back(CopyGeom{is, 0, Contig(is), pos * ost[ax], ost});
        }
        pos += g.meta(v).shape[ax];
      }
    } else if (op == "fill") {
      L.kind = LaunchKind::kFill;
    } else if (op == "embedding") {
      if (!IsFloating(p.metas[n.inputs[0]].dtype)) return Unsupported(g, i, "weight must be floating");
      L.kind = LaunchKind::kEmbedding;
      L.inputs = n.inputs;
    } else if (op == "embedding_backward") {
      if (p.metas[out0].dtype != DType::kF32) return Unsupported(g, i, "output must be f32");
      L.kind = LaunchKind::kEmbeddingBackward;
      L.inputs = n.inputs;
    } else if (op == "sum_to") {
      const Shape& in = g.meta(n.inputs[0]).shape;
      const Shape& os = g.meta(out0).shape;
      if (os.size() > in.size() || !std::equal(os.begin(), os.end(), in.end() - os.size()))
        return Unsupported(g, i, absl::StrCat("only sums over leading dims are supported (", ShapeToString(in),
                                              " -> ", ShapeToString(os), ")"));
      L.kind = LaunchKind::kSumTo;
      L.inputs = n.inputs;
    } else if (op == "layernorm") {
      if (n.inputs.size() != 3) return Unsupported(g, i, "layernorm without bias");
      const DType dt = p.metas[out0].dtype;
      L.kind = LaunchKind::kLayerNorm;
      L.inputs = {want(n.inputs[0], dt), want(n.inputs[1], DType::kF32), want(n.inputs[2], DType::kF32)};
      if (p.metas[n.outputs[1]].dtype != DType::kF32 || p.metas[n.outputs[2]].dtype != DType::kF32)
        return Unsupported(g, i, "mean/rstd must be f32");
    } else if (op == "layernorm_backward") {
      const DType dt = p.metas[out0].dtype;
      L.kind = LaunchKind::kLayerNormBackward;
      L.inputs = {want(n.inputs[0], dt), want(n.inputs[1], dt), want(n.inputs[2], DType::kF32),
                  want(n.inputs[3], DType::kF32), want(n.inputs[4], DType::kF32)};
      if (p.metas[n.outputs[1]].dtype != DType::kF32 || p.metas[n.outputs[2]].dtype != DType::kF32)
        return Unsupported(g, i, "dweight/dbias must be f32");
      // layernorm_backward -> add(other, dx): the kernel adds the residual
      // branch's gradient itself (dresidual) and writes the sum.
      const int su = single_user(out0);
      if (options.fold_residual_grad && su >= 0 && g.nodes()[su].op == "add") {
        const Node& a = g.nodes()[su];
        const int other = a.inputs[0] == out0 ? a.inputs[1] : a.inputs[0];
        if (other != out0 && g.meta(other).shape == g.meta(out0).shape && p.metas[other].dtype == dt &&
            p.metas[a.outputs[0]].dtype == dt && g.meta(a.outputs[0]).shape == g.meta(out0).shape &&
            available_before(other, i) && p.root[other] >= 0) {
          L.inputs.push_back(other);
          L.outputs[0] = a.outputs[0];
          L.nodes.push_back(su);
          L.op = "layernorm_backward+add";
          done[su] = true;
        }
      }
      // The column sums of dx (a linear's bias gradient) in the same kernel:
      // outputs {dx, dweight, dbias, dx_colsum}.
      if (options.bias_grad_in_layernorm) {
        const int dxv = L.outputs[0];
        const Shape& ds = g.meta(dxv).shape;
        for (int u : users[dxv]) {
          const Node& sn = g.nodes()[u];
          if (done[u] || sn.op != "sum_to" || sn.inputs[0] != dxv || ds.empty()) continue;
          const int so = sn.outputs[0];
          if (g.meta(so).shape != Shape{ds.back()} || p.metas[so].dtype != DType::kF32) continue;
          L.outputs.push_back(so);
          L.nodes.push_back(u);
          L.op += "+sum_to";
          done[u] = true;
          break;
        }
      }
    } else if (op == "rmsnorm") {
      const DType dt = p.metas[out0].dtype;
      if (p.metas[n.outputs[1]].dtype != DType::kF32) return Unsupported(g, i, "rstd must be f32");
      L.kind = LaunchKind::kRmsNorm;
      L.inputs = {want(n.inputs[0], dt), want(n.inputs[1], DType::kF32)};
    } else if (op == "rmsnorm_backward") {
      const DType dt = p.metas[out0].dtype;
      if (p.metas[n.outputs[1]].dtype != DType::kF32) return Unsupported(g, i, "dweight must be f32");
      L.kind = LaunchKind::kRmsNormBackward;
      L.inputs = {want(n.inputs[0], dt), want(n.inputs[1], dt), want(n.inputs[2], DType::kF32),
                  want(n.inputs[3], DType::kF32)};
    } else if (op == "rope") {
      if (g.meta(out0).shape.size() != 4 || g.meta(out0).shape[3] % 2 != 0)
        return Unsupported(g, i, "expected x[B, T, H, D] with even D");
      L.kind = LaunchKind::kRope;
      L.inputs = {want(n.inputs[0], p.metas[out0].dtype)};
    } else if (op == "cross_entropy") {
      if (p.metas[n.outputs[0]].dtype != DType::kF32 || p.metas[n.outputs[1]].dtype != DType::kF32)
        return Unsupported(g, i, "loss/lse must be f32");
      L.kind = LaunchKind::kCrossEntropy;
      L.inputs = n.inputs;
    } else if (op == "cross_entropy_backward") {
      L.kind = LaunchKind::kCrossEntropyBackward;
      L.inputs = {want(n.inputs[0], DType::kF32), want(n.inputs[1], p.metas[out0].dtype), n.inputs[2],
                  want(n.inputs[3], DType::kF32)};
    } else if (op == "sdpa" && attn_views && flash_node(i)) {
      L.kind = LaunchKind::kSdpa;
      L.op = "sdpa(views)";
      AttnView o = view_of(out0);
      // o stored [B, T, H, D] when its only readers are one permute to that
      // order (which becomes an alias) and sdpa_backward.
      const Shape& oshape = g.meta(out0).shape;
      int perm = -1;
      bool others_ok = !is_output[out0];
      for (int u : users[out0]) {
        const Node& un = g.nodes()[u];
        if (un.op == "permute" && perm < 0 && un.attrs.GetInts("dims") == std::vector<int64_t>{0, 2, 1, 3} &&
            !is_output[un.outputs[0]])
          perm = u;
        else if (!(un.op == "sdpa_backward" && flash_node(u) && un.inputs[4] == out0 && un.inputs[0] != out0 &&
                   un.inputs[1] != out0 && un.inputs[2] != out0 && un.inputs[3] != out0))
          others_ok = false;
      }
      if (perm >= 0 && others_ok) {
        const int64_t h = oshape[1], t = oshape[2], d = oshape[3];
        o.strides = {t * h * d, d, h * d, 1};
        attn_view[out0] = o;
        const int pout = g.nodes()[perm].outputs[0];
        p.root[out0] = out0;
        p.root[pout] = out0;
        done[perm] = true;
        L.nodes.push_back(perm);
        L.op = "sdpa(views)+permute";
      }
      L.attn = {view_of(n.inputs[0]), view_of(n.inputs[1]), view_of(n.inputs[2]), o};
      L.inputs = {L.attn[0].value, L.attn[1].value, L.attn[2].value};
    } else if (op == "sdpa_backward" && attn_views && flash_node(i)) {
      L.kind = LaunchKind::kSdpaBackward;
      L.op = "sdpa_backward(views)";
      L.attn = {view_of(n.inputs[0]), view_of(n.inputs[1]), view_of(n.inputs[2]), view_of(n.inputs[3]),
                view_of(n.inputs[4])};
      std::vector<AttnView> grads = {view_of(n.outputs[0]), view_of(n.outputs[1]), view_of(n.outputs[2])};
      // dq, dk, dv -> permute -> reshape -> one concat: written straight into
      // their windows of the concat's output.
      int concat = -1;
      std::vector<int> pm(3, -1), rs(3, -1);
      bool direct = options.compose_copies;
      for (int k = 0; k < 3 && direct; ++k) {
        pm[k] = single_user(n.outputs[k]);
        if (pm[k] < 0 || g.nodes()[pm[k]].op != "permute") {
          direct = false;
          break;
        }
        rs[k] = single_user(g.nodes()[pm[k]].outputs[0]);
        if (rs[k] < 0 || g.nodes()[rs[k]].op != "reshape") {
          direct = false;
          break;
        }
        const int c = single_user(g.nodes()[rs[k]].outputs[0]);
        if (c < 0 || g.nodes()[c].op != "concat" || (concat >= 0 && c != concat)) direct = false;
        concat = c;
      }
      if (direct && (g.nodes()[concat].inputs.size() != 3 || st[g.nodes()[concat].outputs[0]] != DType::kBF16))
        direct = false;
      if (direct) {
        const Node& cn = g.nodes()[concat];
        const int cout = cn.outputs[0];
        const Shape& cs = g.meta(cout).shape;
        const std::vector<int64_t> ost = Contig(cs);
        const int64_t ax = NormAxis(cn.attrs.GetInt("axis"), cs.size());
        std::vector<AttnView> into(3);
        int64_t pos = 0;
        for (int v : cn.inputs) {
          int k = 0;
          while (k < 3 && g.nodes()[rs[k]].outputs[0] != v) ++k;
          if (k == 3 || into[k].value >= 0) {
            direct = false;
            break;
          }
          const Shape& ps = g.meta(g.nodes()[pm[k]].outputs[0]).shape;
          auto vs = ViewStrides(g.meta(v).shape, ost, ps);
          const std::vector<int64_t> dims = g.nodes()[pm[k]].attrs.GetInts("dims");
          if (!vs || ax >= static_cast<int64_t>(cs.size()) || dims.size() != 4) {
            direct = false;
            break;
          }
          std::vector<int64_t> gs(4, 0);
          for (size_t j = 0; j < 4; ++j) gs[NormAxis(dims[j], 4)] = (*vs)[j];
          into[k] = AttnView{cout, g.meta(n.outputs[k]).shape, pos * ost[ax], gs};
          if (!flash_strides_ok(into[k].offset, gs, gs.size() == 4 ? ps.back() : 0)) direct = false;
          pos += g.meta(v).shape[ax];
        }
        if (direct) {
          grads = into;
          for (int k = 0; k < 3; ++k) {
            done[pm[k]] = done[rs[k]] = true;
            L.nodes.push_back(pm[k]);
            L.nodes.push_back(rs[k]);
          }
          done[concat] = true;
          L.nodes.push_back(concat);
          L.op = "sdpa_backward(views)+concat";
        }
      }
      if (!direct) {
        // A gradient whose only reader is a permute to [B, T, H, D] is written
        // in that order; the permute becomes an alias (llama: dq/dk/dv -> rope).
        for (int k = 0; k < 3; ++k) {
          const int gout = n.outputs[k];
          const int u = single_user(gout);
          if (u < 0 || g.nodes()[u].op != "permute" || is_output[gout] ||
              g.nodes()[u].attrs.GetInts("dims") != std::vector<int64_t>{0, 2, 1, 3})
            continue;
          const Shape& gs = g.meta(gout).shape;
          grads[k].strides = {gs[2] * gs[1] * gs[3], gs[3], gs[1] * gs[3], 1};
          if (!flash_strides_ok(0, grads[k].strides, gs[3])) {
            grads[k] = view_of(gout);
            continue;
          }
          p.root[gout] = gout;
          p.root[g.nodes()[u].outputs[0]] = gout;
          done[u] = true;
          L.nodes.push_back(u);
          absl::StrAppend(&L.op, "+permute");
        }
      }
      for (const AttnView& gv : grads) L.attn.push_back(gv);
      L.inputs = {L.attn[0].value, L.attn[1].value, L.attn[2].value, L.attn[3].value, L.attn[4].value,
                  n.inputs[5]};
      L.outputs = {grads[0].value, grads[1].value, grads[2].value};
    } else if (op == "sdpa") {
      if (n.inputs.size() != 3) return Unsupported(g, i, "attention masks are not supported");
      if (n.attrs.GetFloat("dropout_p", 0.0) != 0.0) return Unsupported(g, i, "dropout is not supported");
      const DType dt = p.metas[out0].dtype;
      L.kind = LaunchKind::kSdpa;
      L.inputs = {want(n.inputs[0], dt), want(n.inputs[1], dt), want(n.inputs[2], dt)};
    } else if (op == "sdpa_backward") {
      if (n.inputs.size() != 6) return Unsupported(g, i, "attention masks are not supported");
      if (n.attrs.GetFloat("dropout_p", 0.0) != 0.0) return Unsupported(g, i, "dropout is not supported");
      const DType dt = p.metas[out0].dtype;
      if (p.metas[n.outputs[1]].dtype != dt || p.metas[n.outputs[2]].dtype != dt)
        return Unsupported(g, i, "dq, dk, dv must share a dtype");
      L.kind = LaunchKind::kSdpaBackward;
      L.inputs = {want(n.inputs[0], dt), want(n.inputs[1], dt), want(n.inputs[2], dt),
                  want(n.inputs[3], dt), want(n.inputs[4], dt), want(n.inputs[5], DType::kF32)};
    } else if (op == "grad_norm") {
      L.kind = LaunchKind::kGradNorm;
      for (int v : n.inputs) {
        const DType dt = p.metas[v].dtype;
        L.inputs.push_back(dt == DType::kF32 || dt == DType::kBF16 ? v : want(v, DType::kF32));
      }
    } else {
      return Unsupported(g, i, "no CUDA launch for this op");
    }
    p.launches.push_back(std::move(L));
  }

  // Outputs that update an input but were not written in place.
  for (const GraphOutput& o : g.outputs()) {
    if (o.updates < 0) continue;
    if (p.input_of[o.value] == o.updates && p.root[o.value] == g.inputs()[o.updates].value) continue;
    Launch c;
    c.kind = LaunchKind::kCopyBack;
    c.op = "copy_back";
    c.inputs = {o.value};
    c.copy_back_input = o.updates;
    p.launches.push_back(std::move(c));
  }

  if (options.fuse_cross_entropy) FuseCrossEntropy(p);

  // ---- Arena plan over launch positions ------------------------------------
  const int nvals = static_cast<int>(p.metas.size());
  for (const Launch& l : p.launches)
    for (int v : l.outputs)
      if (p.root[v] < 0) p.root[v] = v;
  p.offset.assign(nvals, -1);
  auto in_arena = [&](int r) { return r >= 0 && p.input_of[r] < 0 && !is_shadow[r]; };
  std::vector<int> first(nvals, -1), last(nvals, -1);
  const int npos = static_cast<int>(p.launches.size());
  for (int pos = 0; pos < npos; ++pos) {
    const Launch& l = p.launches[pos];
    for (int v : l.outputs) {
      const int r = p.root[v];
      if (!in_arena(r)) continue;
      if (first[r] < 0) first[r] = pos;
      last[r] = std::max(last[r], pos);
    }
  }
  for (int pos = 0; pos < npos; ++pos)
    for (int v : p.launches[pos].inputs) {
      const int r = v < nvals ? p.root[v] : -1;
      if (r < 0) return absl::InternalError(absl::StrCat("cuda lowering: launch ", pos, " reads %", v, " which no launch writes"));
      if (!in_arena(r)) continue;
      if (first[r] < 0 || first[r] > pos)
        return absl::InternalError(absl::StrCat("cuda lowering: launch ", pos, " reads %", v, " before it is written"));
      last[r] = std::max(last[r], pos);
    }
  for (const GraphOutput& o : g.outputs()) {
    const int r = p.root[o.value];
    if (r < 0) return absl::InternalError(absl::StrCat("cuda lowering: output %", o.value, " is not materialised"));
    if (in_arena(r)) last[r] = npos;
  }
  struct Buf {
    int v;
    int64_t size;
    int first, last;
    int64_t offset = 0;
  };
  std::vector<Buf> bufs;
  for (int v = 0; v < nvals; ++v)
    if (first[v] >= 0) bufs.push_back({v, RoundUp(std::max<int64_t>(p.Bytes(v), 1), p.alignment), first[v], last[v]});
  for (int t = 0; t <= npos; ++t) {
    int64_t live = 0;
    for (const Buf& b : bufs)
      if (b.first <= t && t <= b.last) live += b.size;
    p.live_bytes_bound = std::max(p.live_bytes_bound, live);
  }
  std::vector<std::function<bool(const Buf&, const Buf&)>> orders = {
      [](const Buf& a, const Buf& b) { return a.size > b.size; },
      [](const Buf& a, const Buf& b) { return a.first < b.first; },
      [](const Buf& a, const Buf& b) { return a.size * (a.last - a.first + 1) > b.size * (b.last - b.first + 1); },
  };
  std::vector<Buf> best;
  int64_t best_peak = -1;
  for (const auto& less : orders) {
    std::vector<Buf> order = bufs;
    std::stable_sort(order.begin(), order.end(), less);
    std::vector<const Buf*> placed;
    int64_t peak = 0;
    std::vector<std::pair<int64_t, int64_t>> busy;
    for (Buf& b : order) {
      busy.clear();
      for (const Buf* q : placed)
        if (q->first <= b.last && b.first <= q->last) busy.push_back({q->offset, q->offset + q->size});
      std::sort(busy.begin(), busy.end());
      int64_t best_off = -1, best_gap = 0, prev_end = 0;
      for (const auto& [off, end] : busy) {
        const int64_t gap = off - prev_end;
        if (gap >= b.size && (best_off < 0 || gap < best_gap)) {
          best_off = prev_end;
          best_gap = gap;
        }
        prev_end = std::max(prev_end, end);
      }
      b.offset = best_off >= 0 ? best_off : prev_end;
      peak = std::max(peak, b.offset + b.size);
      placed.push_back(&b);
    }
    if (best_peak < 0 || peak < best_peak) {
      best_peak = peak;
      best = order;
    }
  }
  for (const Buf& b : best) p.offset[b.v] = b.offset;
  p.arena_bytes = std::max<int64_t>(best_peak, 0);
  return p;
}

}  // namespace loom::compiler::cuda
