#include "runtime/data/sentencepiece_tokenizer.h"

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status.h"
#include "runtime/data/internal/unicode_classes.h"

namespace loom::runtime::data {
namespace {

// U+2581, SentencePiece's space marker, in UTF-8.
constexpr char kSpaceMarker[] = "\xE2\x96\x81";

// The end of the run at text[pos] that goes to SentencePiece as it is:
// valid UTF-8 other than U+2581, up to the next `marker` (when not empty).
size_t CleanRunEnd(absl::string_view text, size_t pos, absl::string_view marker) {
  const std::string_view t(text.data(), text.size());
  const size_t stop =
      marker.empty() ? t.size() : std::min(t.size(), t.find(std::string_view(marker.data(), marker.size()), pos));
  while (pos < stop) {
    const internal::Utf8Char c = internal::DecodeUtf8(t, pos);
    if (!c.valid || c.cp == 0x2581) break;
    pos += c.len;
  }
  return std::min(pos, stop);
}

}  // namespace

absl::StatusOr<std::unique_ptr<SentencePieceTokenizer>> SentencePieceTokenizer::FromFile(const std::string& path,
                                                                                         absl::string_view field) {
  const std::string where = absl::StrCat(field, ": ", path);
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::InvalidArgumentError(absl::StrCat(where, ": cannot read the file"));
  std::stringstream ss;
  ss << in.rdbuf();
  LOOM_ASSIGN_OR_RETURN(auto t, FromSerialized(ss.str(), where));
  t->source_ = path;
  return t;
}

absl::StatusOr<std::unique_ptr<SentencePieceTokenizer>> SentencePieceTokenizer::FromSerialized(
    std::string serialized, const std::string& where) {
  if (serialized.empty()) return absl::InvalidArgumentError(absl::StrCat(where, ": the file is empty"));
  std::string error;
  std::unique_ptr<internal::SpModel> model = internal::SpModel::Load(serialized, &error);
  if (model == nullptr)
    return absl::InvalidArgumentError(absl::StrCat(where, ": not a SentencePiece model: ", error));
  std::unique_ptr<SentencePieceTokenizer> t(new SentencePieceTokenizer());
  t->model_ = std::move(model);
  t->serialized_ = std::move(serialized);
  bool byte_fallback = true;
  t->byte_of_id_.assign(t->model_->piece_size(), -1);
  for (int b = 0; b < 256; ++b) {
    const int id = t->model_->PieceId(absl::StrFormat("<0x%02X>", b));
    t->byte_id_[b] = id >= 0 && t->model_->IsByte(id) ? id : -1;
    if (t->byte_id_[b] >= 0) t->byte_of_id_[id] = static_cast<int16_t>(b);
    byte_fallback = byte_fallback && t->byte_id_[b] >= 0;
  }
  t->eot_ = t->model_->PieceId(kEndOfText);
  t->eot_is_piece_ = t->eot_ >= 0;
  if (t->eot_ < 0) t->eot_ = t->model_->eos_id();
  t->exact_ = byte_fallback && t->ProbeExact();
  t->source_ = "trained";
  return t;
}

bool SentencePieceTokenizer::ProbeExact() const {
  const std::vector<std::string> first = model_->Pieces("a");
  if (first.empty() || first.front().rfind(kSpaceMarker, 0) == 0) return false;  // a dummy prefix
  // Whitespace runs, full-width letters and ligatures (NFKC changes them),
  // a combining accent (NFC changes it), a tab and newlines.
  for (const char* probe : {"  Ab  c\t\n\n d  ", "\xEF\xBD\x86\xEF\xBD\x95\xEF\xBD\x8C\xEF\xBD\x8C", "\xEF\xAC\x81",
                            "e\xCC\x81", "\xE2\x84\x96 9"}) {
    std::vector<int32_t> ids;
    std::string back;
    if (!model_->Encode(probe, &ids).empty()) return false;
    if (!model_->Decode(std::vector<int>(ids.begin(), ids.end()), &back).empty() || back != probe) return false;
  }
  return true;
}

absl::Status SentencePieceTokenizer::EncodeClean(absl::string_view text, std::vector<int32_t>* ids) const {
  if (text.empty()) return absl::OkStatus();
  const std::string error = model_->Encode(std::string_view(text.data(), text.size()), ids);
  if (!error.empty()) return absl::InternalError(absl::StrCat("SentencePiece encode: ", error));
  return absl::OkStatus();
}

absl::Status SentencePieceTokenizer::Encode(absl::string_view text, std::vector<int32_t>* ids) const {
  if (!exact_) return EncodeClean(text, ids);
  const absl::string_view marker = eot_is_piece_ ? absl::string_view(kEndOfText) : absl::string_view();
  for (size_t pos = 0; pos < text.size();) {
    const size_t end = CleanRunEnd(text, pos, marker);
    LOOM_RETURN_IF_ERROR(EncodeClean(text.substr(pos, end - pos), ids));
    pos = end;
    if (pos == text.size()) break;
    // An invalid byte, the three bytes of U+2581 or the spelled-out marker:
    // byte pieces.
    const std::string_view t(text.data(), text.size());
    const size_t len = !marker.empty() && text.substr(pos, marker.size()) == marker
                           ? marker.size()
                           : static_cast<size_t>(internal::DecodeUtf8(t, pos).len);
    for (size_t i = 0; i < len; ++i) ids->push_back(byte_id_[static_cast<uint8_t>(text[pos + i])]);
    pos += len;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> SentencePieceTokenizer::Decode(absl::Span<const int32_t> ids) const {
  for (int32_t id : ids)
    if (id < 0 || id >= vocab_size())
      return absl::InvalidArgumentError(
          absl::StrCat("token id ", id, " is not in the sentencepiece vocabulary (", vocab_size(), " ids)"));
  std::string out, part;
  std::vector<int> run;
  auto flush = [&]() -> absl::Status {
    if (run.empty()) return absl::OkStatus();
    part.clear();
    const std::string error = model_->Decode(run, &part);
    if (!error.empty()) return absl::InvalidArgumentError(absl::StrCat("SentencePiece decode: ", error));
    out += part;
    run.clear();
    return absl::OkStatus();
  };
  if (!exact_) {
    run.assign(ids.begin(), ids.end());
    LOOM_RETURN_IF_ERROR(flush());
    return out;
  }
  for (int32_t id : ids) {
    if (byte_of_id_[id] < 0) {
      run.push_back(id);
      continue;
    }
    LOOM_RETURN_IF_ERROR(flush());
    out.push_back(static_cast<char>(byte_of_id_[id]));
  }
  LOOM_RETURN_IF_ERROR(flush());
  return out;
}

std::string SentencePieceTokenizer::Describe() const {
  return absl::StrCat("sentencepiece: ", vocab_size(), " ids, ", kEndOfText, " = ", eot_,
                      exact_ ? ", exact round trip" : ", normalizing model", " (", source_, ")");
}

absl::StatusOr<std::vector<Tokenizer::File>> SentencePieceTokenizer::Files() const {
  return std::vector<File>{{"tokenizer.model", "model", serialized_}};
}

absl::StatusOr<std::unique_ptr<SentencePieceTokenizer>> TrainSentencePiece(
    const SentencePieceTrainOptions& options, const std::function<bool(std::string*)>& next,
    const std::string& where) {
  if (options.model_type != "bpe" && options.model_type != "unigram")
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": expected bpe or unigram, got '", options.model_type, "'"));
  // <unk>, <|endoftext|> and the 256 byte pieces come before any learned piece.
  if (options.vocab_size < 260)
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": vocabulary size ", options.vocab_size,
        " is too small: byte fallback takes 256 ids, <unk> and <|endoftext|> two more (at least 260)"));
  internal::SpTrainOptions o;
  o.model_type = options.model_type;
  o.vocab_size = options.vocab_size;
  o.num_threads = kSentencePieceTrainThreads;
  o.seed = options.seed;
  o.max_sentences = options.max_sentences;
  o.user_defined_symbols = {kEndOfText};
  std::string serialized;
  const std::string error = internal::SpTrain(o, next, &serialized);
  if (!error.empty()) return absl::InvalidArgumentError(absl::StrCat(where, ": SentencePiece: ", error));
  return SentencePieceTokenizer::FromSerialized(std::move(serialized), where);
}

}  // namespace loom::runtime::data
