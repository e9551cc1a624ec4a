#include "runtime/data/tokenizer.h"

#include <filesystem>
#include <fstream>
#include <sstream>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "base/status.h"
#include "nlohmann/json.hpp"
#include "runtime/data/gpt2_tokenizer.h"
#include "runtime/data/sentencepiece_tokenizer.h"

namespace loom::runtime::data {
namespace {

using json = nlohmann::json;

class ByteTokenizer : public Tokenizer {
 public:
  std::string kind() const override { return "bytes"; }
  int64_t vocab_size() const override { return 256; }
  int32_t eot_id() const override { return -1; }
  bool exact_round_trip() const override { return true; }
  absl::Status Encode(absl::string_view text, std::vector<int32_t>* ids) const override {
    for (char c : text) ids->push_back(static_cast<uint8_t>(c));
    return absl::OkStatus();
  }
  absl::StatusOr<std::string> Decode(absl::Span<const int32_t> ids) const override {
    std::string out;
    out.reserve(ids.size());
    for (int32_t id : ids) {
      if (id < 0 || id > 255)
        return absl::InvalidArgumentError(absl::StrCat("token id ", id, " is not a byte (the bytes tokenizer)"));
      out.push_back(static_cast<char>(id));
    }
    return out;
  }
  std::string Describe() const override { return "bytes: 256 ids (id = byte value), no end-of-text id"; }

 protected:
  absl::StatusOr<std::vector<File>> Files() const override { return std::vector<File>{}; }
};

absl::Status Bad(absl::string_view field, absl::string_view value, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", why, " (got ", value, ")"));
}

bool IsFile(const std::string& path) {
  std::error_code ec;
  return std::filesystem::is_regular_file(path, ec);
}

// The kind `spec` names, filled in from its files when left out.
std::string KindOf(const v1::TokenizerSpec& spec) {
  if (!spec.kind().empty()) return spec.kind();
  if (!spec.model().empty()) return "sentencepiece";
  if (!spec.vocab().empty() || !spec.merges().empty() || !spec.json().empty()) return "gpt2";
  return spec.dir().empty() ? "bytes" : "";
}

absl::Status CheckFile(absl::string_view field, const std::string& path) {
  return IsFile(path) ? absl::OkStatus() : Bad(field, path, "no such file");
}

// The description file of a tokenizer folder given as `dir` (the folder, or
// the description itself).
std::string DescriptionPath(const std::string& dir) {
  return IsFile(dir) ? dir : (std::filesystem::path(dir) / kTokenizerDescription).string();
}

}  // namespace

std::unique_ptr<Tokenizer> MakeByteTokenizer() { return std::make_unique<ByteTokenizer>(); }

const TokenizerFieldNames& SpecFieldNames() {
  static const TokenizerFieldNames* names =
      new TokenizerFieldNames{"data.tokenizer.kind", "data.tokenizer.model", "data.tokenizer.vocab",
                              "data.tokenizer.merges", "data.tokenizer.json", "data.tokenizer.dir"};
  return *names;
}

absl::Status Tokenizer::Save(const std::string& dir) const {
  LOOM_ASSIGN_OR_RETURN(std::vector<File> files, Files());
  json desc = {{"format", "loom-tokenizer"}, {"version", 1}, {"kind", kind()}, {"files", json::object()},
               {"vocab_size", vocab_size()}, {"eot_id", eot_id()},
               {"eot", eot_id() >= 0 ? json(kEndOfText) : json(nullptr)},
               {"round_trip", exact_round_trip() ? "exact" : "normalized"}, {"about", Describe()}};
  for (const File& f : files) {
    const std::string path = (std::filesystem::path(dir) / f.name).string();
    std::ofstream out(path, std::ios::binary);
    out << f.bytes;
    if (!out.flush()) return absl::InternalError(absl::StrCat("cannot write ", path));
    desc["files"][f.role] = f.name;
  }
  const std::string path = (std::filesystem::path(dir) / kTokenizerDescription).string();
  std::ofstream out(path);
  out << desc.dump(2) << "\n";
  if (!out.flush()) return absl::InternalError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

absl::Status ValidateTokenizerSpec(const v1::TokenizerSpec& spec, const TokenizerFieldNames& names) {
  const std::string kind = KindOf(spec);
  if (!spec.dir().empty()) {
    for (const auto& [value, field] : {std::pair{&spec.model(), &names.model}, std::pair{&spec.vocab(), &names.vocab},
                                       std::pair{&spec.merges(), &names.merges}, std::pair{&spec.json(), &names.json}})
      if (!value->empty()) return Bad(*field, *value, absl::StrCat("give ", names.dir, " or the files, not both"));
    return CheckFile(names.dir, DescriptionPath(spec.dir()));
  }
  if (kind != "bytes" && kind != "sentencepiece" && kind != "gpt2")
    return Bad(names.kind, spec.kind(), "expected bytes, sentencepiece or gpt2");
  const bool sp = kind == "sentencepiece", gpt2 = kind == "gpt2";
  if (!sp && !spec.model().empty()) return Bad(names.model, spec.model(), "applies to kind sentencepiece");
  if (sp && spec.model().empty()) return Bad(names.model, "nothing", "kind sentencepiece needs a .model file");
  for (const auto& [value, field] : {std::pair{&spec.vocab(), &names.vocab}, std::pair{&spec.merges(), &names.merges},
                                     std::pair{&spec.json(), &names.json}})
    if (!gpt2 && !value->empty()) return Bad(*field, *value, "applies to kind gpt2");
  if (gpt2 && spec.json().empty() && (spec.vocab().empty() || spec.merges().empty()))
    return Bad(spec.vocab().empty() ? names.vocab : names.merges, "nothing",
               absl::StrCat("kind gpt2 needs vocab.json and merges.txt (", names.vocab, ", ", names.merges, ") or ",
                            names.json));
  if (gpt2 && !spec.json().empty() && (!spec.vocab().empty() || !spec.merges().empty()))
    return Bad(names.json, spec.json(), absl::StrCat("give ", names.json, " or vocab and merges, not both"));
  for (const auto& [value, field] : {std::pair{&spec.model(), &names.model}, std::pair{&spec.vocab(), &names.vocab},
                                     std::pair{&spec.merges(), &names.merges}, std::pair{&spec.json(), &names.json}})
    if (!value->empty()) LOOM_RETURN_IF_ERROR(CheckFile(*field, *value));
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadTokenizer(const v1::TokenizerSpec& spec,
                                                         const TokenizerFieldNames& names) {
  LOOM_RETURN_IF_ERROR(ValidateTokenizerSpec(spec, names));
  if (!spec.dir().empty()) {
    LOOM_ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> t, LoadTokenizerFolder(spec.dir(), names.dir));
    if (!spec.kind().empty() && spec.kind() != t->kind())
      return Bad(names.kind, spec.kind(), absl::StrCat("the folder ", spec.dir(), " holds a ", t->kind(), " tokenizer"));
    return t;
  }
  const std::string kind = KindOf(spec);
  if (kind == "sentencepiece") return SentencePieceTokenizer::FromFile(spec.model(), names.model);
  if (kind == "gpt2" && !spec.json().empty()) return Gpt2Tokenizer::FromJson(spec.json(), names.json);
  if (kind == "gpt2") return Gpt2Tokenizer::FromFiles(spec.vocab(), names.vocab, spec.merges(), names.merges);
  return MakeByteTokenizer();
}

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadTokenizerFolder(const std::string& dir, absl::string_view field) {
  const std::string path = DescriptionPath(dir);
  const std::string where = absl::StrCat(field, ": ", path);
  std::ifstream in(path);
  if (!in) return absl::InvalidArgumentError(absl::StrCat(where, ": cannot read the tokenizer description"));
  std::stringstream ss;
  ss << in.rdbuf();
  json d;
  try {
    d = json::parse(ss.str());
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": malformed JSON: ", e.what()));
  }
  auto bad = [&](absl::string_view key, absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": ", key, ": ", why));
  };
  if (!d.is_object() || d.value("format", std::string()) != "loom-tokenizer")
    return bad("format", "expected \"loom-tokenizer\"");
  if (d.value("version", 0) != 1) return bad("version", absl::StrCat("expected 1, got ", d.value("version", json()).dump()));
  if (!d.contains("files") || !d["files"].is_object()) return bad("files", "expected an object of role: file name");
  const std::string base = std::filesystem::path(path).parent_path().string();
  v1::TokenizerSpec spec;
  spec.set_kind(d.value("kind", std::string()));
  TokenizerFieldNames names{absl::StrCat(where, ": kind")};
  for (auto [role, value, name] : {std::tuple{"model", spec.mutable_model(), &names.model},
                                   std::tuple{"vocab", spec.mutable_vocab(), &names.vocab},
                                   std::tuple{"merges", spec.mutable_merges(), &names.merges},
                                   std::tuple{"json", spec.mutable_json(), &names.json}}) {
    *name = absl::StrCat(where, ": files.", role);
    if (!d["files"].contains(role)) continue;
    if (!d["files"][role].is_string()) return bad(absl::StrCat("files.", role), "expected a file name");
    const std::string file = d["files"][role].get<std::string>();
    if (file.empty() || file == "." || file == ".." || file.find('/') != std::string::npos)
      return bad(absl::StrCat("files.", role),
                 absl::StrCat("expected a file name inside the folder, without '/' (got '", file, "')"));
    *value = (std::filesystem::path(base) / file).string();
  }
  LOOM_ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> t, LoadTokenizer(spec, names));
  if (d.contains("vocab_size") && d["vocab_size"] != t->vocab_size())
    return bad("vocab_size", absl::StrCat("the description says ", d["vocab_size"].dump(), ", the files hold ",
                                          t->vocab_size(), " ids"));
  if (d.contains("eot_id") && d["eot_id"] != t->eot_id())
    return bad("eot_id", absl::StrCat("the description says ", d["eot_id"].dump(), ", the files give ", t->eot_id()));
  return t;
}

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadJobTokenizer(const v1::JobSpec& spec) {
  LOOM_ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> t, LoadTokenizer(spec.data().tokenizer()));
  const bool named = spec.data().tokenizer().ByteSizeLong() > 0;
  if (named && t->vocab_size() > spec.model().vocab())
    return absl::InvalidArgumentError(absl::StrCat("model.vocab: ", spec.model().vocab(), " is smaller than the ",
                                                   t->vocab_size(), " ids of data.tokenizer (", t->Describe(), ")"));
  if (spec.data().format() == "text" && t->kind() != "bytes")
    return absl::InvalidArgumentError(absl::StrCat(
        "data.format: text reads bytes as ids, which only the bytes tokenizer decodes; data.tokenizer is ",
        t->kind(), " (prepare token shards with `loom data prepare` and read those)"));
  return t;
}

}  // namespace loom::runtime::data
