#include "parallel/parallel_check.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "base/echo.h"
#include "base/status.h"

namespace loom::parallel {
namespace {

absl::Status Bad(absl::string_view key, absl::string_view why, absl::string_view got) {
  return absl::InvalidArgumentError(absl::StrCat(key, ": ", why, " (got ", EchoValue(got), ")"));
}

bool IsOnnx(const v1::ModelSpec& model) { return model.family() == "onnx"; }

absl::Status CheckTpPlan(const v1::ModelSpec& model, const std::vector<TpRule>& plan, int tp) {
  if (!plan.empty() && !IsOnnx(model))
    return Bad("parallel.tp_plan", absl::StrCat("applies to imported models (model.onnx); ", model.family(),
                                                " uses its built-in tensor-parallel plan"),
               absl::StrCat(plan.size(), " rules"));
  for (const TpRule& r : plan) {
    if (r.pattern.empty()) return Bad("parallel.tp_plan", "a pattern is empty", absl::StrCat("'': ", r.style));
    const auto& styles = TpStyles();
    if (std::find(styles.begin(), styles.end(), r.style) == styles.end())
      return Bad(absl::StrCat("parallel.tp_plan[\"", EchoValue(r.pattern), "\"]"), "expected colwise, rowwise, vocab or replicate",
                 r.style);
  }
  if (IsOnnx(model) && tp > 1 && plan.empty())
    return Bad("parallel.tp_plan",
               absl::StrCat("tp = ", tp, " needs a plan for an ONNX model (parameter-name patterns and their "
                                         "styles), or tp: auto; `loom plan JOB.yaml` proposes one"),
               "none");
  return absl::OkStatus();
}

}  // namespace

const std::vector<std::string>& TpStyles() {
  static const auto* s = new std::vector<std::string>{"colwise", "rowwise", "vocab", "replicate"};
  return *s;
}

std::vector<TpRule> TpPlanFromSpec(const v1::ParallelSpec& p) {
  std::vector<TpRule> out;
  for (const auto& r : p.tp_plan()) out.push_back({r.pattern(), r.style()});
  return out;
}

absl::Status CheckWorldSize(int world, int dp, int tp) {
  if (world <= 0) return Bad("world size", "must be positive", absl::StrCat(world));
  if (tp > 0 && world % tp != 0)
    return Bad("parallel.tp", absl::StrCat("does not divide the world size ", world), absl::StrCat(tp));
  if (dp * tp != world)
    return Bad("parallel.dp", absl::StrCat("dp x tp must equal the world size ", world),
               absl::StrCat("dp=", dp, ", tp=", tp, ": ", dp * tp));
  return absl::OkStatus();
}

absl::Status CheckParallelLayout(const v1::ModelSpec& model, int64_t batch_size, const ParallelLayout& l,
                                 int world) {
  if (l.dp < 1) return Bad("parallel.dp", "must be positive", absl::StrCat(l.dp));
  if (l.tp < 1) return Bad("parallel.tp", "must be positive or auto", absl::StrCat(l.tp));
  if (l.zero_stage < 0 || l.zero_stage > 3)
    return Bad("parallel.zero_stage", "expected 0, 1, 2 or 3", absl::StrCat(l.zero_stage));
  const int n_head = IsOnnx(model) ? 0 : model.n_head();  // an imported graph's heads are its own
  const int n_kv = IsOnnx(model) ? 0 : model.n_kv_head() > 0 ? model.n_kv_head() : n_head;
  if (n_head > 0 && n_head % l.tp != 0)
    return Bad("parallel.tp", absl::StrCat("must divide model.n_head = ", n_head), absl::StrCat(l.tp));
  if (n_kv > 0 && n_kv % l.tp != 0)
    return Bad("parallel.tp", absl::StrCat("must divide model.n_kv_head = ", n_kv), absl::StrCat(l.tp));
  // The built-in plan splits the vocabulary (embedding, output head) and the
  // FFN width over tp, and under sequence parallelism the sequence too.
  if (!IsOnnx(model) && l.tp > 1) {
    if (model.vocab() > 0 && model.vocab() % l.tp != 0)
      return Bad("parallel.tp", absl::StrCat("must divide model.vocab = ", model.vocab(), " (vocab-parallel)"),
                 absl::StrCat(l.tp));
    if (model.ffn_hidden() > 0 && model.ffn_hidden() % l.tp != 0)
      return Bad("parallel.tp", absl::StrCat("must divide model.ffn_hidden = ", model.ffn_hidden()),
                 absl::StrCat(l.tp));
    if (l.sequence_parallel && model.seq_len() > 0 && model.seq_len() % l.tp != 0)
      return Bad("parallel.tp", absl::StrCat("must divide model.seq_len = ", model.seq_len(), " (sequence parallel)"),
                 absl::StrCat(l.tp));
  }
  if (l.sequence_parallel && l.tp < 2)
    return Bad("parallel.sequence_parallel", "needs parallel.tp > 1", absl::StrCat("tp=", l.tp));
  if (l.sequence_parallel && IsOnnx(model))
    return Bad("parallel.sequence_parallel", "is not built for imported (ONNX) models", "true");
  LOOM_RETURN_IF_ERROR(CheckTpPlan(model, l.tp_plan, l.tp));
  if (batch_size > 0 && batch_size % l.dp != 0)
    return Bad("train.batch_size", absl::StrCat("must be divisible by parallel.dp = ", l.dp),
               absl::StrCat(batch_size));
  if (world > 0) LOOM_RETURN_IF_ERROR(CheckWorldSize(world, l.dp, l.tp));
  return absl::OkStatus();
}

absl::Status ValidateParallelSection(const v1::JobSpec& spec) {
  const auto& p = spec.parallel();
  if (p.bucket_mb() < 0 || p.bucket_mb() > 4096)
    return Bad("parallel.bucket_mb", "must be in [0, 4096] (MiB; 0: one all-reduce per gradient)",
               absl::StrCat(p.bucket_mb()));
  if (p.tp_auto()) {
    if (p.dp() < 1) return Bad("parallel.dp", "must be positive", absl::StrCat(p.dp()));
    if (p.zero_stage() < 0 || p.zero_stage() > 3)
      return Bad("parallel.zero_stage", "expected 0, 1, 2 or 3", absl::StrCat(p.zero_stage()));
    if (p.sequence_parallel() && IsOnnx(spec.model()))
      return Bad("parallel.sequence_parallel", "is not built for imported (ONNX) models", "true");
    return CheckTpPlan(spec.model(), TpPlanFromSpec(p), 1);
  }
  ParallelLayout l{p.dp(), p.tp(), p.zero_stage(), p.sequence_parallel(), TpPlanFromSpec(p)};
  return CheckParallelLayout(spec.model(), spec.train().batch_size(), l);
}

}  // namespace loom::parallel
