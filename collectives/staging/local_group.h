// LocalGroup: the staging buffers of ranks that share one host, in shared
// memory that every rank of the group maps, so that a staged all_reduce
// reduces straight from the other ranks' copies instead of sending them
// through the inner backend's sockets.
//
// Each rank owns one arena: a header of progress counters (one cache line
// each) and `slots` chunk slots. Only the owner writes its arena; the others
// map it and register it with the copier, so the copy engine reads from it
// directly. An all_reduce of B bytes runs in chunks of
// min(chunk_bytes, max(256 KiB, B / 4)) bytes (so that an op of up to 4
// slots still has 4 chunks to overlap), whole elements, numbered
// g = 0, 1, ... over the group's life (every rank runs
// the same ops in the same order, so the numbers agree), chunk g in slot
// g % slots of every arena. Chunk g's elements are cut into one part per
// rank (as evenly as whole elements allow), and on rank r:
//
//   wait until every rank has released chunk g - slots    (its slot is free)
//   copy chunk g of the device buffer into this rank's slot; landed = g + 1
//   wait until every rank has landed chunk g
//   part r of this rank's slot  op=  part r of every other rank's slot, in
//   rank order (avg: sum, then divide by the group size); reduced = g + 1
//   wait until every rank has reduced chunk g
//   copy part p of rank p's slot to the device, for every p (no CPU copy:
//   the copy engine gathers the parts); released = g + 1 once they land
//
// The copy of chunk g + 1 to the host is issued before chunk g is reduced,
// and chunk g's copies back land while chunk g + 1 is reduced, so both
// directions of copy overlap the reductions. Every element is reduced by one
// rank, in a fixed order, and every rank copies the same result: the result
// is the same on every rank and the same from run to run.
//
// reduce_scatter and all_gather run the same pipeline over blocks (one per
// rank, the sizes the same on every rank and free to differ between blocks).
// Chunk g holds elements [k * c, (k + 1) * c) of every block (k = g - the
// op's first chunk), so an op has as many chunks as its longest block needs:
//
//   reduce_scatter: a rank's slot holds its slices of all the input blocks,
//     back to back; rank r reduces block r's slice from every slot into its
//     own and copies it back to its output. No rank reads another's result,
//     so there is no wait for `reduced`.
//   all_gather: a rank's slot holds its slice of its own input; once every
//     rank has landed chunk g, rank r copies rank p's slice to output block
//     p, for every p. Nothing is reduced.
//
// A rank reads another rank's slot only before it releases the chunk, and a
// slot is reused only once every rank has released it.
//
// A rank whose op fails (a deadline, an abort, a copy error) marks its arena
// failed; the others then fail at their next wait, naming it, instead of
// waiting out their own deadlines. A failed group is not used again
// (StagedBackend fails every later op, as for any failed op).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "base/dtype.h"
#include "collectives/staging/copier.h"
#include "collectives/store/store.h"
#include "collectives/types.h"

namespace loom::collectives::staging {

// Where a staged all_reduce, reduce_scatter and all_gather run
// (ProcessGroupOptions::staging_path).
enum class StagingPath {
  kAuto,          // shared memory when every rank is on this host, else the ring
  kSharedMemory,  // shared memory; creating the backend fails if it cannot
  kRing,          // the inner backend: its ring over each rank's own buffer (all_reduce), its buckets (the others)
};
// "auto", "shm" or "ring"; InvalidArgument names the value otherwise.
absl::StatusOr<StagingPath> ParseStagingPath(absl::string_view s);

// Time a rank spent in one LocalGroup op, by phase.
struct LocalStats {
  absl::Duration to_host_wait;    // waiting for its copies to the host
  absl::Duration peer_wait;       // waiting for other ranks' progress
  absl::Duration reduce;          // reducing its parts
  absl::Duration to_device_wait;  // waiting for its copies back
};

class LocalGroup {
 public:
  struct Options {
    size_t chunk_bytes = size_t{1} << 20;  // rounded down to whole elements, at least one per rank
    int slots = 3;
    absl::Duration timeout = absl::Seconds(60);  // for Create's rendezvous
  };
  // Creates this rank's arena and maps every other rank's, through `store`
  // (a prefix of this group's own). Every rank of the group must call it.
  // Returns nullptr when some rank could not share memory with the others
  // (another host, no /dev/shm, no room): `why_not` then says which and why.
  static absl::StatusOr<std::unique_ptr<LocalGroup>> Create(store::Store& store, int rank, int size,
                                                            Copier* copier, const Options& o,
                                                            std::string* why_not);
  ~LocalGroup();
  LocalGroup(const LocalGroup&) = delete;
  LocalGroup& operator=(const LocalGroup&) = delete;

  // all_reduce of the device buffer [device, device + bytes) in place.
  // `abort` set by another thread fails it with Aborted at its next wait.
  absl::Status AllReduce(char* device, size_t bytes, DType dtype, ReduceOp op, absl::Time deadline,
                         const std::atomic<bool>& abort, LocalStats* stats);
  // reduce_scatter: `output` (counts[rank] elements) = op over the ranks of
  // their inputs[rank]. inputs[p] holds counts[p] elements on the device.
  absl::Status ReduceScatter(char* output, absl::Span<const char* const> inputs, absl::Span<const size_t> counts,
                             DType dtype, ReduceOp op, absl::Time deadline, const std::atomic<bool>& abort,
                             LocalStats* stats);
  // all_gather: outputs[p] (counts[p] elements) = rank p's `input` (this
  // rank's holds counts[rank]).
  absl::Status AllGather(absl::Span<char* const> outputs, absl::Span<const size_t> counts, const char* input,
                         DType dtype, absl::Time deadline, const std::atomic<bool>& abort, LocalStats* stats);

  struct Arena;  // one rank's mapping (local_group.cc)

 private:
  struct Op;  // what one op moves (local_group.cc)
  class Run;  // one op's pipeline (local_group.cc)
  LocalGroup(int rank, int size, size_t chunk_bytes, int slots, Copier* copier);
  absl::Status Execute(const Op& op, absl::Time deadline, const std::atomic<bool>& abort, LocalStats* stats);
  absl::Status CheckBlocks(size_t blocks, size_t counts, absl::string_view op) const;

  int rank_, size_;
  size_t chunk_bytes_;
  int slots_;
  Copier* copier_;
  std::vector<std::unique_ptr<Arena>> arenas_;  // by rank; arenas_[rank_] is this rank's own
  uint64_t next_chunk_ = 0;                     // g of the next op's first chunk
  bool failed_ = false;
};

}  // namespace loom::collectives::staging
