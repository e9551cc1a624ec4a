// The collective algorithms, written once over the Transport interface.
//
// Each call is a collective: every rank of the transport calls it in the same
// order with matching arguments. `Comm` carries the transport, the op's tag
// base (unique per op, same on every rank) and its deadline. n = ranks,
// B = bytes of the full buffer, alpha = per-message latency.
//
//   algorithm                     steps            bytes sent per rank
//   RingAllReduce                 2(n-1)           2B(n-1)/n
//   RecursiveDoublingAllReduce    log2(n) (+2)     B log2(n)
//   RingReduceScatter             n-1              B(n-1)/n
//   RingAllGather                 n-1              B(n-1)/n (B = output)
//   BinomialBroadcast / Reduce    ceil(log2 n)     <= B log2(n) (root: B log2 n)
//   Gather / Scatter (direct)     1 (root: n-1)    root moves B(n-1)/n
//   PairwiseAllToAll              n-1              what it sends
//   DisseminationBarrier          ceil(log2 n)     0
//
// AllReduce picks recursive doubling below kSmallAllReduceBytes (latency
// bound: log n steps) and the ring above (bandwidth optimal).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "base/dtype.h"
#include "collectives/transport/transport.h"
#include "collectives/types.h"

namespace loom::collectives::algorithms {

inline constexpr size_t kSmallAllReduceBytes = 64 << 10;

struct Comm {
  transport::Transport* transport;
  uint64_t tag_base;  // low 16 bits zero; steps are added to it
  absl::Time deadline;
  int rank() const { return transport->rank(); }
  int size() const { return transport->size(); }
  uint64_t tag(int step) const { return tag_base + static_cast<uint64_t>(step); }
};

// Tag base for the op with sequence number `seq` (collective tags have bit 47 set,
// so they never meet user point-to-point tags, which are < 2^32).
inline uint64_t CollectiveTagBase(uint64_t seq) {
  return (uint64_t{1} << 47) | ((seq & 0x7fffffffull) << 16);
}

// In place on `buf` (count elements). kAvg divides at the end.
// `hooks` (collectives/types.h StageHooks, may be null): the buffer arrives
// and leaves in pieces. The ring announces its chunks in the order it reads
// them (RingAllReduceNeeds), waits for each just before its first read, and
// reports each segment as soon as it is final: its own once the
// reduce-scatter ends, a received one piece by piece as it lands (for avg the
// owner divides its segment before the all-gather sends it). The result is
// bitwise the one without hooks. The small-message path takes the whole
// buffer at the start and reports it at the end.
absl::Status AllReduce(const Comm& c, void* buf, size_t count, DType dtype, ReduceOp op,
                       const StageHooks* hooks = nullptr);
absl::Status RingAllReduce(const Comm& c, void* buf, size_t count, DType dtype, ReduceOp op,
                           const StageHooks* hooks = nullptr);
struct ByteRange {
  size_t offset, bytes;
};
// The byte ranges of a `count`-element ring all_reduce at rank r of n, in the
// order the ring first reads them, in pieces of `piece_bytes` (whole
// elements; 0: the ring's own 1 MiB messages), as StageHooks::piece_bytes.
std::vector<ByteRange> RingAllReduceNeeds(int n, int r, size_t count, DType dtype, size_t piece_bytes = 0);
// The same for AllReduce, whichever path it takes (the small-message path
// reads the whole buffer at once).
std::vector<ByteRange> AllReduceNeeds(int n, int r, size_t count, DType dtype, size_t piece_bytes = 0);
absl::Status RecursiveDoublingAllReduce(const Comm& c, void* buf, size_t count, DType dtype,
                                        ReduceOp op);

// `in` holds sum(counts) elements, blocks in rank order; rank r's `out` gets the
// reduction of block r (counts[r] elements). kAvg divides at the end.
absl::Status RingReduceScatter(const Comm& c, const void* in, void* out,
                               absl::Span<const size_t> counts, DType dtype, ReduceOp op);
// `out` holds sum(bytes) bytes; rank r contributes `in` (bytes[r] bytes) at its offset.
absl::Status RingAllGather(const Comm& c, const void* in, void* out, absl::Span<const size_t> bytes);

// The same two with blocks at explicit offsets instead of back to back (what a
// channel slice of a larger op runs): reduce-scatter block i starts at element
// in_offsets[i] of `in`; all-gather segment i lands at byte out_offsets[i].
absl::Status RingReduceScatterAt(const Comm& c, const void* in, absl::Span<const size_t> in_offsets,
                                 void* out, absl::Span<const size_t> counts, DType dtype, ReduceOp op);
absl::Status RingAllGatherAt(const Comm& c, const void* in, void* out, absl::Span<const size_t> bytes,
                             absl::Span<const size_t> out_offsets);

absl::Status BinomialBroadcast(const Comm& c, void* buf, size_t bytes, int root);
// Reduces every rank's `buf` into root's `buf`; other ranks' buffers are unchanged.
absl::Status BinomialReduce(const Comm& c, void* buf, size_t count, DType dtype, ReduceOp op,
                            int root);

// Root receives bytes[i] from rank i at out + offset(i); `in` is bytes[rank].
absl::Status Gather(const Comm& c, const void* in, void* out, absl::Span<const size_t> bytes,
                    int root);
// Rank i receives bytes[i] from root's in + offset(i) into `out`.
absl::Status Scatter(const Comm& c, const void* in, void* out, absl::Span<const size_t> bytes,
                     int root);

// Sends send_bytes[j] bytes (from in + sum(send_bytes[<j])) to rank j and
// receives recv_bytes[j] bytes into out + sum(recv_bytes[<j]).
absl::Status PairwiseAllToAll(const Comm& c, const void* in, absl::Span<const size_t> send_bytes,
                              void* out, absl::Span<const size_t> recv_bytes);

absl::Status DisseminationBarrier(const Comm& c);

}  // namespace loom::collectives::algorithms
