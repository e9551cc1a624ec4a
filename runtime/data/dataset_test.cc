#include "runtime/data/dataset.h"

#include <cmath>
#include <filesystem>
#include <map>
#include <set>

#include "gtest/gtest.h"
#include "runtime/data/testing/files.h"

namespace loom::runtime::data {
namespace {

namespace fs = std::filesystem;
using testing::Llmc;
using testing::Npy;
using testing::Raw;
using testing::Write;

std::string Dir(const std::string& name) {
  std::string d = ::testing::TempDir() + "/dataset_" + name;
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

v1::JobSpec Spec(const std::string& path, int T, int vocab) {
  v1::JobSpec s;
  s.mutable_model()->set_family("gpt");
  s.mutable_model()->set_seq_len(T);
  s.mutable_model()->set_vocab(vocab);
  s.mutable_data()->set_path(path);
  s.mutable_data()->set_format("auto");
  s.mutable_data()->set_val_fraction(0.1f);
  s.mutable_train()->set_seed(1);
  return s;
}

// Shard k holds ids base_k, base_k + 1, ... (mod 60000), so a window's ids
// tell where it came from.
std::vector<uint32_t> Ramp(int64_t n, uint32_t base) {
  std::vector<uint32_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = (base + static_cast<uint32_t>(i)) % 60000;
  return v;
}

std::vector<int64_t> Dims(const Tensor& t) { return {t.shape().begin(), t.shape().end()}; }

std::vector<int32_t> Row(const Tensor& t, int64_t r) {
  const int64_t n = t.numel() / t.shape()[0];
  const int32_t* p = t.data<int32_t>() + r * n;
  return std::vector<int32_t>(p, p + n);
}

TEST(Dataset, CausalWindowsAreNextTokenPairsInsideOneShard) {
  const std::string d = Dir("causal");
  for (int k = 0; k < 3; ++k) Write(absl::StrCat(d, "/s_", k, ".bin"), Llmc(Ramp(1000, 10000 * k)));
  auto ds = Dataset::Open(Spec(d + "/s_*.bin", 16, 60000));
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_EQ((*ds)->train_samples() + (*ds)->val_samples(), 3 * ((1000 - 1) / 16));
  Batch b = (*ds)->NewBatch(4);
  EXPECT_EQ(b.inputs[0].first, "x");
  EXPECT_EQ(Dims(b.x()), (std::vector<int64_t>{4, 16}));
  for (int step = 0; step < 20; ++step) {
    ASSERT_TRUE((*ds)->Next(4, 0, &b).ok());
    for (int r = 0; r < 4; ++r) {
      auto x = Row(b.x(), r), y = Row(b.y(), r);
      for (int t = 0; t < 16; ++t) EXPECT_EQ(y[t], x[t] + 1);
      EXPECT_EQ((x[0] % 10000) % 16, 0) << "windows start at multiples of seq_len in their shard";
      EXPECT_EQ(x[0] / 10000, (x[15] + 1) / 10000) << "a window stays in one shard";
    }
  }
  EXPECT_NE((*ds)->Summary().find("3 llmc shards"), std::string::npos) << (*ds)->Summary();
}

TEST(Dataset, ValidationShardsReplaceTheFractionSplit) {
  const std::string d = Dir("valglob");
  Write(d + "/train_0.bin", Llmc(Ramp(500, 0)));
  Write(d + "/train_1.bin", Llmc(Ramp(500, 1000)));
  Write(d + "/val_0.bin", Llmc(Ramp(200, 50000)));
  v1::JobSpec spec = Spec(d + "/train_*.bin", 8, 60000);
  spec.mutable_data()->set_val(d + "/val_*.bin");
  spec.mutable_data()->set_val_fraction(0);
  auto ds = Dataset::Open(spec);
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_EQ((*ds)->train_samples(), 2 * ((500 - 1) / 8));
  EXPECT_EQ((*ds)->val_samples(), (200 - 1) / 8);
  Batch b = (*ds)->NewBatch(3);
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE((*ds)->Validation(i, 3, 0, &b).ok());
    for (int r = 0; r < 3; ++r) EXPECT_GE(Row(b.x(), r)[0], 50000);
    ASSERT_TRUE((*ds)->Next(3, 0, &b).ok());
    for (int r = 0; r < 3; ++r) EXPECT_LT(Row(b.x(), r)[0], 2000);
  }
}

TEST(Dataset, RanksReadOnlyTheirRowsOfTheGlobalBatch) {
  const std::string d = Dir("ranks");
  Write(d + "/a.bin", Llmc(Ramp(5000, 0)));
  v1::JobSpec spec = Spec(d + "/a.bin", 8, 60000);
  auto one = Dataset::Open(spec);
  ASSERT_TRUE(one.ok()) << one.status();
  std::vector<std::unique_ptr<Dataset>> ranks;
  for (int r = 0; r < 2; ++r) ranks.push_back(std::move(*Dataset::Open(spec)));
  Batch full = (*one)->NewBatch(6), half = ranks[0]->NewBatch(3);
  for (int step = 0; step < 100; ++step) {  // several epochs of 49 training windows
    ASSERT_TRUE((*one)->Next(6, 0, &full).ok());
    for (int r = 0; r < 2; ++r) {
      ASSERT_TRUE(ranks[r]->Next(6, 3 * r, &half).ok());
      for (int k = 0; k < 3; ++k) ASSERT_EQ(Row(half.x(), k), Row(full.x(), 3 * r + k)) << step;
    }
  }
  EXPECT_FALSE((*one)->Next(6, 4, &half).ok());  // rows 4..6 do not fit a batch of 6
}

TEST(Dataset, IdsAboveVocabFailAtScanOrWhenRead) {
  const std::string d = Dir("vocab");
  std::vector<uint32_t> ids = Ramp(400, 0);
  ids[100] = 5000;  // inside window 12 (tokens 96..104), training or validation
  Write(d + "/a.bin", Llmc(ids));
  auto ds = Dataset::Open(Spec(d + "/a.bin", 8, 1000));
  ASSERT_TRUE(ds.ok()) << ds.status();
  bool scanned = false;
  absl::Status s = (*ds)->ScanIds(kScanLimitBytes, &scanned);
  EXPECT_TRUE(scanned);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(std::string(s.message()).find("a.bin: token id 5000 at byte offset 1224"), std::string::npos) << s;
  Batch b = (*ds)->NewBatch(8);
  absl::Status read = absl::OkStatus();
  for (int i = 0; i < 20 && read.ok(); ++i) {
    read = (*ds)->Next(8, 0, &b);
    if (read.ok()) read = (*ds)->Validation(i, 8, 0, &b);
  }
  EXPECT_NE(std::string(read.message()).find("token id 5000"), std::string::npos) << read;
}

TEST(Dataset, DefaultCorpusIsReadable) {
  v1::JobSpec spec = Spec("", 64, 256);
  auto ds = Dataset::Open(spec);
  ASSERT_TRUE(ds.ok()) << ds.status() << " (scripts/setup.sh installs fortunes)";
  EXPECT_GT((*ds)->train_samples() * 64, 100000);
  EXPECT_GT((*ds)->val_samples(), 10);
}

TEST(Mlm, MasksAtTheRateWithBertReplacementAndIsDeterministic) {
  MlmOptions o;
  o.rate = 0.15;
  o.mask_token = 999;
  o.ignore_index = -100;
  o.random_fraction = 0.1;
  o.keep_fraction = 0.1;
  const int64_t T = 128, V = 1000, windows = 400;
  std::vector<int32_t> tok(T);
  for (int t = 0; t < T; ++t) tok[t] = (t * 7) % 900;
  std::vector<int32_t> x(T), y(T), x2(T), y2(T);
  int64_t selected = 0, masked = 0, kept = 0, random = 0;
  for (int64_t w = 0; w < windows; ++w) {
    MaskWindow(o, 42, w, V, tok.data(), T, x.data(), y.data());
    MaskWindow(o, 42, w, V, tok.data(), T, x2.data(), y2.data());
    ASSERT_EQ(x, x2);
    ASSERT_EQ(y, y2);
    int64_t here = 0;
    for (int t = 0; t < T; ++t) {
      if (y[t] == -100) {
        EXPECT_EQ(x[t], tok[t]);
        continue;
      }
      EXPECT_EQ(y[t], tok[t]);
      ++here;
      masked += x[t] == 999;
      kept += x[t] == tok[t];
      random += x[t] != 999 && x[t] != tok[t];
    }
    EXPECT_GE(here, 1);
    selected += here;
  }
  // 51200 positions: the selected share is 0.15 within 4 standard deviations
  // (sd = sqrt(0.15 * 0.85 / 51200) = 0.0016); of those, 80/10/10 within 0.02.
  const double share = static_cast<double>(selected) / (T * windows);
  EXPECT_NEAR(share, 0.15, 0.0064);
  EXPECT_NEAR(static_cast<double>(masked) / selected, 0.8, 0.02);
  EXPECT_NEAR(static_cast<double>(kept) / selected, 0.1 + 0.1 / V, 0.02);
  EXPECT_NEAR(static_cast<double>(random) / selected, 0.1, 0.02);
  MaskWindow(o, 43, 0, V, tok.data(), T, x2.data(), y2.data());
  MaskWindow(o, 42, 0, V, tok.data(), T, x.data(), y.data());
  EXPECT_NE(y, y2) << "another seed masks other positions";
  // A rate so low that nothing is drawn still masks one position.
  o.rate = 1e-9;
  MaskWindow(o, 42, 0, V, tok.data(), T, x.data(), y.data());
  int64_t n = 0;
  for (int t = 0; t < T; ++t) n += y[t] != -100;
  EXPECT_EQ(n, 1);
}

TEST(Mlm, DatasetBatchesMaskWindowsOfSeqLen) {
  const std::string d = Dir("mlm");
  Write(d + "/a.bin", Llmc(Ramp(3000, 0)));
  v1::JobSpec spec = Spec(d + "/a.bin", 32, 60000);
  spec.mutable_data()->set_kind("mlm");
  spec.mutable_data()->mutable_mlm()->set_mask_token(59999);
  auto ds = Dataset::Open(spec);
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_EQ((*ds)->train_samples() + (*ds)->val_samples(), 3000 / 32);
  Batch b = (*ds)->NewBatch(4);
  ASSERT_TRUE((*ds)->Next(4, 0, &b).ok());
  for (int r = 0; r < 4; ++r) {
    auto x = Row(b.x(), r), y = Row(b.y(), r);
    int64_t n = 0;
    for (int t = 0; t < 32; ++t) {
      if (y[t] == -100) continue;
      ++n;
      EXPECT_EQ(x[t], 59999);
    }
    EXPECT_GE(n, 1);
  }
  spec.mutable_data()->mutable_mlm()->set_mask_token(60000);
  auto bad = Dataset::Open(spec);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(std::string(bad.status().message()).find("data.mlm.mask_token"), std::string::npos);
}

TEST(Pairs, RecordsComeFromBothFilesInADeterministicOrder) {
  const std::string d = Dir("pairs");
  const int64_t N = 300;
  std::vector<float> in(N * 3);
  std::vector<int64_t> lab(N);
  for (int64_t i = 0; i < N; ++i) {
    for (int k = 0; k < 3; ++k) in[i * 3 + k] = static_cast<float>(i) + 0.25f * k;
    lab[i] = i % 7;
  }
  Write(d + "/x.npy", Npy("<f4", {N, 3}, Raw(in)));
  Write(d + "/y.npy", Npy("<i8", {N}, Raw(lab)));
  v1::JobSpec spec = Spec(d + "/x.npy", 8, 100);
  spec.mutable_model()->set_family("");  // a model that takes f32 [B, 3] and i32 [B]
  spec.mutable_data()->set_kind("pairs");
  spec.mutable_data()->set_labels(d + "/y.npy");
  spec.mutable_data()->mutable_inputs()->set_x("features");
  spec.mutable_data()->mutable_inputs()->set_y("label");
  auto ds = Dataset::Open(spec);
  auto again = Dataset::Open(spec);
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_EQ((*ds)->train_samples() + (*ds)->val_samples(), N);
  Batch a = (*ds)->NewBatch(5), b = (*again)->NewBatch(5);
  EXPECT_EQ(a.x().dtype(), DType::kF32);
  EXPECT_EQ(Dims(a.x()), (std::vector<int64_t>{5, 3}));
  EXPECT_EQ(Dims(a.y()), (std::vector<int64_t>{5}));
  ASSERT_NE(a.Find("features"), nullptr);
  ASSERT_NE(a.Find("label"), nullptr);
  std::set<int> records;
  for (int step = 0; step < 10; ++step) {
    ASSERT_TRUE((*ds)->Next(5, 0, &a).ok());
    ASSERT_TRUE((*again)->Next(5, 0, &b).ok());
    EXPECT_EQ(a.x().ToVector(), b.x().ToVector());
    for (int r = 0; r < 5; ++r) {
      const float* x = a.x().data<float>() + 3 * r;
      const int i = static_cast<int>(x[0]);
      EXPECT_EQ(x[2], i + 0.5f);
      EXPECT_EQ(a.y().data<int32_t>()[r], i % 7);
      records.insert(i);
    }
  }
  EXPECT_GT(records.size(), 40u);
  // Mismatched counts, float labels and records a built-in model cannot take.
  Write(d + "/y_short.npy", Npy("<i8", {N - 1}, Raw(std::vector<int64_t>(N - 1))));
  spec.mutable_data()->set_labels(d + "/y_short.npy");
  auto s1 = Dataset::Open(spec);
  EXPECT_NE(std::string(s1.status().message()).find("data.labels"), std::string::npos) << s1.status();
  Write(d + "/y_float.npy", Npy("<f4", {N}, Raw(std::vector<float>(N))));
  spec.mutable_data()->set_labels(d + "/y_float.npy");
  auto s2 = Dataset::Open(spec);
  EXPECT_NE(std::string(s2.status().message()).find("labels are integers"), std::string::npos) << s2.status();
  spec.mutable_data()->set_labels(d + "/y.npy");
  spec.mutable_model()->set_family("gpt");
  auto s3 = Dataset::Open(spec);
  EXPECT_NE(std::string(s3.status().message()).find("model family gpt takes integer inputs"), std::string::npos)
      << s3.status();
}

TEST(Pairs, TokenRecordsTrainBuiltInModelsAndCheckIds) {
  const std::string d = Dir("pairs_tokens");
  const int64_t N = 50, T = 4;
  std::vector<int32_t> x(N * T), y(N * T);
  for (int64_t i = 0; i < N * T; ++i) {
    x[i] = static_cast<int32_t>(i % 90);
    y[i] = i % 5 == 0 ? -100 : static_cast<int32_t>((i + 1) % 90);
  }
  Write(d + "/x.npy", Npy("<i4", {N, T}, Raw(x)));
  Write(d + "/y.npy", Npy("<i4", {N, T}, Raw(y)));
  v1::JobSpec spec = Spec(d + "/x.npy", T, 90);
  spec.mutable_data()->set_kind("pairs");
  spec.mutable_data()->set_labels(d + "/y.npy");
  auto ds = Dataset::Open(spec);
  ASSERT_TRUE(ds.ok()) << ds.status();
  bool scanned = false;
  EXPECT_TRUE((*ds)->ScanIds(kScanLimitBytes, &scanned).ok());
  EXPECT_TRUE(scanned);
  y[17] = 90;
  Write(d + "/y_bad.npy", Npy("<i4", {N, T}, Raw(y)));
  spec.mutable_data()->set_labels(d + "/y_bad.npy");
  auto bad = Dataset::Open(spec);
  ASSERT_TRUE(bad.ok()) << bad.status();
  absl::Status s = (*bad)->ScanIds(kScanLimitBytes, &scanned);
  EXPECT_NE(std::string(s.message()).find("y_bad.npy: label 90 at byte offset"), std::string::npos) << s;
}

}  // namespace
}  // namespace loom::runtime::data
