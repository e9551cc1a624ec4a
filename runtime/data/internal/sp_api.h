// The table of functions libloom_sentencepiece.so exports (sp_shim.cc) and
// sp_bridge.cc calls, in standard C++ types only. Both sides are built from
// this header in one build with one libstdc++, so std::string and
// std::vector cross it safely; kSpApiVersion guards against a stale library.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace loom::runtime::data::internal {

inline constexpr int kSpApiVersion = 1;

struct SpTrainOptions {
  std::string model_type;     // "bpe" or "unigram"
  int vocab_size = 0;
  int num_threads = 1;
  uint32_t seed = 0;          // SentencePiece's sampling of sentences
  int64_t max_sentences = 0;  // input_sentence_size; 0 = every sentence
  std::vector<std::string> user_defined_symbols;
  // Loom trains with these two as they are; tests change them to make a
  // model that normalizes.
  std::string normalization = "identity";  // SentencePiece's normalization_rule_name
  bool add_dummy_prefix = false;
};

// Errors come back as text; "" is success. `model` is a SentencePieceProcessor.
struct SpApi {
  int version;
  void* (*load)(const std::string& serialized, std::string* error);
  void (*destroy)(void* model);
  int (*piece_size)(const void* model);
  int (*piece_id)(const void* model, std::string_view piece);  // -1: no such piece
  std::string (*id_to_piece)(const void* model, int id);
  bool (*is_byte)(const void* model, int id);
  int (*eos_id)(const void* model);
  std::string (*encode)(const void* model, std::string_view text, std::vector<int32_t>* ids);
  std::string (*decode)(const void* model, const std::vector<int>& ids, std::string* text);
  std::vector<std::string> (*pieces)(const void* model, std::string_view text);
  std::string (*train)(const SpTrainOptions& options, const std::function<bool(std::string*)>& next,
                       std::string* serialized);
};

}  // namespace loom::runtime::data::internal

// The one symbol the library exports.
extern "C" const loom::runtime::data::internal::SpApi* loom_sentencepiece_api();
