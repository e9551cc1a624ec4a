// The tensor exchange directory shared with tests/parity/tensor_dir.py:
// index.json ({"name": {"dtype": "f32", "shape": [..]}}) plus name.bin holding
// the raw little-endian elements. Used to hand weights and batches to PyTorch
// and read its results back.
#pragma once

#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "base/tensor.h"

namespace loom::tests::parity {

absl::Status SaveTensorDir(const std::string& dir, const std::map<std::string, Tensor>& tensors);
absl::StatusOr<std::map<std::string, Tensor>> LoadTensorDir(const std::string& dir);

}  // namespace loom::tests::parity
