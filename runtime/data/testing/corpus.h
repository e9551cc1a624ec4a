// Text for the tokenizer and data-preparation tests: prose from the fortunes
// corpus plus documents that exercise what a tokenizer must keep exactly.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace loom::runtime::data::testing {

// The first `bytes` bytes of a fortunes file (Debian's `fortunes` package).
// A missing or empty file aborts the test with the package to install
// (scripts/setup.sh installs it): the tests never run on an empty corpus.
inline std::string FortuneText(const std::string& name, size_t bytes) {
  const std::string path = "/usr/share/games/fortunes/" + name;
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  if (!in || ss.str().empty()) {
    std::fprintf(stderr, "%s: missing or empty; install Debian's fortunes package (scripts/setup.sh)\n", path.c_str());
    std::abort();
  }
  return ss.str().substr(0, bytes);
}

// A string literal with every byte, NULs included.
template <size_t N>
std::string Bytes(const char (&s)[N]) {
  return std::string(s, N - 1);
}

// Documents a round trip must survive: multi-byte UTF-8 (accents, CJK,
// emoji no small vocabulary holds), bytes that are not UTF-8, SentencePiece's
// own space marker U+2581, control characters, whitespace runs, digits,
// contractions, the end-of-text marker spelled out, and an empty document.
inline std::vector<std::string> HardDocuments() {
  return {
      "Hello world! I'm here, don't you see? They've gone; we'll stay.\n",
      "  leading spaces, trailing spaces   \n\n\n  and\ttabs\t\there\r\nCRLF line\r\n",
      "na\xC3\xAFve caf\xC3\xA9 \xC3\xBC\xC3\xB6\xC3\xA4 \xC3\x9F \xE2\x82\xAC 100 \xE2\x80\x94 \xE2\x80\x9Cquoted\xE2\x80\x9D",
      "\xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E\xE3\x81\xAE\xE3\x83\x86\xE3\x82\xAD\xE3\x82\xB9\xE3\x83\x88 "
      "\xD0\xBF\xD1\x80\xD0\xB8\xD0\xB2\xD0\xB5\xD1\x82 \xCE\xB1\xCE\xB2\xCE\xB3 \xF0\x9F\x98\x80\xF0\x9F\x9A\x80",
      Bytes("invalid \xFF\xFE bytes \x80 lone, truncated \xE6\x97, surrogate \xED\xA0\x80 end \xC3"),
      "space marker \xE2\x96\x81 inside \xE2\x96\x81\xE2\x96\x81 text",
      Bytes("nul \0 bell \a escape \x1B[0m"),
      "3.14159 2,718 1e-9 0x1F 2024-12-02 x\xC2\xB2 \xE2\x85\xA7",
      "literal <|endoftext|> in the text",
      "",
  };
}

inline void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out << bytes;
}

}  // namespace loom::runtime::data::testing
