// Token shards: what a data path names, the formats a shard may have, and a
// token source that reads shards through read-only memory maps.
//
// A data path is a file, a directory (its regular, non-hidden files, sorted by
// name) or a glob such as "data/train_*.bin" (sorted matches). In a directory
// read as text or auto, fortune index files (*.dat, *.u8) are skipped: that
// is how the default corpus (/usr/share/games/fortunes) is read.
//
// Formats (one per dataset; a glob mixing them is an error naming two files):
//   text    bytes are tokens (vocab 256);
//   tokens  raw little-endian u16 or u32 ids (data.tokens_dtype), no header;
//   llmc    llm.c's shards: 256 little-endian int32 (header[0] magic,
//           header[1] version, header[2] token count), then the ids;
//   npy     a one-dimensional integer .npy array.
// "auto" detects llmc and npy from the first bytes and reads anything else
// as text. A stated format whose header disagrees with the file is an error
// (a text or tokens file that starts with an llm.c magic or the .npy magic,
// an llmc shard with another magic).
//
// Opening a source reads each shard's header only (bytes, magic, version,
// count against the file size). Each shard is mapped on its first read; only
// the pages of windows actually read are touched, so memory follows the
// batch, not the dataset. Ids are checked against the vocabulary as they are
// read (ScanIds checks a whole small dataset up front). Every error names the
// file and the byte offset.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace loom::runtime::data {

// llm.c's shard header (llm.c dev/data/data_common.py, HEADERS_INFO, and
// llmc/dataloader.h): 256 int32; GPT-2 shards carry magic 20240520, version 1
// and u16 ids; Llama 3 shards magic 20240801, version 7 and u32 ids.
inline constexpr int32_t kLlmcMagicGpt2 = 20240520;
inline constexpr int32_t kLlmcVersionGpt2 = 1;
inline constexpr int32_t kLlmcMagicLlama3 = 20240801;
inline constexpr int32_t kLlmcVersionLlama3 = 7;
inline constexpr int64_t kLlmcHeaderBytes = 256 * 4;

enum class Format { kText, kTokens, kLlmc, kNpy };
const char* FormatName(Format f);

// Where a shard's tokens are and how they are stored.
struct ShardLayout {
  std::string path;
  Format format = Format::kText;
  int width = 1;             // bytes per id: 1, 2, 4 or 8
  bool is_signed = false;    // npy i2/i4/i8: negative ids are errors when read
  int64_t data_offset = 0;   // bytes before the first id
  int64_t num_tokens = 0;
  int64_t file_size = 0;
};

// The files a data path names (see the top of this file). `field` ("data.path")
// prefixes the errors: nothing matches, an empty directory, no such file.
absl::StatusOr<std::vector<std::string>> ExpandDataPath(const std::string& path, const std::string& format,
                                                        absl::string_view field);

// Reads the header of one file and checks it against `format` ("auto",
// "text", "tokens", "llmc" or "npy"; tokens_dtype "u16" / "u32" for tokens).
absl::StatusOr<ShardLayout> InspectShard(const std::string& path, const std::string& format,
                                         const std::string& tokens_dtype);

class MappedFile;

class TokenSource {
 public:
  // Expands `path`, inspects every shard and checks they share one format.
  static absl::StatusOr<std::unique_ptr<TokenSource>> Open(const std::string& path, const std::string& format,
                                                           const std::string& tokens_dtype, absl::string_view field);
  ~TokenSource();

  int num_shards() const { return static_cast<int>(shards_.size()); }
  const ShardLayout& shard(int i) const { return shards_[i]; }
  std::vector<int64_t> ShardSizes() const;  // tokens per shard
  int64_t num_tokens() const;
  int64_t num_bytes() const;  // id bytes over all shards
  Format format() const { return shards_.front().format; }

  // Copies ids [offset, offset + n) of shard `s` into `out`, checking that
  // every id is in [0, vocab). Maps the shard on its first read. Not
  // thread-safe (one reader per process).
  absl::Status Read(int s, int64_t offset, int64_t n, int64_t vocab, int32_t* out) const;
  // Reads of shuffled windows: maps are advised MADV_RANDOM (no readahead
  // around each window). Set before the first read.
  void set_random_access(bool random) { random_ = random; }
  // Reads every id once, checking the range, when the ids take at most
  // `max_bytes`; *scanned says whether it did.
  absl::Status ScanIds(int64_t vocab, int64_t max_bytes, bool* scanned) const;

 private:
  TokenSource() = default;
  std::string field_;  // the spec field naming these shards, prefixing read errors
  bool random_ = false;
  std::vector<ShardLayout> shards_;
  mutable std::vector<std::unique_ptr<MappedFile>> maps_;
};

// A read-only private memory map of a whole file; `random` advises the
// kernel that reads jump around (MADV_RANDOM: no readahead).
class MappedFile {
 public:
  static absl::StatusOr<std::unique_ptr<MappedFile>> Open(const std::string& path, bool random = false);
  ~MappedFile();
  const uint8_t* data() const { return data_; }
  int64_t size() const { return size_; }

 private:
  MappedFile() = default;
  const uint8_t* data_ = nullptr;
  int64_t size_ = 0;
};

}  // namespace loom::runtime::data
