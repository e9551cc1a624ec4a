// The checkpoint manifest: a JSON file, manifest.json, in each checkpoint
// folder. Writing it is the commit marker (see checkpoint.h).
//
// It records, for every tensor, its global shape, dtype and a placement spec
// string (a parallel job's DTensorSpec::ToString(), e.g. "S(0)"; "R" for a
// consolidated export), and its shards: rectangles
// (offsets[], lengths[]) of the global index space, each stored as one tensor
// of a safetensors file written by one rank, with its absolute byte range in
// that file and the CRC-32C of those bytes. Plus the step, the data sampler
// state, the job spec text, the layout description and free-form extra strings
// (e.g. RNG states).
//
//   {"format": "loom-checkpoint", "version": 1, "step": 10, "world_size": 4,
//    "sampler": {"seed": 1, "epoch": 0, "position": 80},
//    "job_spec": "...", "layout": "...", "extra": {"k": "v"},
//    "tensors": [{"name": "w", "dtype": "F32", "shape": [4, 6], "spec": "S(0)",
//                 "shards": [{"file": "rank00000.safetensors", "key": "w", "rank": 0,
//                             "offsets": [0, 0], "lengths": [2, 6],
//                             "byte_range": [128, 176], "crc32c": 1234}, ...]}]}
//
// ParseManifest validates everything a reader relies on, so a hostile or
// damaged manifest is InvalidArgument naming the file and the field: shards
// inside the global shape, byte ranges matching the shard's element count,
// shards of a tensor disjoint and covering it exactly, file names without
// path separators, bounded counts and nesting (memory stays proportional to
// the capped file size).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "base/dtype.h"
#include "runtime/data/dataset.h"

namespace loom::runtime::checkpoint {

inline constexpr int kManifestVersion = 1;
inline constexpr uint64_t kMaxManifestBytes = 256ull << 20;
inline constexpr size_t kMaxShardsPerTensor = 4096;

struct ShardRecord {
  std::string file;  // relative to the checkpoint folder
  std::string key;   // tensor name inside the file
  int64_t rank = 0;
  std::vector<int64_t> offsets, lengths;  // rectangle in the global index space
  uint64_t byte_begin = 0, byte_end = 0;  // absolute offsets in the file
  uint32_t crc32c = 0;
};

struct TensorRecord {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;  // global
  std::string spec;
  std::vector<ShardRecord> shards;
};

struct Manifest {
  int64_t step = 0;
  int64_t world_size = 1;
  data::SamplerState sampler;
  std::string job_spec;
  std::string layout;
  std::map<std::string, std::string> extra;
  std::vector<TensorRecord> tensors;

  const TensorRecord* Find(absl::string_view name) const;
};

std::string ManifestToJson(const Manifest& m);
// Parses and validates; `label` (usually the path) prefixes every error.
absl::StatusOr<Manifest> ParseManifest(absl::string_view json, absl::string_view label);
// The checks ParseManifest applies, for manifests built in memory.
absl::Status ValidateManifest(const Manifest& m, absl::string_view label);

}  // namespace loom::runtime::checkpoint
