// SentencePiece for the rest of Loom, in plain standard types.
//
// Debian's libsentencepiece.so carries its own copy of protobuf-lite (an
// older release than Debian's libprotobuf) and exports all of its symbols,
// so a process that links both gets one library's functions called with the
// other's data and crashes while it starts. And its headers declare
// `namespace absl { using std::string_view; }`, which clashes with Debian's
// Abseil. So SentencePiece lives in a library of its own,
// libloom_sentencepiece.so (sp_shim.cc, built beside this target), which
// this bridge opens on first use with RTLD_LOCAL | RTLD_DEEPBIND: its
// symbols stay out of the process's global scope, and it binds its own
// protobuf copy before anyone else's. The library is looked for next to the
// running executable, in runtime/data/ under the executable's folder or any
// folder above it (bazel-bin), then by name through the dynamic loader.
// Errors are returned as text ("" = success) for the caller to turn into a
// Status.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/data/internal/sp_api.h"

namespace loom::runtime::data::internal {

inline constexpr const char kSpLibraryName[] = "libloom_sentencepiece.so";

// The library's function table, loaded once; nullptr with *error set when
// it cannot be found or loaded.
const SpApi* SentencePieceApi(std::string* error);

class SpModel {
 public:
  // From a serialized ModelProto (a .model file's bytes).
  static std::unique_ptr<SpModel> Load(const std::string& serialized, std::string* error);
  ~SpModel();

  int piece_size() const { return api_->piece_size(model_); }
  // The id of `piece`, or -1 when the model has no such piece.
  int PieceId(std::string_view piece) const { return api_->piece_id(model_, piece); }
  std::string IdToPiece(int id) const { return api_->id_to_piece(model_, id); }
  bool IsByte(int id) const { return api_->is_byte(model_, id); }  // a byte-fallback piece <0xXX>
  int eos_id() const { return api_->eos_id(model_); }               // -1 when disabled

  // Appends the ids of `text`. Thread-safe.
  std::string Encode(std::string_view text, std::vector<int32_t>* ids) const {
    return api_->encode(model_, text, ids);
  }
  std::string Decode(const std::vector<int>& ids, std::string* text) const { return api_->decode(model_, ids, text); }
  // The pieces of `text` (for probing how the model normalizes).
  std::vector<std::string> Pieces(std::string_view text) const { return api_->pieces(model_, text); }

 private:
  SpModel(const SpApi* api, void* model) : api_(api), model_(model) {}
  const SpApi* api_;
  void* model_;
};

// Trains a model with byte fallback and no whitespace removal on the
// sentences `next` yields (it returns false at the end). The serialized
// model goes to *serialized.
std::string SpTrain(const SpTrainOptions& options, const std::function<bool(std::string*)>& next,
                    std::string* serialized);

}  // namespace loom::runtime::data::internal
