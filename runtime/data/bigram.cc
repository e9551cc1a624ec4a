#include "runtime/data/bigram.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status.h"

namespace loom::runtime::data {
namespace {

uint64_t Mix(uint64_t x) {  // splitmix64's finalizer
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

SparseBigram::SparseBigram(int64_t vocab, int64_t max_bytes)
    : vocab_(vocab), max_slots_(max_bytes / static_cast<int64_t>(sizeof(Slot))) {
  slots_.resize(static_cast<size_t>(std::min<int64_t>(4096, std::max<int64_t>(max_slots_, 0))));
}

bool SparseBigram::Grow() {
  const int64_t next = static_cast<int64_t>(slots_.size()) * 2;
  if (next > max_slots_ || next == 0) return false;
  std::vector<Slot> old(static_cast<size_t>(next));
  old.swap(slots_);
  const uint64_t mask = slots_.size() - 1;
  for (const Slot& s : old) {
    if (s.key == 0) continue;
    uint64_t h = Mix(s.key) & mask;
    while (slots_[h].key != 0) h = (h + 1) & mask;
    slots_[h] = s;
  }
  return true;
}

bool SparseBigram::Bump(uint64_t key) {
  const uint64_t k = key + 1;
  for (;;) {
    if (slots_.empty()) return false;
    const uint64_t mask = slots_.size() - 1;
    uint64_t h = Mix(k) & mask;
    while (slots_[h].key != 0 && slots_[h].key != k) h = (h + 1) & mask;
    if (slots_[h].key == k) {
      ++slots_[h].count;
      return true;
    }
    if (2 * (used_ + 1) <= static_cast<int64_t>(slots_.size())) {
      slots_[h] = {k, 1};
      ++used_;
      return true;
    }
    if (!Grow()) return false;
  }
}

uint64_t SparseBigram::Get(uint64_t key) const {
  if (slots_.empty()) return 0;
  const uint64_t k = key + 1, mask = slots_.size() - 1;
  for (uint64_t h = Mix(k) & mask; slots_[h].key != 0; h = (h + 1) & mask)
    if (slots_[h].key == k) return slots_[h].count;
  return 0;
}

bool SparseBigram::Add(const int32_t* t, int64_t n) {
  const uint64_t row = static_cast<uint64_t>(vocab_) + 1;
  for (int64_t i = 0; i + 1 < n; ++i) {
    const uint64_t a = static_cast<uint64_t>(t[i]);
    if (!Bump(a * row + static_cast<uint64_t>(t[i + 1])) || !Bump(a * row + static_cast<uint64_t>(vocab_)))
      return false;
  }
  return true;
}

double SparseBigram::NegLogLikelihood(const int32_t* t, int64_t n, double alpha) const {
  const uint64_t row = static_cast<uint64_t>(vocab_) + 1;
  double nll = 0;
  for (int64_t i = 0; i + 1 < n; ++i) {
    const uint64_t a = static_cast<uint64_t>(t[i]);
    const double c = static_cast<double>(Get(a * row + static_cast<uint64_t>(t[i + 1])));
    const double r = static_cast<double>(Get(a * row + static_cast<uint64_t>(vocab_)));
    nll -= std::log((c + alpha) / (r + alpha * static_cast<double>(vocab_)));
  }
  return nll;
}

absl::StatusOr<BigramResult> BigramBaseline(const Dataset& data, int64_t vocab, const BigramOptions& o) {
  if (data.kind() != Kind::kCausal)
    return absl::FailedPreconditionError(absl::StrCat("the bigram baseline is for causal LMs; data.kind is ",
                                                      KindName(data.kind())));
  const int64_t need = data.window_tokens();
  std::vector<int32_t> w(static_cast<size_t>(need));
  SparseBigram model(vocab, o.max_bytes);
  BigramResult r;
  int64_t fit = 0;
  for (int64_t i = 0; i < data.train_samples() && fit < o.max_tokens; ++i) {
    LOOM_RETURN_IF_ERROR(data.ReadWindow(false, i, w.data()));
    if (!model.Add(w.data(), need)) {
      r.note = absl::StrFormat(
          "skipped: the first %d training tokens fill %d count-table entries; more would exceed %.0f MiB "
          "(data.bigram.max_mib)",
          fit + need, model.distinct_pairs(), o.max_bytes / 1048576.0);
      return r;
    }
    fit += need - 1;
  }
  double nll = 0;
  int64_t n = 0;
  for (int64_t j = 0; j < data.val_samples() && n < o.max_tokens; ++j) {
    LOOM_RETURN_IF_ERROR(data.ReadWindow(true, j, w.data()));
    nll += model.NegLogLikelihood(w.data(), need, o.alpha);
    n += need - 1;
  }
  r.fitted = n > 0;
  r.loss = n > 0 ? nll / static_cast<double>(n) : 0;
  r.note = absl::StrFormat("fitted on %d training token pairs (%d table entries, %.1f MiB), evaluated on %d", fit,
                           model.distinct_pairs(), model.table_bytes() / 1048576.0, n);
  return r;
}

}  // namespace loom::runtime::data
