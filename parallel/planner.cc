#include "parallel/planner.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/match.h"
#include "base/status.h"
#include "compiler/models/models.h"
#include "nlohmann/json.hpp"

namespace loom::parallel {
namespace {

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Which parameters tensor parallelism shards (Megatron layout): every matrix
// (column- or row-parallel, the vocab-parallel embedding and output) except
// GPT's learned positions, and the biases of the column-parallel layers.
bool ShardedByTp(const compiler::models::ParamInfo& p) {
  if (p.name == "wpe") return false;
  if (p.shape.size() == 2) return true;
  return absl::EndsWith(p.name, "c_attn.bias") || absl::EndsWith(p.name, "c_fc.bias");
}

std::string Bytes(double b) {
  if (b >= 1024.0 * 1024 * 1024) return absl::StrFormat("%.2fG", b / (1024.0 * 1024 * 1024));
  if (b >= 1024.0 * 1024) return absl::StrFormat("%.1fM", b / (1024.0 * 1024));
  return absl::StrFormat("%.1fK", b / 1024.0);
}

std::string Seconds(double s) {
  if (s >= 1) return absl::StrFormat("%.2fs", s);
  return absl::StrFormat("%.2fms", s * 1e3);
}

}  // namespace

// The coefficients of TermsOf's terms, in its order, as printed by
// `bazel run //tests/parallel:planner_calibrate` (weighted least squares on relative
// error over its calibration set: 115 lowered layouts of worlds 1, 2 and 8
// and 19 single-process peaks per family). Worst error on that set: gpt
// 6.4% of the single-process peaks and 11.7% of state + arena, except a
// one-layer model whose vocabulary matrix is over half of its parameters
// (up to 30%); llama 7.7% and 8.4%, that model up to 19%.
const MemoryCoefficients& FittedMemoryCoefficients(const std::string& family) {
  static const MemoryCoefficients gpt{{8.144, -3.981, 3.162, 3.185, 6.666, 1.574, 0.5023, 1.066, -3142},
                                      1.283,
                                      {0.9069, 2.378, 1.074, 5.149, -3152}};
  static const MemoryCoefficients llama{{3.478, 4.207, 4.374, 2.239, 5.408, 2.082, -0.4658, 1.161, -8468},
                                        1.026,
                                        {0.9989, 1.07, 1.982, 0.03948, 238.5}};
  return family == "llama" ? llama : gpt;
}

std::string LayoutName(const Layout& l) {
  std::string s = absl::StrCat("dp=", l.dp, " tp=", l.tp, " zero=", l.zero_stage);
  if (l.sequence_parallel) absl::StrAppend(&s, " sp");
  return s;
}

absl::StatusOr<ModelDims> DimsOf(const v1::ModelSpec& model) {
  ModelDims d;
  d.family = model.family().empty() ? "gpt" : model.family();
  d.n_layer = model.n_layer();
  d.n_head = model.n_head();
  d.n_kv_head = model.n_kv_head() > 0 ? model.n_kv_head() : model.n_head();
  d.d_model = model.d_model();
  d.vocab = model.vocab();
  d.seq_len = model.seq_len();
  d.ffn = model.ffn_hidden() > 0 ? model.ffn_hidden()
                                 : (d.family == "llama" ? (8 * d.d_model / 3 + 63) / 64 * 64 : 4 * d.d_model);
  v1::ModelSpec m = model;
  m.set_family(d.family);
  m.set_n_kv_head(static_cast<int>(d.n_kv_head));
  m.set_ffn_hidden(static_cast<int>(d.ffn));
  LOOM_ASSIGN_OR_RETURN(auto params, compiler::models::Parameters(m));
  d.num_parameters = compiler::models::NumParameters(params);
  return d;
}

namespace {

// The model with the jobspec defaults filled in, its parameters and the local
// (per tp rank) parameter count.
struct Sized {
  ModelDims d;
  std::vector<compiler::models::ParamInfo> params;
  int64_t local = 0;    // local (per tp rank) parameter floats
  int64_t largest = 0;  // the largest local parameter
};

absl::StatusOr<Sized> SizeOf(const v1::ModelSpec& model_in, int64_t batch, const Hardware& hw, const Layout& l) {
  Sized z;
  LOOM_ASSIGN_OR_RETURN(z.d, DimsOf(model_in));
  LOOM_RETURN_IF_ERROR(CheckParallelLayout(model_in, batch, l, hw.world));
  v1::ModelSpec model = model_in;
  model.set_family(z.d.family);
  model.set_n_kv_head(static_cast<int>(z.d.n_kv_head));
  model.set_ffn_hidden(static_cast<int>(z.d.ffn));
  LOOM_ASSIGN_OR_RETURN(z.params, compiler::models::Parameters(model));
  for (const auto& p : z.params) {
    int64_t n = 1;
    for (int64_t s : p.shape) n *= s;
    const int64_t here = ShardedByTp(p) ? CeilDiv(n, l.tp) : n;
    z.local += here;
    z.largest = std::max(z.largest, here);
  }
  return z;
}

// ZeRO-2/3 reduce_scatter each gradient right after its producer
// (compiler/spmd/schedule.h), so the arena holds the 1/dp shards (the full
// gradients are transient); ZeRO 0/1 keep the full local gradients until the
// optimizer reduces them.
int64_t GradientFloats(const Sized& z, const Layout& l) {
  return l.zero_stage >= 2 && l.dp > 1 ? CeilDiv(z.local, l.dp) : z.local;
}

// The elements of one fused loop's chunk buffer over a [b, T, width] tensor:
// whole batch rows up to the lowering's default chunk (16384 elements,
// compiler/lowering.h: fused_chunk_elems), at least one row.
double ChunkElems(int64_t b, int64_t seq_len, int64_t width) {
  const int64_t row = std::max<int64_t>(1, seq_len * width);
  return static_cast<double>(std::min(b, std::max<int64_t>(1, 16384 / row)) * row);
}

// The terms of the memory model for one layout, in bytes (planner.h:
// MemoryTerms), each multiplied by its fitted coefficient. With act = bytes
// per activation element x the local batch's tokens, and C, F, V, L the
// model's sizes:
//   activation phase: per layer rep_c*C + (tp_c*C + tp_f*F)/tp, less
//     sp_save*C*(1 - 1/tp) under sequence parallelism (all x act);
//     (tail_c*C + logits_v*V/tp) x act for the embedding, final norm, logits
//     and their gradients; head_grad x the V x C/tp output-layer gradient;
//     less overlap x min(12*L*C/tp per token, the gradient floats) in f32
//     (activations die as gradients appear, so the two peaks partly
//     coincide); plus const_bytes;
//   end of the step: what the arena holds around the optimizer, in f32: the
//     full local gradients (ZeRO-0), the all-gathered updated parameters
//     (ZeRO-1/2, before they are copied into the replicated parameters), the
//     gradient shards (ZeRO-3: its gathered parameter is in `parameters`);
//   workspace: the evaluation program's arena, whose peak is at the MLP (the
//     block input plus gpt's up-projection and GELU, llama's w1, w3 and their
//     gated product) or at the logits (2V/tp); the fused loops' chunk buffers
//     (per layer, over C- and F-wide tensors; with one thread); the kernels'
//     transient copies (~ act x C); const.
MemoryTerms TermsOf(const Sized& z, int64_t batch, const Hardware& hw, const Layout& l) {
  const ModelDims& d = z.d;
  const double tokens = static_cast<double>(batch / l.dp) * d.seq_len;  // the local micro-batch
  const double act = hw.activation_bytes * tokens;  // bytes per coefficient (the fit is in f32 units)
  const double C = d.d_model, F = d.ffn, V = d.vocab, L = d.n_layer, tp = l.tp;
  const double grads = static_cast<double>(GradientFloats(z, l)), local = static_cast<double>(z.local);
  MemoryTerms t;
  t.activation = {act * L * C,
                  act * L * C / tp,
                  act * L * F / tp,
                  l.sequence_parallel ? -act * L * C * (1.0 - 1.0 / tp) : 0.0,
                  act * C,
                  act * V / tp,
                  4.0 * V * C / tp,
                  -4.0 * std::min(12.0 * L * tokens * C / tp, grads),
                  1.0};
  t.end = 4.0 * (l.zero_stage >= 3 && l.dp > 1 ? grads : local);
  const double up = d.family == "llama" ? 3 : 2;
  const int64_t b = batch / l.dp;
  t.workspace = {act * std::max(C + up * F / tp, 2 * V / tp), 4.0 * L * ChunkElems(b, d.seq_len, d.d_model / l.tp),
                 4.0 * L * ChunkElems(b, d.seq_len, d.ffn / l.tp), act * C, 1.0};
  return t;
}

double Dot(const double* a, const double* b, int n) {
  double s = 0;
  for (int i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

MemoryEstimate EstimateMemory(const Sized& z, const MemoryTerms& t, const MemoryCoefficients& k, const Layout& l) {
  const int64_t f32 = 4, dp = l.dp;
  MemoryEstimate m;
  // Parameters (f32 master weights). ZeRO-3 keeps its 1/dp shard; each use
  // gathers a parameter and frees it after the use, so about one gathered
  // parameter, at most the largest, is live at a time.
  const bool z3 = l.zero_stage >= 3 && dp > 1;
  m.parameters = f32 * (z3 ? CeilDiv(z.local, dp) + z.largest : z.local);
  m.gradients = f32 * GradientFloats(z, l);
  m.optimizer = 2 * f32 * ((l.zero_stage >= 1 && dp > 1) ? CeilDiv(z.local, dp) : z.local);
  // The arena's larger phase, less the gradients counted above.
  const double phase = Dot(t.activation.data(), k.activation.data(), kActivationTerms);
  const double end = k.end * t.end - static_cast<double>(m.gradients);
  m.activations = std::max<int64_t>(0, static_cast<int64_t>(std::max(phase, end)));
  m.workspace =
      std::max<int64_t>(0, static_cast<int64_t>(Dot(t.workspace.data(), k.workspace.data(), kWorkspaceTerms)));
  return m;
}

// Step time: compute, the tensor-parallel collectives on the critical path
// and the data-parallel traffic that compute does not hide.
void EstimateTime(const ModelDims& d, int64_t local, int64_t batch, const Hardware& hw, const Layout& l,
                  Candidate& c) {
  const int64_t dp = l.dp, tp = l.tp, f32 = 4;
  const double tokens = static_cast<double>(batch / dp) * d.seq_len;
  const double global_tokens = static_cast<double>(batch) * d.seq_len;
  const double total_flops =
      global_tokens * (6.0 * d.num_parameters + 6.0 * d.n_layer * d.seq_len * d.d_model);
  c.flops = total_flops / (dp * tp);
  c.compute_seconds = c.flops / hw.flops;

  // Links: tp groups are adjacent ranks (tp is the last mesh dimension).
  const int npn = hw.nproc_per_node > 0 ? hw.nproc_per_node : hw.world;
  CommEstimate& cm = c.comm;
  cm.tp_inter_node = tp > 1 && (tp > npn || npn % tp != 0);
  cm.dp_inter_node = dp > 1 && dp * tp > npn;
  auto bw = [&](bool inter) { return inter ? hw.inter_bandwidth : hw.intra_bandwidth; };
  auto lat = [&](bool inter) { return inter ? hw.inter_latency : hw.intra_latency; };

  if (tp > 1) {
    const double ring = static_cast<double>(tp - 1) / tp;
    const double act = tokens * d.d_model * hw.activation_bytes;  // one [b, T, C] activation
    // 4 all-reduces per layer (2 forward, 2 backward), or with sequence
    // parallelism 4 all-gathers + 4 reduce-scatters of the same total bytes;
    // the embedding's and output projection's all-reduces; the parallel
    // cross-entropy's three [b*T] reductions.
    const double bytes = (4.0 * d.n_layer + 2) * 2 * ring * act + 3 * 2 * ring * tokens * f32;
    cm.tp_bytes = static_cast<int64_t>(bytes);
    cm.tp_collectives = static_cast<int>((l.sequence_parallel ? 8 : 4) * d.n_layer + 2 + 3);
    cm.tp_seconds = bytes / bw(cm.tp_inter_node) + cm.tp_collectives * lat(cm.tp_inter_node);
  }
  if (dp > 1) {
    // Bytes move overlapped with compute (down to one bucket / one block that
    // cannot be); each collective's latency is a rendezvous of the step and is
    // always exposed.
    const double ring = static_cast<double>(dp - 1) / dp;
    const double grad = static_cast<double>(f32) * local;
    const double link = bw(cm.dp_inter_node), alpha = lat(cm.dp_inter_node);
    const double fwd = c.compute_seconds / 3.0, bwd = c.compute_seconds * 2.0 / 3.0;
    const int buckets = static_cast<int>(CeilDiv(static_cast<int64_t>(grad), std::max<int64_t>(1, hw.bucket_bytes)));
    const int blocks = static_cast<int>(d.n_layer + 2);  // layers, embedding, head/final norm
    auto overlapped = [](double busy, double window, double granule) {
      return std::max(busy - window, granule);
    };
    double exposed = 0, bytes = 0;
    if (l.zero_stage == 0) {  // bucketed gradient all-reduce during backward
      bytes = 2 * ring * grad;
      cm.dp_collectives = buckets;
      const double t = bytes / link;
      exposed = overlapped(t, bwd, t / buckets);
    } else if (l.zero_stage <= 2) {
      // Gradients reduce(-scatter)ed during backward (ZeRO-1 all-reduces and
      // keeps its shard); the updated parameter shards are all-gathered after
      // the optimizer step, which nothing overlaps.
      const double reduce = (l.zero_stage == 1 ? 2 : 1) * ring * grad, gather = ring * grad;
      bytes = reduce + gather;
      cm.dp_collectives = 2 * buckets;
      exposed = overlapped(reduce / link, bwd, reduce / link / buckets) + gather / link;
    } else {
      // ZeRO-3: each block gathered before its forward use (prefetched behind
      // the previous block), again for backward, its gradients reduce-scattered.
      const double gather = ring * grad;
      bytes = 3 * gather;
      cm.dp_collectives = 3 * blocks;
      exposed = overlapped(gather / link, fwd, gather / link / blocks) +
                overlapped(2 * gather / link, bwd, 2 * gather / link / blocks);
    }
    cm.dp_bytes = static_cast<int64_t>(bytes);
    cm.dp_seconds = bytes / link + cm.dp_collectives * alpha;
    cm.dp_exposed_seconds = exposed + cm.dp_collectives * alpha;
  }
  c.step_seconds = c.compute_seconds + cm.tp_seconds + cm.dp_exposed_seconds;
}

}  // namespace

const std::array<const char*, kActivationTerms>& ActivationTermNames() {
  static const std::array<const char*, kActivationTerms> names = {
      "rep_c", "tp_c", "tp_f", "sp_save", "tail_c", "logits_v", "head_grad", "overlap", "const_bytes"};
  return names;
}

const std::array<const char*, kWorkspaceTerms>& WorkspaceTermNames() {
  static const std::array<const char*, kWorkspaceTerms> names = {"eval", "chunks_c", "chunks_f", "copies_c", "const_bytes"};
  return names;
}

absl::StatusOr<MemoryTerms> MemoryTermsOf(const v1::ModelSpec& model, int64_t batch, const Hardware& hw,
                                          const Layout& l) {
  LOOM_ASSIGN_OR_RETURN(Sized z, SizeOf(model, batch, hw, l));
  return TermsOf(z, batch, hw, l);
}

absl::StatusOr<Candidate> Estimate(const v1::ModelSpec& model, int64_t batch, const Hardware& hw, const Layout& l,
                                   const MemoryCoefficients* coefficients, int grad_accum_steps) {
  const int64_t accum = std::max(1, grad_accum_steps);
  if (batch % accum != 0)
    return absl::InvalidArgumentError(
        absl::StrCat("train.grad_accum_steps: ", accum, " must divide train.batch_size = ", batch));
  LOOM_ASSIGN_OR_RETURN(Sized z, SizeOf(model, batch / accum, hw, l));
  Candidate c;
  c.layout = l;
  const MemoryCoefficients& k = coefficients != nullptr ? *coefficients : FittedMemoryCoefficients(z.d.family);
  c.memory = EstimateMemory(z, TermsOf(z, batch / accum, hw, l), k, l);
  if (accum > 1) {
    // The micro-step keeps every local gradient (no reduce_scatter), so its
    // gradients and arena are those of ZeRO-0/1 on the micro-batch; the
    // evaluation program (the workspace) still runs the whole batch.
    Layout micro = l;
    micro.zero_stage = std::min(l.zero_stage, 1);
    const MemoryEstimate m = EstimateMemory(z, TermsOf(z, batch / accum, hw, micro), k, micro);
    c.memory.gradients = m.gradients;
    c.memory.activations = m.activations;
    c.memory.workspace = EstimateMemory(z, TermsOf(z, batch, hw, l), k, l).workspace;
    c.memory.accumulators = 4 * (z.local + (l.dp > 1 ? GradientFloats(z, l) : 0));
  }
  EstimateTime(z.d, z.local, batch, hw, l, c);
  const MemoryEstimate& m = c.memory;
  if (m.total() > hw.memory_bytes) {
    c.feasible = false;
    std::string what = "activations";
    int64_t most = m.activations;
    for (auto [name, v] : {std::pair<const char*, int64_t>{"parameters", m.parameters}, {"gradients", m.gradients},
                           {"optimizer state", m.optimizer}, {"workspace", m.workspace},
                           {"gradient accumulators", m.accumulators}})
      if (v > most) most = v, what = name;
    c.reason = absl::StrCat("needs ", Bytes(m.total()), "iB per rank > budget ", Bytes(hw.memory_bytes),
                            "iB (largest: ", what, " ", Bytes(most), "iB)");
  }
  return c;
}

int64_t BytesPerRank(const v1::JobSpec& spec) {
  const auto& p = spec.parallel();
  if (spec.device() == "cuda" || spec.model().family() == "onnx" || p.tp_auto()) return 0;
  Hardware hw;
  hw.world = p.dp() * std::max(1, p.tp());
  hw.activation_bytes = spec.train().precision() == "bf16" ? 2 : 4;
  const Layout l{p.dp(), std::max(1, p.tp()), p.zero_stage(), p.sequence_parallel(), {}};
  absl::StatusOr<Candidate> c = Estimate(spec.model(), spec.train().batch_size(), hw, l, nullptr,
                                         std::max(1, spec.train().grad_accum_steps()));
  return c.ok() ? c->memory.total() : 0;
}

absl::StatusOr<Enumeration> EnumerateLayouts(const v1::ModelSpec& model, int64_t batch, const Hardware& hw) {
  LOOM_RETURN_IF_ERROR(CheckWorldSize(hw.world, hw.world, 1));
  if (hw.nproc_per_node < 0) return absl::InvalidArgumentError(absl::StrCat("nproc_per_node: must be positive (got ", hw.nproc_per_node, ")"));
  Enumeration e;
  for (int tp = 1; tp <= hw.world; ++tp) {
    if (hw.world % tp != 0) continue;
    const int dp = hw.world / tp;
    absl::Status legal = CheckParallelLayout(model, batch, Layout{dp, tp, 0, false}, hw.world);
    if (!legal.ok()) {
      e.skipped.push_back({Layout{dp, tp, 0, false}, std::string(legal.message())});
      continue;
    }
    for (int zero = 0; zero <= (dp > 1 ? 3 : 0); ++zero)
      for (int sp = 0; sp <= (tp > 1 ? 1 : 0); ++sp) e.layouts.push_back(Layout{dp, tp, zero, sp == 1});
  }
  return e;
}

absl::StatusOr<Plan> MakePlan(const v1::ModelSpec& model, int64_t batch, const Hardware& hw,
                              const std::function<bool(const Layout&)>& only, int grad_accum_steps) {
  Plan plan;
  LOOM_ASSIGN_OR_RETURN(plan.dims, DimsOf(model));
  plan.batch = batch;
  plan.grad_accum_steps = std::max(1, grad_accum_steps);
  plan.hw = hw;
  LOOM_ASSIGN_OR_RETURN(Enumeration e, EnumerateLayouts(model, batch, hw));
  plan.skipped = e.skipped;
  for (const Layout& l : e.layouts) {
    if (only && !only(l)) continue;
    LOOM_ASSIGN_OR_RETURN(Candidate c, Estimate(model, batch, hw, l, nullptr, plan.grad_accum_steps));
    plan.ranked.push_back(std::move(c));
  }
  LOOM_RETURN_IF_ERROR(RankCandidates(plan));
  return plan;
}

absl::Status RankCandidates(Plan& plan) {
  const Hardware& hw = plan.hw;
  if (plan.ranked.empty()) {
    std::string why = absl::StrCat("no legal layout for world size ", hw.world);
    for (const Skipped& s : plan.skipped) absl::StrAppend(&why, "; tp=", s.layout.tp, ": ", s.reason);
    return absl::InvalidArgumentError(why);
  }
  auto key = [](const Candidate& c) {
    return std::make_tuple(!c.feasible, c.feasible ? c.step_seconds : static_cast<double>(c.memory.total()),
                           c.memory.total(), c.layout.zero_stage, c.layout.sequence_parallel, c.layout.tp);
  };
  std::stable_sort(plan.ranked.begin(), plan.ranked.end(),
                   [&](const Candidate& a, const Candidate& b) { return key(a) < key(b); });
  const Candidate& first = plan.ranked[0];
  if (first.feasible) {
    plan.winner = 0;
    plan.reason = absl::StrCat("fits in memory (", Bytes(first.memory.total()), "iB of ", Bytes(hw.memory_bytes),
                               "iB per rank); fastest estimated step: ", Seconds(first.step_seconds));
    if (plan.ranked.size() > 1) {
      const Candidate& second = plan.ranked[1];
      absl::StrAppend(&plan.reason, " (next: ", LayoutName(second.layout), " at ", Seconds(second.step_seconds),
                      second.feasible ? "" : ", does not fit", ")");
    }
  } else {
    plan.reason = absl::StrCat("no layout fits in ", Bytes(hw.memory_bytes), "iB per rank; the smallest, ",
                               LayoutName(first.layout), ", ", first.reason);
  }
  return absl::OkStatus();
}

std::string FormatPlanTable(const Plan& p) {
  const ModelDims& d = p.dims;
  std::string s =
      !p.model_summary.empty()
          ? absl::StrCat("model: ", p.model_summary, "\n")
          : absl::StrFormat("model: %s, %d layers, d_model %d, %d heads (%d kv), ffn %d, vocab %d, seq_len %d: %.2fM "
                            "parameters\n",
                            d.family, d.n_layer, d.d_model, d.n_head, d.n_kv_head, d.ffn, d.vocab, d.seq_len,
                            d.num_parameters / 1e6);
  absl::StrAppendFormat(
      &s,
      "batch %d; world %d (%d per node); budget %siB per rank; %g TFLOP/s per device; links: intra %g Gb/s, "
      "inter %g Gb/s\n\n",
      p.batch, p.hw.world, p.hw.nproc_per_node > 0 ? p.hw.nproc_per_node : p.hw.world, Bytes(p.hw.memory_bytes),
      p.hw.flops / 1e12, p.hw.intra_bandwidth * 8 / 1e9, p.hw.inter_bandwidth * 8 / 1e9);
  const bool accum = std::any_of(p.ranked.begin(), p.ranked.end(),
                                 [](const Candidate& c) { return c.memory.accumulators > 0; });
  if (accum)
    absl::StrAppendFormat(&s, "gradient accumulation: %d micro-batches of %d per update (accum: the accumulators "
                              "and the update's reduced gradients)\n",
                          p.grad_accum_steps, p.batch / std::max(1, p.grad_accum_steps));
  absl::StrAppendFormat(&s, "%-4s %-20s %8s %8s %8s %8s %8s %8s%s %9s %9s %10s %10s  %s\n", "rank", "layout",
                        "params", "grads", "optim", "activ", "work", "total", accum ? "    accum" : "", "dp-comm",
                        "tp-comm", "compute", "step", "fits");
  for (size_t i = 0; i < p.ranked.size(); ++i) {
    const Candidate& c = p.ranked[i];
    const MemoryEstimate& m = c.memory;
    absl::StrAppendFormat(&s, "%-4s %-20s %8s %8s %8s %8s %8s %8s%s %9s %9s %10s %10s  %s\n",
                          absl::StrCat(i + 1, static_cast<int>(i) == p.winner ? "*" : ""), LayoutName(c.layout),
                          Bytes(m.parameters), Bytes(m.gradients), Bytes(m.optimizer), Bytes(m.activations),
                          Bytes(m.workspace), Bytes(m.total()),
                          accum ? absl::StrFormat(" %8s", Bytes(m.accumulators)) : std::string(),
                          Bytes(c.comm.dp_bytes) + (c.comm.dp_inter_node ? "x" : ""),
                          Bytes(c.comm.tp_bytes) + (c.comm.tp_inter_node ? "x" : ""), Seconds(c.compute_seconds),
                          Seconds(c.step_seconds), c.feasible ? "yes" : "no: " + c.reason);
  }
  absl::StrAppend(&s, "\nmemory per rank in bytes (K/M/G = KiB/MiB/GiB); comm: bytes per rank per step, x = on the "
                      "inter-node link\n");
  if (!p.model_summary.empty())
    absl::StrAppend(&s, "memory and time from each layout's compiled per-rank program (workspace not modelled)\n");
  for (const Skipped& k : p.skipped) absl::StrAppend(&s, "skipped dp=", k.layout.dp, " tp=", k.layout.tp, ": ", k.reason, "\n");
  for (const auto& [tp, shown] : p.tp_plans) {
    absl::StrAppend(&s, "\ntensor-parallel plan for tp=", tp, shown.proposed ? " (proposed)" : " (the job's)",
                    ", as parallel.tp_plan:\n", shown.rules.empty() ? "  (none: every parameter replicated)\n" : "",
                    FormatTpRules(shown.rules));
    if (!shown.replicated.empty())
      absl::StrAppend(&s, "  replicated because propagation cannot keep them sharded: ",
                      absl::StrJoin(shown.replicated, ", "), "\n");
    std::vector<TpAssignment> sharded;
    for (const TpAssignment& a : shown.assignments)
      if (a.placement.is_shard()) sharded.push_back(a);
    absl::StrAppend(&s, "sharded parameters (placement over tp; the other ", shown.assignments.size() - sharded.size(),
                    " are replicated):\n", FormatTpAssignments(sharded));
  }
  if (p.winner >= 0)
    absl::StrAppend(&s, "\nchoice: ", LayoutName(p.ranked[p.winner].layout), ": ", p.reason, "\n");
  else
    absl::StrAppend(&s, "\nno choice: ", p.reason, "\n");
  return s;
}

std::string PlanToJson(const Plan& p) {
  nlohmann::json j;
  const ModelDims& d = p.dims;
  j["inputs"] = {{"family", d.family},
                 {"n_layer", d.n_layer},
                 {"n_head", d.n_head},
                 {"n_kv_head", d.n_kv_head},
                 {"d_model", d.d_model},
                 {"ffn", d.ffn},
                 {"vocab", d.vocab},
                 {"seq_len", d.seq_len},
                 {"num_parameters", d.num_parameters},
                 {"batch", p.batch},
                 {"grad_accum_steps", p.grad_accum_steps},
                 {"world", p.hw.world},
                 {"nproc_per_node", p.hw.nproc_per_node > 0 ? p.hw.nproc_per_node : p.hw.world},
                 {"memory_bytes", p.hw.memory_bytes},
                 {"flops", p.hw.flops},
                 {"intra_bandwidth", p.hw.intra_bandwidth},
                 {"inter_bandwidth", p.hw.inter_bandwidth}};
  if (!p.model_summary.empty()) j["inputs"]["model"] = p.model_summary;
  nlohmann::json cands = nlohmann::json::array();
  for (const Candidate& c : p.ranked) {
    const MemoryEstimate& m = c.memory;
    cands.push_back({{"layout", LayoutName(c.layout)},
                     {"dp", c.layout.dp},
                     {"tp", c.layout.tp},
                     {"zero_stage", c.layout.zero_stage},
                     {"sequence_parallel", c.layout.sequence_parallel},
                     {"memory",
                      {{"parameters", m.parameters},
                       {"gradients", m.gradients},
                       {"optimizer", m.optimizer},
                       {"activations", m.activations},
                       {"workspace", m.workspace},
                       {"accumulators", m.accumulators},
                       {"total", m.total()}}},
                     {"comm",
                      {{"dp_bytes", c.comm.dp_bytes},
                       {"tp_bytes", c.comm.tp_bytes},
                       {"dp_collectives", c.comm.dp_collectives},
                       {"tp_collectives", c.comm.tp_collectives},
                       {"dp_inter_node", c.comm.dp_inter_node},
                       {"tp_inter_node", c.comm.tp_inter_node},
                       {"dp_seconds", c.comm.dp_seconds},
                       {"dp_exposed_seconds", c.comm.dp_exposed_seconds},
                       {"tp_seconds", c.comm.tp_seconds}}},
                     {"flops", c.flops},
                     {"compute_seconds", c.compute_seconds},
                     {"step_seconds", c.step_seconds},
                     {"feasible", c.feasible},
                     {"reason", c.reason}});
    if (!c.layout.tp_plan.empty()) {
      nlohmann::json rules = nlohmann::json::array();
      for (const TpRule& r : c.layout.tp_plan) rules.push_back({{"pattern", r.pattern}, {"style", r.style}});
      cands.back()["tp_plan"] = rules;
    }
  }
  j["candidates"] = cands;
  nlohmann::json skipped = nlohmann::json::array();
  for (const Skipped& k : p.skipped) skipped.push_back({{"dp", k.layout.dp}, {"tp", k.layout.tp}, {"reason", k.reason}});
  j["skipped"] = skipped;
  j["winner"] = p.winner;
  j["choice"] = p.winner >= 0 ? nlohmann::json(LayoutName(p.ranked[p.winner].layout)) : nlohmann::json(nullptr);
  j["reason"] = p.reason;
  return j.dump(2) + "\n";
}

}  // namespace loom::parallel
