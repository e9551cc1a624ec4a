// The safetensors file format: writer and hostile-file-safe reader.
//
// Layout: 8-byte little-endian header length N, N bytes of JSON, then the data
// section. The JSON is an object mapping tensor names to
//   {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}
// (offsets relative to the data section) plus an optional "__metadata__"
// object of string -> string. dtypes: F64 F32 BF16 F16 I32 I64 BOOL.
// The writer pads the header with spaces so the data section starts 8-aligned,
// and stores tensors back to back in the order given.
//
// The reader trusts nothing in the file. It rejects, with InvalidArgument naming
// the file and the problem: a header length above the cap or beyond the file,
// malformed JSON, nesting other than the format's, unknown keys or dtypes, more
// tensors than the cap, too many dims, shapes whose byte size overflows or does
// not equal end - begin, offsets beyond the data section, overlapping tensors,
// duplicate names. The header is parsed with a SAX handler into the index
// directly, so memory stays proportional to the (capped) header size. Data are
// read with pread, by byte range, so one tensor (or part of it) can be read
// without touching the rest of the file.
//
//   LOOM_ASSIGN_OR_RETURN(SafetensorsReader r, SafetensorsReader::Open(path));
//   LOOM_ASSIGN_OR_RETURN(Tensor w, r.ReadTensor("layers.0.wq"));
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "base/dtype.h"
#include "base/tensor.h"
#include "runtime/checkpoint/file_io.h"

namespace loom::runtime::checkpoint {

struct SafetensorsLimits {
  uint64_t max_header_bytes = 64ull << 20;
  uint64_t max_tensors = 1u << 20;
  int max_ndim = 16;
};

absl::string_view SafetensorsDTypeName(DType t);  // "F32", "BF16", ...
absl::StatusOr<DType> ParseSafetensorsDType(absl::string_view name);

struct TensorEntry {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // relative to the data section
  uint64_t nbytes() const { return end - begin; }
};

struct SafetensorsIndex {
  std::map<std::string, std::string> metadata;
  std::vector<TensorEntry> tensors;  // sorted by begin
  uint64_t data_start = 0;           // absolute file offset of the data section
  const TensorEntry* Find(absl::string_view name) const;
};

// Parses the JSON header; data_size is the byte count of the data section.
// `label` (usually the path) prefixes every error.
absl::StatusOr<SafetensorsIndex> ParseSafetensorsHeader(absl::string_view json, uint64_t data_size,
                                                        absl::string_view label,
                                                        const SafetensorsLimits& limits = {});
// Parses a whole in-memory file (length prefix + header + data).
absl::StatusOr<SafetensorsIndex> ParseSafetensorsBuffer(absl::string_view file, absl::string_view label,
                                                        const SafetensorsLimits& limits = {});

class SafetensorsReader {
 public:
  static absl::StatusOr<SafetensorsReader> Open(const std::string& path, const SafetensorsLimits& limits = {});

  const SafetensorsIndex& index() const { return index_; }
  const std::string& path() const { return path_; }
  // Reads bytes [offset, offset + n) of the tensor's data into out.
  absl::Status ReadBytes(const TensorEntry& t, uint64_t offset, void* out, uint64_t n) const;
  absl::StatusOr<Tensor> ReadTensor(absl::string_view name) const;

 private:
  std::string path_;
  std::shared_ptr<ScopedFd> fd_;
  SafetensorsIndex index_;
};

struct TensorToWrite {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  const void* data = nullptr;  // numel(shape) * DTypeSize(dtype) bytes
  // Without `data`: called once, when the tensor's bytes are due, with a sink
  // to call once on numel(shape) * DTypeSize(dtype) bytes, which may be freed
  // after. So a file of many large tensors is written with one of them in
  // memory at a time (a GPU's training state, read back tensor by tensor).
  std::function<absl::Status(const std::function<absl::Status(const void* bytes)>& sink)> produce;
};

struct WrittenTensor {
  std::string name;
  uint64_t file_begin = 0, file_end = 0;  // absolute byte offsets in the file
  uint32_t crc32c = 0;                    // of the tensor's bytes
};

// Serialises the header for `tensors` (data laid out back to back).
absl::StatusOr<std::string> BuildSafetensorsHeader(const std::vector<TensorToWrite>& tensors,
                                                   const std::map<std::string, std::string>& metadata);
// Writes the file (and fsyncs it when do_fsync). Returns each tensor's byte range
// and checksum, in input order.
absl::StatusOr<std::vector<WrittenTensor>> WriteSafetensors(const std::string& path,
                                                            const std::vector<TensorToWrite>& tensors,
                                                            const std::map<std::string, std::string>& metadata,
                                                            bool do_fsync = true);

}  // namespace loom::runtime::checkpoint
