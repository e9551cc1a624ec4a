#include "runtime/train/train_data.h"

#include <cmath>
#include <cstdio>

#include "base/status.h"
#include "runtime/data/bigram.h"

namespace loom::runtime::train {

absl::StatusOr<std::unique_ptr<data::Dataset>> OpenTrainingData(const v1::JobSpec& spec, bool print) {
  LOOM_ASSIGN_OR_RETURN(auto d, data::Dataset::Open(spec));
  bool scanned = false;
  LOOM_RETURN_IF_ERROR(d->ScanIds(data::kScanLimitBytes, &scanned));
  if (print) {
    std::printf("data: %s%s\n", d->Summary().c_str(),
                scanned ? "" : "; ids are checked as windows are read (over the up-front scan limit)");
    std::fflush(stdout);
  }
  return d;
}

absl::StatusOr<double> BaselineLoss(const data::Dataset& d, const v1::JobSpec& spec, bool print) {
  if (d.kind() != data::Kind::kCausal) return NAN;
  const auto& b = spec.data().bigram();
  if (b.skip()) {
    if (print) std::printf("bigram baseline: skipped (data.bigram.skip)\n");
    return NAN;
  }
  data::BigramOptions o;
  if (b.max_mib() > 0) o.max_bytes = static_cast<int64_t>(b.max_mib()) << 20;
  if (b.max_tokens() > 0) o.max_tokens = b.max_tokens();
  LOOM_ASSIGN_OR_RETURN(data::BigramResult r, data::BigramBaseline(d, spec.model().vocab(), o));
  if (print) {
    if (r.fitted) {
      std::printf("bigram baseline validation loss: %.4f (%s)\n", r.loss, r.note.c_str());
    } else {
      std::printf("bigram baseline: %s\n", r.note.c_str());
    }
  }
  return r.fitted ? r.loss : NAN;
}

}  // namespace loom::runtime::train
