// Data position across a checkpoint: a run interrupted at step k and resumed
// from the checkpoint sees exactly the windows the uninterrupted run saw.
#include <vector>

#include "gtest/gtest.h"
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/checkpoint/loader.h"
#include "runtime/checkpoint/test_util.h"
#include "runtime/data/dataset.h"

namespace loom::runtime::checkpoint {
namespace {

// The samples of `steps` batches drawn from `s`, in order.
std::vector<int64_t> Draw(data::Sampler* s, int steps, int64_t batch) {
  std::vector<int64_t> seen;
  for (int i = 0; i < steps; ++i) {
    for (int64_t r = 0; r < batch; ++r) seen.push_back(s->Peek(r));
    s->Advance(batch);
  }
  return seen;
}

TEST(Resume, DataStreamContinuesExactly) {
  const int64_t windows = 133, batch = 8;
  const int total = 40, stop = 17;  // crosses epoch boundaries
  auto full = data::Sampler::Create(windows, 77);
  ASSERT_TRUE(full.ok());
  std::vector<int64_t> uninterrupted = Draw(&*full, total, batch);

  std::string root = testing::FreshDir("resume");
  auto first = data::Sampler::Create(windows, 77);
  std::vector<int64_t> seen = Draw(&*first, stop, batch);
  SaveRequest req = testing::SampleRequest(stop);
  req.sampler = first->state();
  ASSERT_TRUE(SaveCheckpoint(root, req).ok());

  auto loaded = LoadLatest(root);
  ASSERT_TRUE(loaded.ok());
  const data::SamplerState& st = loaded->ckpt.manifest.sampler;
  auto resumed = data::Sampler::Create(windows, st.seed);
  ASSERT_TRUE(resumed.ok());
  ASSERT_TRUE(resumed->Restore(st).ok());
  std::vector<int64_t> rest = Draw(&*resumed, total - stop, batch);
  seen.insert(seen.end(), rest.begin(), rest.end());
  EXPECT_EQ(seen, uninterrupted);  // nothing skipped, nothing repeated
  EXPECT_GE(full->state().epoch, 2);
}

}  // namespace
}  // namespace loom::runtime::checkpoint
