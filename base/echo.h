// Bounded echo of user values in error messages.
//
// Error messages quote a user's value through EchoValue: at most
// kMaxEchoBytes of it, cut at a UTF-8 character boundary, followed by
// "... (N bytes)" when it was longer, with control characters written as
// \xNN (a message stays one line). A huge field therefore never travels
// back whole (gRPC carries the message in a response header).
//
//   return absl::InvalidArgumentError(absl::StrCat("data.path: no such file (got ", EchoValue(p), ")"));
#pragma once

#include <cstddef>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace loom {

inline constexpr size_t kMaxEchoBytes = 200;

// The first `max` bytes of `text` (not splitting a UTF-8 sequence), with
// "... (N bytes)" appended when something was cut.
inline std::string Truncated(absl::string_view text, size_t max) {
  if (text.size() <= max) return std::string(text);
  size_t n = max;
  while (n > 0 && (static_cast<unsigned char>(text[n]) & 0xC0) == 0x80) --n;  // a continuation byte
  return absl::StrCat(text.substr(0, n), "... (", text.size(), " bytes)");
}

inline std::string EchoValue(absl::string_view value) {
  std::string out;
  for (char c : Truncated(value, kMaxEchoBytes)) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) {
      absl::StrAppend(&out, "\\x", absl::Hex(u, absl::kZeroPad2));
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace loom
