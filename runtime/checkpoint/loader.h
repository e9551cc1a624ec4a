// Loading checkpoints: pick the newest complete one (falling back past corrupt
// or partial ones, and saying why), verify it, and read arbitrary rectangular
// slices of any tensor (resharding on load).
//
//   LOOM_ASSIGN_OR_RETURN(LoadResult r, LoadLatest("/ckpt"));
//   if (!r.skipped.empty()) LOG(r.Explain());   // e.g. "step_...42: checksum mismatch in ..."
//   LOOM_ASSIGN_OR_RETURN(CheckpointReader reader, CheckpointReader::Open(r.ckpt));
//   // This rank's slice under the new layout: rows [3, 7) of "w".
//   LOOM_ASSIGN_OR_RETURN(Tensor part, reader.ReadSlice("w", {3, 0}, {4, 6}));
//
// OpenCheckpoint checks that every shard's file opens as a valid safetensors
// file whose entry agrees with the manifest (dtype, shape, byte range); with
// Verify::kFull it also reads every shard and compares CRC-32C. Errors name the
// file. ReadSlice finds the shards overlapping the requested rectangle and
// preads only the byte ranges it needs (a shard's dense span is read in one
// call when at least half of it is needed), then scatters them into place.
// Slice reads do not re-verify checksums (a checksum covers a whole shard);
// verify at load with Verify::kFull.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "base/tensor.h"
#include "runtime/checkpoint/manifest.h"
#include "runtime/checkpoint/safetensors.h"

namespace loom::runtime::checkpoint {

enum class Verify { kStructure, kFull };

struct CheckpointInfo {
  std::string dir;  // root/step_N
  int64_t step = 0;
  Manifest manifest;
};

struct LoadResult {
  CheckpointInfo ckpt;
  std::vector<std::string> skipped;  // newer checkpoints passed over, "name: reason"
  std::string Explain() const;       // one line per skipped checkpoint, then the chosen one
};

// Committed folders (root/step_N), newest first, as (step, path).
absl::StatusOr<std::vector<std::pair<int64_t, std::string>>> ListCheckpoints(const std::string& root);
// The folder name in root/latest ("" when there is no pointer).
absl::StatusOr<std::string> ReadLatestPointer(const std::string& root);
absl::StatusOr<CheckpointInfo> OpenCheckpoint(const std::string& dir, Verify verify = Verify::kFull);
// The newest checkpoint under root that opens and verifies. NotFound when none does
// (the message lists every reason).
absl::StatusOr<LoadResult> LoadLatest(const std::string& root, Verify verify = Verify::kFull);

// Where a run resumes, made safe to save again: picks the newest usable
// checkpoint (LoadLatest) and renames every committed folder newer than it
// (each one passed over as corrupt or incomplete), or every committed folder
// when none is usable, to root/corrupt.step_N.<unix seconds>[.<n>]: kept for
// inspection, out of the way of a new save of the same step. Run it on one
// process before others list root.
struct ResumePoint {
  std::optional<LoadResult> latest;      // the checkpoint to resume from, if any
  std::vector<std::string> quarantined;  // the folders moved aside, new paths
};
absl::StatusOr<ResumePoint> PrepareResume(const std::string& root, Verify verify = Verify::kFull);

class CheckpointReader {
 public:
  static absl::StatusOr<CheckpointReader> Open(const CheckpointInfo& ckpt);

  // The rectangle [offsets, offsets + lengths) of tensor `name`, as a new contiguous tensor.
  absl::StatusOr<Tensor> ReadSlice(const std::string& name, const std::vector<int64_t>& offsets,
                                   const std::vector<int64_t>& lengths);
  absl::StatusOr<Tensor> ReadFull(const std::string& name);
  const Manifest& manifest() const { return ckpt_.manifest; }
  uint64_t bytes_read() const { return bytes_read_; }  // data bytes pread so far

 private:
  absl::StatusOr<const SafetensorsReader*> File(const std::string& file);

  CheckpointInfo ckpt_;
  std::map<std::string, std::unique_ptr<SafetensorsReader>> files_;
  uint64_t bytes_read_ = 0;
};

}  // namespace loom::runtime::checkpoint
