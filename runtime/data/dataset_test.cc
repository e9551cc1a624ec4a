#include "runtime/data/dataset.h"

#include <fstream>
#include <set>

#include "gtest/gtest.h"

namespace loom::data {
namespace {

std::vector<int32_t> Ramp(int n) {
  std::vector<int32_t> t(n);
  for (int i = 0; i < n; ++i) t[i] = i % 251;
  return t;
}

TEST(Data, ByteTokenizerRoundTripsUtf8) {
  std::string path = ::testing::TempDir() + "/t.txt";
  std::string text = "héllo wörld ✓\n";
  std::ofstream(path, std::ios::binary) << text;
  auto t = LoadTokens(path, "text", "u16", 256);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->size(), text.size());
  EXPECT_EQ(DecodeBytes(*t), text);
}

TEST(Data, TokenFilesCheckWidthAndVocab) {
  std::string path = ::testing::TempDir() + "/ids.bin";
  {
    std::ofstream out(path, std::ios::binary);
    uint16_t ids[] = {1, 500, 50000};
    out.write(reinterpret_cast<const char*>(ids), sizeof(ids));
  }
  auto ok = LoadTokens(path, "tokens", "u16", 50304);
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(*ok, (std::vector<int32_t>{1, 500, 50000}));
  auto big = LoadTokens(path, "tokens", "u16", 1000);
  ASSERT_FALSE(big.ok());
  EXPECT_NE(std::string(big.status().message()).find("50000"), std::string::npos);
  EXPECT_FALSE(LoadTokens(path, "tokens", "u32", 50304).ok());  // 6 bytes is not a multiple of 4
  EXPECT_EQ(LoadTokens("/nonexistent", "text", "u16", 256).status().code(), absl::StatusCode::kNotFound);
}

TEST(Data, DefaultCorpusIsReadable) {
  auto t = LoadTokens(kDefaultCorpus, "text", "u16", 256);
  ASSERT_TRUE(t.ok()) << t.status() << " (scripts/setup.sh installs fortunes)";
  EXPECT_GT(t->size(), 100000u);
}

TEST(Data, SplitIsDeterministicAndDisjoint) {
  auto tokens = Ramp(100 * kSplitBlock + 17);
  Split a = SplitTokens(tokens, 0.1, 7), b = SplitTokens(tokens, 0.1, 7), c = SplitTokens(tokens, 0.1, 8);
  EXPECT_EQ(a.train, b.train);
  EXPECT_EQ(a.val, b.val);
  EXPECT_NE(a.val, c.val);
  EXPECT_EQ(a.train.size() + a.val.size(), tokens.size());
  EXPECT_GT(a.val.size(), 2u * kSplitBlock);
  EXPECT_LT(a.val.size(), 25u * kSplitBlock);
}

TEST(Data, SamplerVisitsEveryWindowOncePerEpochAndResumesExactly) {
  auto tokens = Ramp(10 * 16 + 1);  // 10 windows of seq_len 16
  auto s = Sampler::Create(&tokens, 16, 3);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->num_windows(), 10);
  std::set<int64_t> seen;
  Tensor x = Tensor::MustEmpty({1, 16}, DType::kI32), y = Tensor::MustEmpty({1, 16}, DType::kI32);
  for (int i = 0; i < 10; ++i) {
    seen.insert(s->PeekWindow());
    s->Next(1, &x, &y);
    EXPECT_EQ(y.data<int32_t>()[0], (x.data<int32_t>()[0] + 1) % 251);  // targets are the next token
  }
  EXPECT_EQ(seen.size(), 10u);
  // Take 3 more (into epoch 1), save, take 5, then restore a fresh sampler and compare.
  Tensor xb = Tensor::MustEmpty({3, 16}, DType::kI32), yb = Tensor::MustEmpty({3, 16}, DType::kI32);
  s->Next(3, &xb, &yb);
  SamplerState saved = s->state();
  EXPECT_EQ(saved.epoch, 1);
  EXPECT_EQ(saved.position, 3);
  Tensor x5 = Tensor::MustEmpty({5, 16}, DType::kI32), y5 = Tensor::MustEmpty({5, 16}, DType::kI32);
  s->Next(5, &x5, &y5);
  auto r = Sampler::Create(&tokens, 16, 999);
  ASSERT_TRUE(r->Restore(saved).ok());
  Tensor x5b = Tensor::MustEmpty({5, 16}, DType::kI32), y5b = Tensor::MustEmpty({5, 16}, DType::kI32);
  r->Next(5, &x5b, &y5b);
  EXPECT_EQ(x5.ToVector(), x5b.ToVector());
  EXPECT_EQ(y5.ToVector(), y5b.ToVector());
  EXPECT_FALSE(r->Restore({3, 0, 11}).ok());
  EXPECT_FALSE(Sampler::Create(&tokens, 200, 1).ok());
}

TEST(Data, ValidationBatchesAreFixed) {
  auto tokens = Ramp(1000);
  Tensor x = Tensor::MustEmpty({2, 8}, DType::kI32), y = Tensor::MustEmpty({2, 8}, DType::kI32);
  ASSERT_TRUE(ValidationBatch(tokens, 8, 2, 0, &x, &y).ok());
  EXPECT_EQ(x.data<int32_t>()[8], 8);
  EXPECT_EQ(y.data<int32_t>()[0], 1);
  std::vector<int32_t> tiny = {1, 2, 3};
  EXPECT_FALSE(ValidationBatch(tiny, 8, 2, 0, &x, &y).ok());
}

}  // namespace
}  // namespace loom::data
