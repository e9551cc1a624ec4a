// Training data: tokenizers, a deterministic train/validation split and a
// resumable sampler.
//
// Text is tokenized byte-wise (token = byte value, vocab 256), so any UTF-8
// file works. Token-id files hold little-endian u16 or u32 ids. A directory
// path reads every regular file in it, sorted by name, skipping fortune index
// files (*.dat, *.u8): that is how the default corpus (Debian's `fortunes`
// package, /usr/share/games/fortunes) is read.
//
// Split: the token stream is cut into blocks of kSplitBlock tokens; a block
// belongs to validation when a seeded hash of its index falls under
// val_fraction (at least one block each way). The split depends only on
// (data, seed, val_fraction).
//
// Sampler: the train split is cut into non-overlapping windows of seq_len + 1
// tokens (inputs and next-token targets). Each epoch visits every window once
// in an order drawn from (seed, epoch). Its whole state is (epoch, position),
// so a resumed run continues with exactly the next window: nothing skipped,
// nothing repeated.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "base/tensor.h"

namespace loom::data {

inline constexpr const char* kDefaultCorpus = "/usr/share/games/fortunes";
inline constexpr int64_t kSplitBlock = 4096;

// Reads a text file or directory (byte tokens) or a token-id file.
// format: "text" or "tokens"; tokens_dtype: "u16" or "u32". Ids >= vocab are
// an error naming the file and offset.
absl::StatusOr<std::vector<int32_t>> LoadTokens(const std::string& path, const std::string& format,
                                                const std::string& tokens_dtype, int64_t vocab);

std::string DecodeBytes(const std::vector<int32_t>& tokens);  // byte tokens back to text

struct Split {
  std::vector<int32_t> train, val;
};
Split SplitTokens(const std::vector<int32_t>& tokens, double val_fraction, uint64_t seed);

struct SamplerState {
  uint64_t seed = 0;
  int64_t epoch = 0;
  int64_t position = 0;  // windows already taken in this epoch
  bool operator==(const SamplerState& o) const {
    return seed == o.seed && epoch == o.epoch && position == o.position;
  }
};

class Sampler {
 public:
  // Fails when the split holds fewer than one window of seq_len + 1 tokens.
  static absl::StatusOr<Sampler> Create(const std::vector<int32_t>* tokens, int64_t seq_len, uint64_t seed);

  // Fills x and y (i32 [batch, seq_len]) with the next `batch` windows.
  void Next(int64_t batch, Tensor* x, Tensor* y);
  // Index (into the token stream, in windows) of the window that comes next.
  int64_t PeekWindow() const;
  int64_t num_windows() const { return num_windows_; }
  SamplerState state() const { return state_; }
  absl::Status Restore(const SamplerState& s);

 private:
  Sampler(const std::vector<int32_t>* tokens, int64_t seq_len, uint64_t seed);
  void Shuffle();

  const std::vector<int32_t>* tokens_;
  int64_t seq_len_;
  int64_t num_windows_;
  SamplerState state_;
  std::vector<int64_t> order_;
};

// Sequential validation windows: the first `batches` * `batch` windows of `val`
// (wrapping around if it is short). Deterministic. Fails when `val` holds
// fewer than seq_len + 1 tokens.
absl::Status ValidationBatch(const std::vector<int32_t>& val, int64_t seq_len, int64_t batch, int64_t index,
                     Tensor* x, Tensor* y);

}  // namespace loom::data

namespace loom::data {

// Cross-entropy (nats/token) on `val` of a bigram count model fitted on `train`
// with add-`alpha` smoothing: the baseline a language model must beat.
double BigramLoss(const std::vector<int32_t>& train, const std::vector<int32_t>& val, int64_t vocab,
                  double alpha = 0.1);

}  // namespace loom::data
