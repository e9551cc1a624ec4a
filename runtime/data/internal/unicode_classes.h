// The character classes GPT-2's pre-tokenizer needs (gpt2_pretokenize.h),
// without a regex engine: letters (\p{L}), numbers (\p{N}) and white space
// (\s), plus a UTF-8 decoder that never fails.
//
// Letters and numbers come from a generated table (gen_unicode_classes.py,
// Unicode's general categories L* and N*); white space is Unicode's
// White_Space property, listed by hand below.
#pragma once

#include <cstdint>
#include <string_view>

namespace loom::runtime::data::internal {

struct CodepointRange {
  uint32_t lo, hi;  // inclusive
};

extern const char kUnicodeVersion[];  // of the generated table
bool IsUnicodeLetter(uint32_t cp);
bool IsUnicodeNumber(uint32_t cp);

// Unicode's White_Space property (PropList.txt): U+0009-000D, U+0020,
// U+0085, U+00A0, U+1680, U+2000-200A, U+2028, U+2029, U+202F, U+205F,
// U+3000. U+001C-001F (Python's str.isspace) are not white space.
inline bool IsUnicodeWhiteSpace(uint32_t cp) {
  if (cp < 0x80) return cp == 0x20 || (cp >= 0x09 && cp <= 0x0D);
  return cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 ||
         cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

// One step of UTF-8 decoding at text[pos] (pos < text.size()).
struct Utf8Char {
  uint32_t cp = 0;  // the code point, or the byte value when !valid
  int len = 1;      // bytes consumed (1 for an invalid byte)
  bool valid = true;
};

// A well-formed sequence (no overlong forms, no surrogates, at most
// U+10FFFF) decodes to its code point; anything else is one invalid byte, so
// every byte string splits into characters and invalid bytes, as Python's
// decode(errors="surrogateescape") splits it.
inline Utf8Char DecodeUtf8(std::string_view text, size_t pos) {
  const auto b = [&](size_t i) { return static_cast<uint8_t>(text[i]); };
  const uint8_t c0 = b(pos);
  if (c0 < 0x80) return {c0, 1, true};
  int len = 0;
  uint32_t cp = 0, min = 0;
  if ((c0 & 0xE0) == 0xC0) {
    len = 2, cp = c0 & 0x1F, min = 0x80;
  } else if ((c0 & 0xF0) == 0xE0) {
    len = 3, cp = c0 & 0x0F, min = 0x800;
  } else if ((c0 & 0xF8) == 0xF0) {
    len = 4, cp = c0 & 0x07, min = 0x10000;
  } else {
    return {c0, 1, false};
  }
  if (pos + len > text.size()) return {c0, 1, false};
  for (int i = 1; i < len; ++i) {
    if ((b(pos + i) & 0xC0) != 0x80) return {c0, 1, false};
    cp = (cp << 6) | (b(pos + i) & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return {c0, 1, false};
  return {cp, len, true};
}

}  // namespace loom::runtime::data::internal
