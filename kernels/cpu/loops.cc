#include "kernels/cpu/loops.h"

#include <algorithm>
#include <cstring>

#include "base/thread_pool.h"

namespace loom::kernels::cpu {

int64_t StridedLoop::rows() const {
  int64_t r = 1;
  for (size_t i = 0; i + 1 < shape.size(); ++i) r *= shape[i];
  return r;
}

StridedLoop MakeLoop(absl::Span<const int64_t> shape, std::vector<Strides> strides) {
  StridedLoop loop;
  loop.num_operands = static_cast<int>(strides.size());
  loop.strides.resize(strides.size());
  // Keep dims of size != 1 (size-0 dims are kept: the loop then has no rows).
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    bool merge = !loop.shape.empty();
    for (size_t k = 0; merge && k < strides.size(); ++k)
      merge = loop.strides[k].back() == strides[k][d] * shape[d];
    if (merge) {
      loop.shape.back() *= shape[d];
      for (size_t k = 0; k < strides.size(); ++k) loop.strides[k].back() = strides[k][d];
    } else {
      loop.shape.push_back(shape[d]);
      for (size_t k = 0; k < strides.size(); ++k) loop.strides[k].push_back(strides[k][d]);
    }
  }
  if (loop.shape.empty()) {
    loop.shape.push_back(1);
    for (auto& s : loop.strides) s.push_back(1);
  }
  return loop;
}

void ForRows(const StridedLoop& loop, const RowFn& fn) {
  const int nd = static_cast<int>(loop.shape.size());
  const int no = loop.num_operands;
  const int64_t rows = loop.rows(), inner = loop.inner();
  if (rows == 0 || inner == 0) return;
  int64_t inner_strides[kMaxLoopOperands];
  for (int k = 0; k < no; ++k) inner_strides[k] = loop.strides[k][nd - 1];
  auto run = [&](int64_t lo, int64_t hi) {
    // Decompose row `lo` into an index over the outer dims, then step an odometer.
    Shape idx(nd, 0);
    int64_t off[kMaxLoopOperands] = {0};
    int64_t r = lo;
    for (int d = nd - 2; d >= 0; --d) {
      idx[d] = r % loop.shape[d];
      r /= loop.shape[d];
      for (int k = 0; k < no; ++k) off[k] += idx[d] * loop.strides[k][d];
    }
    for (int64_t row = lo; row < hi; ++row) {
      fn(off, inner, inner_strides);
      for (int d = nd - 2; d >= 0; --d) {
        if (++idx[d] < loop.shape[d]) {
          for (int k = 0; k < no; ++k) off[k] += loop.strides[k][d];
          break;
        }
        idx[d] = 0;
        for (int k = 0; k < no; ++k) off[k] -= (loop.shape[d] - 1) * loop.strides[k][d];
      }
    }
  };
  if (rows * inner < kParallelMinElements || rows == 1) {
    // One row (or small work): split the row itself when it is long.
    if (rows == 1 && inner >= kParallelMinElements) {
      ParallelFor(inner, 8192, [&](int64_t lo, int64_t hi) {
        int64_t off[kMaxLoopOperands];
        for (int k = 0; k < no; ++k) off[k] = lo * inner_strides[k];
        fn(off, hi - lo, inner_strides);
      });
      return;
    }
    run(0, rows);
    return;
  }
  int64_t grain = std::max<int64_t>(1, 8192 / std::max<int64_t>(inner, 1));
  ParallelFor(rows, grain, run);
}

namespace {
template <typename T>
void CopyRows(const StridedLoop& loop, const T* src, T* dst) {
  ForRows(loop, [&](const int64_t* off, int64_t n, const int64_t* inner) {
    T* d = dst + off[0];
    const T* s = src + off[1];
    if (inner[0] == 1 && inner[1] == 1) {
      std::memcpy(d, s, n * sizeof(T));
    } else {
      const int64_t sd = inner[0], ss = inner[1];
      for (int64_t j = 0; j < n; ++j) d[j * sd] = s[j * ss];
    }
  });
}

void CopyLoop(const StridedLoop& loop, size_t elem, const void* src, void* dst) {
  switch (elem) {
    case 1: CopyRows(loop, static_cast<const uint8_t*>(src), static_cast<uint8_t*>(dst)); break;
    case 2: CopyRows(loop, static_cast<const uint16_t*>(src), static_cast<uint16_t*>(dst)); break;
    case 4: CopyRows(loop, static_cast<const uint32_t*>(src), static_cast<uint32_t*>(dst)); break;
    default: CopyRows(loop, static_cast<const uint64_t*>(src), static_cast<uint64_t*>(dst)); break;
  }
}
}  // namespace

// A transpose-like copy into contiguous dst: src's innermost (collapsed) dim
// is strided while its second-innermost is unit-stride. Row-by-row copying
// would read one element per cache line; 32x32 tiles keep both sides in cache.
template <typename T>
void TransposeTiles(const StridedLoop& loop, const T* src, T* dst) {
  const int nd = static_cast<int>(loop.shape.size());
  const int64_t rows = loop.shape[nd - 2], cols = loop.shape[nd - 1];
  const int64_t sc = loop.strides[1][nd - 1];
  int64_t outer = 1;
  for (int d = 0; d < nd - 2; ++d) outer *= loop.shape[d];
  constexpr int64_t kTile = 32;
  const int64_t rtiles = (rows + kTile - 1) / kTile;
  ParallelFor(outer * rtiles, std::max<int64_t>(1, kParallelMinElements / (kTile * std::max<int64_t>(cols, 1))),
              [&](int64_t lo, int64_t hi) {
                for (int64_t t = lo; t < hi; ++t) {
                  const int64_t o = t / rtiles, r0 = (t % rtiles) * kTile, r1 = std::min(rows, r0 + kTile);
                  int64_t off = 0, rem = o;
                  for (int d = nd - 3; d >= 0; --d) {
                    off += (rem % loop.shape[d]) * loop.strides[1][d];
                    rem /= loop.shape[d];
                  }
                  const T* s = src + off;
                  T* out = dst + o * rows * cols;
                  for (int64_t c0 = 0; c0 < cols; c0 += kTile) {
                    const int64_t c1 = std::min(cols, c0 + kTile);
                    for (int64_t r = r0; r < r1; ++r)
                      for (int64_t c = c0; c < c1; ++c) out[r * cols + c] = s[r + c * sc];
                  }
                }
              });
}

void CopyStrided(const Tensor& src, void* dst) {
  if (src.numel() == 0) return;
  if (src.is_contiguous()) {
    std::memcpy(dst, src.raw_data(), src.nbytes());
    return;
  }
  StridedLoop loop = MakeLoop(src.shape(), {ContiguousStrides(src.shape()), src.strides()});
  const int nd = static_cast<int>(loop.shape.size());
  if (nd >= 2 && loop.strides[1][nd - 1] != 1 && loop.strides[1][nd - 2] == 1 && loop.shape[nd - 1] >= 8) {
    const void* s = src.raw_data();
    switch (DTypeSize(src.dtype())) {
      case 1: TransposeTiles(loop, static_cast<const uint8_t*>(s), static_cast<uint8_t*>(dst)); return;
      case 2: TransposeTiles(loop, static_cast<const uint16_t*>(s), static_cast<uint16_t*>(dst)); return;
      case 4: TransposeTiles(loop, static_cast<const uint32_t*>(s), static_cast<uint32_t*>(dst)); return;
      default: TransposeTiles(loop, static_cast<const uint64_t*>(s), static_cast<uint64_t*>(dst)); return;
    }
  }
  CopyLoop(loop, DTypeSize(src.dtype()), src.raw_data(), dst);
}

void CopyView(const Tensor& src, const Tensor& dst) {
  if (src.numel() == 0) return;
  StridedLoop loop = MakeLoop(src.shape(), {dst.strides(), src.strides()});
  CopyLoop(loop, DTypeSize(src.dtype()), src.raw_data(), dst.raw_data());
}

void CopyRaw(absl::Span<const int64_t> shape, size_t elem, const void* src, absl::Span<const int64_t> src_strides,
             void* dst, absl::Span<const int64_t> dst_strides) {
  if (NumElements(shape) == 0) return;
  StridedLoop loop = MakeLoop(shape, {Strides(dst_strides.begin(), dst_strides.end()),
                                      Strides(src_strides.begin(), src_strides.end())});
  CopyLoop(loop, elem, src, dst);
}

Strides BroadcastStrides(const Tensor& t, absl::Span<const int64_t> shape) {
  Strides s(shape.size(), 0);
  size_t lead = shape.size() - t.ndim();
  for (int i = 0; i < t.ndim(); ++i)
    if (t.dim(i) == shape[lead + i]) s[lead + i] = t.stride(i);
  return s;
}

}  // namespace loom::kernels::cpu
