#include "runtime/data/bigram.h"

#include <cmath>
#include <filesystem>

#include "base/rng.h"
#include "gtest/gtest.h"
#include "runtime/data/testing/files.h"

namespace loom::runtime::data {
namespace {

// The plain reference: V * V dense counts over every pair of `train`, mean
// negative log-likelihood over the pairs of `val`.
double DenseBigramLoss(const std::vector<int32_t>& train, const std::vector<int32_t>& val, int64_t vocab,
                       double alpha) {
  std::vector<double> counts(static_cast<size_t>(vocab * vocab), 0.0), rows(static_cast<size_t>(vocab), 0.0);
  for (size_t i = 0; i + 1 < train.size(); ++i) {
    counts[static_cast<size_t>(train[i]) * vocab + train[i + 1]] += 1;
    rows[train[i]] += 1;
  }
  double nll = 0;
  int64_t n = 0;
  for (size_t i = 0; i + 1 < val.size(); ++i, ++n) {
    const double c = counts[static_cast<size_t>(val[i]) * vocab + val[i + 1]];
    nll -= std::log((c + alpha) / (rows[val[i]] + alpha * vocab));
  }
  return nll / n;
}

// Skewed ids: a Markov chain where each id prefers a few successors.
std::vector<int32_t> Chain(int64_t n, int64_t vocab, uint64_t seed) {
  Philox rng(seed, 0);
  std::vector<int32_t> t(static_cast<size_t>(n));
  t[0] = 0;
  for (int64_t i = 1; i < n; ++i) {
    const uint32_t r = rng.Bits(i);
    t[i] = static_cast<int32_t>(r % 4 == 0 ? r / 4 % vocab : (t[i - 1] * 31 + r % 3) % vocab);
  }
  return t;
}

TEST(SparseBigram, MatchesTheDenseReference) {
  const int64_t V = 300;
  auto train = Chain(20000, V, 1), val = Chain(3000, V, 2);
  SparseBigram m(V, 64 << 20);
  ASSERT_TRUE(m.Add(train.data(), static_cast<int64_t>(train.size())));
  const double sparse = m.NegLogLikelihood(val.data(), static_cast<int64_t>(val.size()), 0.1) / (val.size() - 1);
  const double dense = DenseBigramLoss(train, val, V, 0.1);
  EXPECT_NEAR(sparse, dense, 1e-12 * std::abs(dense));
  EXPECT_LT(dense, std::log(static_cast<double>(V)));  // the chain is predictable
}

TEST(SparseBigram, RefusesToGrowPastItsBudget) {
  const int64_t V = 1 << 20;  // a vocabulary whose dense table would take 8 TiB
  std::vector<int32_t> t(200000);
  Philox rng(3, 0);
  for (size_t i = 0; i < t.size(); ++i) t[i] = static_cast<int32_t>(rng.Bits(i) % V);
  SparseBigram small(V, 1 << 20);  // 65536 slots: at most 32768 entries
  EXPECT_FALSE(small.Add(t.data(), static_cast<int64_t>(t.size())));
  EXPECT_LE(small.table_bytes(), 1 << 20);
  SparseBigram big(V, 64 << 20);
  EXPECT_TRUE(big.Add(t.data(), static_cast<int64_t>(t.size())));
  EXPECT_LE(big.table_bytes(), 64 << 20);
}

TEST(BigramBaseline, FitsCausalWindowsOrSaysWhyItSkipped) {
  namespace fs = std::filesystem;
  const std::string d = ::testing::TempDir() + "/bigram";
  fs::remove_all(d);
  fs::create_directories(d);
  const int64_t V = 200, T = 16;
  auto ids = Chain(40 * 4096, V, 5);
  testing::Write(d + "/a.bin", testing::Llmc(std::vector<uint32_t>(ids.begin(), ids.end())));
  v1::JobSpec spec;
  spec.mutable_model()->set_family("gpt");
  spec.mutable_model()->set_seq_len(T);
  spec.mutable_model()->set_vocab(V);
  spec.mutable_data()->set_path(d + "/a.bin");
  spec.mutable_data()->set_val_fraction(0.1f);
  auto ds = Dataset::Open(spec);
  ASSERT_TRUE(ds.ok()) << ds.status();
  // The dense reference over the pairs inside each window.
  std::vector<double> counts(V * V, 0.0), rows(V, 0.0);
  std::vector<int32_t> w(T + 1);
  for (int64_t i = 0; i < (*ds)->train_samples(); ++i) {
    ASSERT_TRUE((*ds)->ReadWindow(false, i, w.data()).ok());
    for (int64_t t = 0; t < T; ++t) {
      counts[w[t] * V + w[t + 1]] += 1;
      rows[w[t]] += 1;
    }
  }
  double nll = 0;
  for (int64_t i = 0; i < (*ds)->val_samples(); ++i) {
    ASSERT_TRUE((*ds)->ReadWindow(true, i, w.data()).ok());
    for (int64_t t = 0; t < T; ++t) nll -= std::log((counts[w[t] * V + w[t + 1]] + 0.1) / (rows[w[t]] + 0.1 * V));
  }
  auto r = BigramBaseline(**ds, V);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(r->fitted) << r->note;
  EXPECT_NEAR(r->loss, nll / ((*ds)->val_samples() * T), 1e-12);
  EXPECT_LT(r->loss, std::log(static_cast<double>(V)));
  BigramOptions tiny;
  tiny.max_bytes = 4096;
  auto skipped = BigramBaseline(**ds, V, tiny);
  ASSERT_TRUE(skipped.ok());
  EXPECT_FALSE(skipped->fitted);
  EXPECT_NE(skipped->note.find("skipped"), std::string::npos) << skipped->note;
  EXPECT_NE(skipped->note.find("data.bigram.max_mib"), std::string::npos) << skipped->note;
}

}  // namespace
}  // namespace loom::runtime::data
