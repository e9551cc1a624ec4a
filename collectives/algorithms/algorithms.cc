#include "collectives/algorithms/algorithms.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status.h"
#include "collectives/algorithms/reduce.h"

namespace loom::collectives::algorithms {
namespace {

char* P(void* p, size_t off) { return static_cast<char*>(p) + off; }
const char* P(const void* p, size_t off) { return static_cast<const char*>(p) + off; }
int Mod(int a, int n) { return ((a % n) + n) % n; }

// Receives from `from` while sending to `to` (either may be -1 to skip).
absl::Status Exchange(const Comm& c, int step, int to, const void* send, size_t send_n, int from,
                      void* recv, size_t recv_n) {
  std::unique_ptr<transport::TransportRequest> r;
  if (from >= 0) {
    LOOM_ASSIGN_OR_RETURN(r, c.transport->IRecv(from, c.tag(step), recv, recv_n));
  }
  if (to >= 0) LOOM_RETURN_IF_ERROR(c.transport->Send(to, c.tag(step), send, send_n, c.deadline));
  if (r) LOOM_RETURN_IF_ERROR(r->Wait(c.deadline));
  return absl::OkStatus();
}

std::vector<size_t> Offsets(absl::Span<const size_t> sizes) {
  std::vector<size_t> off(sizes.size() + 1, 0);
  for (size_t i = 0; i < sizes.size(); ++i) off[i + 1] = off[i] + sizes[i];
  return off;
}

// Scratch memory of the calling (executor) thread, kept between ops so large
// collectives do not page-fault fresh buffers every call. Slot 0/1: ring
// ping-pong buffers, slot 2: other temporaries.
char* Scratch(int slot, size_t bytes) {
  thread_local std::unique_ptr<char[]> buf[3];
  thread_local size_t cap[3] = {0, 0, 0};
  if (cap[slot] < bytes) {
    buf[slot].reset(new char[bytes]);
    cap[slot] = bytes;
  }
  return buf[slot].get();
}

constexpr size_t kChunkBytes = 1 << 20;

// Elements per ring message: `piece_bytes` (0: kChunkBytes), whole elements,
// at least one.
size_t ChunkElems(size_t piece_bytes, size_t es) {
  return std::max<size_t>((piece_bytes ? piece_bytes : kChunkBytes) / es, 1);
}

// Ring reduce-scatter of `in` (segments of counts[i] elements); rank r's fully
// reduced segment r lands in `out` (which may alias in + offset(r)). Each step's
// segment travels in <= 1 MiB chunks (staged: the hooks' pieces): all receives
// are posted first, then every
// sent chunk is followed by reducing the matching received chunk, so reduction
// overlaps the transfer of the next chunk.
// `in_off[i]`: element offset of block i in `in` (Offsets(counts) when the
// blocks are contiguous; a channel slice passes its sub-blocks' offsets).
// `hooks` (may be null): every chunk of `in` is waited for with ready (byte
// offsets from `in`) just before it is first sent or reduced.
absl::Status RingReduceScatterCore(const Comm& c, const void* in, void* out,
                                   absl::Span<const size_t> counts, DType dtype, ReduceOp op,
                                   int step0, absl::Span<const size_t> off, const StageHooks* hooks = nullptr) {
  const int n = c.size(), r = c.rank();
  const size_t es = DTypeSize(dtype);
  size_t max_count = 0;
  for (size_t k : counts) max_count = std::max(max_count, k);
  if (n == 1) {
    if (counts[0] && out != P(in, off[0] * es)) std::memmove(out, P(in, off[0] * es), counts[0] * es);
    return absl::OkStatus();
  }
  char* bufs[2] = {Scratch(0, max_count * es), Scratch(1, max_count * es)};
  const size_t chunk = ChunkElems(hooks ? hooks->piece_bytes : 0, es);
  const int right = Mod(r + 1, n), left = Mod(r - 1, n);
  const char* send_src = P(in, off[Mod(r - 1, n)] * es);
  for (int s = 0; s < n - 1; ++s) {
    const int send_seg = Mod(r - 1 - s, n), recv_seg = Mod(r - 2 - s, n);
    const bool last = s == n - 2;  // recv_seg == r
    char* recv_dst = bufs[s % 2];
    // acc = in[recv_seg] (op) received. On the last step acc lives in `out`.
    char* acc = last ? static_cast<char*>(out) : recv_dst;
    const char* mine = P(in, off[recv_seg] * es);
    size_t send_n = counts[send_seg], recv_n = counts[recv_seg];
    std::vector<std::unique_ptr<transport::TransportRequest>> reqs;
    for (size_t o = 0; o < recv_n || (o == 0 && recv_n == 0); o += chunk) {
      size_t len = std::min(chunk, recv_n - o);
      LOOM_ASSIGN_OR_RETURN(auto q, c.transport->IRecv(left, c.tag(step0 + s), recv_dst + o * es, len * es));
      reqs.push_back(std::move(q));
      if (recv_n == 0) break;
    }
    auto ready = [&](const char* p, size_t n_elems) {
      const size_t at = static_cast<size_t>(p - static_cast<const char*>(in));
      return hooks && n_elems ? hooks->ready(at, n_elems * es) : absl::OkStatus();
    };
    if (last && acc != mine && recv_n) {
      LOOM_RETURN_IF_ERROR(ready(mine, recv_n));
      std::memmove(acc, mine, recv_n * es);
    }
    size_t sent = 0, done = 0;
    size_t send_chunks = send_n == 0 ? 1 : (send_n + chunk - 1) / chunk;
    // Sends are started, not waited, chunk by chunk (a transport that can
    // move data while this thread reduces, like UCX's rendezvous, then
    // overlaps both); all are waited before the step's buffers are reused.
    std::vector<std::unique_ptr<transport::TransportRequest>> sends;
    for (size_t k = 0; k < std::max(send_chunks, reqs.size()); ++k) {
      if (k < send_chunks) {
        size_t len = std::min(chunk, send_n - sent);
        if (s == 0) LOOM_RETURN_IF_ERROR(ready(send_src + sent * es, len));  // later steps send `acc`
        LOOM_ASSIGN_OR_RETURN(auto q, c.transport->ISend(right, c.tag(step0 + s), send_src + sent * es, len * es,
                                                         c.deadline));
        sends.push_back(std::move(q));
        sent += len;
      }
      if (k < reqs.size()) {
        LOOM_RETURN_IF_ERROR(reqs[k]->Wait(c.deadline));
        size_t len = std::min(chunk, recv_n - done);
        if (len) {
          if (last) {
            if (acc == mine) LOOM_RETURN_IF_ERROR(ready(mine + done * es, len));
            ReduceInto(dtype, op, acc + done * es, recv_dst + done * es, len);
          } else {
            LOOM_RETURN_IF_ERROR(ready(mine + done * es, len));
            ReduceInto(dtype, op, acc + done * es, mine + done * es, len);
          }
        }
        done += len;
      }
    }
    for (auto& q : sends) LOOM_RETURN_IF_ERROR(q->Wait(c.deadline));
    send_src = acc;
  }
  return absl::OkStatus();
}

// In-place ring all-gather over byte segments of `buf`; rank r owns segment r,
// which starts at off[r].
absl::Status RingAllGatherInPlace(const Comm& c, void* buf, absl::Span<const size_t> bytes,
                                  int step0, absl::Span<const size_t> off) {
  const int n = c.size(), r = c.rank();
  const int right = Mod(r + 1, n), left = Mod(r - 1, n);
  for (int s = 0; s < n - 1; ++s) {
    int send_seg = Mod(r - s, n), recv_seg = Mod(r - s - 1, n);
    LOOM_RETURN_IF_ERROR(Exchange(c, step0 + s, right, P(buf, off[send_seg]), bytes[send_seg], left,
                                  P(buf, off[recv_seg]), bytes[recv_seg]));
  }
  return absl::OkStatus();
}

std::vector<size_t> EvenSplit(size_t count, int n) {
  std::vector<size_t> counts(n);
  for (int i = 0; i < n; ++i) counts[i] = count / n + (static_cast<size_t>(i) < count % n ? 1 : 0);
  return counts;
}

}  // namespace

namespace {
bool SmallAllReduce(size_t count, DType dtype, int n) {
  return count * DTypeSize(dtype) < kSmallAllReduceBytes || count < static_cast<size_t>(n);
}
}  // namespace

std::vector<ByteRange> AllReduceNeeds(int n, int r, size_t count, DType dtype, size_t piece_bytes) {
  if (!SmallAllReduce(count, dtype, n)) return RingAllReduceNeeds(n, r, count, dtype, piece_bytes);
  if (count == 0) return {};
  return {{0, count * DTypeSize(dtype)}};
}

absl::Status AllReduce(const Comm& c, void* buf, size_t count, DType dtype, ReduceOp op, const StageHooks* hooks) {
  if (SmallAllReduce(count, dtype, c.size())) {
    const size_t bytes = count * DTypeSize(dtype);
    if (hooks && bytes) {  // one range: read first, final at the end
      if (hooks->need) hooks->need(0, bytes);
      LOOM_RETURN_IF_ERROR(hooks->ready(0, bytes));
    }
    LOOM_RETURN_IF_ERROR(RecursiveDoublingAllReduce(c, buf, count, dtype, op));
    if (hooks && bytes) hooks->done(0, bytes);
    return absl::OkStatus();
  }
  return RingAllReduce(c, buf, count, dtype, op, hooks);
}

std::vector<ByteRange> RingAllReduceNeeds(int n, int r, size_t count, DType dtype, size_t piece_bytes) {
  const size_t es = DTypeSize(dtype), chunk = ChunkElems(piece_bytes, es) * es;
  std::vector<ByteRange> out;
  if (n <= 1) {
    if (count) out.push_back({0, count * es});
    return out;
  }
  std::vector<size_t> bytes(n);
  std::vector<size_t> counts = EvenSplit(count, n);
  for (int i = 0; i < n; ++i) bytes[i] = counts[i] * es;
  const std::vector<size_t> off = Offsets(bytes);
  auto piece = [&](int seg, size_t k) -> ByteRange {
    const size_t at = k * chunk;
    return {off[seg] + at, std::min(chunk, bytes[seg] - at)};
  };
  auto pieces = [&](int seg) { return (bytes[seg] + chunk - 1) / chunk; };
  // Step 0 sends segment r-1 chunk by chunk, each followed by reducing the
  // matching chunk of segment r-2; step s >= 1 reduces segment r-2-s.
  const int first = Mod(r - 1, n), second = Mod(r - 2, n);
  for (size_t k = 0; k < std::max(pieces(first), pieces(second)); ++k) {
    if (k < pieces(first)) out.push_back(piece(first, k));
    if (k < pieces(second)) out.push_back(piece(second, k));
  }
  for (int s = 1; s < n - 1; ++s)
    for (size_t k = 0; k < pieces(Mod(r - 2 - s, n)); ++k) out.push_back(piece(Mod(r - 2 - s, n), k));
  return out;
}

namespace {

// [offset, offset + bytes) in pieces of at most `piece` bytes; one (empty)
// piece for an empty range, so that both ends exchange the same messages.
std::vector<ByteRange> Pieces(size_t offset, size_t bytes, size_t piece) {
  std::vector<ByteRange> out;
  for (size_t o = 0; o < bytes || o == 0; o += piece) {
    out.push_back({offset + o, std::min(piece, bytes - o)});
    if (bytes == 0) break;
  }
  return out;
}

// The all-gather half of the ring (segment s of `buf` at off[s], bytes[s]
// long, rank r's own segment r reduced). The receives are posted before the
// reduce-scatter starts (Post runs first), so a neighbour that finishes its
// half first streams straight into `buf` instead of into a transport's
// unexpected-message buffer. Safe: segment j arrives only once it is fully
// reduced, i.e. after this rank has read (and sent) its own part of segment j
// (staged: after its copy landed).
//
// Staged (`hooks`): a segment is final as soon as it is in this rank's buffer,
// because its owner divides it (avg) before sending it: the own segment is
// reported when the reduce-scatter ends, a received one piece by piece as it
// lands. Both ends move segments in the hooks' pieces, so the copy back of a
// received segment runs while the rest of it arrives.
class RingGather {
 public:
  RingGather(const Comm& c, void* buf, absl::Span<const size_t> bytes, absl::Span<const size_t> off, size_t es,
             const StageHooks* hooks)
      : c_(c), buf_(buf), bytes_(bytes), off_(off), piece_(ChunkElems(hooks ? hooks->piece_bytes : 0, es) * es),
        hooks_(hooks) {}

  absl::Status Post() {
    const int n = c_.size(), r = c_.rank(), left = Mod(r - 1, n);
    recvs_.resize(n - 1);
    for (int s = 0; s < n - 1; ++s) {
      for (const ByteRange& p : SegmentPieces(Mod(r - s - 1, n))) {
        LOOM_ASSIGN_OR_RETURN(auto q, c_.transport->IRecv(left, c_.tag(n + s), P(buf_, p.offset), p.bytes));
        recvs_[s].push_back(std::move(q));
      }
    }
    return absl::OkStatus();
  }

  // After the reduce-scatter: the own segment is final (divided first for
  // avg when staged).
  absl::Status Run(DType dtype, ReduceOp op) {
    const int n = c_.size(), r = c_.rank(), right = Mod(r + 1, n);
    const size_t es = DTypeSize(dtype);
    if (hooks_) {
      if (op == ReduceOp::kAvg) DivideInPlace(dtype, P(buf_, off_[r]), bytes_[r] / es, n);
      if (bytes_[r]) hooks_->done(off_[r], bytes_[r]);
    }
    for (int s = 0; s < n - 1; ++s) {
      const int seg = Mod(r - s, n), recv_seg = Mod(r - s - 1, n);
      std::vector<std::unique_ptr<transport::TransportRequest>> sends;
      for (const ByteRange& p : SegmentPieces(seg)) {
        LOOM_ASSIGN_OR_RETURN(auto q, c_.transport->ISend(right, c_.tag(n + s), P(buf_, p.offset), p.bytes,
                                                          c_.deadline));
        sends.push_back(std::move(q));
      }
      std::vector<ByteRange> got = SegmentPieces(recv_seg);
      for (size_t k = 0; k < recvs_[s].size(); ++k) {
        LOOM_RETURN_IF_ERROR(recvs_[s][k]->Wait(c_.deadline));
        if (hooks_ && got[k].bytes) hooks_->done(got[k].offset, got[k].bytes);
      }
      for (auto& q : sends) LOOM_RETURN_IF_ERROR(q->Wait(c_.deadline));
    }
    if (!hooks_ && op == ReduceOp::kAvg) DivideInPlace(dtype, buf_, off_[n] / es, n);
    return absl::OkStatus();
  }

 private:
  // Unstaged: one message per segment.
  std::vector<ByteRange> SegmentPieces(int seg) const {
    return Pieces(off_[seg], bytes_[seg], hooks_ ? piece_ : std::max<size_t>(bytes_[seg], 1));
  }

  const Comm& c_;
  void* buf_;
  absl::Span<const size_t> bytes_, off_;
  size_t piece_;
  const StageHooks* hooks_;
  std::vector<std::vector<std::unique_ptr<transport::TransportRequest>>> recvs_;
};

}  // namespace

absl::Status RingAllReduce(const Comm& c, void* buf, size_t count, DType dtype, ReduceOp op,
                           const StageHooks* hooks) {
  const int n = c.size();
  const size_t es = DTypeSize(dtype);
  if (hooks && hooks->need)
    for (const ByteRange& b : RingAllReduceNeeds(n, c.rank(), count, dtype, hooks->piece_bytes))
      hooks->need(b.offset, b.bytes);
  if (n > 1) {
    std::vector<size_t> counts = EvenSplit(count, n);
    size_t my_off = 0;
    for (int i = 0; i < c.rank(); ++i) my_off += counts[i];
    std::vector<size_t> bytes(n);
    for (int i = 0; i < n; ++i) bytes[i] = counts[i] * es;
    const std::vector<size_t> off = Offsets(bytes);
    RingGather gather(c, buf, bytes, off, es, hooks);
    LOOM_RETURN_IF_ERROR(gather.Post());
    std::vector<size_t> elem_off = Offsets(counts);
    LOOM_RETURN_IF_ERROR(RingReduceScatterCore(c, buf, P(buf, my_off * es), counts, dtype, op, 0, elem_off, hooks));
    return gather.Run(dtype, op);
  }
  if (hooks && count) {
    LOOM_RETURN_IF_ERROR(hooks->ready(0, count * es));
    hooks->done(0, count * es);
  }
  return absl::OkStatus();
}

absl::Status RecursiveDoublingAllReduce(const Comm& c, void* buf, size_t count, DType dtype,
                                        ReduceOp op) {
  const int n = c.size(), r = c.rank();
  const size_t bytes = count * DTypeSize(dtype);
  char* tmp = Scratch(2, bytes);
  int p2 = 1;
  while (p2 * 2 <= n) p2 *= 2;
  const int rem = n - p2;
  // Fold: among the first 2*rem ranks, even ranks hand their data to the odd neighbour.
  int vr;  // rank among the p2 participants, -1 if folded out
  if (r < 2 * rem) {
    if (r % 2 == 0) {
      LOOM_RETURN_IF_ERROR(c.transport->Send(r + 1, c.tag(0), buf, bytes, c.deadline));
      vr = -1;
    } else {
      LOOM_RETURN_IF_ERROR(c.transport->Recv(r - 1, c.tag(0), tmp, bytes, c.deadline));
      ReduceInto(dtype, op, buf, tmp, count);
      vr = r / 2;
    }
  } else {
    vr = r - rem;
  }
  auto real = [&](int v) { return v < rem ? 2 * v + 1 : v + rem; };
  if (vr >= 0) {
    int step = 1;
    for (int mask = 1; mask < p2; mask <<= 1, ++step) {
      int partner = real(vr ^ mask);
      LOOM_RETURN_IF_ERROR(Exchange(c, step, partner, buf, bytes, partner, tmp, bytes));
      // Reduce in a rank-independent order so both partners hold identical bits.
      if (partner < r) {
        ReduceInto(dtype, op, tmp, buf, count);
        if (bytes) std::memcpy(buf, tmp, bytes);
      } else {
        ReduceInto(dtype, op, buf, tmp, count);
      }
    }
  }
  // Unfold: odd ranks return the result to their even neighbour.
  if (r < 2 * rem) {
    if (r % 2 == 1) {
      LOOM_RETURN_IF_ERROR(c.transport->Send(r - 1, c.tag(100), buf, bytes, c.deadline));
    } else {
      LOOM_RETURN_IF_ERROR(c.transport->Recv(r + 1, c.tag(100), buf, bytes, c.deadline));
    }
  }
  if (op == ReduceOp::kAvg) DivideInPlace(dtype, buf, count, n);
  return absl::OkStatus();
}

absl::Status RingReduceScatter(const Comm& c, const void* in, void* out,
                               absl::Span<const size_t> counts, DType dtype, ReduceOp op) {
  return RingReduceScatterAt(c, in, Offsets(counts), out, counts, dtype, op);
}

absl::Status RingReduceScatterAt(const Comm& c, const void* in, absl::Span<const size_t> in_offsets,
                                 void* out, absl::Span<const size_t> counts, DType dtype, ReduceOp op) {
  LOOM_RETURN_IF_ERROR(RingReduceScatterCore(c, in, out, counts, dtype, op, 0, in_offsets));
  if (op == ReduceOp::kAvg) DivideInPlace(dtype, out, counts[c.rank()], c.size());
  return absl::OkStatus();
}

absl::Status RingAllGather(const Comm& c, const void* in, void* out,
                           absl::Span<const size_t> bytes) {
  return RingAllGatherAt(c, in, out, bytes, Offsets(bytes));
}

absl::Status RingAllGatherAt(const Comm& c, const void* in, void* out, absl::Span<const size_t> bytes,
                             absl::Span<const size_t> out_offsets) {
  const int r = c.rank();
  if (bytes[r] && P(out, out_offsets[r]) != in) std::memmove(P(out, out_offsets[r]), in, bytes[r]);
  return RingAllGatherInPlace(c, out, bytes, 0, out_offsets);
}

absl::Status BinomialBroadcast(const Comm& c, void* buf, size_t bytes, int root) {
  const int n = c.size();
  const int vr = Mod(c.rank() - root, n);
  int mask = 1;
  while (mask < n) {
    if (vr & mask) {
      int src = Mod(vr - mask + root, n);
      LOOM_RETURN_IF_ERROR(c.transport->Recv(src, c.tag(0), buf, bytes, c.deadline));
      break;
    }
    mask <<= 1;
  }
  mask >>= 1;
  while (mask > 0) {
    if (vr + mask < n) {
      int dst = Mod(vr + mask + root, n);
      LOOM_RETURN_IF_ERROR(c.transport->Send(dst, c.tag(0), buf, bytes, c.deadline));
    }
    mask >>= 1;
  }
  return absl::OkStatus();
}

absl::Status BinomialReduce(const Comm& c, void* buf, size_t count, DType dtype, ReduceOp op,
                            int root) {
  const int n = c.size();
  const int vr = Mod(c.rank() - root, n);
  const size_t bytes = count * DTypeSize(dtype);
  std::vector<char> acc(bytes), tmp(bytes);
  if (bytes) std::memcpy(acc.data(), buf, bytes);
  for (int mask = 1; mask < n; mask <<= 1) {
    if (vr & mask) {
      int dst = Mod(vr - mask + root, n);
      return c.transport->Send(dst, c.tag(0), acc.data(), bytes, c.deadline);
    }
    if (vr + mask < n) {
      int src = Mod(vr + mask + root, n);
      LOOM_RETURN_IF_ERROR(c.transport->Recv(src, c.tag(0), tmp.data(), bytes, c.deadline));
      ReduceInto(dtype, op, acc.data(), tmp.data(), count);
    }
  }
  // Only the root gets here.
  if (op == ReduceOp::kAvg) DivideInPlace(dtype, acc.data(), count, n);
  if (bytes) std::memcpy(buf, acc.data(), bytes);
  return absl::OkStatus();
}

absl::Status Gather(const Comm& c, const void* in, void* out, absl::Span<const size_t> bytes,
                    int root) {
  const int n = c.size(), r = c.rank();
  if (r != root) return c.transport->Send(root, c.tag(0), in, bytes[r], c.deadline);
  std::vector<size_t> off = Offsets(bytes);
  std::vector<std::unique_ptr<transport::TransportRequest>> reqs;
  for (int i = 0; i < n; ++i) {
    if (i == r) continue;
    LOOM_ASSIGN_OR_RETURN(auto q, c.transport->IRecv(i, c.tag(0), P(out, off[i]), bytes[i]));
    reqs.push_back(std::move(q));
  }
  if (bytes[r]) std::memmove(P(out, off[r]), in, bytes[r]);
  for (auto& q : reqs) LOOM_RETURN_IF_ERROR(q->Wait(c.deadline));
  return absl::OkStatus();
}

absl::Status Scatter(const Comm& c, const void* in, void* out, absl::Span<const size_t> bytes,
                     int root) {
  const int n = c.size(), r = c.rank();
  if (r != root) return c.transport->Recv(root, c.tag(0), out, bytes[r], c.deadline);
  std::vector<size_t> off = Offsets(bytes);
  for (int s = 1; s < n; ++s) {
    int i = Mod(r + s, n);
    LOOM_RETURN_IF_ERROR(c.transport->Send(i, c.tag(0), P(in, off[i]), bytes[i], c.deadline));
  }
  if (bytes[r]) std::memmove(out, P(in, off[r]), bytes[r]);
  return absl::OkStatus();
}

absl::Status PairwiseAllToAll(const Comm& c, const void* in, absl::Span<const size_t> send_bytes,
                              void* out, absl::Span<const size_t> recv_bytes) {
  const int n = c.size(), r = c.rank();
  std::vector<size_t> soff = Offsets(send_bytes), roff = Offsets(recv_bytes);
  if (recv_bytes[r] != send_bytes[r]) {
    return absl::InvalidArgumentError(absl::StrCat("all_to_all: rank ", r, " sends itself ",
                                                   send_bytes[r], " bytes but expects ",
                                                   recv_bytes[r]));
  }
  if (send_bytes[r]) std::memmove(P(out, roff[r]), P(in, soff[r]), send_bytes[r]);
  for (int s = 1; s < n; ++s) {
    int to = Mod(r + s, n), from = Mod(r - s, n);
    LOOM_RETURN_IF_ERROR(Exchange(c, s, to, P(in, soff[to]), send_bytes[to], from,
                                  P(out, roff[from]), recv_bytes[from]));
  }
  return absl::OkStatus();
}

absl::Status DisseminationBarrier(const Comm& c) {
  const int n = c.size(), r = c.rank();
  char dummy = 0;
  int step = 0;
  for (int k = 1; k < n; k <<= 1, ++step) {
    LOOM_RETURN_IF_ERROR(Exchange(c, step, Mod(r + k, n), &dummy, 0, Mod(r - k, n), &dummy, 0));
  }
  return absl::OkStatus();
}

}  // namespace loom::collectives::algorithms
