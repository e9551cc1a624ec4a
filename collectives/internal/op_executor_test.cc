// OpExecutor on its own: issue order and deadlines, the failure path (message,
// hooks, later ops refused, flight recorder, dump, metrics policies), aborts,
// shutdown, and posted ops completed on the waiter thread.
#include "collectives/internal/op_executor.h"

#include <unistd.h>

#include <fstream>
#include <sstream>
#include <vector>

#include "absl/synchronization/notification.h"
#include "collectives/metrics.h"
#include "gtest/gtest.h"

namespace loom::collectives::internal {
namespace {

constexpr absl::Duration kWait = absl::Seconds(20);  // bound on every wait here

OpInfo Info(OpType op, absl::Duration timeout = absl::Seconds(2)) {
  return OpInfo{op, DType::kF32, 16, 64, timeout};
}

OpExecutorOptions Named(const std::string& backend, int rank = 0) {
  OpExecutorOptions o;
  o.backend = backend;
  o.rank = rank;
  return o;
}

OpMetrics MetricsOf(const std::string& backend, const std::string& op) {
  auto snap = GlobalCollectiveMetrics().Snapshot();
  auto it = snap.find(MetricsKey{backend, op});
  return it == snap.end() ? OpMetrics{} : it->second;
}

TEST(OpExecutorTest, RunsOpsInIssueOrderWithDeadlineStartPlusTimeout) {
  OpExecutor ex(Named("exec_order"));
  absl::Mutex mu;
  std::vector<uint64_t> seqs;
  std::vector<absl::Duration> budgets;  // deadline - time the run began
  std::vector<std::shared_ptr<Work>> works;
  for (int i = 0; i < 5; ++i) {
    absl::Duration timeout = absl::Seconds(1 + i);
    auto w = ex.Submit(Info(OpType::kAllReduce, timeout), nullptr, [&](uint64_t seq, absl::Time deadline) {
      absl::MutexLock l(&mu);
      seqs.push_back(seq);
      budgets.push_back(deadline - absl::Now());
      return absl::OkStatus();
    });
    ASSERT_TRUE(w.ok()) << w.status();
    works.push_back(*w);
  }
  for (auto& w : works) ASSERT_TRUE(w->Wait(absl::Now() + kWait).ok());
  ASSERT_EQ(seqs, (std::vector<uint64_t>{0, 1, 2, 3, 4}));
  for (int i = 0; i < 5; ++i) {
    EXPECT_LE(budgets[i], absl::Seconds(1 + i)) << i;
    EXPECT_GT(budgets[i], absl::Seconds(1 + i) - absl::Milliseconds(500)) << i;
  }
  std::vector<OpRecord> recs = ex.recorder()->Snapshot();
  ASSERT_EQ(recs.size(), 5u);
  for (const OpRecord& r : recs) {
    EXPECT_EQ(r.state, OpRecord::State::kOk);
    EXPECT_EQ(r.op, "all_reduce");
    EXPECT_EQ(r.dtype, "f32");
    EXPECT_EQ(r.numel, 16);
  }
  OpMetrics m = MetricsOf("exec_order", "all_reduce");
  EXPECT_EQ(m.count, 5);
  EXPECT_EQ(m.failures, 0);
  EXPECT_EQ(m.bytes, 5 * 64);
}

TEST(OpExecutorTest, FailureRunsHooksThenFailsEveryLaterOp) {
  char dir_tmpl[] = "/tmp/op_executor_testXXXXXX";
  ASSERT_NE(mkdtemp(dir_tmpl), nullptr);
  OpExecutorOptions o = Named("exec_fail", 3);
  o.flight_recorder_dir = dir_tmpl;
  absl::Mutex mu;
  std::vector<std::string> events;
  o.describe_failure = [&](const absl::Status& e) {
    absl::MutexLock l(&mu);
    events.push_back(absl::StrCat("describe: ", e.message()));
    return absl::Status(e.code(), absl::StrCat(e.message(), "; described"));
  };
  o.abort = [&](const absl::Status& e) {
    absl::MutexLock l(&mu);
    events.push_back(absl::StrCat("abort: ", e.message()));
  };
  OpExecutor ex(o);
  auto ok = [](uint64_t, absl::Time) { return absl::OkStatus(); };
  bool later_ran = false;
  auto w0 = ex.Submit(Info(OpType::kBarrier), nullptr, ok);
  auto w1 = ex.Submit(Info(OpType::kAllReduce), nullptr,
                      [](uint64_t, absl::Time) { return absl::UnavailableError("boom"); });
  auto w2 = ex.Submit(Info(OpType::kBroadcast), nullptr, [&](uint64_t, absl::Time) {
    later_ran = true;
    return absl::OkStatus();
  });
  ASSERT_TRUE(w0.ok() && w1.ok() && w2.ok());
  EXPECT_TRUE((*w0)->Wait(absl::Now() + kWait).ok());
  const std::string first = "exec_fail all_reduce #1 on rank 3 (timeout 2s): boom";
  absl::Status s1 = (*w1)->Wait(absl::Now() + kWait);
  EXPECT_EQ(s1, absl::UnavailableError(first + "; described"));
  absl::Status s2 = (*w2)->Wait(absl::Now() + kWait);
  EXPECT_EQ(s2, absl::FailedPreconditionError("exec_fail broadcast #2: not run, an earlier op failed: " + first +
                                              "; described"));
  EXPECT_FALSE(later_ran);
  {
    absl::MutexLock l(&mu);
    EXPECT_EQ(events, (std::vector<std::string>{"describe: " + first, "abort: " + first + "; described"}));
  }
  std::vector<OpRecord> recs = ex.recorder()->Snapshot();
  ASSERT_EQ(recs.size(), 3u);
  EXPECT_EQ(recs[0].state, OpRecord::State::kOk);
  EXPECT_EQ(recs[1].state, OpRecord::State::kFailed);
  EXPECT_EQ(recs[1].error, first + "; described");
  EXPECT_EQ(recs[2].state, OpRecord::State::kFailed);
  std::ifstream dump(absl::StrCat(dir_tmpl, "/exec_fail.rank3.txt"));
  ASSERT_TRUE(dump.good()) << "no flight recorder dump in " << dir_tmpl;
  std::stringstream text;
  text << dump.rdbuf();
  EXPECT_NE(text.str().find("seq=1 op=all_reduce dtype=f32 numel=16 state=failed"), std::string::npos) << text.str();
  // Default metrics policy: the failure counts with its latency, the op not run is not recorded.
  EXPECT_EQ(MetricsOf("exec_fail", "all_reduce").failures, 1);
  EXPECT_EQ(MetricsOf("exec_fail", "broadcast").count, 0);
}

TEST(OpExecutorTest, MetricsPolicyForOpsThatDoNotSucceed) {
  for (bool staged_policy : {false, true}) {
    std::string name = staged_policy ? "exec_metrics_staged" : "exec_metrics_default";
    OpExecutorOptions o = Named(name);
    o.count_ops_not_run = staged_policy;
    o.failure_latency = !staged_policy;
    OpExecutor ex(o);
    auto w1 = ex.Submit(Info(OpType::kReduce), nullptr, [](uint64_t, absl::Time) {
      absl::SleepFor(absl::Milliseconds(30));
      return absl::DeadlineExceededError("late");
    });
    auto w2 = ex.Submit(Info(OpType::kBarrier), nullptr, [](uint64_t, absl::Time) { return absl::OkStatus(); });
    ASSERT_TRUE(w1.ok() && w2.ok());
    EXPECT_EQ((*w1)->Wait(absl::Now() + kWait).code(), absl::StatusCode::kDeadlineExceeded);
    EXPECT_EQ((*w2)->Wait(absl::Now() + kWait).code(), absl::StatusCode::kFailedPrecondition);
    OpMetrics failed = MetricsOf(name, "reduce");
    EXPECT_EQ(failed.count, 1) << name;
    EXPECT_EQ(failed.failures, 1) << name;
    if (staged_policy) {
      EXPECT_EQ(failed.total_seconds, 0.0) << name;
    } else {
      EXPECT_GE(failed.total_seconds, 0.025) << name;
    }
    OpMetrics not_run = MetricsOf(name, "barrier");
    EXPECT_EQ(not_run.count, staged_policy ? 1 : 0) << name;
    EXPECT_EQ(not_run.failures, staged_policy ? 1 : 0) << name;
  }
}

TEST(OpExecutorTest, AbortBeforeStartSkipsTheOpAndAbortWhileRunningCallsTheHook) {
  OpExecutor ex(Named("exec_abort"));
  absl::Notification release;
  auto running = ex.Submit(
      Info(OpType::kAllGather), [&] { release.Notify(); },
      [&](uint64_t, absl::Time deadline) {
        if (!release.WaitForNotificationWithDeadline(deadline)) return absl::DeadlineExceededError("never released");
        return absl::CancelledError("aborted by the hook");
      });
  bool skipped_ran = false;
  auto skipped = ex.Submit(Info(OpType::kScatter), nullptr, [&](uint64_t, absl::Time) {
    skipped_ran = true;
    return absl::OkStatus();
  });
  ASSERT_TRUE(running.ok() && skipped.ok());
  (*skipped)->Abort();  // still queued behind `running`
  EXPECT_EQ((*skipped)->Wait(absl::Now() + kWait), absl::CancelledError("aborted before it started"));
  while (ex.recorder()->Snapshot()[0].state != OpRecord::State::kRunning) absl::SleepFor(absl::Milliseconds(1));
  (*running)->Abort();  // running: the hook releases it
  absl::Status s = (*running)->Wait(absl::Now() + kWait);
  EXPECT_EQ(s, absl::CancelledError("exec_abort all_gather #0 on rank 0 (timeout 2s): aborted by the hook"));
  // The executor records the skipped op when it reaches it: wait for an op behind it.
  auto behind = ex.Submit(Info(OpType::kBarrier), nullptr, [](uint64_t, absl::Time) { return absl::OkStatus(); });
  ASSERT_TRUE(behind.ok());
  EXPECT_EQ((*behind)->Wait(absl::Now() + kWait).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_FALSE(skipped_ran);
  std::vector<OpRecord> recs = ex.recorder()->Snapshot();
  ASSERT_EQ(recs.size(), 3u);
  EXPECT_EQ(recs[1].state, OpRecord::State::kFailed);
  EXPECT_EQ(recs[1].error, "aborted before it started");
  EXPECT_EQ(recs[1].started, absl::Time());
}

TEST(OpExecutorTest, RefusesBadTimeoutAndDrainsTheQueueOnStop) {
  OpExecutor ex(Named("exec_stop"));
  auto ok = [](uint64_t, absl::Time) { return absl::OkStatus(); };
  auto bad = ex.Submit(Info(OpType::kAllReduce, absl::ZeroDuration()), nullptr, ok);
  EXPECT_EQ(bad.status(), absl::InvalidArgumentError("all_reduce: options.timeout: must be positive"));
  auto slow = ex.Submit(Info(OpType::kBarrier), nullptr, [](uint64_t, absl::Time) {
    absl::SleepFor(absl::Milliseconds(50));
    return absl::OkStatus();
  });
  auto queued = ex.Submit(Info(OpType::kBroadcast), nullptr, ok);
  ASSERT_TRUE(slow.ok() && queued.ok());
  ex.Stop();
  EXPECT_TRUE((*slow)->IsCompleted());
  EXPECT_TRUE((*queued)->IsCompleted());
  EXPECT_TRUE((*queued)->status().ok()) << (*queued)->status();
  auto late = ex.Submit(Info(OpType::kBarrier), nullptr, ok);
  EXPECT_EQ(late.status(), absl::FailedPreconditionError("backend is shutting down"));
  ex.Stop();  // a second Stop is a no-op
}

// run and post get the op's number among the collectives: a send or a recv
// (which only some ranks issue) takes none, so every rank tags its later
// collectives alike. The flight recorder still numbers every op.
TEST(OpExecutorTest, PointToPointOpsTakeNoCollectiveTagNumber) {
  OpExecutor ex(Named("exec_tag_seq"));
  absl::Mutex mu;
  std::vector<uint64_t> got;
  auto coll = [&](uint64_t tag_seq, absl::Time) {
    absl::MutexLock l(&mu);
    got.push_back(tag_seq);
    return absl::OkStatus();
  };
  auto p2p = [](uint64_t, absl::Time) { return OpExecutor::Completion([](absl::Time) { return absl::OkStatus(); }); };
  std::vector<std::shared_ptr<Work>> works;
  for (OpType op : {OpType::kAllReduce, OpType::kSend, OpType::kRecv, OpType::kBarrier, OpType::kSend,
                    OpType::kAllGather}) {
    const bool pt = op == OpType::kSend || op == OpType::kRecv;
    auto w = pt ? ex.Submit(Info(op), nullptr, nullptr, p2p) : ex.Submit(Info(op), nullptr, coll);
    ASSERT_TRUE(w.ok()) << w.status();
    works.push_back(*w);
  }
  for (auto& w : works) ASSERT_TRUE(w->Wait(absl::Now() + kWait).ok());
  EXPECT_EQ(got, (std::vector<uint64_t>{0, 1, 2}));
  std::vector<uint64_t> recorded;
  for (const OpRecord& r : ex.recorder()->Snapshot()) recorded.push_back(r.seq);
  EXPECT_EQ(recorded, (std::vector<uint64_t>{0, 1, 2, 3, 4, 5}));
}

TEST(OpExecutorTest, PostedOpsCompleteOnTheWaiterWithoutHoldingBackLaterOps) {
  OpExecutor ex(Named("exec_post"));
  auto peer = std::make_shared<absl::Notification>();
  uint64_t posted_seq = 99;
  auto post = ex.Submit(Info(OpType::kRecv), nullptr, nullptr, [&, peer](uint64_t seq, absl::Time) {
    posted_seq = seq;
    return OpExecutor::Completion([peer](absl::Time deadline) {
      if (!peer->WaitForNotificationWithDeadline(deadline)) return absl::DeadlineExceededError("no peer");
      return absl::OkStatus();
    });
  });
  auto after = ex.Submit(Info(OpType::kBarrier), nullptr, [](uint64_t, absl::Time) { return absl::OkStatus(); });
  ASSERT_TRUE(post.ok() && after.ok());
  EXPECT_TRUE((*after)->Wait(absl::Now() + kWait).ok());
  EXPECT_FALSE((*post)->IsCompleted());  // the receive waits on the waiter thread
  EXPECT_EQ(posted_seq, 0u);
  peer->Notify();
  EXPECT_TRUE((*post)->Wait(absl::Now() + kWait).ok());

  // A posted op whose completion passes its deadline fails like a run op.
  auto stuck = ex.Submit(Info(OpType::kSend, absl::Milliseconds(100)), nullptr, nullptr, [](uint64_t, absl::Time) {
    return OpExecutor::Completion([](absl::Time deadline) {
      absl::SleepFor(std::max(deadline - absl::Now(), absl::ZeroDuration()));
      return absl::DeadlineExceededError("no peer");
    });
  });
  ASSERT_TRUE(stuck.ok());
  EXPECT_EQ((*stuck)->Wait(absl::Now() + kWait),
            absl::DeadlineExceededError("exec_post send #2 on rank 0 (timeout 100ms): no peer"));
  auto refused = ex.Submit(Info(OpType::kBarrier), nullptr, [](uint64_t, absl::Time) { return absl::OkStatus(); });
  ASSERT_TRUE(refused.ok());
  EXPECT_EQ((*refused)->Wait(absl::Now() + kWait).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(ex.recorder()->Snapshot()[2].state, OpRecord::State::kFailed);
}

TEST(OpExecutorTest, APostThatFailsFailsTheOpOnTheExecutorThread) {
  OpExecutor ex(Named("exec_post_fail"));
  auto post = ex.Submit(Info(OpType::kSend), nullptr, nullptr,
                        [](uint64_t, absl::Time) -> absl::StatusOr<OpExecutor::Completion> {
                          return absl::UnavailableError("connection to rank 1 lost");
                        });
  ASSERT_TRUE(post.ok());
  EXPECT_EQ((*post)->Wait(absl::Now() + kWait),
            absl::UnavailableError("exec_post_fail send #0 on rank 0 (timeout 2s): connection to rank 1 lost"));
  EXPECT_EQ(MetricsOf("exec_post_fail", "send").failures, 1);
}

}  // namespace
}  // namespace loom::collectives::internal
