#include "parallel/planner.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/match.h"
#include "base/status.h"
#include "compiler/models/models.h"
#include "nlohmann/json.hpp"

namespace loom::parallel {
namespace {

// The memory model's coefficients, in f32 units per token of the local batch
// unless noted. Least-squares fits (relative error) of what Loom allocates:
// the real lowered programs' arenas for dp/tp/ZeRO/SP layouts of small GPT and
// Llama configs (planner_layouts.cc: CompileParallel + lowering with
// do-nothing communicators) together with single-process Trainer peaks
// (planner_calibrate.cc). Fitted on those: within 12% of every layout's
// state + arena and 10% of every single-process peak.
//
// Arena of the training step = the local gradients: full for ZeRO 0/1 (reduced
// where the optimizer consumes them), the 1/dp shards for ZeRO 2/3 (each
// reduce_scattered right after its producer: compiler/spmd/schedule.h)
//   + per layer: rep_c*C + (tp_c*C + tp_f*F)/tp - sp_save*C*(1 - 1/tp) under SP
//   + tail_c*C + logits_v*V/tp (embedding/final norm, logits and their grad)
//   - overlap * min(12*L*C/tp per token, gradient floats): activations die as
//     gradients appear, so the two peaks partly coincide
//   + ZeRO-3: the local parameters / (L + 2), about one block's gathered
//     copies (each use gathers its own and frees it after; the fitted z3
//     coefficient described the older copies kept from forward to backward
//     and is no longer used)
//   + const.
// Workspace = the evaluation program's arena: ws_c*C + ws_v*V/tp.
struct MemoryModel {
  double rep_c, tp_c, tp_f, sp_save, tail_c, logits_v, overlap, z3, const_bytes, ws_c, ws_v;
};

const MemoryModel& Coefficients(const std::string& family) {
  static const MemoryModel gpt{5.633, -8.543, 4.228, 3.145, 15.643, 2, 0.556, 0.55, -11514, 14.18, 1};
  static const MemoryModel llama{2.045, -2.473, 6.791, 2.063, 10.04, 2, 0.809, 0.586, -83360, 9.317, 1};
  return family == "llama" ? llama : gpt;
}

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Which parameters tensor parallelism shards (Megatron layout): every matrix
// (column- or row-parallel, the vocab-parallel embedding and output) except
// GPT's learned positions, and the biases of the column-parallel layers.
bool ShardedByTp(const models::ParamInfo& p) {
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
  LOOM_ASSIGN_OR_RETURN(auto params, models::Parameters(m));
  d.num_parameters = models::NumParameters(params);
  return d;
}

absl::StatusOr<Candidate> Estimate(const v1::ModelSpec& model_in, int64_t batch, const Hardware& hw,
                                   const Layout& l) {
  LOOM_ASSIGN_OR_RETURN(ModelDims d, DimsOf(model_in));
  LOOM_RETURN_IF_ERROR(CheckParallelLayout(model_in, batch, l, hw.world));
  v1::ModelSpec model = model_in;
  model.set_family(d.family);
  model.set_n_kv_head(static_cast<int>(d.n_kv_head));
  model.set_ffn_hidden(static_cast<int>(d.ffn));
  LOOM_ASSIGN_OR_RETURN(auto params, models::Parameters(model));

  const int64_t dp = l.dp, tp = l.tp;
  // Local (per tp rank) parameter count.
  int64_t local = 0;
  for (const auto& p : params) {
    int64_t n = 1;
    for (int64_t s : p.shape) n *= s;
    local += ShardedByTp(p) ? CeilDiv(n, tp) : n;
  }

  Candidate c;
  c.layout = l;
  MemoryEstimate& m = c.memory;
  const int64_t f32 = 4;
  const MemoryModel& k = Coefficients(d.family);
  // Parameters (f32 master weights); ZeRO-3 keeps its 1/dp shard plus the
  // gathered copies that are live at the peak.
  const bool z3 = l.zero_stage >= 3 && dp > 1;
  // ZeRO-2/3 (spmd2): each gradient's reduce_scatter runs right after its
  // producer (compiler/spmd/schedule.h), so the arena holds the 1/dp shards
  // (the full gradients are transient); ZeRO-3 gathers a parameter per use
  // and frees it after, so about one block's gathered parameters are live.
  const bool rs = l.zero_stage >= 2 && dp > 1;
  const int64_t grad_local = rs ? CeilDiv(local, dp) : local;
  m.parameters = f32 * (z3 ? CeilDiv(local, dp) + CeilDiv(local, d.n_layer + 2) : local);
  // Gradients: the local gradients live in the step's arena until the
  // optimizer (full for ZeRO 0/1, the shards for ZeRO 2/3).
  m.gradients = f32 * grad_local;
  m.optimizer = 2 * f32 * ((l.zero_stage >= 1 && dp > 1) ? CeilDiv(local, dp) : local);

  // Activations of the local micro-batch (batch / dp rows).
  const double tokens = static_cast<double>(batch / dp) * d.seq_len;
  const double ab = hw.activation_bytes / 4.0;  // the fit is in f32 units
  const double C = d.d_model, F = d.ffn, V = d.vocab, L = d.n_layer;
  double per_layer = k.rep_c * C + (k.tp_c * C + k.tp_f * F) / tp;
  if (l.sequence_parallel) per_layer -= k.sp_save * C * (1.0 - 1.0 / tp);
  const double act_f32 = tokens * (L * per_layer + k.tail_c * C + k.logits_v * V / tp);
  const double overlap = k.overlap * std::min(12.0 * L * tokens * C / tp, static_cast<double>(grad_local));
  m.activations = std::max<int64_t>(0, static_cast<int64_t>(4 * (ab * act_f32 - overlap) + k.const_bytes));
  m.workspace = static_cast<int64_t>(4 * ab * tokens * (k.ws_c * C + k.ws_v * V / tp));

  // Compute.
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

  if (m.total() > hw.memory_bytes) {
    c.feasible = false;
    std::string what = "activations";
    int64_t most = m.activations;
    for (auto [name, v] : {std::pair<const char*, int64_t>{"parameters", m.parameters}, {"gradients", m.gradients},
                           {"optimizer state", m.optimizer}, {"workspace", m.workspace}})
      if (v > most) most = v, what = name;
    c.reason = absl::StrCat("needs ", Bytes(m.total()), "iB per rank > budget ", Bytes(hw.memory_bytes),
                            "iB (largest: ", what, " ", Bytes(most), "iB)");
  }
  return c;
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
                              const std::function<bool(const Layout&)>& only) {
  Plan plan;
  LOOM_ASSIGN_OR_RETURN(plan.dims, DimsOf(model));
  plan.batch = batch;
  plan.hw = hw;
  LOOM_ASSIGN_OR_RETURN(Enumeration e, EnumerateLayouts(model, batch, hw));
  plan.skipped = e.skipped;
  for (const Layout& l : e.layouts) {
    if (only && !only(l)) continue;
    LOOM_ASSIGN_OR_RETURN(Candidate c, Estimate(model, batch, hw, l));
    plan.ranked.push_back(std::move(c));
  }
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
  return plan;
}

std::string FormatPlanTable(const Plan& p) {
  const ModelDims& d = p.dims;
  std::string s = absl::StrFormat(
      "model: %s, %d layers, d_model %d, %d heads (%d kv), ffn %d, vocab %d, seq_len %d: %.2fM parameters\n"
      "batch %d; world %d (%d per node); budget %siB per rank; %g TFLOP/s per device; links: intra %g Gb/s, "
      "inter %g Gb/s\n\n",
      d.family, d.n_layer, d.d_model, d.n_head, d.n_kv_head, d.ffn, d.vocab, d.seq_len, d.num_parameters / 1e6,
      p.batch, p.hw.world, p.hw.nproc_per_node > 0 ? p.hw.nproc_per_node : p.hw.world, Bytes(p.hw.memory_bytes),
      p.hw.flops / 1e12, p.hw.intra_bandwidth * 8 / 1e9, p.hw.inter_bandwidth * 8 / 1e9);
  absl::StrAppendFormat(&s, "%-4s %-20s %8s %8s %8s %8s %8s %8s %9s %9s %10s %10s  %s\n", "rank", "layout", "params",
                        "grads", "optim", "activ", "work", "total", "dp-comm", "tp-comm", "compute", "step", "fits");
  for (size_t i = 0; i < p.ranked.size(); ++i) {
    const Candidate& c = p.ranked[i];
    const MemoryEstimate& m = c.memory;
    absl::StrAppendFormat(&s, "%-4s %-20s %8s %8s %8s %8s %8s %8s %9s %9s %10s %10s  %s\n",
                          absl::StrCat(i + 1, static_cast<int>(i) == p.winner ? "*" : ""), LayoutName(c.layout),
                          Bytes(m.parameters), Bytes(m.gradients), Bytes(m.optimizer), Bytes(m.activations),
                          Bytes(m.workspace), Bytes(m.total()),
                          Bytes(c.comm.dp_bytes) + (c.comm.dp_inter_node ? "x" : ""),
                          Bytes(c.comm.tp_bytes) + (c.comm.tp_inter_node ? "x" : ""), Seconds(c.compute_seconds),
                          Seconds(c.step_seconds), c.feasible ? "yes" : "no: " + c.reason);
  }
  absl::StrAppend(&s, "\nmemory per rank in bytes (K/M/G = KiB/MiB/GiB); comm: bytes per rank per step, x = on the "
                      "inter-node link\n");
  for (const Skipped& k : p.skipped) absl::StrAppend(&s, "skipped dp=", k.layout.dp, " tp=", k.layout.tp, ": ", k.reason, "\n");
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
                 {"world", p.hw.world},
                 {"nproc_per_node", p.hw.nproc_per_node > 0 ? p.hw.nproc_per_node : p.hw.world},
                 {"memory_bytes", p.hw.memory_bytes},
                 {"flops", p.hw.flops},
                 {"intra_bandwidth", p.hw.intra_bandwidth},
                 {"inter_bandwidth", p.hw.inter_bandwidth}};
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
