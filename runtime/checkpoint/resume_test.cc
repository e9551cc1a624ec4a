// Data position across a checkpoint: a run interrupted at step k and resumed
// from the checkpoint sees exactly the windows the uninterrupted run saw.
#include <vector>

#include "gtest/gtest.h"
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/checkpoint/loader.h"
#include "runtime/checkpoint/test_util.h"
#include "runtime/data/dataset.h"

namespace loom::checkpoint {
namespace {

// Every input token of `steps` batches drawn from `s`, in order.
std::vector<int32_t> Draw(data::Sampler* s, int steps, int64_t batch, int64_t seq) {
  std::vector<int32_t> seen;
  Tensor x = Tensor::MustEmpty({batch, seq}, DType::kI32), y = Tensor::MustEmpty({batch, seq}, DType::kI32);
  for (int i = 0; i < steps; ++i) {
    s->Next(batch, &x, &y);
    seen.insert(seen.end(), x.data<int32_t>(), x.data<int32_t>() + batch * seq);
  }
  return seen;
}

TEST(Resume, DataStreamContinuesExactly) {
  std::vector<int32_t> tokens(2000);
  // Token i is i, so every window is distinguishable by its content.
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>(i);
  const int64_t seq = 15, batch = 8;
  const int total = 40, stop = 17;  // crosses epoch boundaries (133 windows per epoch)
  auto full = data::Sampler::Create(&tokens, seq, 77);
  ASSERT_TRUE(full.ok());
  std::vector<int32_t> uninterrupted = Draw(&*full, total, batch, seq);

  std::string root = testing::FreshDir("resume");
  auto first = data::Sampler::Create(&tokens, seq, 77);
  std::vector<int32_t> seen = Draw(&*first, stop, batch, seq);
  SaveRequest req = testing::SampleRequest(stop);
  req.sampler = first->state();
  ASSERT_TRUE(SaveCheckpoint(root, req).ok());

  auto loaded = LoadLatest(root);
  ASSERT_TRUE(loaded.ok());
  const data::SamplerState& st = loaded->ckpt.manifest.sampler;
  auto resumed = data::Sampler::Create(&tokens, seq, st.seed);
  ASSERT_TRUE(resumed.ok());
  ASSERT_TRUE(resumed->Restore(st).ok());
  std::vector<int32_t> rest = Draw(&*resumed, total - stop, batch, seq);
  seen.insert(seen.end(), rest.begin(), rest.end());
  EXPECT_EQ(seen, uninterrupted);  // nothing skipped, nothing repeated
  EXPECT_GE(full->state().epoch, 2);
}

}  // namespace
}  // namespace loom::checkpoint
