// Calibration of the planner's memory model (a tool, not a test). It measures
// what Loom allocates on the calibration set below (parallel/testing/
// memory_probe.h), fits the coefficients of the planner's memory terms
// (planner.h: MemoryTermsOf) per family, and prints them in the form
// planner.cc holds, with every calibration row's error under the fit.
//
//   bazel run //parallel:planner_calibrate
//
// The calibration set is used here only. The tests check held-out
// configurations: planner_memory_test (single-process peaks) and
// planner_layout_memory_test (world-4 layouts, and world 1) use model sizes,
// batch sizes and layouts that do not appear below.
//
// Per family, two fits, each minimising the sum of squared relative errors
// ((y - known - terms . k) / y)^2 (weighted least squares on columns scaled
// to unit norm, solved by Householder QR):
//   arena        rows: one rank's lowered training step (CompileParallel) for
//                layouts of world 1, 2 and 8, and the single-process configs
//                at world 1; y = state + arena. The estimate is parameters +
//                optimizer + max(gradients + activation phase, end phase), so
//                the rows are split by the phase that is larger under the
//                current coefficients, each phase fitted on its rows, until
//                the split stops changing;
//   workspace    rows: the single-process configs, y = the allocator's
//                high-water mark around Trainer::Create + 3 steps, known =
//                that config's measured state + arena.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/thread_pool.h"
#include "parallel/planner.h"
#include "tests/parallel/memory_probe.h"

namespace loom::tests::parallel {
namespace {

using testing::ModelOf;

struct Row {
  std::string what;
  double y = 0, known = 0;
  std::vector<double> terms;
};

// An arena row: y = state + arena; the estimate's parts without coefficients.
struct ArenaRow {
  std::string what;
  double y = 0;
  double params_opt = 0, grads = 0;  // parameters + optimizer, gradients (bytes)
  loom::parallel::MemoryTerms terms;
};

// min_k sum_i ((y_i - known_i - terms_i . k) / y_i)^2.
std::vector<double> FitRelative(const std::vector<Row>& rows, int n) {
  const int m = static_cast<int>(rows.size());
  std::vector<std::vector<double>> a(m, std::vector<double>(n));
  std::vector<double> b(m), scale(n, 0);
  for (int i = 0; i < m; ++i) {
    for (int j = 0; j < n; ++j) a[i][j] = rows[i].terms[j] / rows[i].y;
    b[i] = (rows[i].y - rows[i].known) / rows[i].y;
  }
  for (int j = 0; j < n; ++j) {
    for (int i = 0; i < m; ++i) scale[j] += a[i][j] * a[i][j];
    scale[j] = scale[j] > 0 ? std::sqrt(scale[j]) : 1;
    for (int i = 0; i < m; ++i) a[i][j] /= scale[j];
  }
  // Householder QR, applied to b as it goes; then back substitution.
  for (int j = 0; j < n; ++j) {
    double norm = 0;
    for (int i = j; i < m; ++i) norm += a[i][j] * a[i][j];
    norm = std::sqrt(norm);
    if (norm == 0) continue;
    const double alpha = a[j][j] > 0 ? -norm : norm;
    std::vector<double> v(m, 0);
    for (int i = j; i < m; ++i) v[i] = a[i][j];
    v[j] -= alpha;
    double vv = 0;
    for (int i = j; i < m; ++i) vv += v[i] * v[i];
    if (vv == 0) continue;
    for (int c = j; c < n; ++c) {
      double dot = 0;
      for (int i = j; i < m; ++i) dot += v[i] * a[i][c];
      for (int i = j; i < m; ++i) a[i][c] -= 2 * dot / vv * v[i];
    }
    double dot = 0;
    for (int i = j; i < m; ++i) dot += v[i] * b[i];
    for (int i = j; i < m; ++i) b[i] -= 2 * dot / vv * v[i];
  }
  std::vector<double> k(n, 0);
  for (int j = n - 1; j >= 0; --j) {
    double s = b[j];
    for (int c = j + 1; c < n; ++c) s -= a[j][c] * k[c];
    k[j] = std::fabs(a[j][j]) > 1e-12 ? s / a[j][j] : 0;
  }
  for (int j = 0; j < n; ++j) k[j] /= scale[j];
  return k;
}

double PhaseA(const ArenaRow& r, const std::vector<double>& k) {
  double s = r.grads;
  for (int j = 0; j < loom::parallel::kActivationTerms; ++j) s += r.terms.activation[j] * k[j];
  return s;
}

// The arena fit: the activation-phase coefficients and `end`; prints how the
// rows split between the phases and whether the split settled.
std::vector<double> FitArena(const std::vector<ArenaRow>& rows, double* end) {
  std::vector<bool> in_end(rows.size(), false);
  std::vector<double> k;
  *end = 1;
  bool settled = false;
  int rounds = 0;
  while (!settled && rounds < 50) {
    ++rounds;
    std::vector<Row> a, b;
    for (size_t i = 0; i < rows.size(); ++i) {
      const ArenaRow& r = rows[i];
      if (in_end[i])
        b.push_back({r.what, r.y, r.params_opt, {r.terms.end}});
      else
        a.push_back({r.what, r.y, r.params_opt + r.grads, {r.terms.activation.begin(), r.terms.activation.end()}});
    }
    k = FitRelative(a, loom::parallel::kActivationTerms);
    if (!b.empty()) *end = FitRelative(b, 1)[0];
    settled = true;
    for (size_t i = 0; i < rows.size(); ++i) {
      const bool e = *end * rows[i].terms.end > PhaseA(rows[i], k);
      settled = settled && e == in_end[i];
      in_end[i] = e;
    }
  }
  const auto n_end = std::count(in_end.begin(), in_end.end(), true);
  std::printf("arena rows: %zu in the activation phase, %zu in the end phase (%s after %d rounds)\n",
              rows.size() - n_end, static_cast<size_t>(n_end), settled ? "settled" : "NOT settled", rounds);
  return k;
}

struct Config {
  v1::ModelSpec model;
  int64_t batch;
};

// Single-process configs: one base per family and one-at-a-time variations
// of depth, width, sequence, batch, vocabulary and ffn, plus mixed sizes from
// tiny (under 1 MB) to about 200 MB.
std::vector<Config> PeakConfigs(const std::string& f) {
  const bool llama = f == "llama";
  const int kv = llama ? 2 : 4;
  std::vector<Config> c;
  for (int L : {1, 2, 4}) c.push_back({ModelOf(f, L, 4, kv, 64, 32, 256), 4});
  for (int C : {32, 128}) c.push_back({ModelOf(f, 2, 4, kv, C, 32, 256), 4});
  for (int T : {16, 64}) c.push_back({ModelOf(f, 2, 4, kv, 64, T, 256), 4});
  for (int B : {1, 8}) c.push_back({ModelOf(f, 2, 4, kv, 64, 32, 256), B});
  c.push_back({ModelOf(f, 2, 4, kv, 64, 32, 1024), 4});
  c.push_back({ModelOf(f, 2, 4, kv, 64, 32, 256, llama ? 384 : 512), 4});
  c.push_back({ModelOf(f, 2, 4, kv, 128, 64, 256), 32});
  c.push_back({ModelOf(f, 6, 8, llama ? 2 : 8, 256, 128, 1024), 8});
  c.push_back({ModelOf(f, 1, 2, 1 + !llama, 32, 16, 256), 1});
  c.push_back({ModelOf(f, 3, 6, llama ? 3 : 6, 192, 96, 512), 2});
  c.push_back({ModelOf(f, 2, 16, llama ? 4 : 16, 256, 64, 256), 4});
  c.push_back({ModelOf(f, 1, 2, 2, 16, 8, 64), 2});
  c.push_back({ModelOf(f, 2, 2, 1 + !llama, 32, 8, 128), 1});
  c.push_back({ModelOf(f, 1, 4, llama ? 2 : 4, 32, 24, 160), 1});
  return c;
}

// Layout models: 8 heads (kv too), so every tp up to 8 is legal.
std::vector<v1::ModelSpec> LayoutModels(const std::string& f) {
  return {ModelOf(f, 2, 8, 8, 128, 32, 256), ModelOf(f, 4, 8, 8, 64, 64, 256), ModelOf(f, 1, 8, 8, 64, 16, 1024)};
}

// Worlds 1, 2 and 8 (the held-out test uses world 4).
std::vector<loom::parallel::Layout> LayoutSet() {
  return {{1, 1, 0, false}, {2, 1, 0, false}, {1, 2, 0, false}, {1, 2, 0, true}, {2, 1, 1, false},
          {2, 1, 2, false}, {2, 1, 3, false}, {8, 1, 0, false}, {8, 1, 1, false}, {8, 1, 2, false},
          {8, 1, 3, false}, {4, 2, 0, false}, {4, 2, 3, false}, {2, 4, 0, false}, {2, 4, 0, true},
          {1, 8, 0, false}};
}

// Prints one row's error; returns |error|.
double Report(const char* kind, const std::string& what, double measured, double estimate) {
  const double e = (estimate - measured) / measured;
  std::printf("  %-6s %-58s measured %11.0f estimate %11.0f (%+.1f%%)\n", kind, what.c_str(), measured, estimate,
              100 * e);
  return std::fabs(e);
}

struct Measured {
  std::vector<ArenaRow> arena;
  std::vector<Row> workspace;
  std::vector<Config> peak_configs;
  std::vector<std::pair<Config, loom::parallel::Layout>> layouts;
};

absl::Status AddArenaRow(const v1::ModelSpec& m, int64_t b, const loom::parallel::Layout& l, Measured& out) {
  loom::parallel::Hardware hw;
  hw.world = l.dp * l.tp;
  LOOM_ASSIGN_OR_RETURN(loom::parallel::MemoryTerms t, loom::parallel::MemoryTermsOf(m, b, hw, l));
  LOOM_ASSIGN_OR_RETURN(loom::parallel::Candidate e, loom::parallel::Estimate(m, b, hw, l));
  LOOM_ASSIGN_OR_RETURN(testing::LocalProgram lp, testing::LocalProgramBytes(m, b, l));
  const loom::parallel::MemoryEstimate& me = e.memory;
  out.arena.push_back({testing::Describe(m, b) + " " + loom::parallel::LayoutName(l), static_cast<double>(lp.total()),
                       static_cast<double>(me.parameters + me.optimizer), static_cast<double>(me.gradients), t});
  out.layouts.push_back({{m, b}, l});
  return absl::OkStatus();
}

absl::StatusOr<Measured> Measure(const std::string& family) {
  Measured out;
  for (const Config& c : PeakConfigs(family)) {
    LOOM_RETURN_IF_ERROR(AddArenaRow(c.model, c.batch, {1, 1, 0, false}, out));
    LOOM_ASSIGN_OR_RETURN(int64_t peak, testing::TrainerPeakBytes(testing::TrainSpec(c.model, c.batch), 3));
    LOOM_ASSIGN_OR_RETURN(
        loom::parallel::MemoryTerms t,
        loom::parallel::MemoryTermsOf(c.model, c.batch, loom::parallel::Hardware{}, {1, 1, 0, false}));
    out.workspace.push_back({testing::Describe(c.model, c.batch), static_cast<double>(peak), out.arena.back().y,
                             {t.workspace.begin(), t.workspace.end()}});
    out.peak_configs.push_back(c);
  }
  for (const v1::ModelSpec& m : LayoutModels(family))
    for (int64_t b : {8, 32})
      for (const loom::parallel::Layout& l : LayoutSet()) {
        loom::parallel::Hardware hw;
        hw.world = l.dp * l.tp;
        if (!loom::parallel::MemoryTermsOf(m, b, hw, l).ok()) continue;  // not a legal layout for this model
        LOOM_RETURN_IF_ERROR(AddArenaRow(m, b, l, out));
      }
  return out;
}

// Fits and prints one family's coefficients and every calibration row's error
// through Estimate with them.
absl::Status Calibrate(const std::string& family) {
  LOOM_ASSIGN_OR_RETURN(Measured ms, Measure(family));
  std::printf("%s: %zu arena rows, %zu peak rows\n", family.c_str(), ms.arena.size(), ms.workspace.size());
  loom::parallel::MemoryCoefficients k;
  const std::vector<double> a = FitArena(ms.arena, &k.end);
  std::copy(a.begin(), a.end(), k.activation.begin());
  const std::vector<double> w = FitRelative(ms.workspace, loom::parallel::kWorkspaceTerms);
  std::copy(w.begin(), w.end(), k.workspace.begin());
  double worst_arena = 0, worst_peak = 0;
  for (size_t i = 0; i < ms.arena.size(); ++i) {
    const auto& [c, l] = ms.layouts[i];
    loom::parallel::Hardware hw;
    hw.world = l.dp * l.tp;
    LOOM_ASSIGN_OR_RETURN(loom::parallel::Candidate e, loom::parallel::Estimate(c.model, c.batch, hw, l, &k));
    const double est = static_cast<double>(e.memory.total() - e.memory.workspace);
    worst_arena = std::max(worst_arena, Report("arena", ms.arena[i].what, ms.arena[i].y, est));
  }
  for (size_t i = 0; i < ms.workspace.size(); ++i) {
    const Config& c = ms.peak_configs[i];
    LOOM_ASSIGN_OR_RETURN(loom::parallel::Candidate e,
                          loom::parallel::Estimate(c.model, c.batch, loom::parallel::Hardware{}, {1, 1, 0, false}, &k));
    worst_peak = std::max(worst_peak, Report("peak", ms.workspace[i].what, ms.workspace[i].y,
                                             static_cast<double>(e.memory.total())));
  }
  std::printf("%s worst |error| on the calibration set: state + arena %.1f%%, single-process peak %.1f%%\n",
              family.c_str(), 100 * worst_arena, 100 * worst_peak);
  std::printf("  static const MemoryCoefficients %s{{", family.c_str());
  for (int j = 0; j < loom::parallel::kActivationTerms; ++j) std::printf("%s%.4g", j ? ", " : "", k.activation[j]);
  std::printf("}, %.4g, {", k.end);
  for (int j = 0; j < loom::parallel::kWorkspaceTerms; ++j) std::printf("%s%.4g", j ? ", " : "", k.workspace[j]);
  std::printf("}};\n  (activation terms:");
  for (const char* n : loom::parallel::ActivationTermNames()) std::printf(" %s", n);
  std::printf("; end; workspace terms:");
  for (const char* n : loom::parallel::WorkspaceTermNames()) std::printf(" %s", n);
  std::printf(")\n\n");
  return absl::OkStatus();
}

}  // namespace
}  // namespace loom::tests::parallel

int main() {
  loom::SetNumThreads(1);
  for (const char* family : {"gpt", "llama"}) {
    absl::Status s = loom::tests::parallel::Calibrate(family);
    if (!s.ok()) {
      std::fprintf(stderr, "planner_calibrate: %s: %s\n", family, s.ToString().c_str());
      return 1;
    }
  }
  return 0;
}
