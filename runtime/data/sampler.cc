#include "runtime/data/sampler.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "base/rng.h"

namespace loom::runtime::data {

void SampleSet::Add(int shard, int64_t first, int64_t count, int64_t stride) {
  if (count <= 0) return;
  if (!ranges_.empty()) {
    Range& last = ranges_.back();
    if (last.shard == shard && last.stride == stride && last.first + last.count * stride == first) {
      last.count += count;  // continues the previous range
      total_ += count;
      return;
    }
  }
  ranges_.push_back(Range{shard, first, count, stride, total_});
  total_ += count;
}

std::pair<int, int64_t> SampleSet::Locate(int64_t i) const {
  auto it = std::upper_bound(ranges_.begin(), ranges_.end(), i,
                             [](int64_t v, const Range& r) { return v < r.before; });
  const Range& r = *(it - 1);
  return {r.shard, r.first + (i - r.before) * r.stride};
}

int64_t SamplesIn(int64_t n, int64_t stride, int64_t need) { return n < need ? 0 : (n - need) / stride + 1; }

SampleSet AllSamples(const std::vector<int64_t>& shard_tokens, int64_t stride, int64_t need) {
  SampleSet s;
  for (size_t k = 0; k < shard_tokens.size(); ++k)
    s.Add(static_cast<int>(k), 0, SamplesIn(shard_tokens[k], stride, need), stride);
  return s;
}

absl::StatusOr<SplitSets> SplitByFraction(const std::vector<int64_t>& shard_tokens, int64_t stride, int64_t need,
                                          int64_t group, double fraction, uint64_t seed) {
  int64_t samples = 0, groups = 0;
  for (int64_t n : shard_tokens) {
    const int64_t w = SamplesIn(n, stride, need);
    samples += w;
    groups += (w + group - 1) / group;
  }
  if (samples < 2)
    return absl::InvalidArgumentError(absl::StrCat("the data holds ", samples, " sample", samples == 1 ? "" : "s",
                                                   " of ", need, " tokens; a validation split needs at least 2"));
  if (groups < 2) {
    group = 1;
    groups = samples;
  }
  const Philox rng(seed ^ 0x5eed5117ull, 0);
  std::vector<bool> is_val(static_cast<size_t>(groups));
  int64_t nval = 0;
  for (int64_t g = 0; g < groups; ++g) nval += (is_val[g] = rng.Uniform(g) < fraction);
  if (nval == 0) is_val[groups - 1] = true;
  if (nval == groups) is_val[0] = false;
  SplitSets out;
  int64_t g = 0;
  for (size_t k = 0; k < shard_tokens.size(); ++k) {
    const int64_t w = SamplesIn(shard_tokens[k], stride, need);
    for (int64_t first = 0; first < w; first += group, ++g) {
      SampleSet& dst = is_val[g] ? out.val : out.train;
      dst.Add(static_cast<int>(k), first * stride, std::min(group, w - first), stride);
    }
  }
  return out;
}

namespace {

// A 4-round Feistel network on `bits` bits (even), keyed by (seed, epoch).
uint64_t Feistel(uint64_t x, int bits, const Philox& key) {
  const int half = bits / 2;
  const uint64_t mask = (uint64_t{1} << half) - 1;
  uint64_t l = x >> half, r = x & mask;
  for (uint64_t round = 0; round < 4; ++round) {
    const uint64_t f = (static_cast<uint64_t>(key.Bits(2 * ((round << 32) | r))) << 32) |
                       key.Bits(2 * ((round << 32) | r) + 1);
    const uint64_t nl = r;
    r = (l ^ f) & mask;
    l = nl;
  }
  return (l << half) | r;
}

}  // namespace

int64_t Permute(uint64_t seed, int64_t epoch, int64_t i, int64_t n) {
  if (n <= 1) return 0;
  int bits = 2;
  while ((uint64_t{1} << bits) < static_cast<uint64_t>(n)) bits += 2;
  const Philox key(seed ^ 0x0fdc5a3b9e1d2c47ull, static_cast<uint64_t>(epoch));
  uint64_t x = static_cast<uint64_t>(i);
  do {  // cycle walking: the walk from an index in [0, n) returns to [0, n)
    x = Feistel(x, bits, key);
  } while (x >= static_cast<uint64_t>(n));
  return static_cast<int64_t>(x);
}

absl::StatusOr<Sampler> Sampler::Create(int64_t n, uint64_t seed, Order order) {
  if (n <= 0) return absl::InvalidArgumentError("the training split holds no samples");
  return Sampler(n, seed, order);
}

int64_t Sampler::Peek(int64_t ahead) const {
  const int64_t p = state_.position + ahead;
  const int64_t epoch = state_.epoch + p / n_, i = p % n_;
  return order_ == Order::kSequential ? i : Permute(state_.seed, epoch, i, n_);
}

uint64_t Sampler::DrawIndex(int64_t ahead) const {
  return static_cast<uint64_t>(state_.epoch) * static_cast<uint64_t>(n_) +
         static_cast<uint64_t>(state_.position + ahead);
}

void Sampler::Advance(int64_t count) {
  const int64_t p = state_.position + count;
  state_.epoch += p / n_;
  state_.position = p % n_;
}

absl::Status Sampler::Restore(const SamplerState& s) {
  if (s.position < 0 || s.position > n_ || s.epoch < 0)
    return absl::InvalidArgumentError(absl::StrCat("sampler state (epoch ", s.epoch, ", position ", s.position,
                                                   ") does not fit ", n_, " training samples"));
  state_ = s;
  Advance(0);  // a position at the end of an epoch is the start of the next
  return absl::OkStatus();
}

}  // namespace loom::runtime::data
