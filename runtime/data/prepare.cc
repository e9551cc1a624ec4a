#include "runtime/data/prepare.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/status.h"
#include "base/thread_pool.h"
#include "nlohmann/json.hpp"
#include "runtime/data/sentencepiece_tokenizer.h"
#include "runtime/data/tokenizer.h"

namespace loom::runtime::data {
namespace {

constexpr int32_t kMagicU16 = 20240520, kVersionU16 = 1;  // llm.c, GPT-2 shards
constexpr int32_t kMagicU32 = 20240801, kVersionU32 = 7;  // llm.c, Llama 3 shards

template <typename T>
absl::Status Bad(absl::string_view field, const T& value, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", why, " (got ", value, ")"));
}

// A whole input file, read-only and memory-mapped (nothing for an empty file).
class MappedInput {
 public:
  static absl::StatusOr<std::unique_ptr<MappedInput>> Open(const std::string& path) {
    std::unique_ptr<MappedInput> m(new MappedInput());
    m->path_ = path;
    const int fd = ::open(path.c_str(), O_RDONLY);
    if (fd < 0) return Bad("--input", path, absl::StrCat("cannot open: ", std::strerror(errno)));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
      ::close(fd);
      return Bad("--input", path, "not a regular file");
    }
    m->size_ = st.st_size;
    if (m->size_ > 0) {
      void* p = mmap(nullptr, m->size_, PROT_READ, MAP_PRIVATE, fd, 0);
      if (p == MAP_FAILED) {
        ::close(fd);
        return Bad("--input", path, absl::StrCat("cannot map: ", std::strerror(errno)));
      }
      madvise(p, m->size_, MADV_SEQUENTIAL);
      m->data_ = static_cast<const char*>(p);
    }
    ::close(fd);
    return m;
  }
  ~MappedInput() {
    if (data_ != nullptr) munmap(const_cast<char*>(data_), size_);
  }
  absl::string_view text() const { return absl::string_view(data_, size_); }
  const std::string& path() const { return path_; }

 private:
  MappedInput() = default;
  std::string path_;
  const char* data_ = nullptr;
  size_t size_ = 0;
};

// The documents of the inputs, in order (see prepare.h: `documents`). Views
// stay valid for the reader's lifetime.
class DocumentReader {
 public:
  static absl::StatusOr<std::unique_ptr<DocumentReader>> Open(const std::vector<std::string>& inputs,
                                                              const std::string& mode) {
    std::unique_ptr<DocumentReader> r(new DocumentReader());
    if (mode == "blank-line") {
      r->blank_lines_ = true;
    } else if (absl::StartsWith(mode, "line=") && mode.size() > 5) {
      r->separator_ = mode.substr(5);
    } else if (mode != "file") {
      return Bad("--documents", mode, "expected file, blank-line or line=TEXT");
    }
    if (inputs.empty()) return Bad("--input", "nothing", "give at least one text file");
    for (const std::string& path : inputs) {
      LOOM_ASSIGN_OR_RETURN(auto f, MappedInput::Open(path));
      r->bytes_ += f->text().size();
      r->files_.push_back(std::move(f));
    }
    return r;
  }

  int64_t total_bytes() const { return bytes_; }
  // Bytes of input passed so far (documents and separators).
  int64_t consumed() const { return done_bytes_ + static_cast<int64_t>(pos_); }

  bool Next(absl::string_view* doc) {
    while (file_ < files_.size()) {
      const absl::string_view t = files_[file_]->text();
      if (!blank_lines_ && separator_.empty()) {  // one document per file
        if (pos_ == 0 && !t.empty()) {
          pos_ = t.size();
          *doc = t;
          return true;
        }
      } else {
        while (pos_ < t.size() && IsSeparator(t, pos_)) pos_ = LineEnd(t, pos_);
        if (pos_ < t.size()) {
          size_t end = pos_;
          while (end < t.size() && !IsSeparator(t, end)) end = LineEnd(t, end);
          *doc = t.substr(pos_, end - pos_);
          pos_ = end;
          return true;
        }
      }
      done_bytes_ += t.size();
      pos_ = 0;
      ++file_;
    }
    return false;
  }

 private:
  DocumentReader() = default;
  static size_t LineEnd(absl::string_view t, size_t pos) {
    const size_t nl = t.find('\n', pos);
    return nl == absl::string_view::npos ? t.size() : nl + 1;
  }
  bool IsSeparator(absl::string_view t, size_t pos) const {
    absl::string_view line = t.substr(pos, LineEnd(t, pos) - pos);
    if (absl::EndsWith(line, "\n")) line.remove_suffix(1);
    if (absl::EndsWith(line, "\r")) line.remove_suffix(1);
    return blank_lines_ ? line.empty() : line == separator_;
  }

  std::vector<std::unique_ptr<MappedInput>> files_;
  bool blank_lines_ = false;
  std::string separator_;
  size_t file_ = 0, pos_ = 0;
  int64_t bytes_ = 0, done_bytes_ = 0;
};

// One split's shards: tokens are buffered and written shard_tokens at a time.
class ShardWriter {
 public:
  ShardWriter(std::string dir, std::string prefix, int64_t shard_tokens, bool wide, bool header)
      : dir_(std::move(dir)), prefix_(std::move(prefix)), shard_tokens_(shard_tokens), wide_(wide), header_(header) {}

  absl::Status Add(const std::vector<int32_t>& ids) {
    for (size_t i = 0; i < ids.size();) {
      const size_t take = std::min<size_t>(ids.size() - i, shard_tokens_ - buffer_.size());
      buffer_.insert(buffer_.end(), ids.begin() + i, ids.begin() + i + take);
      i += take;
      if (static_cast<int64_t>(buffer_.size()) == shard_tokens_) LOOM_RETURN_IF_ERROR(Flush());
    }
    return absl::OkStatus();
  }

  absl::Status Flush() {
    if (buffer_.empty()) return absl::OkStatus();
    const std::string name = absl::StrFormat("%s_%06d.bin", prefix_, names_.size());
    const std::string path = (std::filesystem::path(dir_) / name).string(), tmp = path + ".tmp";
    int32_t header[256] = {};
    header[0] = wide_ ? kMagicU32 : kMagicU16;
    header[1] = wide_ ? kVersionU32 : kVersionU16;
    header[2] = static_cast<int32_t>(buffer_.size());
    std::ofstream out(tmp, std::ios::binary);
    if (header_) out.write(reinterpret_cast<const char*>(header), sizeof(header));
    if (wide_) {
      std::vector<uint32_t> w(buffer_.begin(), buffer_.end());
      out.write(reinterpret_cast<const char*>(w.data()), w.size() * 4);
    } else {
      std::vector<uint16_t> w(buffer_.begin(), buffer_.end());
      out.write(reinterpret_cast<const char*>(w.data()), w.size() * 2);
    }
    if (!out.flush() || (out.close(), std::rename(tmp.c_str(), path.c_str()) != 0))
      return absl::InternalError(absl::StrCat("cannot write ", path, ": ", std::strerror(errno)));
    names_.push_back(name);
    buffer_.clear();
    return absl::OkStatus();
  }

  const std::vector<std::string>& names() const { return names_; }

 private:
  std::string dir_, prefix_;
  int64_t shard_tokens_;
  bool wide_, header_;
  std::vector<int32_t> buffer_;
  std::vector<std::string> names_;
};

struct Doc {
  absl::string_view text;
  int split;  // 0 train, 1 validation
};

// The split of document `index`: a seeded hash against val_fraction.
int SplitOf(int64_t index, uint64_t seed, double val_fraction) {
  uint64_t z = seed + 0x9E3779B97F4A7C15ull * static_cast<uint64_t>(index + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return static_cast<double>(z >> 11) * 0x1.0p-53 < val_fraction ? 1 : 0;
}

// Encodes `docs` on the pool: contiguous groups of about equal bytes; the
// tokens of group g for split s go to parts[2 * g + s], so a split's tokens
// in document order are its parts in group order.
absl::Status EncodeBatch(const Tokenizer& tok, const std::vector<Doc>& docs, ThreadPool& pool,
                         std::vector<std::vector<int32_t>>* parts_out) {
  const int64_t groups = std::min<int64_t>(docs.size(), pool.num_threads() * 8);
  int64_t bytes = 0;
  for (const Doc& d : docs) bytes += d.text.size();
  std::vector<size_t> starts = {0};
  for (size_t i = 0, acc = 0; i < docs.size() && static_cast<int64_t>(starts.size()) < groups; ++i) {
    acc += docs[i].text.size();
    if (acc * groups >= bytes * starts.size() && i + 1 < docs.size()) starts.push_back(i + 1);
  }
  starts.push_back(docs.size());
  const int64_t n = static_cast<int64_t>(starts.size()) - 1;
  std::vector<std::vector<int32_t>>& parts = *parts_out;
  parts.assign(2 * n, {});
  std::vector<absl::Status> status(n);
  const int32_t eot = tok.eot_id();
  pool.ParallelFor(n, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t g = lo; g < hi; ++g) {
      for (size_t i = starts[g]; i < starts[g + 1] && status[g].ok(); ++i) {
        std::vector<int32_t>& into = parts[2 * g + docs[i].split];
        if (eot >= 0) into.push_back(eot);
        status[g] = tok.Encode(docs[i].text, &into);
      }
    }
  });
  for (const absl::Status& s : status) LOOM_RETURN_IF_ERROR(s);
  return absl::OkStatus();
}

absl::Status CheckOptions(const PrepareOptions& o) {
  const bool trains = !o.train_type.empty();
  if (trains && (!o.tokenizer.model().empty() || !o.tokenizer.vocab().empty() || !o.tokenizer.json().empty() ||
                 !o.tokenizer.dir().empty()))
    return Bad("--train-tokenizer", o.train_type, "trains a new tokenizer; leave out the tokenizer files");
  if (trains && !o.tokenizer.kind().empty() && o.tokenizer.kind() != "sentencepiece")
    return Bad("--tokenizer", o.tokenizer.kind(), "--train-tokenizer trains a sentencepiece tokenizer");
  if (trains && o.vocab_size <= 0) return Bad("--vocab-size", o.vocab_size, "give the vocabulary size to train");
  if (!trains && o.vocab_size != 0) return Bad("--vocab-size", o.vocab_size, "applies to --train-tokenizer");
  if (o.out_dir.empty()) return Bad("--out", "nothing", "give the output folder");
  if (!(o.val_fraction >= 0 && o.val_fraction < 1)) return Bad("--val-fraction", o.val_fraction, "must be in [0, 1)");
  if (o.shard_tokens <= 0 || o.shard_tokens > INT32_MAX)
    return Bad("--shard-tokens", o.shard_tokens, "must be in [1, 2^31)");
  if (o.dtype != "auto" && o.dtype != "u16" && o.dtype != "u32") return Bad("--dtype", o.dtype, "expected auto, u16 or u32");
  if (o.format != "llmc" && o.format != "raw") return Bad("--format", o.format, "expected llmc or raw");
  if (o.threads <= 0) return Bad("--threads", o.threads, "must be positive");
  if (o.train_sentences < 0) return Bad("--train-sentences", o.train_sentences, "must not be negative");
  std::error_code ec;
  if (std::filesystem::exists(o.out_dir, ec) &&
      (!std::filesystem::is_directory(o.out_dir, ec) || !std::filesystem::is_empty(o.out_dir, ec)))
    return Bad("--out", o.out_dir, "must be a new or empty folder (shards of another run would mix in)");
  return absl::OkStatus();
}

// Trains a SentencePiece model on the lines of every document.
absl::StatusOr<std::unique_ptr<Tokenizer>> TrainOnInputs(const PrepareOptions& o) {
  LOOM_ASSIGN_OR_RETURN(auto reader, DocumentReader::Open(o.inputs, o.documents));
  absl::string_view doc;
  size_t pos = 0;
  bool have = false;
  auto next = [&](std::string* line) {
    while (!have || pos >= doc.size()) {
      if (!reader->Next(&doc)) return false;
      have = true;
      pos = 0;
    }
    const size_t nl = doc.find('\n', pos);
    const size_t end = nl == absl::string_view::npos ? doc.size() : nl + 1;
    line->assign(doc.data() + pos, end - pos);
    pos = end;
    return true;
  };
  SentencePieceTrainOptions t;
  t.model_type = o.train_type;
  t.vocab_size = o.vocab_size;
  t.max_sentences = o.train_sentences;
  t.seed = static_cast<uint32_t>(o.seed);
  LOOM_ASSIGN_OR_RETURN(auto tok,
                        TrainSentencePiece(t, next, absl::StrCat("--train-tokenizer ", o.train_type,
                                                                 " --vocab-size ", o.vocab_size)));
  return std::unique_ptr<Tokenizer>(std::move(tok));
}

const TokenizerFieldNames& FlagNames() {
  static const TokenizerFieldNames* names = new TokenizerFieldNames{
      "--tokenizer", "--model", "--vocab", "--merges", "--tokenizer-json", "--tokenizer-dir"};
  return *names;
}

// Whether the shards hold u32 ids, checked against --dtype.
absl::StatusOr<bool> WideIds(const PrepareOptions& o, const Tokenizer& tok) {
  const bool fits16 = tok.vocab_size() <= 65536;
  if (o.dtype == "u16" && !fits16)
    return Bad("--dtype", "u16", absl::StrCat("the tokenizer has ", tok.vocab_size(),
                                              " ids and u16 holds ids below 65536; use u32 or auto"));
  return o.dtype == "u32" || !fits16;
}

absl::Status WriteDatasetJson(const PrepareOptions& o, const PrepareSummary& s, const Tokenizer& tok, bool wide) {
  nlohmann::json j = {
      {"format", o.format},
      {"dtype", wide ? "u32" : "u16"},
      {"tokenizer", kTokenizerDescription},
      {"eot_id", tok.eot_id()},
      {"documents_mode", o.documents},
      {"inputs", o.inputs},
      {"val_fraction", o.val_fraction},
      {"seed", o.seed},
  };
  if (o.format == "llmc") {
    j["magic"] = wide ? kMagicU32 : kMagicU16;
    j["version"] = wide ? kVersionU32 : kVersionU16;
  }
  for (int split = 0; split < 2; ++split) {
    j["documents"][kSplitNames[split]] = s.documents[split];
    j["tokens"][kSplitNames[split]] = s.tokens[split];
    j["shards"][kSplitNames[split]] = s.shards[split];
  }
  const std::string path = (std::filesystem::path(o.out_dir) / "dataset.json").string();
  std::ofstream out(path);
  out << j.dump(2) << "\n";
  if (!out.flush()) return absl::InternalError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<PrepareSummary> Prepare(const PrepareOptions& o, const PrepareProgress& progress) {
  LOOM_RETURN_IF_ERROR(CheckOptions(o));
  LOOM_ASSIGN_OR_RETURN(auto reader, DocumentReader::Open(o.inputs, o.documents));
  if (reader->total_bytes() == 0)
    return Bad("--input", absl::StrJoin(o.inputs, " "), "the input files are empty: no documents");
  PrepareSummary s;
  const auto t0 = std::chrono::steady_clock::now();
  std::unique_ptr<Tokenizer> tok;
  if (!o.train_type.empty()) {
    LOOM_ASSIGN_OR_RETURN(tok, TrainOnInputs(o));
  } else {
    LOOM_ASSIGN_OR_RETURN(tok, LoadTokenizer(o.tokenizer, FlagNames()));
  }
  const auto t1 = std::chrono::steady_clock::now();
  s.train_seconds = o.train_type.empty() ? 0 : std::chrono::duration<double>(t1 - t0).count();
  if (tok->eot_id() < 0 && tok->kind() != "bytes")
    return absl::InvalidArgumentError(absl::StrCat(
        "the tokenizer (", tok->Describe(), ") has no end-of-text id (no ", kEndOfText, " piece, no </s>)"));
  LOOM_ASSIGN_OR_RETURN(const bool wide, WideIds(o, *tok));
  std::error_code ec;
  std::filesystem::create_directories(o.out_dir, ec);
  if (ec) return Bad("--out", o.out_dir, absl::StrCat("cannot create the folder: ", ec.message()));
  const bool header = o.format == "llmc";
  ShardWriter writers[2] = {ShardWriter(o.out_dir, kSplitNames[0], o.shard_tokens, wide, header),
                            ShardWriter(o.out_dir, kSplitNames[1], o.shard_tokens, wide, header)};
  ThreadPool pool(o.threads);
  std::vector<Doc> batch;
  std::vector<std::vector<int32_t>> parts;
  int64_t index = 0;
  for (bool more = true; more;) {
    batch.clear();
    int64_t bytes = 0;
    absl::string_view doc;
    while (bytes < o.batch_bytes && (more = reader->Next(&doc))) {
      const int split = o.val_fraction > 0 ? SplitOf(index++, o.seed, o.val_fraction) : 0;
      batch.push_back({doc, split});
      ++s.documents[split];
      bytes += doc.size();
    }
    LOOM_RETURN_IF_ERROR(EncodeBatch(*tok, batch, pool, &parts));
    for (size_t i = 0; i < parts.size(); ++i) {
      s.tokens[i % 2] += parts[i].size();
      LOOM_RETURN_IF_ERROR(writers[i % 2].Add(parts[i]));
    }
    if (progress) progress(reader->consumed(), reader->total_bytes(), s.tokens[0] + s.tokens[1]);
  }
  if (s.documents[0] + s.documents[1] == 0)
    return Bad("--input", absl::StrJoin(o.inputs, " "),
               absl::StrCat("no documents (--documents ", o.documents, " leaves nothing)"));
  for (int split = 0; split < 2; ++split) {
    LOOM_RETURN_IF_ERROR(writers[split].Flush());
    s.shards[split] = writers[split].names();
  }
  s.text_bytes = reader->total_bytes();
  s.encode_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
  s.dtype = wide ? "u32" : "u16";
  s.tokenizer = tok->Describe();
  LOOM_RETURN_IF_ERROR(tok->Save(o.out_dir));
  LOOM_RETURN_IF_ERROR(WriteDatasetJson(o, s, *tok, wide));
  return s;
}

}  // namespace loom::runtime::data
