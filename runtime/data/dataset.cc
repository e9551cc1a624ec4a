#include "runtime/data/dataset.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "absl/strings/str_cat.h"
#include "base/rng.h"
#include "base/status.h"

namespace loom::data {
namespace {

namespace fs = std::filesystem;

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

absl::StatusOr<std::string> ReadTextTree(const std::string& path) {
  std::error_code ec;
  if (!fs::is_directory(path, ec)) return ReadFile(path);
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(path, ec)) {
    std::string name = e.path().filename().string();
    if (!e.is_regular_file() || name.empty() || name[0] == '.') continue;
    if (e.path().extension() == ".dat" || e.path().extension() == ".u8") continue;
    files.push_back(e.path().string());
  }
  if (ec) return absl::NotFoundError(absl::StrCat(path, ": ", ec.message()));
  std::sort(files.begin(), files.end());
  std::string all;
  for (const std::string& f : files) {
    LOOM_ASSIGN_OR_RETURN(std::string text, ReadFile(f));
    all += text;
  }
  if (all.empty()) return absl::InvalidArgumentError(absl::StrCat(path, ": no text found"));
  return all;
}

}  // namespace

absl::StatusOr<std::vector<int32_t>> LoadTokens(const std::string& path, const std::string& format,
                                                const std::string& tokens_dtype, int64_t vocab) {
  if (format == "text") {
    LOOM_ASSIGN_OR_RETURN(std::string text, ReadTextTree(path));
    std::vector<int32_t> t(text.size());
    for (size_t i = 0; i < text.size(); ++i) t[i] = static_cast<unsigned char>(text[i]);
    return t;
  }
  if (format != "tokens")
    return absl::InvalidArgumentError(absl::StrCat("data.format: expected text or tokens, got '", format, "'"));
  int width = tokens_dtype == "u16" ? 2 : tokens_dtype == "u32" ? 4 : 0;
  if (width == 0)
    return absl::InvalidArgumentError(
        absl::StrCat("data.tokens_dtype: expected u16 or u32, got '", tokens_dtype, "'"));
  LOOM_ASSIGN_OR_RETURN(std::string bytes, ReadFile(path));
  if (bytes.size() % width != 0)
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": size ", bytes.size(), " is not a multiple of ", width, " (", tokens_dtype, " ids)"));
  std::vector<int32_t> t(bytes.size() / width);
  const auto* b = reinterpret_cast<const unsigned char*>(bytes.data());
  for (size_t i = 0; i < t.size(); ++i) {
    uint32_t v = 0;
    for (int k = width - 1; k >= 0; --k) v = (v << 8) | b[i * width + k];
    if (v >= static_cast<uint64_t>(vocab))
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": token id ", v, " at index ", i, " is outside model.vocab = ", vocab));
    t[i] = static_cast<int32_t>(v);
  }
  return t;
}

std::string DecodeBytes(const std::vector<int32_t>& tokens) {
  std::string s;
  s.reserve(tokens.size());
  for (int32_t t : tokens) s.push_back(static_cast<char>(t & 0xff));
  return s;
}

Split SplitTokens(const std::vector<int32_t>& tokens, double val_fraction, uint64_t seed) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  const int64_t blocks = std::max<int64_t>(1, (n + kSplitBlock - 1) / kSplitBlock);
  Philox rng(seed ^ 0x5eed5117ull, 0);
  std::vector<bool> is_val(blocks);
  int64_t nval = 0;
  for (int64_t b = 0; b < blocks; ++b) nval += (is_val[b] = rng.Uniform(b) < val_fraction);
  if (blocks >= 2 && nval == 0) is_val[blocks - 1] = true;
  if (blocks >= 2 && nval == blocks) is_val[0] = false;
  Split s;
  for (int64_t b = 0; b < blocks; ++b) {
    auto lo = tokens.begin() + std::min(n, b * kSplitBlock);
    auto hi = tokens.begin() + std::min(n, (b + 1) * kSplitBlock);
    auto& dst = is_val[b] ? s.val : s.train;
    dst.insert(dst.end(), lo, hi);
  }
  if (blocks == 1) {  // tiny corpus: cut the one block by fraction
    int64_t cut = static_cast<int64_t>(n * (1 - val_fraction));
    s.train.assign(tokens.begin(), tokens.begin() + cut);
    s.val.assign(tokens.begin() + cut, tokens.end());
  }
  return s;
}

Sampler::Sampler(const std::vector<int32_t>* tokens, int64_t seq_len, uint64_t seed)
    : tokens_(tokens),
      seq_len_(seq_len),
      num_windows_((static_cast<int64_t>(tokens->size()) - 1) / seq_len) {
  state_.seed = seed;
  Shuffle();
}

absl::StatusOr<Sampler> Sampler::Create(const std::vector<int32_t>* tokens, int64_t seq_len, uint64_t seed) {
  if (seq_len <= 0) return absl::InvalidArgumentError(absl::StrCat("model.seq_len must be positive, got ", seq_len));
  if (static_cast<int64_t>(tokens->size()) < seq_len + 1)
    return absl::InvalidArgumentError(absl::StrCat("the training split has ", tokens->size(),
                                                   " tokens, fewer than one window of seq_len + 1 = ", seq_len + 1));
  return Sampler(tokens, seq_len, seed);
}

void Sampler::Shuffle() {
  order_.resize(num_windows_);
  for (int64_t i = 0; i < num_windows_; ++i) order_[i] = i;
  Philox rng(state_.seed, static_cast<uint64_t>(state_.epoch));
  for (int64_t i = num_windows_ - 1; i > 0; --i) {
    uint64_t r = (static_cast<uint64_t>(rng.Bits(2 * i)) << 32) | rng.Bits(2 * i + 1);
    std::swap(order_[i], order_[r % static_cast<uint64_t>(i + 1)]);
  }
}

int64_t Sampler::PeekWindow() const { return order_[state_.position]; }

void Sampler::Next(int64_t batch, Tensor* x, Tensor* y) {
  int32_t* xp = x->data<int32_t>();
  int32_t* yp = y->data<int32_t>();
  for (int64_t b = 0; b < batch; ++b) {
    int64_t start = order_[state_.position++] * seq_len_;
    if (state_.position == num_windows_) {  // the epoch is used up: start the next
      ++state_.epoch;
      state_.position = 0;
      Shuffle();
    }
    for (int64_t t = 0; t < seq_len_; ++t) {
      xp[b * seq_len_ + t] = (*tokens_)[start + t];
      yp[b * seq_len_ + t] = (*tokens_)[start + t + 1];
    }
  }
}

absl::Status Sampler::Restore(const SamplerState& s) {
  if (s.position < 0 || s.position > num_windows_ || s.epoch < 0)
    return absl::InvalidArgumentError(absl::StrCat("sampler state (epoch ", s.epoch, ", position ", s.position,
                                                   ") does not fit ", num_windows_, " windows"));
  state_ = s;
  if (state_.position == num_windows_) {
    ++state_.epoch;
    state_.position = 0;
  }
  Shuffle();
  return absl::OkStatus();
}

absl::Status ValidationBatch(const std::vector<int32_t>& val, int64_t seq_len, int64_t batch, int64_t index,
                             Tensor* x, Tensor* y) {
  if (static_cast<int64_t>(val.size()) < seq_len + 1)
    return absl::InvalidArgumentError(absl::StrCat("the validation split has ", val.size(),
                                                   " tokens, fewer than seq_len + 1 = ", seq_len + 1));
  int64_t windows = std::max<int64_t>(1, (static_cast<int64_t>(val.size()) - 1) / seq_len);
  int32_t* xp = x->data<int32_t>();
  int32_t* yp = y->data<int32_t>();
  for (int64_t b = 0; b < batch; ++b) {
    int64_t w = (index * batch + b) % windows;
    for (int64_t t = 0; t < seq_len; ++t) {
      int64_t i = (w * seq_len + t) % static_cast<int64_t>(val.size() - 1);
      xp[b * seq_len + t] = val[i];
      yp[b * seq_len + t] = val[i + 1];
    }
  }
  return absl::OkStatus();
}

}  // namespace loom::data

namespace loom::data {

double BigramLoss(const std::vector<int32_t>& train, const std::vector<int32_t>& val, int64_t vocab,
                  double alpha) {
  std::vector<double> counts(static_cast<size_t>(vocab * vocab), 0.0), rows(static_cast<size_t>(vocab), 0.0);
  for (size_t i = 0; i + 1 < train.size(); ++i) {
    counts[static_cast<size_t>(train[i]) * vocab + train[i + 1]] += 1;
    rows[train[i]] += 1;
  }
  double nll = 0;
  int64_t n = 0;
  for (size_t i = 0; i + 1 < val.size(); ++i, ++n) {
    double c = counts[static_cast<size_t>(val[i]) * vocab + val[i + 1]];
    nll -= std::log((c + alpha) / (rows[val[i]] + alpha * vocab));
  }
  return n ? nll / n : 0;
}

}  // namespace loom::data
