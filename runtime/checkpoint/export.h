// Consolidated export and import: one standard safetensors file holding every
// tensor of a checkpoint whole, under its manifest name (the conventional
// parameter names, e.g. "layers.0.attn.wq"), readable by any safetensors
// reader (PyTorch's safetensors package, tools in other languages).
//
//   loom export CKPT out.safetensors   ->  ExportCheckpoint(CKPT, "out.safetensors")
//   loom import out.safetensors        ->  ImportConsolidated(...), then train / save
//
// The export assembles each tensor from its shards with resharding reads (one
// tensor in memory at a time), writes tensors back to back in manifest order,
// and records metadata {"format": "pt", "loom.step": ..., "loom.layout": ...}.
// The file appears atomically (tmp + fsync + rename).
#pragma once

#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "base/tensor.h"
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/checkpoint/loader.h"
#include "runtime/checkpoint/safetensors.h"

namespace loom::runtime::checkpoint {

// Writes a safetensors file whose tensors `produce(i)` makes one at a time
// (entries[i] gives the name, dtype and shape; its data pointer is unused):
// one tensor in memory at a time, the file appearing atomically (tmp + fsync +
// rename).
absl::Status WriteSafetensorsStreamed(const std::string& out_path, const std::vector<TensorToWrite>& entries,
                                      const std::map<std::string, std::string>& metadata,
                                      const std::function<absl::StatusOr<Tensor>(size_t)>& produce);

// `rename` maps manifest names to exported names (absent: unchanged).
absl::Status ExportConsolidated(const CheckpointInfo& ckpt, const std::string& out_path,
                                const std::map<std::string, std::string>& rename = {});
// `ckpt_path` is a checkpoint root (its newest usable checkpoint is taken) or a step folder.
absl::Status ExportCheckpoint(const std::string& ckpt_path, const std::string& out_path);

struct ImportedTensors {
  std::vector<std::pair<std::string, Tensor>> tensors;  // file order
  std::map<std::string, std::string> metadata;
};
absl::StatusOr<ImportedTensors> ImportConsolidated(const std::string& path);

// A save request holding each tensor whole on rank 0 (spec "R"), e.g. to
// start a run from an imported file.
SaveRequest RequestFromTensors(const std::vector<std::pair<std::string, Tensor>>& tensors, int64_t step);

}  // namespace loom::runtime::checkpoint
