// A SentencePiece model (Debian's libsentencepiece) as a Tokenizer, and
// training one.
//
// Models that `loom data prepare --train-tokenizer` trains use identity
// normalization (the text is not changed: no NFKC, no whitespace folding),
// no dummy prefix, byte fallback (a character outside the vocabulary becomes
// its UTF-8 bytes as <0xXX> pieces) and <|endoftext|> as a user-defined
// piece, the end-of-text id. For such a model the round trip is exact for
// every byte string: SentencePiece itself would turn invalid UTF-8 into
// U+FFFD and the character U+2581 (its space marker) into a space, so the
// tokenizer encodes those bytes as byte pieces directly and decodes runs of
// byte pieces to their raw bytes, handing everything else to SentencePiece.
// The text "<|endoftext|>" is encoded the same way, as ordinary bytes (as
// GPT-2's tokenizer encodes it): the end-of-text id marks document
// boundaries only, never something the text spelled out.
// Whether a loaded .model behaves that way is probed when it loads (byte
// pieces present, no dummy prefix, probe texts that round-trip); any other
// model is used as SentencePiece uses it (exact_round_trip() is false).
//
// The end-of-text id is the piece <|endoftext|> when the model has it, else
// the model's </s> (eos), else none (-1).
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "runtime/data/internal/sp_bridge.h"
#include "runtime/data/tokenizer.h"

namespace loom::runtime::data {

class SentencePieceTokenizer : public Tokenizer {
 public:
  // A .model file; `field` names where its path came from, for errors.
  static absl::StatusOr<std::unique_ptr<SentencePieceTokenizer>> FromFile(const std::string& path,
                                                                          absl::string_view field);
  // A serialized model (a .model file's bytes); `where` prefixes errors.
  static absl::StatusOr<std::unique_ptr<SentencePieceTokenizer>> FromSerialized(std::string serialized,
                                                                                const std::string& where);

  std::string kind() const override { return "sentencepiece"; }
  int64_t vocab_size() const override { return model_->piece_size(); }
  int32_t eot_id() const override { return eot_; }
  bool exact_round_trip() const override { return exact_; }
  absl::Status Encode(absl::string_view text, std::vector<int32_t>* ids) const override;
  absl::StatusOr<std::string> Decode(absl::Span<const int32_t> ids) const override;
  std::string Describe() const override;
  // The piece of an id, as the model spells it (▁ for a space).
  std::string Piece(int32_t id) const { return model_->IdToPiece(id); }

 protected:
  absl::StatusOr<std::vector<File>> Files() const override;

 private:
  SentencePieceTokenizer() = default;
  absl::Status EncodeClean(absl::string_view text, std::vector<int32_t>* ids) const;
  // Whether the model round-trips exactly (see the top of this file).
  bool ProbeExact() const;

  std::unique_ptr<internal::SpModel> model_;
  std::string serialized_, source_;
  std::array<int32_t, 256> byte_id_{};  // <0xXX>; -1 without byte fallback
  std::vector<int16_t> byte_of_id_;      // the inverse: a byte piece's byte, else -1
  int32_t eot_ = -1;
  bool eot_is_piece_ = false;  // <|endoftext|> is a piece (not </s>)
  bool exact_ = false;
};

struct SentencePieceTrainOptions {
  std::string model_type = "bpe";  // or "unigram"
  int vocab_size = 8000;
  // Sentences SentencePiece samples for training (0 = all of them), seeded.
  int64_t max_sentences = 1000000;
  uint32_t seed = 0;
};

// The number of threads SentencePiece's trainer always runs with: its result
// depends on the thread count, and a prepared dataset must not depend on
// --threads.
inline constexpr int kSentencePieceTrainThreads = 8;

// Trains a model on the sentences `next` yields (false at the end); errors
// are InvalidArgument prefixed with `where`.
absl::StatusOr<std::unique_ptr<SentencePieceTokenizer>> TrainSentencePiece(
    const SentencePieceTrainOptions& options, const std::function<bool(std::string*)>& next,
    const std::string& where);

}  // namespace loom::runtime::data
