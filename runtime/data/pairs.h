// (input, label) records from two .npy files, for classifiers and other
// models that are not fed token windows (data.kind: pairs).
//
// inputs.npy holds [N, ...] elements of any supported numeric type (npy.h);
// labels.npy holds [N] or [N, ...] integers. Record i is inputs[i] and
// labels[i]. Both files are mapped read-only and only the records drawn are
// read. Float inputs become f32; integer and bool inputs become i32 (a value
// outside int32 is an error), as do labels. Limits given at open are checked
// on every value read, with the file and byte offset in the error.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "base/tensor.h"
#include "runtime/data/npy.h"
#include "runtime/data/shards.h"

namespace loom::runtime::data {

struct PairLimits {
  int64_t input_ids = 0;        // > 0: integer inputs must be in [0, input_ids)
  int64_t label_ids = 0;        // > 0: labels must be in [0, label_ids) or equal `ignore_label`
  int64_t ignore_label = -100;
};

class PairSource {
 public:
  // `field` / `labels_field` ("data.path" / "data.labels") prefix the errors.
  static absl::StatusOr<std::unique_ptr<PairSource>> Open(const std::string& inputs, const std::string& labels,
                                                          const PairLimits& limits, const std::string& field,
                                                          const std::string& labels_field);
  int64_t size() const { return inputs_.shape[0]; }
  // Per-record shapes (the array's shape without its first dimension).
  std::vector<int64_t> input_shape() const;
  std::vector<int64_t> label_shape() const;
  DType input_dtype() const { return inputs_.type.kind == 'f' ? DType::kF32 : DType::kI32; }
  std::string Describe() const;  // "inputs.npy (f4 [1000, 16]), labels.npy (i8 [1000])"

  // Copies record i into row `row` of x and y (tensors of [rows, ...]).
  absl::Status Read(int64_t i, int64_t row, Tensor* x, Tensor* y) const;

 private:
  PairSource() = default;
  absl::Status ReadInputs(int64_t i, int64_t row, Tensor* x) const;
  std::string inputs_path_, labels_path_;  // "<field>: <path>", as errors name them
  NpyHeader inputs_, labels_;
  std::unique_ptr<MappedFile> inputs_map_, labels_map_;
  PairLimits limits_;
};

}  // namespace loom::runtime::data
