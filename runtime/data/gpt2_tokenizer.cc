#include "runtime/data/gpt2_tokenizer.h"

#include <atomic>
#include <climits>
#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "base/status.h"
#include "nlohmann/json.hpp"
#include "runtime/data/internal/gpt2_pretokenize.h"
#include "runtime/data/internal/unicode_classes.h"

namespace loom::runtime::data {
namespace {

using json = nlohmann::json;
using MergeRules = std::vector<Gpt2Tokenizer::MergeRule>;

absl::Status Bad(const std::string& where, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(where, ": ", what));
}

void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

absl::StatusOr<std::string> ReadWhole(const std::string& path, const std::string& where) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Bad(where, "cannot read the file");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

absl::StatusOr<json> ParseJson(const std::string& text, const std::string& where) {
  try {
    return json::parse(text);
  } catch (const std::exception& e) {
    return Bad(where, absl::StrCat("malformed JSON: ", e.what()));
  }
}

// {"token": id, ...} -> (token, id) pairs; `key` names the object in errors.
absl::StatusOr<std::vector<std::pair<std::string, int32_t>>> VocabFromJson(const json& j, const std::string& where,
                                                                          absl::string_view key) {
  if (!j.is_object()) return Bad(where, absl::StrCat(key, ": expected an object of token: id"));
  std::vector<std::pair<std::string, int32_t>> out;
  out.reserve(j.size());
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (!it.value().is_number_integer() || it.value().get<int64_t>() < 0 || it.value().get<int64_t>() > INT32_MAX)
      return Bad(where, absl::StrCat(key, ": token '", it.key(), "': expected an id in [0, 2^31), got ",
                                     it.value().dump()));
    out.emplace_back(it.key(), it.value().get<int32_t>());
  }
  if (out.empty()) return Bad(where, absl::StrCat(key, ": the vocabulary is empty"));
  return out;
}

// merges.txt: an optional "#version" line, then one "left right" per line.
absl::StatusOr<MergeRules> MergesFromText(const std::string& text, const std::string& where) {
  MergeRules out;
  int line_no = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty() || (line_no == 1 && absl::StartsWith(line, "#version"))) continue;
    std::vector<absl::string_view> parts = absl::StrSplit(line, ' ');
    if (parts.size() != 2 || parts[0].empty() || parts[1].empty())
      return Bad(where, absl::StrCat("line ", line_no, ": expected two tokens separated by one space, got '", line,
                                     "'"));
    out.push_back({std::string(parts[0]), std::string(parts[1]), absl::StrCat("line ", line_no)});
  }
  if (out.empty()) return Bad(where, "no merge rules");
  return out;
}

absl::StatusOr<MergeRules> MergesFromJson(const json& j, const std::string& where) {
  if (!j.is_array()) return Bad(where, "model.merges: expected an array");
  MergeRules out;
  for (size_t i = 0; i < j.size(); ++i) {
    const std::string at = absl::StrCat("model.merges[", i, "]");
    const json& m = j[i];
    if (m.is_string()) {
      std::vector<std::string> parts = absl::StrSplit(m.get<std::string>(), ' ');
      if (parts.size() != 2 || parts[0].empty() || parts[1].empty())
        return Bad(where, absl::StrCat(at, ": expected \"left right\", got ", m.dump()));
      out.push_back({parts[0], parts[1], at});
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      out.push_back({m[0].get<std::string>(), m[1].get<std::string>(), at});
    } else {
      return Bad(where, absl::StrCat(at, ": expected \"left right\" or [\"left\", \"right\"], got ", m.dump()));
    }
  }
  if (out.empty()) return Bad(where, "model.merges: no merge rules");
  return out;
}

// The parts of tokenizer.json that must say "GPT-2's byte-level BPE".
absl::Status CheckJsonIsGpt2(const json& j, const std::string& where) {
  if (!j.is_object() || !j.contains("model") || !j["model"].is_object())
    return Bad(where, "model: missing (expected a tokenizers JSON with model.type BPE)");
  const json& m = j["model"];
  const std::string type = m.value("type", std::string());
  if (type != "BPE") return Bad(where, absl::StrCat("model.type: expected BPE, got '", type, "'"));
  if (m.contains("byte_fallback") && m["byte_fallback"].is_boolean() && m["byte_fallback"].get<bool>())
    return Bad(where, "model.byte_fallback: true is not GPT-2's byte-level BPE");
  for (const char* k : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (m.contains(k) && !m[k].is_null() && !(m[k].is_string() && m[k].get<std::string>().empty()))
      return Bad(where, absl::StrCat("model.", k, ": GPT-2 has none, got ", m[k].dump()));
  if (j.contains("normalizer") && !j["normalizer"].is_null())
    return Bad(where, absl::StrCat("normalizer: GPT-2 has none, got ", j["normalizer"].dump()));
  if (j.contains("pre_tokenizer") && !j["pre_tokenizer"].is_null()) {
    const json& p = j["pre_tokenizer"];
    if (!p.is_object() || p.value("type", std::string()) != "ByteLevel")
      return Bad(where, absl::StrCat("pre_tokenizer: expected type ByteLevel, got ", p.dump()));
    if (p.value("add_prefix_space", false))
      return Bad(where, "pre_tokenizer.add_prefix_space: true is not supported (GPT-2 adds no space)");
    if (!p.value("use_regex", true))
      return Bad(where, "pre_tokenizer.use_regex: false is not supported (GPT-2 splits with its pattern)");
  }
  return absl::OkStatus();
}

std::atomic<uint64_t> next_cache_key{1};
// Ids index a table, so they are bounded (GPT-2 has 50257, Llama 3 128256).
constexpr int32_t kMaxId = (1 << 24) - 1;

}  // namespace

std::array<uint32_t, 256> Gpt2ByteAlphabet() {
  std::array<uint32_t, 256> a{};
  uint32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    a[b] = printable ? static_cast<uint32_t>(b) : next++;
  }
  return a;
}

// Ids: every vocab token's bytes (through the byte alphabet) and every added
// token's text, with no id given twice different bytes.
absl::Status Gpt2Tokenizer::BuildIds(const Vocab& vocab, const Vocab& added, const std::string& vocab_where,
                                     absl::flat_hash_map<std::string, int32_t>* by_token) {
  std::array<int, 0x144> byte_of;  // code point -> byte; the alphabet ends below U+0144
  byte_of.fill(-1);
  const std::array<uint32_t, 256> alphabet = Gpt2ByteAlphabet();
  for (int b = 0; b < 256; ++b) byte_of[alphabet[b]] = b;
  int32_t max_id = -1;
  for (const Vocab* v : {&vocab, &added})
    for (const auto& [token, id] : *v) {
      if (id > kMaxId)
        return Bad(vocab_where, absl::StrCat("token '", token, "': id ", id, " is above the limit ", kMaxId));
      max_id = std::max(max_id, id);
    }
  id_bytes_.assign(max_id + 1, std::string());
  id_known_.assign(max_id + 1, false);
  for (const Vocab* v : {&vocab, &added}) {
    for (const auto& [token, id] : *v) {
      std::string bytes;
      for (size_t pos = 0; v == &vocab && pos < token.size();) {
        const internal::Utf8Char c = internal::DecodeUtf8(token, pos);
        if (!c.valid || c.cp >= byte_of.size() || byte_of[c.cp] < 0)
          return Bad(vocab_where, absl::StrFormat("token '%s' (id %d): character U+%04X is not in GPT-2's byte "
                                                  "alphabet", token, id, c.cp));
        bytes.push_back(static_cast<char>(byte_of[c.cp]));
        pos += c.len;
      }
      if (v == &added) bytes = token;
      if (id_known_[id] && id_bytes_[id] != bytes)
        return Bad(vocab_where, absl::StrCat("id ", id, " is given to two tokens ('", token, "' and another)"));
      id_known_[id] = true;
      id_bytes_[id] = bytes;
      (*by_token)[token] = id;
    }
  }
  for (int b = 0; b < 256; ++b) {
    std::string symbol;
    AppendUtf8(alphabet[b], &symbol);
    auto it = by_token->find(symbol);
    if (it == by_token->end())
      return Bad(vocab_where, absl::StrFormat("no token for byte 0x%02X ('%s'); a byte-level vocabulary has all 256",
                                              b, symbol));
    byte_id_[b] = it->second;
  }
  auto eot = by_token->find(kEndOfText);
  if (eot == by_token->end()) return Bad(vocab_where, absl::StrCat("no ", kEndOfText, " token"));
  eot_ = eot->second;
  return absl::OkStatus();
}

absl::Status Gpt2Tokenizer::Build(const Vocab& vocab, const Vocab& added, const std::vector<MergeRule>& merges,
                                  const std::string& vocab_where, const std::string& merges_where) {
  absl::flat_hash_map<std::string, int32_t> by_token;
  LOOM_RETURN_IF_ERROR(BuildIds(vocab, added, vocab_where, &by_token));
  int32_t rank = 0;
  for (const MergeRule& m : merges) {
    auto l = by_token.find(m.left), r = by_token.find(m.right), lr = by_token.find(m.left + m.right);
    for (auto [it, what] : {std::pair{l, &m.left}, std::pair{r, &m.right}})
      if (it == by_token.end())
        return Bad(merges_where, absl::StrCat(m.where, ": '", *what, "' is not in the vocabulary"));
    if (lr == by_token.end())
      return Bad(merges_where, absl::StrCat(m.where, ": the merged token '", m.left, m.right,
                                            "' is not in the vocabulary"));
    const uint64_t key = static_cast<uint64_t>(l->second) << 32 | static_cast<uint32_t>(r->second);
    merges_.try_emplace(key, Merge{rank++, lr->second});  // a repeated rule keeps its first rank
  }
  cache_key_ = next_cache_key.fetch_add(1);
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Gpt2Tokenizer>> Gpt2Tokenizer::FromFiles(const std::string& vocab_path,
                                                                        absl::string_view vocab_field,
                                                                        const std::string& merges_path,
                                                                        absl::string_view merges_field) {
  const std::string vw = absl::StrCat(vocab_field, ": ", vocab_path), mw = absl::StrCat(merges_field, ": ", merges_path);
  LOOM_ASSIGN_OR_RETURN(std::string vocab_text, ReadWhole(vocab_path, vw));
  LOOM_ASSIGN_OR_RETURN(std::string merges_text, ReadWhole(merges_path, mw));
  LOOM_ASSIGN_OR_RETURN(json vj, ParseJson(vocab_text, vw));
  LOOM_ASSIGN_OR_RETURN(Vocab vocab, VocabFromJson(vj, vw, "vocabulary"));
  LOOM_ASSIGN_OR_RETURN(MergeRules merges, MergesFromText(merges_text, mw));
  std::unique_ptr<Gpt2Tokenizer> t(new Gpt2Tokenizer());
  LOOM_RETURN_IF_ERROR(t->Build(vocab, {}, merges, vw, mw));
  t->files_ = {{"vocab.json", "vocab", std::move(vocab_text)}, {"merges.txt", "merges", std::move(merges_text)}};
  t->source_ = absl::StrCat(vocab_path, " + ", merges_path);
  return t;
}

absl::StatusOr<std::unique_ptr<Gpt2Tokenizer>> Gpt2Tokenizer::FromJson(const std::string& path,
                                                                       absl::string_view field) {
  const std::string where = absl::StrCat(field, ": ", path);
  LOOM_ASSIGN_OR_RETURN(std::string text, ReadWhole(path, where));
  LOOM_ASSIGN_OR_RETURN(json j, ParseJson(text, where));
  LOOM_RETURN_IF_ERROR(CheckJsonIsGpt2(j, where));
  const json& m = j["model"];
  if (!m.contains("vocab")) return Bad(where, "model.vocab: missing");
  if (!m.contains("merges")) return Bad(where, "model.merges: missing");
  LOOM_ASSIGN_OR_RETURN(Vocab vocab, VocabFromJson(m["vocab"], where, "model.vocab"));
  LOOM_ASSIGN_OR_RETURN(MergeRules merges, MergesFromJson(m["merges"], where));
  Vocab added;
  if (j.contains("added_tokens") && !j["added_tokens"].is_null()) {
    if (!j["added_tokens"].is_array()) return Bad(where, "added_tokens: expected an array");
    for (size_t i = 0; i < j["added_tokens"].size(); ++i) {
      const json& a = j["added_tokens"][i];
      if (!a.is_object() || !a.contains("id") || !a["id"].is_number_integer() || a["id"].get<int64_t>() < 0 ||
          a["id"].get<int64_t>() > INT32_MAX || !a.contains("content") || !a["content"].is_string() ||
          a["content"].get<std::string>().empty())
        return Bad(where, absl::StrCat("added_tokens[", i, "]: expected {\"id\": N, \"content\": \"...\"}, got ",
                                       a.dump()));
      added.emplace_back(a["content"].get<std::string>(), a["id"].get<int32_t>());
    }
  }
  std::unique_ptr<Gpt2Tokenizer> t(new Gpt2Tokenizer());
  LOOM_RETURN_IF_ERROR(t->Build(vocab, added, merges, where, where));
  t->files_ = {{"tokenizer.json", "json", std::move(text)}};
  t->source_ = path;
  return t;
}

void Gpt2Tokenizer::EncodePiece(absl::string_view piece, std::vector<int32_t>* ids) const {
  std::vector<int32_t> syms(piece.size()), next;
  for (size_t i = 0; i < piece.size(); ++i) syms[i] = byte_id_[static_cast<uint8_t>(piece[i])];
  while (syms.size() > 1) {
    Merge best{INT32_MAX, -1};
    uint64_t best_key = 0;
    for (size_t i = 0; i + 1 < syms.size(); ++i) {
      const uint64_t key = static_cast<uint64_t>(syms[i]) << 32 | static_cast<uint32_t>(syms[i + 1]);
      auto it = merges_.find(key);
      if (it != merges_.end() && it->second.rank < best.rank) best = it->second, best_key = key;
    }
    if (best.id < 0) break;
    const int32_t left = static_cast<int32_t>(best_key >> 32), right = static_cast<int32_t>(best_key & 0xFFFFFFFFu);
    next.clear();
    for (size_t i = 0; i < syms.size(); ++i) {
      if (i + 1 < syms.size() && syms[i] == left && syms[i + 1] == right) {
        next.push_back(best.id);
        ++i;
      } else {
        next.push_back(syms[i]);
      }
    }
    syms.swap(next);
  }
  ids->insert(ids->end(), syms.begin(), syms.end());
}

absl::Status Gpt2Tokenizer::Encode(absl::string_view text, std::vector<int32_t>* ids) const {
  struct Cache {
    uint64_t owner = 0;
    absl::flat_hash_map<std::string, std::vector<int32_t>> pieces;
  };
  thread_local Cache cache;
  if (cache.owner != cache_key_) {
    cache.pieces.clear();
    cache.owner = cache_key_;
  }
  std::vector<int32_t> fresh;
  internal::Gpt2Pretokenize(std::string_view(text.data(), text.size()), [&](std::string_view piece) {
    absl::string_view p(piece.data(), piece.size());
    auto it = cache.pieces.find(p);
    if (it != cache.pieces.end()) {
      ids->insert(ids->end(), it->second.begin(), it->second.end());
      return;
    }
    fresh.clear();
    EncodePiece(p, &fresh);
    ids->insert(ids->end(), fresh.begin(), fresh.end());
    if (cache.pieces.size() >= 65536) cache.pieces.clear();
    cache.pieces.emplace(std::string(p), fresh);
  });
  return absl::OkStatus();
}

absl::StatusOr<std::string> Gpt2Tokenizer::Decode(absl::Span<const int32_t> ids) const {
  std::string out;
  for (int32_t id : ids) {
    if (id < 0 || id >= vocab_size() || !id_known_[id])
      return absl::InvalidArgumentError(absl::StrCat("token id ", id, " is not in the gpt2 vocabulary (",
                                                     vocab_size(), " ids)"));
    out += id_bytes_[id];
  }
  return out;
}

std::string Gpt2Tokenizer::Describe() const {
  return absl::StrCat("gpt2 byte-level BPE: ", vocab_size(), " ids, ", num_merges(), " merges, ", kEndOfText, " = ",
                      eot_, " (", source_, ")");
}

absl::StatusOr<std::vector<Tokenizer::File>> Gpt2Tokenizer::Files() const { return files_; }

}  // namespace loom::runtime::data
