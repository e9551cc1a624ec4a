// libloom_sentencepiece.so: SentencePiece behind the function table of
// sp_api.h. Only this file includes SentencePiece's headers, and it must
// include no Abseil header, directly or through another Loom header
// (sp_bridge.h says why the library stands apart).
#if !__has_include(<sentencepiece_processor.h>) || !__has_include(<sentencepiece_trainer.h>)
#error "SentencePiece's headers are missing: install Debian's libsentencepiece-dev (scripts/setup.sh)"
#endif
#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <unordered_map>

#include "runtime/data/internal/sp_api.h"

namespace loom::runtime::data::internal {
namespace {

using Processor = sentencepiece::SentencePieceProcessor;

const Processor& P(const void* model) { return *static_cast<const Processor*>(model); }

class CallbackIterator : public sentencepiece::SentenceIterator {
 public:
  explicit CallbackIterator(const std::function<bool(std::string*)>& next) : next_(next) { Next(); }
  bool done() const override { return done_; }
  void Next() override { done_ = !next_(&value_); }
  const std::string& value() const override { return value_; }
  sentencepiece::util::Status status() const override { return sentencepiece::util::Status(); }

 private:
  const std::function<bool(std::string*)>& next_;
  std::string value_;
  bool done_ = false;
};

void* Load(const std::string& serialized, std::string* error) {
  auto* p = new Processor();
  const auto s = p->LoadFromSerializedProto(serialized);
  if (s.ok()) return p;
  *error = s.ToString();
  delete p;
  return nullptr;
}

void Destroy(void* model) { delete static_cast<Processor*>(model); }
int PieceSize(const void* m) { return P(m).GetPieceSize(); }

int PieceId(const void* m, std::string_view piece) {
  const int id = P(m).PieceToId(piece);
  return id >= 0 && P(m).IdToPiece(id) == piece ? id : -1;
}

std::string IdToPiece(const void* m, int id) { return P(m).IdToPiece(id); }
bool IsByte(const void* m, int id) { return P(m).IsByte(id); }
int EosId(const void* m) { return P(m).eos_id(); }

std::string Encode(const void* m, std::string_view text, std::vector<int32_t>* ids) {
  std::vector<int> out;
  const auto s = P(m).Encode(text, &out);
  if (!s.ok()) return s.ToString();
  ids->insert(ids->end(), out.begin(), out.end());
  return "";
}

std::string Decode(const void* m, const std::vector<int>& ids, std::string* text) {
  const auto s = P(m).Decode(ids, text);
  return s.ok() ? "" : s.ToString();
}

std::vector<std::string> Pieces(const void* m, std::string_view text) {
  std::vector<std::string> pieces;
  if (!P(m).Encode(text, &pieces).ok()) pieces.clear();
  return pieces;
}

std::string Train(const SpTrainOptions& o, const std::function<bool(std::string*)>& next, std::string* serialized) {
  std::string symbols;
  for (const std::string& s : o.user_defined_symbols) symbols += (symbols.empty() ? "" : ",") + s;
  const std::unordered_map<std::string, std::string> args = {
      {"model_type", o.model_type},
      {"vocab_size", std::to_string(o.vocab_size)},
      {"num_threads", std::to_string(o.num_threads)},
      {"input_sentence_size", std::to_string(o.max_sentences)},
      {"shuffle_input_sentence", "true"},
      {"normalization_rule_name", o.normalization},
      {"add_dummy_prefix", o.add_dummy_prefix ? "true" : "false"},
      {"remove_extra_whitespaces", "false"},
      {"allow_whitespace_only_pieces", "true"},
      {"byte_fallback", "true"},
      {"bos_id", "-1"},
      {"eos_id", "-1"},
      {"user_defined_symbols", symbols},
      {"minloglevel", "2"},
      {"model_prefix", ""},
  };
  sentencepiece::SetRandomGeneratorSeed(o.seed);
  CallbackIterator it(next);
  const auto s = sentencepiece::SentencePieceTrainer::Train(args, &it, serialized);
  return s.ok() ? "" : s.ToString();
}

const SpApi kApi = {kSpApiVersion, Load, Destroy, PieceSize, PieceId, IdToPiece, IsByte,
                    EosId,         Encode, Decode, Pieces,  Train};

}  // namespace
}  // namespace loom::runtime::data::internal

extern "C" __attribute__((visibility("default"))) const loom::runtime::data::internal::SpApi* loom_sentencepiece_api() {
  return &loom::runtime::data::internal::kApi;
}
