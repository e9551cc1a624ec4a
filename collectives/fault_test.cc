// Failure behaviour, ranks as processes, for every CPU backend:
//  - kill -9 of one rank while the others are in an all_reduce: every survivor
//    fails within 2 x the op timeout (tcp errors name the dead rank; Gloo's
//    carry only addresses; UCX finds it by the deadline);
//  - SIGSTOP of one rank: survivors fail no earlier than timeout/2 and no later
//    than 2 x timeout;
//  - one rank issuing an extra collective: the flight-recorder diff names it.
#include <signal.h>
#include <sys/stat.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "collectives/process_group.h"
#include "collectives/testing/multiprocess.h"
#include "collectives/tools/flight_recorder_diff.h"
#include "gtest/gtest.h"

namespace loom::collectives::testing {
namespace {

constexpr absl::Duration kOpTimeout = absl::Seconds(3);
constexpr int kVictim = 1;

// arg = "<spec>|<mode>[|<dir>]"
std::vector<std::string> Args(const std::string& arg) { return absl::StrSplit(arg, '|'); }

int FaultWorker(WorkerContext& ctx) {
  auto args = Args(ctx.arg);
  ProcessGroupOptions po;
  po.backend = args[0];
  po.timeout = absl::Seconds(20);
  auto pg = ProcessGroup::Create(ctx.store, ctx.rank, ctx.world, po);
  if (!pg.ok()) {
    fprintf(stderr, "[rank %d] %s\n", ctx.rank, pg.status().ToString().c_str());
    return 1;
  }
  auto b = (*pg)->Barrier({});
  WORKER_EXPECT(ctx, b.ok() && (*b)->Wait().ok(), "setup barrier");
  (void)ctx.store->Set(absl::StrCat("ready/", ctx.rank), "1");
  if (ctx.rank == kVictim) {
    absl::SleepFor(absl::Seconds(60));  // killed or stopped by the controller
    return 0;
  }
  Tensor t = Tensor::MustEmpty({100000}, DType::kF32);
  t.Fill(1);
  AllReduceOptions o;
  o.timeout = kOpTimeout;
  absl::Time t0 = absl::Now();
  auto w = (*pg)->AllReduce(t, o);
  WORKER_EXPECT(ctx, w.ok(), "issue");
  absl::Status s = (*w)->Wait(absl::Now() + 3 * kOpTimeout);
  absl::Duration took = absl::Now() - t0;
  fprintf(stderr, "[rank %d] %s after %s: %s\n", ctx.rank, args[1].c_str(),
          absl::FormatDuration(took).c_str(), s.ToString().c_str());
  WORKER_EXPECT(ctx, !s.ok() && !absl::StrContains(s.message(), "Work::Wait"),
                "op must fail by itself, not by Work::Wait");
  WORKER_EXPECT(ctx, took <= 2 * kOpTimeout, "failed after ", absl::FormatDuration(took));
  if (args[1] == "stop") WORKER_EXPECT(ctx, took >= kOpTimeout / 2, "failed too early: ", absl::FormatDuration(took));
  if (args[1] == "kill" && args[0] == "cpu:tcp") {
    WORKER_EXPECT(ctx, absl::StrContains(s.message(), "rank 1"), "error should name rank 1: ", s.message());
  }
  (void)ctx.store->Set(absl::StrCat("done/", ctx.rank), "1");
  return 0;
}
LOOM_COLLECTIVES_WORKER(fault, FaultWorker);

int ExtraOpWorker(WorkerContext& ctx) {
  auto args = Args(ctx.arg);
  ProcessGroupOptions po;
  po.backend = args[0];
  po.timeout = absl::Seconds(20);
  po.flight_recorder_dir = args[2];
  auto pg = ProcessGroup::Create(ctx.store, ctx.rank, ctx.world, po);
  if (!pg.ok()) return 1;
  Tensor t = Tensor::MustEmpty({64}, DType::kF32);
  for (int i = 0; i < 3; ++i) {
    auto w = (*pg)->AllReduce(t, {});
    WORKER_EXPECT(ctx, w.ok() && (*w)->Wait().ok(), "all_reduce ", i);
  }
  if (ctx.rank == kVictim) {
    AllGatherOptions o;
    o.timeout = absl::Seconds(2);
    Tensor out = Tensor::MustEmpty({64 * ctx.world}, DType::kF32);
    auto w = (*pg)->AllGatherInto(out, t, o);  // the extra collective
    WORKER_EXPECT(ctx, w.ok() && !(*w)->Wait().ok(), "extra op must fail");
    (void)ctx.store->Set("victim_done", "1");
  } else {
    WORKER_EXPECT(ctx, ctx.store->Wait({"victim_done"}, absl::Seconds(20)).ok(), "victim_done");
  }
  WORKER_EXPECT(ctx, (*pg)->DumpFlightRecorders(args[2]).ok(), "dump");
  return 0;
}
LOOM_COLLECTIVES_WORKER(extra_op, ExtraOpWorker);

class FaultTest : public ::testing::TestWithParam<std::string> {};

void Inject(int sig, store::Store& store, const std::vector<pid_t>& pids) {
  std::vector<std::string> ready;
  for (size_t r = 0; r < pids.size(); ++r) ready.push_back(absl::StrCat("ready/", r));
  if (!store.Wait(ready, absl::Seconds(30)).ok()) return;
  absl::SleepFor(absl::Milliseconds(200));  // survivors are inside their all_reduce
  kill(pids[kVictim], sig);
  if (sig == SIGSTOP) {
    std::vector<std::string> done;
    for (size_t r = 0; r < pids.size(); ++r) if (r != kVictim) done.push_back(absl::StrCat("done/", r));
    (void)store.Wait(done, absl::Seconds(30));
    kill(pids[kVictim], SIGKILL);
  }
}

TEST_P(FaultTest, KilledPeer) {
  RunResult r = RunRanks({.worker = "fault", .world = 3, .arg = GetParam() + "|kill",
                          .deadline = absl::Seconds(45),
                          .controller = [](store::Store& s, const std::vector<pid_t>& p) { Inject(SIGKILL, s, p); }});
  EXPECT_FALSE(r.timed_out);
  EXPECT_EQ(r.exit_codes[0], 0) << r.Summary();
  EXPECT_EQ(r.exit_codes[1], 128 + SIGKILL) << r.Summary();
  EXPECT_EQ(r.exit_codes[2], 0) << r.Summary();
}

TEST_P(FaultTest, StoppedPeer) {
  RunResult r = RunRanks({.worker = "fault", .world = 3, .arg = GetParam() + "|stop",
                          .deadline = absl::Seconds(45),
                          .controller = [](store::Store& s, const std::vector<pid_t>& p) { Inject(SIGSTOP, s, p); }});
  EXPECT_FALSE(r.timed_out);
  EXPECT_EQ(r.exit_codes[0], 0) << r.Summary();
  EXPECT_EQ(r.exit_codes[2], 0) << r.Summary();
}

TEST_P(FaultTest, ExtraCollectiveNamedByFlightRecorder) {
  std::string spec = GetParam();
  const char* tmp = std::getenv("TEST_TMPDIR");
  std::string dir = absl::StrCat(tmp ? tmp : "/tmp", "/fr_", spec.substr(4), "_", getpid());
  mkdir(dir.c_str(), 0755);
  RunResult r = RunRanks({.worker = "extra_op", .world = 3, .arg = absl::StrCat(spec, "|extra|", dir),
                          .deadline = absl::Seconds(45)});
  EXPECT_TRUE(r.ok()) << r.Summary();
  std::vector<tools::RankDump> dumps;
  for (int rank = 0; rank < 3; ++rank) {
    std::ifstream f(absl::StrCat(dir, "/", spec.substr(4), ".rank", rank, ".txt"));
    std::stringstream ss;
    ss << f.rdbuf();
    dumps.push_back({rank, ss.str()});
  }
  auto d = tools::FindDivergence(dumps);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_TRUE(d->found);
  EXPECT_EQ(d->kind, "extra");
  EXPECT_EQ(d->rank, kVictim);
  EXPECT_EQ(d->seq, 3u);
  EXPECT_NE(d->description.find("all_gather_into"), std::string::npos) << d->description;
}

INSTANTIATE_TEST_SUITE_P(Backends, FaultTest, ::testing::Values("cpu:tcp", "cpu:gloo", "cpu:ucx"),
                         [](const auto& info) { return info.param.substr(4); });

}  // namespace
}  // namespace loom::collectives::testing

int main(int argc, char** argv) {
  int rc;
  if (loom::collectives::testing::MaybeRunWorker(&rc)) return rc;
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
