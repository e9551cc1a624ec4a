// Batches: the named tensors a training or evaluation step consumes, and the
// per-window transforms of each batch kind.
//
// Kinds (data.kind):
//   causal  x = tokens [t, t + seq_len), y = tokens [t + 1, t + seq_len + 1)
//           (i32 [rows, seq_len]): next-token prediction;
//   mlm     x = a window of seq_len tokens with some positions replaced,
//           y = the original id at those positions and ignore_index elsewhere
//           (MaskWindow);
//   pairs   x = input records of a .npy array ([rows, ...], f32 for float
//           arrays, i32 for integer and bool arrays), y = label records (i32).
//
// A batch holds two tensors named by data.inputs (default "x" and "y"): the
// model input first, the targets second. Built-in model families read them
// as their graph inputs x and y; a model with other input names maps them in
// the job spec (data.inputs.x / data.inputs.y) and looks them up by name.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"
#include "base/tensor.h"

namespace loom::runtime::data {

enum class Kind { kCausal, kMlm, kPairs };
const char* KindName(Kind k);

struct Batch {
  std::vector<std::pair<std::string, Tensor>> inputs;  // [0]: model input, [1]: targets

  const Tensor& x() const { return inputs[0].second; }
  const Tensor& y() const { return inputs[1].second; }
  Tensor& mutable_x() { return inputs[0].second; }
  Tensor& mutable_y() { return inputs[1].second; }
  int64_t rows() const { return inputs.empty() ? 0 : x().shape()[0]; }
  const Tensor* Find(absl::string_view name) const;
};

struct MlmOptions {
  double rate = 0.15;            // share of positions selected for prediction
  int64_t mask_token = 0;        // the id a selected position usually becomes
  int64_t ignore_index = -100;   // the target of positions not selected
  double random_fraction = 0;    // of the selected positions: a uniformly random id instead
  double keep_fraction = 0;      // of the selected positions: the original id kept
};

// Masks one window of T tokens. Position t is selected when the uniform draw
// Philox(seed, draw).Uniform(3t) < rate; a selected position gets a random
// id (next uniform < random_fraction), keeps its id (< random_fraction +
// keep_fraction) or becomes mask_token; y holds the original id there and
// ignore_index elsewhere. When no position is selected, the one with the
// smallest draw is, so every window contributes to the loss. Deterministic
// in (seed, draw, t): a resumed run and every rank mask alike.
void MaskWindow(const MlmOptions& o, uint64_t seed, uint64_t draw, int64_t vocab, const int32_t* tokens, int64_t T,
                int32_t* x, int32_t* y);

}  // namespace loom::runtime::data
