// Writers of data files for tests: llm.c shards, .npy arrays and raw ids,
// built byte by byte from the formats' descriptions (not from the readers
// under test).
#pragma once

#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace loom::runtime::data::testing {

template <typename T>
std::string Raw(const std::vector<T>& v) {
  std::string s(v.size() * sizeof(T), '\0');
  if (!v.empty()) std::memcpy(s.data(), v.data(), s.size());
  return s;
}

// An llm.c shard: 256 int32 (magic, version, count, zeros), then the ids as
// u16 (version 1) or u32. count < 0: the number of ids given.
inline std::string Llmc(const std::vector<uint32_t>& ids, int32_t magic = 20240520, int32_t version = 1,
                        int32_t count = -1) {
  std::vector<int32_t> header(256, 0);
  header[0] = magic;
  header[1] = version;
  header[2] = count < 0 ? static_cast<int32_t>(ids.size()) : count;
  std::string s = Raw(header);
  if (magic == 20240801) return s + Raw(ids);
  std::vector<uint16_t> narrow(ids.begin(), ids.end());
  return s + Raw(narrow);
}

// A version-1 .npy file: magic, version, u16 header length, the dict padded
// with spaces to a 64-byte boundary and ending in '\n', then `data`.
inline std::string Npy(const std::string& descr, const std::vector<int64_t>& shape, const std::string& data) {
  std::string dims = absl::StrJoin(shape, ", ");
  if (shape.size() == 1) dims += ",";
  std::string dict = absl::StrCat("{'descr': '", descr, "', 'fortran_order': False, 'shape': (", dims, "), }");
  size_t total = 10 + dict.size() + 1;
  dict.append((64 - total % 64) % 64, ' ');
  dict += '\n';
  std::string s = "\x93NUMPY";
  s += '\x01';
  s += '\x00';
  s += static_cast<char>(dict.size() & 0xff);
  s += static_cast<char>(dict.size() >> 8);
  return s + dict + data;
}

inline std::string Write(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
  return path;
}

}  // namespace loom::runtime::data::testing
