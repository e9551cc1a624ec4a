// Test helpers: deterministic tensors, rectangular grid shardings of a full
// tensor into a SaveRequest, bitwise comparison, a fresh temp folder.
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/tensor.h"
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/checkpoint/file_io.h"

namespace loom::runtime::checkpoint::testing {

inline std::string FreshDir(const std::string& name) {
  const char* t = getenv("TEST_TMPDIR");
  std::string dir = absl::StrCat(t ? t : "/tmp", "/", name, ".", getpid());
  RemoveTree(dir).IgnoreError();
  MakeDir(dir).IgnoreError();
  return dir;
}

// Distinct values per element and per `salt` (exactly representable in bf16 for small i).
inline Tensor Pattern(const std::vector<int64_t>& shape, DType dtype, int salt) {
  Tensor t = Tensor::MustEmpty(shape, dtype);
  for (int64_t i = 0; i < t.numel(); ++i) {
    double v = dtype == DType::kBool ? ((i + salt) % 3 == 0) : static_cast<double>((i * 7 + salt * 13) % 251) - 100;
    t.SetDouble(i, v);
  }
  return t;
}

inline bool BitwiseEqual(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape()) return false;
  if (a.nbytes() == 0) return true;
  Tensor ca = a.Contiguous(), cb = b.Contiguous();
  return std::memcmp(ca.raw_data(), cb.raw_data(), ca.nbytes()) == 0;
}

// Element-wise copy of a rectangle of `full` (any rank).
inline Tensor Slice(const Tensor& full, const std::vector<int64_t>& off, const std::vector<int64_t>& len) {
  Tensor v = full;
  for (size_t d = 0; d < off.size(); ++d) v = v.Narrow(static_cast<int>(d), off[d], len[d]);
  return v.Contiguous();
}

// Splits dim d into `parts[d]` near-equal pieces; ranks numbered row-major over the grid.
inline TensorToSave GridShards(const std::string& name, const Tensor& full, const std::vector<int>& parts,
                               int rank_base = 0) {
  TensorToSave t;
  t.name = name;
  t.dtype = full.dtype();
  t.global_shape.assign(full.shape().begin(), full.shape().end());
  t.spec = "grid";
  const size_t nd = t.global_shape.size();
  std::vector<int> idx(nd, 0);
  int64_t total = 1;
  for (int p : parts) total *= p;
  for (int64_t r = 0; r < total; ++r) {
    std::vector<int64_t> off(nd), len(nd);
    for (size_t d = 0; d < nd; ++d) {
      int64_t n = t.global_shape[d], p = parts[d];
      int64_t lo = n * idx[d] / p, hi = n * (idx[d] + 1) / p;
      off[d] = lo;
      len[d] = hi - lo;
    }
    t.shards.push_back({rank_base + r, off, Slice(full, off, len)});
    for (size_t d = nd; d-- > 0;) {
      if (++idx[d] < parts[d]) break;
      idx[d] = 0;
    }
  }
  return t;
}

// A request with three tensors: "w" f32 [7, 10] on a 2x2 grid (ranks 0-3),
// "b" bf16 [5] whole on rank 1, "count" i64 scalar on rank 0.
inline SaveRequest SampleRequest(int64_t step, int salt = 0) {
  SaveRequest req;
  req.step = step;
  req.world_size = 4;
  req.sampler = {99, 1, step * 8};
  req.job_spec = "model: tiny\n";
  req.layout = "tp=2 x dp=2";
  req.tensors.push_back(GridShards("w", Pattern({7, 10}, DType::kF32, salt + static_cast<int>(step)), {2, 2}));
  TensorToSave b = GridShards("b", Pattern({5}, DType::kBF16, salt + 1), {1}, 1);
  req.tensors.push_back(b);
  TensorToSave c = GridShards("count", Pattern({}, DType::kI64, static_cast<int>(step)), {});
  req.tensors.push_back(c);
  return req;
}

}  // namespace loom::runtime::checkpoint::testing
