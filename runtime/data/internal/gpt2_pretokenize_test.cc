// GPT-2's pre-tokenizer against splits worked out by hand from its pattern,
// and the generated Unicode table against Python's unicodedata. (The whole
// tokenizer is checked against an independent Python implementation that
// uses the pattern itself in gpt2_tokenizer_test.)
#include "runtime/data/internal/gpt2_pretokenize.h"

#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "runtime/data/internal/unicode_classes.h"

namespace loom::runtime::data::internal {
namespace {

std::vector<std::string> Split(const std::string& text) {
  std::vector<std::string> out;
  Gpt2Pretokenize(text, [&](std::string_view p) { out.emplace_back(p); });
  return out;
}

using V = std::vector<std::string>;

TEST(Gpt2Pretokenize, WordsSpacesAndContractions) {
  EXPECT_EQ(Split("Hello world"), (V{"Hello", " world"}));
  EXPECT_EQ(Split("I'm here, don't"), (V{"I", "'m", " here", ",", " don", "'t"}));
  EXPECT_EQ(Split("you're they've we'll he'd it's"),
            (V{"you", "'re", " they", "'ve", " we", "'ll", " he", "'d", " it", "'s"}));
  // Contractions are lower case only, and match before anything else.
  EXPECT_EQ(Split("IT'S 'sa"), (V{"IT", "'", "S", " '", "sa"}));
  EXPECT_EQ(Split("'sa"), (V{"'s", "a"}));
  EXPECT_EQ(Split("hello!!! world?!"), (V{"hello", "!!!", " world", "?!"}));
  EXPECT_EQ(Split(" ?! x"), (V{" ?!", " x"}));
  EXPECT_EQ(Split("123 4567 3.14"), (V{"123", " 4567", " 3", ".", "14"}));
  EXPECT_EQ(Split("abc123def"), (V{"abc", "123", "def"}));
}

TEST(Gpt2Pretokenize, WhitespaceRunsLeaveTheirLastSpaceToTheNextWord) {
  EXPECT_EQ(Split("a   b"), (V{"a", "  ", " b"}));
  EXPECT_EQ(Split("  foo"), (V{" ", " foo"}));
  EXPECT_EQ(Split("foo  "), (V{"foo", "  "}));
  EXPECT_EQ(Split(" "), (V{" "}));
  EXPECT_EQ(Split("a\n\nb"), (V{"a", "\n", "\n", "b"}));
  EXPECT_EQ(Split("a\n\n"), (V{"a", "\n\n"}));
  EXPECT_EQ(Split("\t\tx"), (V{"\t", "\t", "x"}));
  EXPECT_EQ(Split("x \n y"), (V{"x", " \n", " y"}));
  // U+00A0 (no-break space) is white space but not the optional ' '.
  EXPECT_EQ(Split("a\xC2\xA0" "b"), (V{"a", "\xC2\xA0", "b"}));
}

TEST(Gpt2Pretokenize, UnicodeClassesAndInvalidBytes) {
  EXPECT_EQ(Split("na\xC3\xAFve caf\xC3\xA9"), (V{"na\xC3\xAFve", " caf\xC3\xA9"}));
  // 日本語 テキスト: letters (Lo) in runs.
  EXPECT_EQ(Split("\xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E \xE3\x83\x86\xE3\x82\xAD\xE3\x82\xB9\xE3\x83\x88"),
            (V{"\xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E", " \xE3\x83\x86\xE3\x82\xAD\xE3\x82\xB9\xE3\x83\x88"}));
  // x² (No), e + combining acute (Mn: neither letter nor number), 😀 (So).
  EXPECT_EQ(Split("x\xC2\xB2 e\xCC\x81 \xF0\x9F\x98\x80!"), (V{"x", "\xC2\xB2", " e", "\xCC\x81", " \xF0\x9F\x98\x80!"}));
  // Invalid bytes (a lone continuation, a truncated sequence, an encoded
  // surrogate, an overlong form) are characters of the third class.
  EXPECT_EQ(Split("ab\xFF\xFE" "cd \x80"), (V{"ab", "\xFF\xFE", "cd", " \x80"}));
  EXPECT_EQ(Split("\xE6\x97" "a"), (V{"\xE6\x97", "a"}));
  EXPECT_EQ(Split("\xED\xA0\x80x"), (V{"\xED\xA0\x80", "x"}));
  EXPECT_EQ(Split("\xC0\xAFx"), (V{"\xC0\xAF", "x"}));
}

TEST(Gpt2Pretokenize, PiecesAreNonEmptyAndConcatenateToAnyByteString) {
  std::mt19937 rng(7);
  const char alphabet[] = "ab '\n\t1.\xC3\xA9\xE2\x96\x81\xFF\x80";
  for (int trial = 0; trial < 2000; ++trial) {
    std::string text;
    const int n = rng() % 24;
    for (int i = 0; i < n; ++i) text.push_back(alphabet[rng() % (sizeof(alphabet) - 1)]);
    std::string joined;
    for (const std::string& p : Split(text)) {
      ASSERT_FALSE(p.empty()) << text;
      joined += p;
    }
    ASSERT_EQ(joined, text);
  }
}

TEST(UnicodeClasses, TableMatchesItsGeneratorAndKnownCharacters) {
  EXPECT_TRUE(IsUnicodeLetter(0xE9));      // é
  EXPECT_TRUE(IsUnicodeLetter(0x65E5));    // 日
  EXPECT_TRUE(IsUnicodeLetter(0x2C6));     // ˆ (Lm)
  EXPECT_FALSE(IsUnicodeLetter(0x301));    // combining acute (Mn)
  EXPECT_TRUE(IsUnicodeNumber(0x663));     // Arabic-Indic three (Nd)
  EXPECT_TRUE(IsUnicodeNumber(0x2167));    // Roman numeral eight (Nl)
  EXPECT_TRUE(IsUnicodeNumber(0xB2));      // ² (No)
  EXPECT_FALSE(IsUnicodeNumber(0x4E00));   // 一 is a letter, not a number
  EXPECT_TRUE(IsUnicodeLetter(0x4E00));
  EXPECT_FALSE(IsUnicodeWhiteSpace(0x1C));  // Python's isspace() says yes; White_Space says no
  EXPECT_TRUE(IsUnicodeWhiteSpace(0x3000));
  // The table is what the generator writes from this machine's unicodedata.
  FILE* p = popen(
      "/usr/bin/python3 runtime/data/internal/gen_unicode_classes.py --check "
      "runtime/data/internal/unicode_classes.cc 2>&1",
      "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[512];
  while (fgets(buf, sizeof(buf), p)) out += buf;
  EXPECT_EQ(pclose(p), 0) << out;
  EXPECT_NE(out.find(std::string("Unicode ") + kUnicodeVersion), std::string::npos) << out;
}

}  // namespace
}  // namespace loom::runtime::data::internal
