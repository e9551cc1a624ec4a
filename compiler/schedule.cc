#include "compiler/schedule.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace loom::compiler {
namespace {

bool IsConstant(const std::string& kind) { return kind.empty() || kind == "constant"; }

template <typename T>
absl::Status Bad(absl::string_view key, const T& value, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(key, ": ", why, " (got ", value, ")"));
}

}  // namespace

double ScheduledLearningRate(const v1::TrainSpec& tr, int64_t step) {
  const double lr = tr.lr(), min = tr.min_lr();
  const int64_t warmup = tr.warmup_steps(), steps = tr.steps();
  if (warmup > 0 && step <= warmup) return lr * static_cast<double>(step) / static_cast<double>(warmup);
  const std::string& kind = tr.lr_schedule();
  if (IsConstant(kind)) return lr;
  const bool wsd = kind == "wsd";
  const int64_t start = wsd ? steps - tr.decay_steps() : warmup;
  const int64_t len = wsd ? tr.decay_steps() : steps - warmup;
  if (step <= start) return lr;
  const double p =
      len <= 1 ? 0.0 : std::clamp(static_cast<double>(step - start - 1) / static_cast<double>(len - 1), 0.0, 1.0);
  if (kind == "cosine") return min + (lr - min) * (1.0 + std::cos(M_PI * p)) / 2.0;
  return lr + (min - lr) * p;  // linear, and the decay of wsd
}

absl::Status ValidateSchedule(const v1::TrainSpec& tr) {
  const std::string& kind = tr.lr_schedule();
  const bool constant = IsConstant(kind);
  if (!constant && kind != "cosine" && kind != "linear" && kind != "wsd")
    return Bad("train.lr_schedule", kind, "expected constant, cosine, linear or wsd (warmup-stable-decay)");
  if (tr.warmup_steps() < 0) return Bad("train.warmup_steps", tr.warmup_steps(), "must not be negative");
  if (!(tr.min_lr() >= 0 && tr.min_lr() <= tr.lr()))
    return Bad("train.min_lr", tr.min_lr(), absl::StrCat("must be in [0, train.lr = ", tr.lr(), "]"));
  if (constant && tr.min_lr() != 0)
    return Bad("train.min_lr", tr.min_lr(), "applies to train.lr_schedule cosine, linear and wsd, not constant");
  if (kind != "wsd" && tr.decay_steps() != 0)
    return Bad("train.decay_steps", tr.decay_steps(), "applies to train.lr_schedule: wsd only");
  if (!constant && tr.warmup_steps() >= tr.steps())
    return Bad("train.warmup_steps", tr.warmup_steps(),
               absl::StrCat("leaves no step to decay over (train.steps = ", tr.steps(), ")"));
  if (kind == "wsd" && !(tr.decay_steps() >= 2 && tr.decay_steps() <= tr.steps() - tr.warmup_steps()))
    return Bad("train.decay_steps", tr.decay_steps(),
               absl::StrCat("wsd needs 2 <= decay_steps <= train.steps - train.warmup_steps = ",
                            tr.steps() - tr.warmup_steps()));
  return absl::OkStatus();
}

}  // namespace loom::compiler
