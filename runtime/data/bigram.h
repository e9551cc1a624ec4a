// The bigram baseline of a causal LM: the validation cross-entropy (nats per
// token) of a count model P(b | a) = (c(a, b) + alpha) / (c(a) + alpha * V)
// fitted on training windows. A language model that trains should beat it.
//
// Memory is bounded for any vocabulary: counts live in an open-addressing
// table over the pairs actually seen (16 bytes a slot, load at most 1/2),
// grown up to BigramOptions::max_bytes. The fit reads the training windows in
// set order up to max_tokens tokens, and the evaluation reads validation
// windows up to max_tokens. When the distinct pairs outgrow the table, the
// baseline is skipped and the result says why.
//
// SparseBigram is the count model itself; bigram_test.cc holds its plain
// reference (V * V doubles).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/data/dataset.h"

namespace loom::runtime::data {

struct BigramOptions {
  int64_t max_bytes = 64ll << 20;     // table limit
  int64_t max_tokens = 16ll << 20;    // training (and validation) tokens read
  double alpha = 0.1;                 // add-alpha smoothing
};

struct BigramResult {
  bool fitted = false;  // false: skipped, `note` says why
  double loss = 0;
  std::string note;     // what was fitted on, or why it was skipped
};

class SparseBigram {
 public:
  SparseBigram(int64_t vocab, int64_t max_bytes);
  // Counts the pairs (t[i], t[i + 1]) of one run of tokens; false when the
  // table would outgrow max_bytes (the counts are then incomplete).
  bool Add(const int32_t* t, int64_t n);
  // Sum of -log P(t[i + 1] | t[i]) over the pairs of the run.
  double NegLogLikelihood(const int32_t* t, int64_t n, double alpha) const;
  int64_t distinct_pairs() const { return used_; }  // table entries: pairs and row totals
  int64_t table_bytes() const { return static_cast<int64_t>(slots_.size() * sizeof(Slot)); }

 private:
  struct Slot {
    uint64_t key = 0;  // 0: empty; else pair key + 1
    uint64_t count = 0;
  };
  bool Bump(uint64_t key);
  uint64_t Get(uint64_t key) const;
  bool Grow();
  int64_t vocab_, max_slots_;
  std::vector<Slot> slots_;
  int64_t used_ = 0;
};

// The baseline on a causal dataset's windows (see the top of this file).
absl::StatusOr<BigramResult> BigramBaseline(const Dataset& data, int64_t vocab, const BigramOptions& o = {});

}  // namespace loom::runtime::data
