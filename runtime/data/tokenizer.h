// Tokenizers: text to token ids and back, behind one interface.
//
//   kind           ids                         end-of-text         files
//   bytes          the byte values (vocab 256)  none                none (the default)
//   sentencepiece  a SentencePiece model        <|endoftext|>, else the model's </s>
//                                                                   a .model file
//   gpt2           GPT-2's byte-level BPE      <|endoftext|>       vocab.json + merges.txt, or
//                                                                   Hugging Face's tokenizer.json
//
// (sentencepiece_tokenizer.h and gpt2_tokenizer.h say how each encodes.)
// A job names its tokenizer in data.tokenizer (v1::TokenizerSpec); the data
// a job reads holds ids of that tokenizer, and samples are decoded with it.
//
// A tokenizer folder is how one travels: `loom data prepare --out DIR` writes
// one into DIR, and a run folder keeps one in RUN/tokenizer/. It holds
// loom-tokenizer.json and the files that description names, by name inside
// the folder (a name with '/' is refused, so the folder holds every file a
// description reaches):
//
//   {"format": "loom-tokenizer", "version": 1, "kind": "gpt2",
//    "files": {"vocab": "vocab.json", "merges": "merges.txt"},
//    "vocab_size": 50257, "eot_id": 50256, "eot": "<|endoftext|>",
//    "round_trip": "exact"}
//
// "round_trip" says whether Decode(Encode(x)) == x for every byte string x
// ("exact") or only for text the model's normalization leaves alone
// ("normalized"). Only kind, files and version are read back; the rest
// documents the folder and is checked against the loaded tokenizer.
//
//   LOOM_ASSIGN_OR_RETURN(auto tok, LoadTokenizer(spec.data().tokenizer()));
//   std::vector<int32_t> ids;
//   LOOM_RETURN_IF_ERROR(tok->Encode("Hello", &ids));
//   LOOM_ASSIGN_OR_RETURN(std::string text, tok->Decode(ids));
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "proto/loom/v1/job.pb.h"

namespace loom::runtime::data {

inline constexpr const char kEndOfText[] = "<|endoftext|>";
inline constexpr const char kTokenizerDescription[] = "loom-tokenizer.json";

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  virtual std::string kind() const = 0;
  // Ids are in [0, vocab_size()).
  virtual int64_t vocab_size() const = 0;
  // The id that separates documents, or -1 when the tokenizer has none.
  virtual int32_t eot_id() const = 0;
  // Whether Decode(Encode(x)) == x for every byte string x.
  virtual bool exact_round_trip() const = 0;

  // Appends the ids of `text` to *ids. Thread-safe: one tokenizer may encode
  // on many threads at once.
  virtual absl::Status Encode(absl::string_view text, std::vector<int32_t>* ids) const = 0;
  // The text of `ids`; InvalidArgument naming the first id outside
  // [0, vocab_size()).
  virtual absl::StatusOr<std::string> Decode(absl::Span<const int32_t> ids) const = 0;

  // Writes the tokenizer's files and loom-tokenizer.json into the existing
  // folder `dir`.
  absl::Status Save(const std::string& dir) const;
  // One line for logs: kind, vocabulary, end-of-text id, where it came from.
  virtual std::string Describe() const = 0;

 protected:
  // The files Save writes: (name inside the folder, role in "files", bytes).
  struct File {
    std::string name, role, bytes;
  };
  virtual absl::StatusOr<std::vector<File>> Files() const = 0;
};

// The byte tokenizer: id = byte value, vocab 256, no end-of-text id.
std::unique_ptr<Tokenizer> MakeByteTokenizer();

// What a tokenizer's source fields are called where the user wrote them, for
// error messages: the job spec's keys or `loom data prepare`'s flags.
struct TokenizerFieldNames {
  std::string kind, model, vocab, merges, json, dir;
};
const TokenizerFieldNames& SpecFieldNames();  // data.tokenizer.kind, ...

// Checks which fields are set for the kind and that the files exist, without
// reading them; errors name the field and the value.
absl::Status ValidateTokenizerSpec(const v1::TokenizerSpec& spec,
                                   const TokenizerFieldNames& names = SpecFieldNames());

// Loads what `spec` names (an empty spec: the byte tokenizer). Errors are
// InvalidArgument naming the field, the file and what in it is wrong.
absl::StatusOr<std::unique_ptr<Tokenizer>> LoadTokenizer(const v1::TokenizerSpec& spec,
                                                         const TokenizerFieldNames& names = SpecFieldNames());

// Loads the tokenizer folder `dir` (its loom-tokenizer.json); `field` names
// where the folder was given, for errors.
absl::StatusOr<std::unique_ptr<Tokenizer>> LoadTokenizerFolder(const std::string& dir, absl::string_view field);

// A job's tokenizer (data.tokenizer), checked against the job: a tokenizer
// the spec names must have a model output for every id (model.vocab >=
// vocab_size()), and data.format text (bytes as ids) goes only with the
// bytes tokenizer. An unset data.tokenizer gives the bytes tokenizer without
// the vocabulary check: token-id data of a smaller vocabulary makes no claim
// about its ids' text (samples show ids above 255 as numbers).
absl::StatusOr<std::unique_ptr<Tokenizer>> LoadJobTokenizer(const v1::JobSpec& spec);

}  // namespace loom::runtime::data
