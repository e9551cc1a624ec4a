// NumPy's .npy format: header parsing and typed element reads.
//
// A .npy file is the magic "\x93NUMPY", a major and minor version byte, the
// header length (u16 little-endian in version 1, u32 in versions 2 and 3), then
// an ASCII Python dict such as
//     {'descr': '<u2', 'fortran_order': False, 'shape': (1000,), }
// padded with spaces, then the array's elements in C order. ParseNpyHeader
// reads only that header; the elements stay in the file (shard.h maps it).
//
// Supported element types: little-endian (or one-byte) bool, signed and
// unsigned integers of 1, 2, 4 and 8 bytes and floats of 2, 4 and 8 bytes.
// Big-endian arrays and Fortran order are errors naming the field.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace loom::runtime::data {

inline constexpr absl::string_view kNpyMagic = "\x93NUMPY";

struct ElementType {
  char kind = 'u';  // 'u' unsigned, 'i' signed, 'f' float, 'b' bool
  int width = 1;    // bytes
  bool is_integer() const { return kind == 'u' || kind == 'i' || kind == 'b'; }
  std::string ToString() const;  // "u2", "f4", ...
};

struct NpyHeader {
  ElementType type;
  std::vector<int64_t> shape;
  int64_t data_offset = 0;  // bytes before the first element
  int64_t count = 1;        // elements (product of shape)
};

// Parses the header at the start of `prefix` (the file's first bytes; at least
// the whole header) and checks that `file_size` holds every element. Errors
// name `path`, the byte offset and the field.
absl::StatusOr<NpyHeader> ParseNpyHeader(absl::string_view prefix, int64_t file_size, const std::string& path);

// Element `i` of an array of type `t` at `base`, as double / as int64 (a float
// element that is not an integer is reported through *exact = false).
double ElementAsDouble(const uint8_t* base, const ElementType& t, int64_t i);
int64_t ElementAsInt(const uint8_t* base, const ElementType& t, int64_t i, bool* exact);

}  // namespace loom::runtime::data
