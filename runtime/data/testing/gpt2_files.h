// Small GPT-2 tokenizer files for tests: vocab.json with the 256 byte
// symbols (ids 0..255 in byte order), the merges' tokens, `filler` unused
// tokens (to make a vocabulary of any size), then <|endoftext|>; merges.txt.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "nlohmann/json.hpp"
#include "runtime/data/gpt2_tokenizer.h"
#include "runtime/data/testing/corpus.h"

namespace loom::runtime::data::testing {

// A code point below U+0800 in UTF-8 (the byte alphabet ends at U+0143).
inline std::string Utf8Small(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s.push_back(static_cast<char>(cp));
  } else {
    s.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
  return s;
}

// Writes dir/vocab.json and dir/merges.txt (dir must exist); returns dir.
inline std::string WriteGpt2Files(const std::string& dir,
                                  const std::vector<std::pair<std::string, std::string>>& merges, int filler = 0) {
  const std::array<uint32_t, 256> alphabet = Gpt2ByteAlphabet();
  nlohmann::json vocab = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) vocab[Utf8Small(alphabet[b])] = b;
  std::string merges_txt = "#version: 0.2\n";
  for (const auto& [a, b] : merges) {
    const size_t id = vocab.size();
    if (!vocab.contains(a + b)) vocab[a + b] = id;
    merges_txt += a + " " + b + "\n";
  }
  for (int i = 0; i < filler; ++i) {
    const size_t id = vocab.size();
    vocab["<unused" + std::to_string(i) + ">"] = id;
  }
  const size_t eot = vocab.size();
  vocab[kEndOfText] = eot;
  WriteFile(dir + "/vocab.json", vocab.dump());
  WriteFile(dir + "/merges.txt", merges_txt);
  return dir;
}

// A few English merges (" t", "th", "the", " the", "in", "ing", "er").
inline std::vector<std::pair<std::string, std::string>> EnglishMerges() {
  const std::string g = Utf8Small(0x120);  // the space symbol
  return {{"t", "h"}, {"th", "e"}, {g, "the"}, {g, "t"}, {"i", "n"}, {"in", "g"}, {"e", "r"}, {g, "a"}};
}

}  // namespace loom::runtime::data::testing
