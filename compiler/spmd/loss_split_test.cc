// Mean cross-entropy with ignored targets, rows split across ranks: the
// propagated program, run on N ranks (threads, TCP over loopback), must give
// the loss and logits gradient of the one-process program within 1e-6, for
// ranks holding different numbers of counted targets, a rank whose targets
// are all ignored (no NaN), and every target ignored (loss and gradient 0,
// which is what the one-rank kernel returns; PyTorch gives NaN there).
// Layouts: rows over dp = 2 and 4; vocabulary over tp = 2 (rows whole); and
// dp = 2 x tp = 2 (rows and vocabulary split, the masked-LM layout).
#include <cmath>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status.h"
#include "collectives/process_group.h"
#include "collectives/store/store_server.h"
#include "collectives/store/tcp_store.h"
#include "compiler/comm/communicator.h"
#include "compiler/executor.h"
#include "compiler/ir/text.h"
#include "compiler/spmd/spmd.h"
#include "gtest/gtest.h"

namespace loom::compiler::spmd {
namespace {

constexpr int64_t kRows = 8, kVocab = 6;
constexpr double kIgnore = -100;

std::string GraphText() {
  return absl::StrCat(R"(graph @ce(%x: f32[)", kRows, ", ", kVocab, R"(], %y: i64[)", kRows, R"(]) {
  %0, %1 = cross_entropy(%x, %y) : f32[], f32[)", kRows, R"(]
  %2 = fill() {dtype="f32", shape=[], value=1.0} : f32[]
  %3 = cross_entropy_backward(%2, %x, %y, %1) : f32[)", kRows, ", ", kVocab, R"(]
  return %0, %3
}
)");
}

std::vector<double> Logits() {
  std::vector<double> x(kRows * kVocab);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.7 * static_cast<double>(i) + 0.3) * 2.0;
  return x;
}

struct Layout {
  int dp = 1, tp = 1;  // rank = d * tp + t
};

// Rows [d * kRows / dp, ...) and columns [t * kVocab / tp, ...) of rank r.
Tensor LocalLogits(const Layout& l, int r) {
  const int d = r / l.tp, t = r % l.tp;
  const int64_t nr = kRows / l.dp, nc = kVocab / l.tp;
  const std::vector<double> x = Logits();
  std::vector<double> v;
  for (int64_t i = 0; i < nr; ++i)
    for (int64_t j = 0; j < nc; ++j) v.push_back(x[(d * nr + i) * kVocab + t * nc + j]);
  return Tensor::FromVector({nr, nc}, v);
}

Tensor LocalTargets(const Layout& l, int r, const std::vector<double>& y) {
  const int64_t nr = kRows / l.dp, d = r / l.tp;
  return Tensor::FromVector({nr}, std::vector<double>(y.begin() + d * nr, y.begin() + (d + 1) * nr), DType::kI64);
}

struct Outcome {
  double loss = 0;
  std::vector<double> grad;
};

absl::StatusOr<Outcome> RunOneProcess(const std::vector<double>& y) {
  LOOM_ASSIGN_OR_RETURN(ir::Graph g, ir::ParseGraph(GraphText()));
  LOOM_ASSIGN_OR_RETURN(compiler::Executor ex, compiler::Executor::Create(g));
  LOOM_ASSIGN_OR_RETURN(std::vector<Tensor> out,
                        ex.Run({Tensor::FromVector({kRows, kVocab}, Logits()), Tensor::FromVector({kRows}, y, DType::kI64)}));
  return Outcome{out[0].GetDouble(0), out[1].ToVector()};
}

absl::StatusOr<Outcome> RunRank(const Layout& l, int r, const std::string& address, const std::vector<double>& y) {
  LOOM_ASSIGN_OR_RETURN(auto store, collectives::store::TcpStore::Connect(address, "s"));
  collectives::ProcessGroupOptions po;
  po.backend = "tcp";
  LOOM_ASSIGN_OR_RETURN(auto world, collectives::ProcessGroup::Create(store, r, l.dp * l.tp, po));
  // Every rank creates every group in the same order; it keeps its own two.
  std::unique_ptr<collectives::ProcessGroup> dp, tp;
  for (int t = 0; t < l.tp; ++t) {
    std::vector<int> ranks;
    for (int d = 0; d < l.dp; ++d) ranks.push_back(d * l.tp + t);
    LOOM_ASSIGN_OR_RETURN(auto g, world->NewGroup(ranks));
    if (g) dp = std::move(g);
  }
  for (int d = 0; d < l.dp; ++d) {
    std::vector<int> ranks;
    for (int t = 0; t < l.tp; ++t) ranks.push_back(d * l.tp + t);
    LOOM_ASSIGN_OR_RETURN(auto g, world->NewGroup(ranks));
    if (g) tp = std::move(g);
  }
  auto dp_comm = comm::MakeProcessGroupCommunicator(dp.get(), 20000);
  auto tp_comm = comm::MakeProcessGroupCommunicator(tp.get(), 20000);
  LOOM_ASSIGN_OR_RETURN(ir::Graph g, ir::ParseGraph(GraphText()));
  SpmdOptions o;
  o.mesh = {{"dp", "tp"}, {l.dp, l.tp}};
  LOOM_ASSIGN_OR_RETURN(o.inputs["x"], dtensor::ParseSpec(absl::StrCat(l.dp > 1 ? "S(0)" : "R", ",", l.tp > 1 ? "S(1)" : "R"), o.mesh));
  LOOM_ASSIGN_OR_RETURN(o.inputs["y"], dtensor::ParseSpec(absl::StrCat(l.dp > 1 ? "S(0)" : "R", ",R"), o.mesh));
  LOOM_ASSIGN_OR_RETURN(ir::Graph local, Parallelize(g, o));
  compiler::LoweringOptions lo;
  lo.communicators["dp"] = dp_comm.get();
  lo.communicators["tp"] = tp_comm.get();
  LOOM_ASSIGN_OR_RETURN(compiler::Executor ex, compiler::Executor::Create(local, lo));
  LOOM_ASSIGN_OR_RETURN(std::vector<Tensor> out, ex.Run({LocalLogits(l, r), LocalTargets(l, r, y)}));
  if (out[1].numel() != kRows * kVocab)
    return absl::InternalError(absl::StrCat("rank ", r, ": gradient has ", out[1].numel(), " elements, not the whole"));
  return Outcome{out[0].GetDouble(0), out[1].ToVector()};
}

// Runs the layout's ranks as threads; checks every rank against one process.
void ExpectMatchesOneProcess(const Layout& l, const std::vector<double>& y) {
  auto ref = RunOneProcess(y);
  ASSERT_TRUE(ref.ok()) << ref.status();
  collectives::store::StoreServer::Options so;
  so.secret = "s";
  auto server = collectives::store::StoreServer::Start(so);
  ASSERT_TRUE(server.ok()) << server.status();
  const int world = l.dp * l.tp;
  std::vector<absl::StatusOr<Outcome>> got(world, absl::UnknownError("not run"));
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] { got[r] = RunRank(l, r, (*server)->address(), y); });
  for (auto& t : threads) t.join();
  for (int r = 0; r < world; ++r) {
    ASSERT_TRUE(got[r].ok()) << "rank " << r << ": " << got[r].status();
    EXPECT_FALSE(std::isnan(got[r]->loss)) << "rank " << r;
    EXPECT_NEAR(got[r]->loss, ref->loss, 1e-6) << "rank " << r << " dp=" << l.dp << " tp=" << l.tp;
    ASSERT_EQ(got[r]->grad.size(), ref->grad.size());
    for (size_t i = 0; i < ref->grad.size(); ++i)
      ASSERT_NEAR(got[r]->grad[i], ref->grad[i], 1e-6) << "rank " << r << " element " << i;
  }
}

const std::vector<double> kUneven = {1, kIgnore, kIgnore, kIgnore, 2, 3, 0, 5};   // dp=4: counts 1, 0, 2, 2
const std::vector<double> kOneRankIgnored = {kIgnore, kIgnore, kIgnore, kIgnore, 1, 2, 3, 4};
const std::vector<double> kAllIgnored(kRows, kIgnore);
const std::vector<double> kNoneIgnored = {0, 1, 2, 3, 4, 5, 0, 1};

TEST(LossSplit, OneProcessReferenceIsTheMeanOverCountedTargets) {
  // The reference itself: uneven counts change the mean; all ignored gives 0.
  auto a = RunOneProcess(kUneven);
  ASSERT_TRUE(a.ok()) << a.status();
  const std::vector<double> x = Logits();
  double total = 0;
  int counted = 0;
  for (int64_t i = 0; i < kRows; ++i) {
    if (kUneven[i] == kIgnore) continue;
    double s = 0;
    for (int64_t j = 0; j < kVocab; ++j) s += std::exp(x[i * kVocab + j]);
    total += std::log(s) - x[i * kVocab + static_cast<int64_t>(kUneven[i])];
    ++counted;
  }
  EXPECT_NEAR(a->loss, total / counted, 1e-5);
  auto z = RunOneProcess(kAllIgnored);
  ASSERT_TRUE(z.ok()) << z.status();
  EXPECT_EQ(z->loss, 0.0);
  for (double v : z->grad) ASSERT_EQ(v, 0.0);
}

TEST(LossSplit, RowsOverTwoRanksWithUnevenCounts) { ExpectMatchesOneProcess({2, 1}, kUneven); }
TEST(LossSplit, RowsOverFourRanksOneWithNothingCounted) { ExpectMatchesOneProcess({4, 1}, kUneven); }
TEST(LossSplit, RowsOverTwoRanksOneAllIgnored) { ExpectMatchesOneProcess({2, 1}, kOneRankIgnored); }
TEST(LossSplit, RowsOverFourRanksAllIgnored) { ExpectMatchesOneProcess({4, 1}, kAllIgnored); }
TEST(LossSplit, RowsOverTwoRanksNoneIgnored) { ExpectMatchesOneProcess({2, 1}, kNoneIgnored); }
TEST(LossSplit, VocabOverTwoRanksAllIgnored) { ExpectMatchesOneProcess({1, 2}, kAllIgnored); }
TEST(LossSplit, VocabOverTwoRanksUneven) { ExpectMatchesOneProcess({1, 2}, kUneven); }
TEST(LossSplit, RowsAndVocabTwoByTwoUneven) { ExpectMatchesOneProcess({2, 2}, kUneven); }
TEST(LossSplit, RowsAndVocabTwoByTwoOneAllIgnored) { ExpectMatchesOneProcess({2, 2}, kOneRankIgnored); }

}  // namespace
}  // namespace loom::compiler::spmd
