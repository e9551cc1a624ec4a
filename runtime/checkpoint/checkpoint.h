// Saving checkpoints: sharded safetensors files plus a manifest, committed
// atomically, with retention and an asynchronous saver.
//
// On disk, under a root folder:
//   root/step_000000000042/manifest.json          the commit marker
//   root/step_000000000042/rank00000.safetensors  shards written by rank 0
//   root/step_000000000042/rank00001.safetensors  ...
//   root/latest                                   "step_000000000042\n"
//   root/.tmp.step_000000000043/                  a save in progress (or a stale one)
//
// Commit protocol (each step finishes before the next starts):
//   1. BeginSave: create root/.tmp.step_N (replacing a leftover one).
//   2. Each rank: WriteRankShards writes rankRRRRR.safetensors in it and fsyncs
//      the file; the returned shard records (byte ranges, CRC-32C) go to rank 0.
//   3. CommitSave (rank 0): validate the manifest, fsync the folder, write
//      manifest.json (tmp + fsync + rename), fsync the folder, rename the folder
//      to root/step_N, fsync root. The checkpoint now exists.
//   4. Atomically replace root/latest (tmp + fsync + rename + fsync root).
//   5. Retention: step folders beyond the newest keep_last are first renamed
//      to root/.tmp.del.* (atomic), then removed.
// A crash at any point leaves either no root/step_N or a complete one; "latest"
// names only committed folders. CleanStale (call at start) removes leftover
// root/.tmp.* folders and files.
//
// A CommitGate (CheckpointOptions::gate) ends commits for good when a worker
// is told to stop: Close() waits for a commit past its check (steps 3-5 from
// the rename on) to finish, and every later CommitSave fails with Cancelled
// before it renames anything, so no checkpoint becomes visible after Close().
//
// A shard is a rectangle of a tensor's global index space: offsets[] and the
// data tensor, whose shape gives lengths[]. The shards of one tensor must be
// disjoint and cover it (the manifest checks); replicated copies are saved once.
//
//   SaveRequest req;  req.step = 100;  req.tensors = {...};
//   LOOM_RETURN_IF_ERROR(SaveCheckpoint("/ckpt", req, {.keep_last = 3}));
//
// AsyncCheckpointer::SaveAsync snapshots (clones) the shard data on the
// caller's thread, then a saver thread writes and commits while the caller
// continues; Wait() returns the outcome.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "base/tensor.h"
#include "runtime/checkpoint/manifest.h"
#include "runtime/data/dataset.h"

namespace loom::runtime::checkpoint {

struct ShardData {
  int64_t rank = 0;
  std::vector<int64_t> offsets;  // in the global index space
  Tensor data;                   // shape = lengths; dtype = the tensor's
};

struct TensorToSave {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> global_shape;
  std::string spec;
  std::vector<ShardData> shards;
};

struct SaveRequest {
  int64_t step = 0;
  int64_t world_size = 1;
  data::SamplerState sampler;
  std::string job_spec;
  std::string layout;
  std::map<std::string, std::string> extra;
  std::vector<TensorToSave> tensors;
};

struct CheckpointOptions;

class CommitGate {
 public:
  // Blocks while a commit holds the gate, then refuses every later one.
  // Returns the step of the last checkpoint committed through it (-1: none).
  int64_t Close();
  bool closed();

 private:
  friend absl::Status CommitSave(const std::string&, const std::string&, const Manifest&, const CheckpointOptions&);
  std::mutex mu_;
  bool closed_ = false;
  int64_t last_committed_ = -1;
};

struct CheckpointOptions {
  int keep_last = 3;           // <= 0 keeps every checkpoint
  CommitGate* gate = nullptr;  // optional; must outlive the commits that use it
};

inline constexpr const char* kManifestName = "manifest.json";
inline constexpr const char* kLatestName = "latest";

std::string StepDirName(int64_t step);  // "step_000000000042"
// Parses a StepDirName; false for anything else.
bool ParseStepDirName(const std::string& name, int64_t* step);
std::string RankFileName(int64_t rank);  // "rank00003.safetensors"

// Removes leftover temporary folders/files (".tmp.*") under root.
absl::Status CleanStale(const std::string& root);

// Step 1: creates root (if needed) and an empty root/.tmp.step_N; returns its path.
absl::StatusOr<std::string> BeginSave(const std::string& root, int64_t step);

// Step 2, on each rank: one shard of tensor `tensor` for this rank's file.
struct RankShard {
  std::string tensor;
  std::vector<int64_t> offsets;
  Tensor data;
  // Without `data`: the shard's dtype and shape, and `load`, called when its
  // bytes are written (WriteRankShards holds one loaded shard at a time).
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  std::function<absl::StatusOr<Tensor>()> load;
};
struct WrittenShard {
  std::string tensor;
  ShardRecord record;
};
absl::StatusOr<std::vector<WrittenShard>> WriteRankShards(const std::string& tmp_dir, int64_t rank,
                                                          const std::vector<RankShard>& shards);

// Steps 3-5, on rank 0, once every rank's records are in `m`.
absl::Status CommitSave(const std::string& root, const std::string& tmp_dir, const Manifest& m,
                        const CheckpointOptions& options);

// Steps 1-5 in this process (ranks' files written one after another).
absl::Status SaveCheckpoint(const std::string& root, const SaveRequest& req, const CheckpointOptions& options = {});

// Contiguous private copies of every shard's data. With `reuse` (an earlier
// snapshot no longer in use), a shard whose dtype and shape match the shard at
// the same position in `reuse` is copied into that buffer instead of a fresh
// one (no page faults on already-touched memory).
SaveRequest SnapshotRequest(const SaveRequest& req, const SaveRequest* reuse = nullptr);

class AsyncCheckpointer {
 public:
  AsyncCheckpointer(std::string root, CheckpointOptions options = {});
  ~AsyncCheckpointer();  // waits for the save in flight
  AsyncCheckpointer(const AsyncCheckpointer&) = delete;
  AsyncCheckpointer& operator=(const AsyncCheckpointer&) = delete;

  // Waits for the previous save (returning its error, if any, without starting
  // this one), snapshots `req`, starts writing it, and returns.
  absl::Status SaveAsync(const SaveRequest& req);
  // Waits for the save in flight; its status (OK when none).
  absl::Status Wait();
  // True while the saver thread is still writing (non-blocking).
  bool in_flight() const { return thread_.joinable() && !done_.load(); }

 private:
  std::string root_;
  CheckpointOptions options_;
  std::thread thread_;
  std::atomic<bool> done_{false};
  absl::Status result_;
  std::shared_ptr<SaveRequest> last_snapshot_;  // its buffers are reused by the next snapshot
};

}  // namespace loom::runtime::checkpoint
