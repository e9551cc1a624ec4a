// The on-disk store of choices made by timing: cuBLASLt algorithms
// (gemm.cc), the SDPA dispatcher's kernels (attention/sdpa_dispatch.h) and
// cuDNN's attention engine configs (attention/cudnn_sdpa.h). A choice is
// timed once per shape and device; a later process finds it here and runs
// the same kernel without timing again.
//
//   TuningCache& tc = TuningCache::Global();
//   LOOM_RETURN_IF_ERROR(tc.Open("/root/.cache/loom/kernels/choices.tsv"));
//   const std::string key = absl::StrCat("gemm ", DeviceTag(dev), " ", shape);
//   if (std::optional<std::string> v = tc.Get(key)) ...;   // reuse the choice
//   else { ...time...; tc.Put(key, "3 8"); }
//
// File: one "key<TAB>value" line per choice, appended with one write(2) under
// O_APPEND (processes sharing the file add whole lines); on Open the last
// line of a key wins and malformed lines are skipped. Keys name the device
// (DeviceTag) and the library version, so a file moved to another GPU or
// library tunes again. Tabs and newlines inside keys or values are replaced
// by spaces. Without a file (Open never called, or Open("")) Get finds
// nothing and Put keeps the choice in memory only. The CUDA executor opens
// <its kernel cache folder>/choices.tsv (CudaOptions::kernel_cache).
// Thread-safe.
#pragma once

#include <map>
#include <mutex>
#include <optional>
#include <string>

#include "absl/status/status.h"

namespace loom::kernels::cuda {

class TuningCache {
 public:
  static TuningCache& Global();

  // Reads `path` (a missing file is an empty cache) and appends to it from
  // now on; "" forgets every entry and writes no file. Unavailable when the
  // file exists but cannot be read.
  absl::Status Open(const std::string& path);
  std::string path() const;
  std::optional<std::string> Get(const std::string& key) const;
  // Records the choice in memory and, with a file, appends its line. A failed
  // write is ignored: the cache is an optimisation.
  void Put(const std::string& key, const std::string& value);
  size_t size() const;

 private:
  mutable std::mutex mu_;
  std::string path_;
  std::map<std::string, std::string> entries_;
};

// "NVIDIA H200 sm90": the part of a key that names the device.
std::string DeviceTag(const std::string& name, int major, int minor);

}  // namespace loom::kernels::cuda
