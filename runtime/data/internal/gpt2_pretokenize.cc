#include "runtime/data/internal/gpt2_pretokenize.h"

#include "runtime/data/internal/unicode_classes.h"

namespace loom::runtime::data::internal {
namespace {

enum class CharClass { kLetter, kNumber, kSpace, kOther };

CharClass ClassOf(const Utf8Char& c) {
  if (!c.valid) return CharClass::kOther;
  if (c.cp < 0x80) {  // ASCII without the tables
    const uint32_t a = c.cp;
    if ((a >= 'a' && a <= 'z') || (a >= 'A' && a <= 'Z')) return CharClass::kLetter;
    if (a >= '0' && a <= '9') return CharClass::kNumber;
    return IsUnicodeWhiteSpace(a) ? CharClass::kSpace : CharClass::kOther;
  }
  if (IsUnicodeWhiteSpace(c.cp)) return CharClass::kSpace;
  if (IsUnicodeLetter(c.cp)) return CharClass::kLetter;
  if (IsUnicodeNumber(c.cp)) return CharClass::kNumber;
  return CharClass::kOther;
}

CharClass ClassAt(std::string_view text, size_t pos) { return ClassOf(DecodeUtf8(text, pos)); }

// The end of the run of characters of class `cls` that starts at `pos`.
size_t RunEnd(std::string_view text, size_t pos, CharClass cls) {
  while (pos < text.size()) {
    const Utf8Char c = DecodeUtf8(text, pos);
    if (ClassOf(c) != cls) break;
    pos += c.len;
  }
  return pos;
}

// 's 't 're 've 'm 'll 'd: the length of the contraction at `pos`, or 0.
size_t ContractionLength(std::string_view text, size_t pos) {
  if (text[pos] != '\'' || pos + 1 >= text.size()) return 0;
  const char a = text[pos + 1];
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
  if (pos + 2 >= text.size()) return 0;
  const char b = text[pos + 2];
  if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
  return 0;
}

}  // namespace

size_t Gpt2PieceEnd(std::string_view text, size_t pos) {
  if (size_t n = ContractionLength(text, pos); n > 0) return pos + n;
  // ` ?\p{L}+`, ` ?\p{N}+`, ` ?[^\s\p{L}\p{N}]+`: one class decides which.
  const size_t start = text[pos] == ' ' && pos + 1 < text.size() ? pos + 1 : pos;
  const CharClass cls = ClassAt(text, start);
  if (cls != CharClass::kSpace) return RunEnd(text, start, cls);
  // `\s+(?!\S)` then `\s+`: here text[pos] is white space.
  size_t end = pos, last = pos;  // `last`: where the run's last character starts
  int count = 0;
  while (end < text.size()) {
    const Utf8Char c = DecodeUtf8(text, end);
    if (ClassOf(c) != CharClass::kSpace) break;
    last = end;
    end += c.len;
    ++count;
  }
  if (end == text.size() || count == 1) return end;
  return last;
}

}  // namespace loom::runtime::data::internal
