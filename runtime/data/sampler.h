// Samples (windows of a token stream, or records) and the order they are
// drawn in.
//
// SampleSet: the samples of one split as ranges over shards. A shard of n
// tokens holds windows at token offsets 0, stride, 2 * stride, ... as long as
// `need` tokens fit (causal windows: stride seq_len, need seq_len + 1, so a
// window's targets end where the next window starts). Windows never cross a
// shard boundary. Records of a .npy pair are samples of stride 1.
//
// SplitByFraction cuts a shard list into training and validation samples:
// consecutive samples form groups of `group` samples (never crossing shards),
// and a group is validation when a hash of (seed, group index) falls under
// `fraction`, with at least one group each way. With fewer than two groups,
// every sample is its own group. The split depends only on the shard sizes,
// the window shape, the seed and the fraction.
//
// Sampler: each epoch visits every sample of the training set once, in an
// order drawn from (seed, epoch) by a keyed bijection of [0, n) (a Feistel
// network with cycle walking), so the order costs no memory and any draw is
// computed directly: draw k of the run is sample Permute(epoch, position + k).
// Its whole state is (seed, epoch, position): a resumed run continues with
// exactly the next sample, nothing skipped, nothing repeated. Ranks of a
// data-parallel job all hold the same state and each computes only the draws
// of its rows of the global batch.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace loom::runtime::data {

inline constexpr int64_t kSplitBlock = 4096;  // tokens per split group (at least one window)

class SampleSet {
 public:
  // `count` samples of shard `shard` starting at token `first`, `stride` apart.
  void Add(int shard, int64_t first, int64_t count, int64_t stride);
  int64_t size() const { return total_; }
  // Shard and token offset of sample i (0 <= i < size()).
  std::pair<int, int64_t> Locate(int64_t i) const;

 private:
  struct Range {
    int shard;
    int64_t first, count, stride, before;  // before: samples in earlier ranges
  };
  std::vector<Range> ranges_;
  int64_t total_ = 0;
};

// Samples per shard of `n` tokens: (n - need) / stride + 1 when need <= n.
int64_t SamplesIn(int64_t n, int64_t stride, int64_t need);
SampleSet AllSamples(const std::vector<int64_t>& shard_tokens, int64_t stride, int64_t need);

struct SplitSets {
  SampleSet train, val;
};
// Fails when the shards hold fewer than two samples.
absl::StatusOr<SplitSets> SplitByFraction(const std::vector<int64_t>& shard_tokens, int64_t stride, int64_t need,
                                          int64_t group, double fraction, uint64_t seed);

struct SamplerState {
  uint64_t seed = 0;
  int64_t epoch = 0;
  int64_t position = 0;  // samples already drawn in this epoch
  bool operator==(const SamplerState& o) const {
    return seed == o.seed && epoch == o.epoch && position == o.position;
  }
};

enum class Order { kShuffle, kSequential };

// Sample i of the order of `epoch` over n samples: a bijection of [0, n).
int64_t Permute(uint64_t seed, int64_t epoch, int64_t i, int64_t n);

class Sampler {
 public:
  // Fails when n <= 0.
  static absl::StatusOr<Sampler> Create(int64_t n, uint64_t seed, Order order = Order::kShuffle);

  // The sample drawn `ahead` draws after the current position, and that
  // draw's index in the whole run (epoch * n + position + ahead), which seeds
  // per-draw randomness such as MLM masks.
  int64_t Peek(int64_t ahead = 0) const;
  uint64_t DrawIndex(int64_t ahead = 0) const;
  void Advance(int64_t count);

  int64_t num_samples() const { return n_; }
  SamplerState state() const { return state_; }
  // Fails when the position does not fit this sampler's sample count.
  absl::Status Restore(const SamplerState& s);

 private:
  Sampler(int64_t n, uint64_t seed, Order order) : n_(n), order_(order) { state_.seed = seed; }
  int64_t n_;
  Order order_;
  SamplerState state_;
};

}  // namespace loom::runtime::data
