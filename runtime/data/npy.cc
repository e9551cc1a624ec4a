#include "runtime/data/npy.h"

#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/dtype.h"

namespace loom::runtime::data {
namespace {

absl::Status Bad(const std::string& path, int64_t offset, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": .npy header at byte offset ", offset, ": ", what));
}

// The text after `'key':` in the header dict, or empty when the key is absent.
absl::string_view ValueOf(absl::string_view dict, absl::string_view key) {
  const std::string quoted = absl::StrCat("'", key, "'");
  size_t k = dict.find(quoted);
  if (k == absl::string_view::npos) return {};
  size_t colon = dict.find(':', k + quoted.size());
  if (colon == absl::string_view::npos) return {};
  return absl::StripLeadingAsciiWhitespace(dict.substr(colon + 1));
}

absl::StatusOr<ElementType> ParseDescr(absl::string_view v, const std::string& path, int64_t at) {
  if (v.empty() || v[0] != '\'') return Bad(path, at, "'descr' is not a quoted type string");
  size_t end = v.find('\'', 1);
  if (end == absl::string_view::npos) return Bad(path, at, "'descr' is not terminated");
  absl::string_view d = v.substr(1, end - 1);
  if (d.size() < 3) return Bad(path, at, absl::StrCat("'descr' '", d, "' is not a supported type"));
  const char order = d[0];
  ElementType t;
  t.kind = d[1];
  if (!absl::SimpleAtoi(d.substr(2), &t.width))
    return Bad(path, at, absl::StrCat("'descr' '", d, "' has no element size"));
  const bool sized = (t.kind == 'b' && t.width == 1) ||
                     ((t.kind == 'u' || t.kind == 'i') && (t.width == 1 || t.width == 2 || t.width == 4 || t.width == 8)) ||
                     (t.kind == 'f' && (t.width == 2 || t.width == 4 || t.width == 8));
  if (!sized)
    return Bad(path, at, absl::StrCat("'descr' '", d, "' is not a supported type (bool, u1..u8, i1..i8, f2, f4, f8)"));
  if (order == '>' && t.width > 1)
    return Bad(path, at, absl::StrCat("'descr' '", d, "' is big-endian; only little-endian arrays are read"));
  if (order != '<' && order != '|' && order != '=' && !(order == '>' && t.width == 1))
    return Bad(path, at, absl::StrCat("'descr' '", d, "' has an unknown byte order"));
  return t;
}

absl::StatusOr<std::vector<int64_t>> ParseShape(absl::string_view v, const std::string& path, int64_t at) {
  if (v.empty() || v[0] != '(') return Bad(path, at, "'shape' is not a tuple");
  size_t end = v.find(')');
  if (end == absl::string_view::npos) return Bad(path, at, "'shape' is not terminated");
  std::vector<int64_t> shape;
  for (absl::string_view part : absl::StrSplit(v.substr(1, end - 1), ',')) {
    part = absl::StripAsciiWhitespace(part);
    if (part.empty()) continue;
    int64_t n = 0;
    if (!absl::SimpleAtoi(part, &n) || n < 0)
      return Bad(path, at, absl::StrCat("'shape' has a bad dimension '", part, "'"));
    shape.push_back(n);
  }
  return shape;
}

}  // namespace

std::string ElementType::ToString() const { return absl::StrCat(std::string(1, kind), width); }

absl::StatusOr<NpyHeader> ParseNpyHeader(absl::string_view prefix, int64_t file_size, const std::string& path) {
  if (file_size == 0) return absl::InvalidArgumentError(absl::StrCat(path, ": empty file (0 bytes)"));
  if (prefix.size() < 10 || prefix.substr(0, kNpyMagic.size()) != kNpyMagic)
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": not a .npy file: the magic \\x93NUMPY is missing at byte offset 0"));
  const auto* b = reinterpret_cast<const uint8_t*>(prefix.data());
  const int major = b[6];
  int64_t header_len = 0, start = 0;
  if (major == 1) {
    header_len = b[8] | (b[9] << 8);
    start = 10;
  } else if (major == 2 || major == 3) {
    if (prefix.size() < 12) return Bad(path, 8, "truncated header length");
    header_len = static_cast<int64_t>(b[8]) | (b[9] << 8) | (b[10] << 16) | (static_cast<int64_t>(b[11]) << 24);
    start = 12;
  } else {
    return Bad(path, 6, absl::StrCat("unsupported format version ", major));
  }
  if (start + header_len > static_cast<int64_t>(prefix.size()) || start + header_len > file_size)
    return Bad(path, start, absl::StrCat("the header claims ", header_len, " bytes; the file is truncated (",
                                         file_size, " bytes)"));
  absl::string_view dict = prefix.substr(start, header_len);
  NpyHeader h;
  h.data_offset = start + header_len;
  absl::string_view descr = ValueOf(dict, "descr"), fortran = ValueOf(dict, "fortran_order"),
                    shape = ValueOf(dict, "shape");
  if (descr.empty()) return Bad(path, start, "no 'descr' field");
  if (shape.empty()) return Bad(path, start, "no 'shape' field");
  if (absl::StartsWith(fortran, "True")) return Bad(path, start, "'fortran_order' is True; only C order is read");
  auto t = ParseDescr(descr, path, start);
  if (!t.ok()) return t.status();
  h.type = *t;
  auto s = ParseShape(shape, path, start);
  if (!s.ok()) return s.status();
  h.shape = std::move(*s);
  for (int64_t d : h.shape) {
    if (d > 0 && h.count > (int64_t{1} << 60) / d) return Bad(path, start, "'shape' is too large");
    h.count *= d;
  }
  const int64_t need = h.data_offset + h.count * h.type.width;
  if (need != file_size)
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": ", need > file_size ? "truncated" : "trailing bytes", ": 'shape' and 'descr' give ", h.count,
        " elements ending at byte offset ", need, ", but the file has ", file_size, " bytes"));
  return h;
}

double ElementAsDouble(const uint8_t* base, const ElementType& t, int64_t i) {
  const uint8_t* p = base + i * t.width;
  switch (t.kind) {
    case 'f': {
      if (t.width == 2) {
        uint16_t h;
        std::memcpy(&h, p, 2);
        return F16::ToFloat(h);
      }
      if (t.width == 4) {
        float f;
        std::memcpy(&f, p, 4);
        return f;
      }
      double d;
      std::memcpy(&d, p, 8);
      return d;
    }
    default: {
      bool exact = true;
      return static_cast<double>(ElementAsInt(base, t, i, &exact));
    }
  }
}

int64_t ElementAsInt(const uint8_t* base, const ElementType& t, int64_t i, bool* exact) {
  const uint8_t* p = base + i * t.width;
  if (t.kind == 'f') {
    double d = ElementAsDouble(base, t, i);
    if (!(d >= -9.0e18 && d <= 9.0e18)) {  // NaN, infinities and out-of-range values
      *exact = false;
      return 0;
    }
    int64_t v = static_cast<int64_t>(d);
    *exact = static_cast<double>(v) == d;
    return v;
  }
  *exact = true;
  uint64_t u = 0;
  std::memcpy(&u, p, t.width);  // little-endian host
  if (t.kind == 'i' && t.width < 8) {
    const int shift = 64 - 8 * t.width;
    return static_cast<int64_t>(u << shift) >> shift;
  }
  if (t.kind == 'u' && t.width == 8 && u > static_cast<uint64_t>(INT64_MAX)) *exact = false;
  return static_cast<int64_t>(u);
}

}  // namespace loom::runtime::data
