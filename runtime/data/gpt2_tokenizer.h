// GPT-2's byte-level BPE, read from vocab.json + merges.txt (OpenAI's and
// Hugging Face's gpt2 files) or from Hugging Face's tokenizer.json.
//
// Encoding: the text is cut into pieces by GPT-2's pre-tokenizer
// (internal/gpt2_pretokenize.h); each piece's bytes start as the one-byte
// symbols of GPT-2's byte alphabet (every byte is a printable character:
// the bytes '!'..'~', U+00A1..U+00AC and U+00AE..U+00FF stand for themselves,
// the other 68 bytes for U+0100.. in byte order, so a space is 'Ġ'); then,
// as long as two neighbouring symbols form a pair in merges.txt, every
// occurrence of the pair that ranks first (earliest line), left to right,
// becomes one symbol. The symbols' vocab.json ids are the piece's ids. Any
// byte string encodes (invalid UTF-8 included), and decoding the ids gives
// the bytes back: the round trip is exact.
//
// <|endoftext|> has its own id (vocab.json's, or tokenizer.json's added
// token); documents are separated by it. Text that spells "<|endoftext|>"
// encodes as ordinary text, as OpenAI's encoder does; only document
// boundaries get the id.
//
// tokenizer.json is accepted when it describes this same tokenizer:
// model.type "BPE" with model.vocab and model.merges (strings "a b" or pairs
// ["a", "b"]), no normalizer, a ByteLevel pre-tokenizer (or none) without
// add_prefix_space. Anything else is an error naming the JSON field.
//
// Encoded pieces are cached per thread (up to 65536 pieces), so Encode is
// thread-safe and scales with threads.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "runtime/data/tokenizer.h"

namespace loom::runtime::data {

// GPT-2's byte alphabet: the code point that stands for each byte.
std::array<uint32_t, 256> Gpt2ByteAlphabet();

class Gpt2Tokenizer : public Tokenizer {
 public:
  // `vocab_field` / `merges_field` name where the paths came from, for errors.
  static absl::StatusOr<std::unique_ptr<Gpt2Tokenizer>> FromFiles(const std::string& vocab_path,
                                                                  absl::string_view vocab_field,
                                                                  const std::string& merges_path,
                                                                  absl::string_view merges_field);
  static absl::StatusOr<std::unique_ptr<Gpt2Tokenizer>> FromJson(const std::string& path, absl::string_view field);

  std::string kind() const override { return "gpt2"; }
  int64_t vocab_size() const override { return static_cast<int64_t>(id_bytes_.size()); }
  int32_t eot_id() const override { return eot_; }
  bool exact_round_trip() const override { return true; }
  absl::Status Encode(absl::string_view text, std::vector<int32_t>* ids) const override;
  absl::StatusOr<std::string> Decode(absl::Span<const int32_t> ids) const override;
  std::string Describe() const override;

  int64_t num_merges() const { return static_cast<int64_t>(merges_.size()); }
  // The ids of one pre-tokenized piece, without the cache.
  void EncodePiece(absl::string_view piece, std::vector<int32_t>* ids) const;

  // A token: its string in the byte alphabet and its id.
  using Vocab = std::vector<std::pair<std::string, int32_t>>;
  // One merge rule and where it was read ("line 7", "model.merges[5]").
  struct MergeRule {
    std::string left, right, where;
  };

 protected:
  absl::StatusOr<std::vector<File>> Files() const override;

 private:
  struct Merge {
    int32_t rank, id;
  };
  Gpt2Tokenizer() = default;
  // `*_where` prefix errors ("--vocab: /p/vocab.json"); tokens of `added`
  // (tokenizer.json's added_tokens) are raw text, not the byte alphabet.
  absl::Status Build(const Vocab& vocab, const Vocab& added, const std::vector<MergeRule>& merges,
                     const std::string& vocab_where, const std::string& merges_where);
  absl::Status BuildIds(const Vocab& vocab, const Vocab& added, const std::string& vocab_where,
                        absl::flat_hash_map<std::string, int32_t>* by_token);

  std::vector<std::string> id_bytes_;  // the bytes each id decodes to
  std::vector<bool> id_known_;         // false: a hole in a sparse vocabulary
  std::array<int32_t, 256> byte_id_{};
  absl::flat_hash_map<uint64_t, Merge> merges_;  // (left id << 32 | right id)
  int32_t eot_ = -1;
  uint64_t cache_key_ = 0;  // tells this tokenizer's per-thread cache from others'
  std::vector<File> files_;  // the source files, for Save
  std::string source_;
};

}  // namespace loom::runtime::data
