#include "runtime/data/shards.h"

#include <fcntl.h>
#include <glob.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "base/status.h"
#include "runtime/data/npy.h"

namespace loom::runtime::data {
namespace {

namespace fs = std::filesystem;

bool IsGlob(const std::string& p) { return p.find_first_of("*?[") != std::string::npos; }

// The first bytes of a file (up to `n`) and its size.
absl::Status ReadPrefix(const std::string& path, size_t n, std::string* prefix, int64_t* size) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return absl::NotFoundError(absl::StrCat(path, ": cannot open: ", std::strerror(errno)));
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    return absl::NotFoundError(absl::StrCat(path, ": cannot stat: ", std::strerror(errno)));
  }
  *size = st.st_size;
  prefix->resize(std::min<size_t>(n, static_cast<size_t>(st.st_size)));
  ssize_t got = prefix->empty() ? 0 : ::pread(fd, prefix->data(), prefix->size(), 0);
  ::close(fd);
  if (got != static_cast<ssize_t>(prefix->size()))
    return absl::DataLossError(absl::StrCat(path, ": short read of the header at byte offset 0"));
  return absl::OkStatus();
}

int32_t Int32At(const std::string& b, size_t offset) {
  int32_t v;
  std::memcpy(&v, b.data() + offset, 4);
  return v;
}

// What the first bytes say the file is: llmc, npy, or neither (returned as text).
Format Detect(const std::string& prefix) {
  if (prefix.size() >= 4) {
    int32_t magic = Int32At(prefix, 0);
    if (magic == kLlmcMagicGpt2 || magic == kLlmcMagicLlama3) return Format::kLlmc;
  }
  if (prefix.compare(0, kNpyMagic.size(), kNpyMagic.data(), kNpyMagic.size()) == 0) return Format::kNpy;
  return Format::kText;
}

absl::Status Invalid(const std::string& path, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": ", what));
}

absl::StatusOr<ShardLayout> LlmcLayout(ShardLayout l, const std::string& prefix) {
  if (l.file_size < kLlmcHeaderBytes)
    return Invalid(l.path, absl::StrCat("truncated llm.c header: ", kLlmcHeaderBytes,
                                        " bytes needed from byte offset 0, the file has ", l.file_size));
  const int32_t magic = Int32At(prefix, 0), version = Int32At(prefix, 4), count = Int32At(prefix, 8);
  if (magic != kLlmcMagicGpt2 && magic != kLlmcMagicLlama3)
    return Invalid(l.path, absl::StrCat("header[0] (magic, byte offset 0) is ", magic, "; an llm.c shard has ",
                                        kLlmcMagicGpt2, " (GPT-2) or ", kLlmcMagicLlama3, " (Llama 3)"));
  const int32_t want = magic == kLlmcMagicGpt2 ? kLlmcVersionGpt2 : kLlmcVersionLlama3;
  if (version != want)
    return Invalid(l.path, absl::StrCat("header[1] (version, byte offset 4) is ", version, "; magic ", magic,
                                        " goes with version ", want));
  if (count < 0)
    return Invalid(l.path, absl::StrCat("header[2] (token count, byte offset 8) is negative: ", count));
  l.width = magic == kLlmcMagicGpt2 ? 2 : 4;
  l.data_offset = kLlmcHeaderBytes;
  l.num_tokens = count;
  const int64_t end = kLlmcHeaderBytes + static_cast<int64_t>(count) * l.width;
  if (end != l.file_size)
    return Invalid(l.path, absl::StrCat(end > l.file_size ? "truncated" : "trailing bytes",
                                        ": header[2] (token count, byte offset 8) says ", count,
                                        " tokens, ending at byte offset ", end, ", but the file has ",
                                        l.file_size, " bytes"));
  return l;
}

absl::StatusOr<ShardLayout> NpyLayout(ShardLayout l, const std::string& prefix) {
  LOOM_ASSIGN_OR_RETURN(NpyHeader h, ParseNpyHeader(prefix, l.file_size, l.path));
  if (h.shape.size() != 1)
    return Invalid(l.path, absl::StrCat(".npy 'shape' has ", h.shape.size(),
                                        " dimensions; a token shard is one-dimensional"));
  if (h.type.kind != 'u' && h.type.kind != 'i')
    return Invalid(l.path, absl::StrCat(".npy 'descr' is ", h.type.ToString(), "; token ids are integers"));
  l.width = h.type.width;
  l.is_signed = h.type.kind == 'i';
  l.data_offset = h.data_offset;
  l.num_tokens = h.count;
  return l;
}

}  // namespace

const char* FormatName(Format f) {
  switch (f) {
    case Format::kText: return "text";
    case Format::kTokens: return "tokens";
    case Format::kLlmc: return "llmc";
    case Format::kNpy: return "npy";
  }
  return "?";
}

absl::StatusOr<std::vector<std::string>> ExpandDataPath(const std::string& path, const std::string& format,
                                                        absl::string_view field) {
  std::vector<std::string> files;
  std::error_code ec;
  if (IsGlob(path)) {
    glob_t g;
    int rc = ::glob(path.c_str(), GLOB_ERR, nullptr, &g);
    if (rc == 0)
      for (size_t i = 0; i < g.gl_pathc; ++i)
        if (fs::is_regular_file(g.gl_pathv[i], ec)) files.push_back(g.gl_pathv[i]);
    ::globfree(&g);
    if (files.empty())
      return absl::InvalidArgumentError(absl::StrCat(field, ": no file matches '", path, "'"));
  } else if (fs::is_directory(path, ec)) {
    const bool text = format == "text" || format == "auto" || format.empty();
    for (const auto& e : fs::directory_iterator(path, ec)) {
      const std::string name = e.path().filename().string();
      if (!e.is_regular_file() || name.empty() || name[0] == '.') continue;
      if (text && (e.path().extension() == ".dat" || e.path().extension() == ".u8")) continue;
      files.push_back(e.path().string());
    }
    if (ec) return absl::NotFoundError(absl::StrCat(field, ": ", path, ": ", ec.message()));
    if (files.empty())
      return absl::InvalidArgumentError(absl::StrCat(field, ": directory '", path, "' holds no data files"));
  } else if (fs::is_regular_file(path, ec)) {
    files.push_back(path);
  } else {
    return absl::NotFoundError(absl::StrCat(field, ": ", path, ": no such file or directory"));
  }
  std::sort(files.begin(), files.end());
  return files;
}

absl::StatusOr<ShardLayout> InspectShard(const std::string& path, const std::string& format,
                                         const std::string& tokens_dtype) {
  ShardLayout l;
  l.path = path;
  std::string prefix;
  LOOM_RETURN_IF_ERROR(ReadPrefix(path, 65536, &prefix, &l.file_size));
  if (l.file_size == 0) return Invalid(path, "empty file (0 bytes)");
  const Format seen = Detect(prefix);
  const std::string f = format.empty() ? "auto" : format;
  if (f == "auto") {
    l.format = seen;
  } else if (f == "text" || f == "tokens") {
    l.format = f == "text" ? Format::kText : Format::kTokens;
    if (seen != Format::kText)
      return Invalid(path, absl::StrCat("data.format is ", f, " but the file starts with the ", FormatName(seen),
                                        " magic at byte offset 0; set data.format: ", FormatName(seen),
                                        " (or auto)"));
  } else if (f == "llmc") {
    l.format = Format::kLlmc;
  } else if (f == "npy") {
    l.format = Format::kNpy;
    if (seen != Format::kNpy)
      return Invalid(path, "data.format is npy but the magic \\x93NUMPY is missing at byte offset 0");
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("data.format: expected auto, text, tokens, llmc or npy, got '", format, "'"));
  }
  switch (l.format) {
    case Format::kText:
      l.num_tokens = l.file_size;
      return l;
    case Format::kTokens: {
      l.width = tokens_dtype == "u32" ? 4 : tokens_dtype == "u16" || tokens_dtype.empty() ? 2 : 0;
      if (l.width == 0)
        return absl::InvalidArgumentError(
            absl::StrCat("data.tokens_dtype: expected u16 or u32, got '", tokens_dtype, "'"));
      if (l.file_size % l.width != 0)
        return Invalid(path, absl::StrCat("size ", l.file_size, " is not a multiple of ", l.width, " (",
                                          tokens_dtype.empty() ? "u16" : tokens_dtype,
                                          " ids): a partial id starts at byte offset ",
                                          l.file_size - l.file_size % l.width));
      l.num_tokens = l.file_size / l.width;
      return l;
    }
    case Format::kLlmc: return LlmcLayout(std::move(l), prefix);
    case Format::kNpy: return NpyLayout(std::move(l), prefix);
  }
  return absl::InternalError("unreachable");
}

absl::StatusOr<std::unique_ptr<TokenSource>> TokenSource::Open(const std::string& path, const std::string& format,
                                                               const std::string& tokens_dtype,
                                                               absl::string_view field) {
  LOOM_ASSIGN_OR_RETURN(std::vector<std::string> files, ExpandDataPath(path, format, field));
  std::unique_ptr<TokenSource> s(new TokenSource());
  s->field_ = std::string(field);
  for (const std::string& f : files) {
    auto l = InspectShard(f, format, tokens_dtype);
    if (!l.ok()) return Annotate(l.status(), field);
    if (!s->shards_.empty() && l->format != s->shards_.front().format)
      return absl::InvalidArgumentError(absl::StrCat(
          field, ": mixed formats: ", s->shards_.front().path, " is ", FormatName(s->shards_.front().format), ", ",
          f, " is ", FormatName(l->format), "; the shards of one dataset share one format"));
    s->shards_.push_back(std::move(*l));
  }
  s->maps_.resize(s->shards_.size());
  return s;
}

TokenSource::~TokenSource() = default;

std::vector<int64_t> TokenSource::ShardSizes() const {
  std::vector<int64_t> out;
  for (const ShardLayout& l : shards_) out.push_back(l.num_tokens);
  return out;
}

int64_t TokenSource::num_tokens() const {
  int64_t n = 0;
  for (const ShardLayout& l : shards_) n += l.num_tokens;
  return n;
}

int64_t TokenSource::num_bytes() const {
  int64_t n = 0;
  for (const ShardLayout& l : shards_) n += l.num_tokens * l.width;
  return n;
}

absl::Status TokenSource::Read(int s, int64_t offset, int64_t n, int64_t vocab, int32_t* out) const {
  const ShardLayout& l = shards_[s];
  if (offset < 0 || n < 0 || offset + n > l.num_tokens)
    return absl::OutOfRangeError(absl::StrCat(field_, ": ", l.path, ": ids [", offset, ", ", offset + n, ") outside its ",
                                              l.num_tokens, " tokens"));
  if (!maps_[s]) {
    auto m = MappedFile::Open(l.path, random_);
    if (!m.ok()) return Annotate(m.status(), field_);
    maps_[s] = std::move(*m);
    if (maps_[s]->size() != l.file_size)
      return absl::DataLossError(absl::StrCat(field_, ": ", l.path, ": the file changed size since it was opened (",
                                              l.file_size, " -> ", maps_[s]->size(), " bytes)"));
  }
  const uint8_t* base = maps_[s]->data() + l.data_offset + offset * l.width;
  for (int64_t i = 0; i < n; ++i) {
    uint64_t u = 0;
    std::memcpy(&u, base + i * l.width, l.width);  // little-endian host
    int64_t v = static_cast<int64_t>(u);
    if (l.is_signed && l.width < 8) v = static_cast<int64_t>(u << (64 - 8 * l.width)) >> (64 - 8 * l.width);
    if (v < 0 || v >= vocab)
      return absl::InvalidArgumentError(absl::StrCat(field_, ": ", l.path, ": token id ", v, " at byte offset ",
                                                     l.data_offset + (offset + i) * l.width, " (token ", offset + i,
                                                     ") is outside [0, model.vocab = ", vocab, ")"));
    out[i] = static_cast<int32_t>(v);
  }
  return absl::OkStatus();
}

absl::Status TokenSource::ScanIds(int64_t vocab, int64_t max_bytes, bool* scanned) const {
  *scanned = num_bytes() <= max_bytes;
  if (!*scanned) return absl::OkStatus();
  std::vector<int32_t> buf(1 << 16);
  for (int s = 0; s < num_shards(); ++s)
    for (int64_t at = 0; at < shards_[s].num_tokens; at += static_cast<int64_t>(buf.size()))
      LOOM_RETURN_IF_ERROR(
          Read(s, at, std::min<int64_t>(static_cast<int64_t>(buf.size()), shards_[s].num_tokens - at), vocab, buf.data()));
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<MappedFile>> MappedFile::Open(const std::string& path, bool random) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return absl::NotFoundError(absl::StrCat(path, ": cannot open: ", std::strerror(errno)));
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    return absl::NotFoundError(absl::StrCat(path, ": cannot stat: ", std::strerror(errno)));
  }
  if (st.st_size == 0) {
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrCat(path, ": empty file (0 bytes)"));
  }
  void* p = ::mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (p == MAP_FAILED) return absl::InternalError(absl::StrCat(path, ": mmap failed: ", std::strerror(errno)));
  if (random) (void)::madvise(p, static_cast<size_t>(st.st_size), MADV_RANDOM);  // advice only: failure is harmless
  std::unique_ptr<MappedFile> m(new MappedFile());
  m->data_ = static_cast<const uint8_t*>(p);
  m->size_ = st.st_size;
  return m;
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), static_cast<size_t>(size_));
}

}  // namespace loom::runtime::data
