#include "compiler/models/models.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/rng.h"
#include "base/status.h"

namespace loom::compiler::models {
namespace {

using ir::Graph;
using ir::InputKind;
using kernels::Attrs;

struct Dims {
  int64_t L, H, Hkv, C, D, T, V, F;
  double eps, theta;
};

Dims DimsOf(const v1::ModelSpec& s) {
  Dims d;
  d.L = s.n_layer();
  d.H = s.n_head();
  d.Hkv = s.n_kv_head() > 0 ? s.n_kv_head() : s.n_head();
  d.C = s.d_model();
  d.D = d.C / d.H;
  d.T = s.seq_len();
  d.V = s.vocab();
  d.F = s.ffn_hidden() > 0 ? s.ffn_hidden() : 4 * d.C;
  d.eps = s.norm_eps() > 0 ? s.norm_eps() : 1e-5;
  d.theta = s.rope_theta() > 0 ? s.rope_theta() : 10000.0;
  return d;
}

absl::Status CheckSpec(const v1::ModelSpec& s) {
  if (s.family() != "gpt" && s.family() != "llama")
    return absl::InvalidArgumentError(absl::StrCat("model.family: expected gpt or llama, got '", s.family(), "'"));
  for (auto [key, v] : {std::pair<const char*, int>{"model.n_layer", s.n_layer()}, {"model.n_head", s.n_head()},
                        {"model.d_model", s.d_model()}, {"model.seq_len", s.seq_len()}, {"model.vocab", s.vocab()}})
    if (v <= 0) return absl::InvalidArgumentError(absl::StrCat(key, ": must be positive, got ", v));
  if (s.d_model() % s.n_head() != 0)
    return absl::InvalidArgumentError(absl::StrCat("model.d_model: ", s.d_model(),
                                                   " is not divisible by model.n_head = ", s.n_head()));
  int kv = s.n_kv_head() > 0 ? s.n_kv_head() : s.n_head();
  if (s.n_head() % kv != 0)
    return absl::InvalidArgumentError(absl::StrCat("model.n_kv_head: ", kv, " does not divide model.n_head = ",
                                                   s.n_head()));
  if (s.family() == "gpt" && kv != s.n_head())
    return absl::InvalidArgumentError("model.n_kv_head: the gpt family has no grouped-query attention");
  if (s.family() == "llama" && (s.d_model() / s.n_head()) % 2 != 0)
    return absl::InvalidArgumentError(absl::StrCat("model.d_model: head dimension ", s.d_model() / s.n_head(),
                                                   " must be even for RoPE"));
  return absl::OkStatus();
}

// Small helpers that keep the model code readable.
class B {
 public:
  explicit B(Graph& g) : g_(g) {}
  absl::StatusOr<int> Op(absl::string_view op, std::vector<int> in, Attrs a = {}) {
    return g_.AddOp1(op, std::move(in), std::move(a));
  }
  absl::StatusOr<std::vector<int>> OpN(absl::string_view op, std::vector<int> in, Attrs a = {}) {
    return g_.AddOp(op, std::move(in), std::move(a));
  }
  int P(const std::string& name) { return g_.inputs()[g_.FindInput(name)].value; }

 private:
  Graph& g_;
};

// The causal keep mask bool[T, T] (true where key s <= query t), made from
// shape ops only: a row of T trues then T falses, repeated T times and read
// back in rows of 2T - 1, starts each row r one place earlier, so its first T
// entries are r falses then trues (s >= r); the transpose keeps s <= t.
absl::StatusOr<int> CausalKeep(B& b, int64_t T) {
  const auto fill = [&](double value) {
    return b.Op("fill", {}, {{"shape", std::vector<int64_t>{T, T}}, {"dtype", std::string("bool")}, {"value", value}});
  };
  LOOM_ASSIGN_OR_RETURN(int ones, fill(1));
  LOOM_ASSIGN_OR_RETURN(int zeros, fill(0));
  LOOM_ASSIGN_OR_RETURN(int rows, b.Op("concat", {ones, zeros}, {{"axis", int64_t{1}}}));
  LOOM_ASSIGN_OR_RETURN(int flat, b.Op("reshape", {rows}, {{"shape", std::vector<int64_t>{2 * T * T}}}));
  LOOM_ASSIGN_OR_RETURN(int head, b.Op("slice", {flat}, {{"axis", int64_t{0}}, {"start", int64_t{0}},
                                                        {"length", T * (2 * T - 1)}}));
  LOOM_ASSIGN_OR_RETURN(int skew, b.Op("reshape", {head}, {{"shape", std::vector<int64_t>{T, 2 * T - 1}}}));
  LOOM_ASSIGN_OR_RETURN(int upper, b.Op("slice", {skew}, {{"axis", int64_t{1}}, {"start", int64_t{0}},
                                                          {"length", T}}));
  return b.Op("permute", {upper}, {{"dims", std::vector<int64_t>{1, 0}}});
}

// Causal attention written out with dropout on the probabilities:
//   P = dropout(softmax(where(keep, q k^T / sqrt(D), -inf)), step); out = P v
// q [B,H,T,D]; k, v [B,Hkv,T,D] with each kv head repeated for its H / Hkv
// query heads (head h reads kv head h / (H / Hkv), as sdpa does). The
// dropout op keys its mask by the element's index in the whole [B,H,T,T]
// tensor, i.e. by the global (batch, head, query, key) position.
absl::StatusOr<int> AttentionWithDropout(B& b, int q, int k, int v, int keep, int step, const Attrs& drop,
                                         const Dims& d, int64_t Bn) {
  const int64_t G = d.H / d.Hkv;
  auto expand = [&](int x) -> absl::StatusOr<int> {  // [B,Hkv,T,D] -> [B,H,T,D]
    if (G == 1) return x;
    LOOM_ASSIGN_OR_RETURN(int r, b.Op("reshape", {x}, {{"shape", std::vector<int64_t>{Bn, d.Hkv, 1, d.T, d.D}}}));
    LOOM_ASSIGN_OR_RETURN(int e, b.Op("broadcast_to", {r}, {{"shape", std::vector<int64_t>{Bn, d.Hkv, G, d.T, d.D}}}));
    return b.Op("reshape", {e}, {{"shape", std::vector<int64_t>{Bn, d.H, d.T, d.D}}});
  };
  LOOM_ASSIGN_OR_RETURN(int kx, expand(k));
  LOOM_ASSIGN_OR_RETURN(int vx, expand(v));
  LOOM_ASSIGN_OR_RETURN(int s, b.Op("matmul", {q, kx}, {{"trans_b", true}}));
  LOOM_ASSIGN_OR_RETURN(int scaled, b.Op("scale", {s}, {{"s", 1.0 / std::sqrt(static_cast<double>(d.D))}}));
  LOOM_ASSIGN_OR_RETURN(int ninf, b.Op("fill", {}, {{"shape", std::vector<int64_t>{}}, {"dtype", std::string("f32")},
                                                     {"value", -std::numeric_limits<double>::infinity()}}));
  LOOM_ASSIGN_OR_RETURN(int masked, b.Op("where", {keep, scaled, ninf}));
  LOOM_ASSIGN_OR_RETURN(int p, b.Op("softmax", {masked}, {{"axis", int64_t{-1}}}));
  LOOM_ASSIGN_OR_RETURN(int dropped, b.Op("dropout", {p, step}, drop));
  return b.Op("matmul", {dropped, vx});
}

}  // namespace

BuildOptions TrainingOptions(const v1::JobSpec& spec) {
  BuildOptions o;
  o.batch = spec.train().batch_size();
  o.dropout = spec.model().dropout();
  o.dropout_seed = spec.train().seed();
  return o;
}

int BlockOfParameter(const std::string& name) {
  for (absl::string_view prefix : {"h.", "layers."}) {
    if (!absl::StartsWith(name, prefix)) continue;
    const size_t dot = name.find('.', prefix.size());
    int block = -1;
    if (dot != std::string::npos && absl::SimpleAtoi(name.substr(prefix.size(), dot - prefix.size()), &block))
      return block;
  }
  return -1;
}

uint64_t DropoutSeed(uint64_t seed, int64_t site) {
  uint64_t z = seed + 0x9E3779B97F4A7C15ull * (static_cast<uint64_t>(site) + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

absl::StatusOr<std::vector<ParamInfo>> Parameters(const v1::ModelSpec& spec) {
  LOOM_RETURN_IF_ERROR(CheckSpec(spec));
  Dims d = DimsOf(spec);
  const double proj_std = 0.02 / std::sqrt(2.0 * d.L);
  std::vector<ParamInfo> p;
  auto mat = [&](std::string n, int64_t r, int64_t c, double std = 0.02) {
    p.push_back({std::move(n), {r, c}, std, 0, true});
  };
  auto vec = [&](std::string n, int64_t c, double value) { p.push_back({std::move(n), {c}, 0, value, false}); };
  if (spec.family() == "gpt") {
    mat("wte", d.V, d.C);
    mat("wpe", d.T, d.C, 0.01);
    for (int64_t i = 0; i < d.L; ++i) {
      std::string h = absl::StrCat("h.", i, ".");
      vec(h + "ln_1.weight", d.C, 1);
      vec(h + "ln_1.bias", d.C, 0);
      mat(h + "attn.c_attn.weight", d.C, 3 * d.C);
      vec(h + "attn.c_attn.bias", 3 * d.C, 0);
      mat(h + "attn.c_proj.weight", d.C, d.C, proj_std);
      vec(h + "attn.c_proj.bias", d.C, 0);
      vec(h + "ln_2.weight", d.C, 1);
      vec(h + "ln_2.bias", d.C, 0);
      mat(h + "mlp.c_fc.weight", d.C, d.F);
      vec(h + "mlp.c_fc.bias", d.F, 0);
      mat(h + "mlp.c_proj.weight", d.F, d.C, proj_std);
      vec(h + "mlp.c_proj.bias", d.C, 0);
    }
    vec("ln_f.weight", d.C, 1);
    vec("ln_f.bias", d.C, 0);
  } else {
    mat("tok_embeddings", d.V, d.C);
    for (int64_t i = 0; i < d.L; ++i) {
      std::string l = absl::StrCat("layers.", i, ".");
      vec(l + "attention_norm.weight", d.C, 1);
      mat(l + "attention.wq", d.C, d.H * d.D);
      mat(l + "attention.wk", d.C, d.Hkv * d.D);
      mat(l + "attention.wv", d.C, d.Hkv * d.D);
      mat(l + "attention.wo", d.H * d.D, d.C, proj_std);
      vec(l + "ffn_norm.weight", d.C, 1);
      mat(l + "feed_forward.w1", d.C, d.F);
      mat(l + "feed_forward.w3", d.C, d.F);
      mat(l + "feed_forward.w2", d.F, d.C, proj_std);
    }
    vec("norm.weight", d.C, 1);
    mat("output", d.C, d.V);
  }
  return p;
}

int64_t NumParameters(const std::vector<ParamInfo>& params) {
  int64_t n = 0;
  for (const ParamInfo& p : params) n += NumElements(p.shape);
  return n;
}

absl::StatusOr<Graph> BuildForward(const v1::ModelSpec& spec, const BuildOptions& opts) {
  LOOM_ASSIGN_OR_RETURN(std::vector<ParamInfo> params, Parameters(spec));
  const Dims d = DimsOf(spec);
  const int64_t Bn = opts.batch, T = d.T, C = d.C, H = d.H, Hkv = d.Hkv, D = d.D;
  Graph g(spec.family());
  for (const ParamInfo& p : params) g.AddInput(p.name, {DType::kF32, p.shape}, InputKind::kParam);
  int x = g.AddInput("x", {DType::kI32, {Bn, T}});
  int y = g.AddInput("y", {DType::kI32, {Bn, T}});
  B b(g);
  const Attrs causal{{"is_causal", true}};
  const std::vector<int64_t> to_heads = {0, 2, 1, 3};
  auto heads = [&](int v, int64_t nh) -> absl::StatusOr<int> {  // [B,T,nh*D] -> [B,nh,T,D]
    LOOM_ASSIGN_OR_RETURN(int r, b.Op("reshape", {v}, {{"shape", std::vector<int64_t>{Bn, T, nh, D}}}));
    return b.Op("permute", {r}, {{"dims", to_heads}});
  };
  auto merge = [&](int v) -> absl::StatusOr<int> {  // [B,H,T,D] -> [B,T,C]
    LOOM_ASSIGN_OR_RETURN(int p, b.Op("permute", {v}, {{"dims", to_heads}}));
    return b.Op("reshape", {p}, {{"shape", std::vector<int64_t>{Bn, T, H * D}}});
  };
  auto linear = [&](int v, const std::string& w, const std::string& bias) -> absl::StatusOr<int> {
    LOOM_ASSIGN_OR_RETURN(int m, b.Op("matmul", {v, b.P(w)}));
    if (bias.empty()) return m;
    return b.Op("add", {m, b.P(bias)});
  };
  const Attrs eps{{"eps", d.eps}};
  if (!(opts.dropout >= 0 && opts.dropout < 1))
    return absl::InvalidArgumentError(absl::StrCat("model.dropout: must be in [0, 1), got ", opts.dropout));
  const int step = opts.dropout > 0 ? g.AddInput("step", {DType::kF32, {}}) : -1;
  auto drop = [&](int v, int64_t site) -> absl::StatusOr<int> {
    if (step < 0) return v;
    const Attrs a{{"p", opts.dropout}, {"seed", static_cast<int64_t>(DropoutSeed(opts.dropout_seed, site))}};
    return b.Op("dropout", {v, step}, a);
  };
  // Causal attention of block i: the fused sdpa without dropout, else written
  // out with attention dropout at site 1 + 2 L + i.
  int keep = -1;
  auto attend = [&](int q, int k, int v, int64_t i) -> absl::StatusOr<int> {
    if (step < 0) {
      LOOM_ASSIGN_OR_RETURN(auto att, b.OpN("sdpa", {q, k, v}, causal));
      return att[0];
    }
    if (keep < 0) {
      LOOM_ASSIGN_OR_RETURN(keep, CausalKeep(b, T));
    }
    const Attrs a{{"p", opts.dropout},
                  {"seed", static_cast<int64_t>(DropoutSeed(opts.dropout_seed, 1 + 2 * d.L + i))}};
    return AttentionWithDropout(b, q, k, v, keep, step, a, d, Bn);
  };
  int h;
  if (spec.family() == "gpt") {
    LOOM_ASSIGN_OR_RETURN(int tok, b.Op("embedding", {b.P("wte"), x}));
    LOOM_ASSIGN_OR_RETURN(int emb, b.Op("add", {tok, b.P("wpe")}));
    LOOM_ASSIGN_OR_RETURN(h, drop(emb, 0));
    for (int64_t i = 0; i < d.L; ++i) {
      std::string p = absl::StrCat("h.", i, ".");
      LOOM_ASSIGN_OR_RETURN(auto ln1, b.OpN("layernorm", {h, b.P(p + "ln_1.weight"), b.P(p + "ln_1.bias")}, eps));
      LOOM_ASSIGN_OR_RETURN(int qkv, linear(ln1[0], p + "attn.c_attn.weight", p + "attn.c_attn.bias"));
      int part[3];
      for (int j = 0; j < 3; ++j) {
        LOOM_ASSIGN_OR_RETURN(int s, b.Op("slice", {qkv}, {{"axis", int64_t{2}}, {"start", j * C}, {"length", C}}));
        LOOM_ASSIGN_OR_RETURN(part[j], heads(s, H));
      }
      LOOM_ASSIGN_OR_RETURN(int att, attend(part[0], part[1], part[2], i));
      LOOM_ASSIGN_OR_RETURN(int merged, merge(att));
      LOOM_ASSIGN_OR_RETURN(int proj, linear(merged, p + "attn.c_proj.weight", p + "attn.c_proj.bias"));
      LOOM_ASSIGN_OR_RETURN(proj, drop(proj, 1 + 2 * i));
      LOOM_ASSIGN_OR_RETURN(h, b.Op("add", {h, proj}));
      LOOM_ASSIGN_OR_RETURN(auto ln2, b.OpN("layernorm", {h, b.P(p + "ln_2.weight"), b.P(p + "ln_2.bias")}, eps));
      LOOM_ASSIGN_OR_RETURN(int fc, linear(ln2[0], p + "mlp.c_fc.weight", p + "mlp.c_fc.bias"));
      LOOM_ASSIGN_OR_RETURN(int act, b.Op("gelu", {fc}, {{"approximate", std::string("tanh")}}));
      LOOM_ASSIGN_OR_RETURN(int down, linear(act, p + "mlp.c_proj.weight", p + "mlp.c_proj.bias"));
      LOOM_ASSIGN_OR_RETURN(down, drop(down, 2 + 2 * i));
      LOOM_ASSIGN_OR_RETURN(h, b.Op("add", {h, down}));
    }
    LOOM_ASSIGN_OR_RETURN(auto lnf, b.OpN("layernorm", {h, b.P("ln_f.weight"), b.P("ln_f.bias")}, eps));
    LOOM_ASSIGN_OR_RETURN(h, b.Op("matmul", {lnf[0], b.P("wte")}, {{"trans_b", true}}));
  } else {
    const Attrs rope{{"theta", d.theta}};
    LOOM_ASSIGN_OR_RETURN(int emb, b.Op("embedding", {b.P("tok_embeddings"), x}));
    LOOM_ASSIGN_OR_RETURN(h, drop(emb, 0));
    for (int64_t i = 0; i < d.L; ++i) {
      std::string p = absl::StrCat("layers.", i, ".");
      LOOM_ASSIGN_OR_RETURN(auto n1, b.OpN("rmsnorm", {h, b.P(p + "attention_norm.weight")}, eps));
      auto rotated = [&](const std::string& w, int64_t nh) -> absl::StatusOr<int> {
        LOOM_ASSIGN_OR_RETURN(int m, linear(n1[0], w, ""));
        LOOM_ASSIGN_OR_RETURN(int r, b.Op("reshape", {m}, {{"shape", std::vector<int64_t>{Bn, T, nh, D}}}));
        LOOM_ASSIGN_OR_RETURN(int ro, b.Op("rope", {r}, rope));
        return b.Op("permute", {ro}, {{"dims", to_heads}});
      };
      LOOM_ASSIGN_OR_RETURN(int q, rotated(p + "attention.wq", H));
      LOOM_ASSIGN_OR_RETURN(int k, rotated(p + "attention.wk", Hkv));
      LOOM_ASSIGN_OR_RETURN(int vm, linear(n1[0], p + "attention.wv", ""));
      LOOM_ASSIGN_OR_RETURN(int v, heads(vm, Hkv));
      LOOM_ASSIGN_OR_RETURN(int att, attend(q, k, v, i));
      LOOM_ASSIGN_OR_RETURN(int merged, merge(att));
      LOOM_ASSIGN_OR_RETURN(int o, linear(merged, p + "attention.wo", ""));
      LOOM_ASSIGN_OR_RETURN(o, drop(o, 1 + 2 * i));
      LOOM_ASSIGN_OR_RETURN(h, b.Op("add", {h, o}));
      LOOM_ASSIGN_OR_RETURN(auto n2, b.OpN("rmsnorm", {h, b.P(p + "ffn_norm.weight")}, eps));
      LOOM_ASSIGN_OR_RETURN(int g1, linear(n2[0], p + "feed_forward.w1", ""));
      LOOM_ASSIGN_OR_RETURN(int g3, linear(n2[0], p + "feed_forward.w3", ""));
      LOOM_ASSIGN_OR_RETURN(int act, b.Op("silu", {g1}));
      LOOM_ASSIGN_OR_RETURN(int gated, b.Op("mul", {act, g3}));
      LOOM_ASSIGN_OR_RETURN(int down, linear(gated, p + "feed_forward.w2", ""));
      LOOM_ASSIGN_OR_RETURN(down, drop(down, 2 + 2 * i));
      LOOM_ASSIGN_OR_RETURN(h, b.Op("add", {h, down}));
    }
    LOOM_ASSIGN_OR_RETURN(auto nf, b.OpN("rmsnorm", {h, b.P("norm.weight")}, eps));
    LOOM_ASSIGN_OR_RETURN(h, linear(nf[0], "output", ""));
  }
  LOOM_ASSIGN_OR_RETURN(int logits, b.Op("reshape", {h}, {{"shape", std::vector<int64_t>{Bn * T, d.V}}}));
  LOOM_ASSIGN_OR_RETURN(int targets, b.Op("reshape", {y}, {{"shape", std::vector<int64_t>{Bn * T}}}));
  LOOM_ASSIGN_OR_RETURN(auto ce, b.OpN("cross_entropy", {logits, targets}));
  g.AddOutput(ce[0]);
  if (opts.return_logits) g.AddOutput(logits);
  return g;
}

Tensor InitParameter(const std::vector<ParamInfo>& params, size_t index, uint64_t seed, int threads) {
  const ParamInfo& p = params[index];
  Tensor t = Tensor::MustEmpty(p.shape, DType::kF32);
  float* v = t.data<float>();
  const int64_t n = t.numel();
  // Philox is counter-based: element e's value is the same whichever thread draws it.
  auto fill = [&](int64_t begin, int64_t end) {
    Philox rng(seed, index);
    for (int64_t e = begin; e < end; ++e)
      v[e] = static_cast<float>(p.init_std > 0 ? p.init_std * rng.Normal(e) : p.init_value);
  };
  const int64_t parts = std::max<int64_t>(1, std::min<int64_t>(threads, n / (1 << 16)));
  std::vector<std::thread> pool;
  for (int64_t k = 1; k < parts; ++k) pool.emplace_back(fill, n * k / parts, n * (k + 1) / parts);
  fill(0, n / parts);
  for (std::thread& th : pool) th.join();
  return t;
}

std::map<std::string, Tensor> InitParameters(const std::vector<ParamInfo>& params, uint64_t seed) {
  std::map<std::string, Tensor> out;
  for (size_t i = 0; i < params.size(); ++i) out.emplace(params[i].name, InitParameter(params, i, seed));
  return out;
}

}  // namespace loom::compiler::models
