#include "runtime/service/store/job_store.h"

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <thread>

#include "gtest/gtest.h"

namespace loom::runtime::service::store {
namespace {

std::string FreshDir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  std::string d = std::string(tmp ? tmp : "/tmp") + "/" + name;
  std::filesystem::remove_all(d);
  return d;
}

NewJob Job(const std::string& key, const std::string& name = "j", int prio = 0) {
  return NewJob{key, name, "spec:" + name, prio, 2};
}

TEST(JobStore, OpensInWalWithFullSync) {
  std::string dir = FreshDir("wal");
  auto st = JobStore::Open(dir);
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_EQ(*(*st)->Pragma("journal_mode"), "wal");
  EXPECT_EQ(*(*st)->Pragma("synchronous"), "2");  // FULL
  EXPECT_EQ(*(*st)->IntegrityCheck(), "ok");
  struct stat sb;
  ASSERT_EQ(stat(dir.c_str(), &sb), 0);
  EXPECT_EQ(sb.st_mode & 0777, 0700u);
}

TEST(JobStore, InsertGetAndIdempotency) {
  auto st = *JobStore::Open(FreshDir("idem"));
  auto a = st->InsertJob(Job("k1", "alpha", 3));
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_FALSE(a->existing);
  EXPECT_EQ(a->job.state, v1::PENDING);
  EXPECT_EQ(a->job.priority, 3);
  EXPECT_EQ(a->job.spec, "spec:alpha");
  auto again = st->InsertJob(Job("k1", "alpha", 3));
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->existing);
  EXPECT_EQ(again->job.id, a->job.id);
  auto clash = st->InsertJob(Job("k1", "other"));
  EXPECT_EQ(clash.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(std::string(clash.status().message()).find("idempotency_key"), std::string::npos);
  // Empty keys never dedupe.
  auto e1 = st->InsertJob(Job("")), e2 = st->InsertJob(Job(""));
  ASSERT_TRUE(e1.ok() && e2.ok());
  EXPECT_NE(e1->job.id, e2->job.id);
  EXPECT_EQ(st->GetJob(9999).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(st->FindByKey("k1")->id, a->job.id);
  EXPECT_EQ(st->FindByKey("nope").status().code(), absl::StatusCode::kNotFound);
  auto events = st->Events(a->job.id);
  ASSERT_TRUE(events.ok());
  ASSERT_EQ(events->size(), 1u);
  EXPECT_EQ((*events)[0].message, "submitted");
}

TEST(JobStore, LifecycleAndTerminalStatesNeverChange) {
  auto st = *JobStore::Open(FreshDir("life"));
  int64_t id = st->InsertJob(Job("k"))->job.id;
  // PENDING -> RUNNING skips SCHEDULED.
  EXPECT_EQ(st->Update(id, [](JobRecord& j) { j.state = v1::RUNNING; }).status().code(),
            absl::StatusCode::kFailedPrecondition);
  for (v1::JobState s : {v1::SCHEDULED, v1::RUNNING, v1::RESTARTING, v1::RUNNING}) {
    auto r = st->Update(id, [&](JobRecord& j) {
      j.state = s;
      if (s == v1::RESTARTING) ++j.restart_count;
    });
    ASSERT_TRUE(r.ok()) << r.status();
  }
  auto done = st->Update(id, [](JobRecord& j) {
    j.state = v1::FAILED;
    j.exit_codes = {0, 137};
    j.root_cause_rank = 1;
    j.root_cause = "rank 1: killed";
    j.last_checkpoint_step = 40;
  });
  ASSERT_TRUE(done.ok()) << done.status();
  // In code: every later update is refused and nothing is written.
  auto again = st->Update(id, [](JobRecord& j) { j.root_cause = "changed"; });
  EXPECT_EQ(again.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(st->Update(id, [](JobRecord& j) { j.state = v1::RUNNING; }).status().code(),
            absl::StatusCode::kFailedPrecondition);
  // In the database: a raw UPDATE or DELETE is aborted by the triggers.
  EXPECT_FALSE(st->ExecRaw("UPDATE jobs SET state = 3 WHERE id = " + std::to_string(id)).ok());
  EXPECT_FALSE(st->ExecRaw("DELETE FROM jobs").ok());
  auto j = st->GetJob(id);
  ASSERT_TRUE(j.ok());
  EXPECT_EQ(j->state, v1::FAILED);
  EXPECT_EQ(j->restart_count, 1);
  EXPECT_EQ(j->exit_codes, (std::vector<int32_t>{0, 137}));
  EXPECT_EQ(j->root_cause_rank, 1);
  EXPECT_EQ(j->root_cause, "rank 1: killed");
  EXPECT_EQ(j->last_checkpoint_step, 40);
  auto events = *st->Events(id);
  ASSERT_EQ(events.size(), 6u);  // submitted + 5 state changes
  EXPECT_EQ(events.back().state, v1::FAILED);
}

TEST(JobStore, PlacementRefsSurviveReopen) {
  std::string dir = FreshDir("refs");
  int64_t a = 0, b = 0;
  {
    auto st = JobStore::Open(dir);
    ASSERT_TRUE(st.ok()) << st.status();
    a = (*st)->InsertJob(Job("ka", "a"))->job.id;
    b = (*st)->InsertJob(Job("kb", "b"))->job.id;
    ASSERT_TRUE((*st)->SetPlacementRef(a, "17").ok());
    ASSERT_TRUE((*st)->SetPlacementRef(a, "18").ok());  // replaced, not added
  }
  auto st = JobStore::Open(dir);
  ASSERT_TRUE(st.ok()) << st.status();
  auto refs = (*st)->PlacementRefs();
  ASSERT_TRUE(refs.ok()) << refs.status();
  EXPECT_EQ(*refs, (std::map<int64_t, std::string>{{a, "18"}}));
  EXPECT_FALSE((*st)->SetPlacementRef(b + 100, "1").ok()) << "a ref for a job that does not exist";
}

TEST(JobStore, TransitionTable) {
  EXPECT_TRUE(IsAllowedTransition(v1::PENDING, v1::SCHEDULED));
  EXPECT_TRUE(IsAllowedTransition(v1::PENDING, v1::CANCELLED));
  EXPECT_TRUE(IsAllowedTransition(v1::RESTARTING, v1::RUNNING));
  EXPECT_FALSE(IsAllowedTransition(v1::PENDING, v1::SUCCEEDED));
  EXPECT_FALSE(IsAllowedTransition(v1::RUNNING, v1::PENDING));
  for (v1::JobState t : {v1::SUCCEEDED, v1::FAILED, v1::CANCELLED}) {
    for (int to = 1; to <= 7; ++to) {
      if (to != t) {
        EXPECT_FALSE(IsAllowedTransition(t, static_cast<v1::JobState>(to)));
      }
    }
  }
}

TEST(JobStore, ListFiltersAndPages) {
  auto st = *JobStore::Open(FreshDir("list"));
  for (int i = 0; i < 7; ++i) {
    ASSERT_TRUE(st->InsertJob(Job("k" + std::to_string(i), i % 2 ? "odd" : "even")).ok());
  }
  ASSERT_TRUE(st->Update(1, [](JobRecord& j) { j.state = v1::CANCELLED; }).ok());
  ListQuery q;
  q.limit = 3;
  auto p1 = *st->ListJobs(q);
  ASSERT_EQ(p1.size(), 3u);
  q.after_id = p1.back().id;
  auto p2 = *st->ListJobs(q);
  ASSERT_EQ(p2.size(), 3u);
  EXPECT_EQ(p2[0].id, 4);
  q = ListQuery();
  q.name_prefix = "ev";
  EXPECT_EQ(st->ListJobs(q)->size(), 4u);
  q.states = {v1::PENDING};
  EXPECT_EQ(st->ListJobs(q)->size(), 3u);
  q = ListQuery();
  q.name_prefix = "%";  // no LIKE wildcards
  EXPECT_EQ(st->ListJobs(q)->size(), 0u);
  EXPECT_EQ(st->ActiveJobs()->size(), 6u);
  auto counts = *st->CountByState();
  EXPECT_EQ(counts[v1::PENDING], 6);
  EXPECT_EQ(counts[v1::CANCELLED], 1);
}

TEST(JobStore, SetWaitReasonsSkipsTerminalJobs) {
  auto st = *JobStore::Open(FreshDir("why"));
  int64_t a = st->InsertJob(Job("a"))->job.id, b = st->InsertJob(Job("b"))->job.id;
  ASSERT_TRUE(st->Update(b, [](JobRecord& j) { j.state = v1::CANCELLED; }).ok());
  ASSERT_TRUE(st->SetWaitReasons({{a, "no room"}, {b, "ignored"}}).ok());
  EXPECT_EQ(st->GetJob(a)->wait_reason, "no room");
  EXPECT_EQ(st->GetJob(b)->wait_reason, "");
}

TEST(JobStore, LogsIndex) {
  auto st = *JobStore::Open(FreshDir("logs"));
  int64_t id = st->InsertJob(Job("k"))->job.id;
  ASSERT_TRUE(st->AddLog({id, 1, "stdout", "/d/1.out"}).ok());
  ASSERT_TRUE(st->AddLog({id, 0, "stderr", "/d/0.err"}).ok());
  ASSERT_TRUE(st->AddLog({id, 0, "stderr", "/d/0b.err"}).ok());  // replaces
  auto logs = *st->Logs(id);
  ASSERT_EQ(logs.size(), 2u);
  EXPECT_EQ(logs[0].path, "/d/0b.err");
  EXPECT_FALSE(st->AddLog({999, 0, "stdout", "x"}).ok());  // foreign key
}

TEST(JobStore, ReopenKeepsEverything) {
  std::string dir = FreshDir("reopen");
  {
    auto st = *JobStore::Open(dir);
    ASSERT_TRUE(st->InsertJob(Job("a")).ok());
    ASSERT_TRUE(st->Update(1, [](JobRecord& j) { j.state = v1::SCHEDULED; }).ok());
  }
  auto st = *JobStore::Open(dir);
  EXPECT_EQ(st->GetJob(1)->state, v1::SCHEDULED);
  EXPECT_TRUE(st->InsertJob(Job("a"))->existing);
}

TEST(JobStore, SecondStoreOnTheFolderIsRefusedUntilTheFirstCloses) {
  std::string dir = FreshDir("lock");
  auto first = JobStore::Open(dir);
  ASSERT_TRUE(first.ok()) << first.status();
  auto second = JobStore::Open(dir);
  ASSERT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition) << second.status();
  EXPECT_NE(second.status().message().find("in use by another coordinator (pid " + std::to_string(getpid())),
            std::string::npos)
      << second.status();
  first->reset();
  EXPECT_TRUE(JobStore::Open(dir).ok());
}

// loom.db deleted or truncated to 0 bytes in a folder that held a store: the
// store refuses to start empty (and reuse job ids) unless told to (`init`);
// then ids continue after every id the old store could have handed out.
TEST(JobStore, LostDatabaseNeedsInitAndIdsNeverRepeat) {
  for (bool truncate : {false, true}) {
    std::string dir = FreshDir(truncate ? "lost_db_empty" : "lost_db_missing");
    std::set<int64_t> seen;
    {
      auto st = *JobStore::Open(dir);
      for (int i = 0; i < 3; ++i) seen.insert(st->InsertJob(Job("k" + std::to_string(i)))->job.id);
      ASSERT_TRUE(st->InsertAgent("node", "h", "").ok());
    }
    for (const char* suffix : {"", "-wal", "-shm"}) std::filesystem::remove(dir + "/loom.db" + suffix);
    if (truncate) std::ofstream(dir + "/loom.db").close();
    auto refused = JobStore::Open(dir);
    ASSERT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition) << refused.status();
    EXPECT_NE(refused.status().message().find(truncate ? "loom.db is empty" : "loom.db is missing"),
              std::string::npos)
        << refused.status();
    EXPECT_NE(refused.status().message().find("--init"), std::string::npos) << refused.status();
    StoreOptions init;
    init.init = true;
    auto st = JobStore::Open(dir, init);
    ASSERT_TRUE(st.ok()) << st.status();
    for (int i = 0; i < 3; ++i) {
      int64_t id = (*st)->InsertJob(Job("k" + std::to_string(i)))->job.id;
      EXPECT_TRUE(seen.insert(id).second) << "job id " << id << " handed out twice";
      EXPECT_GT(id, 3);
    }
    auto agent = (*st)->InsertAgent("node", "h", "");
    ASSERT_TRUE(agent.ok()) << agent.status();
    EXPECT_NE(agent->id, "agent-1-node");
  }
}

// The marker's reservation grows block by block as ids are handed out; a
// reopened store continues at the next id (no jump), a recreated one after the
// whole reservation.
TEST(JobStore, ReservationGrowsByBlocksAndReopenDoesNotJump) {
  std::string dir = FreshDir("id_blocks");
  StoreOptions small;
  small.id_block = 10;
  {
    auto st = *JobStore::Open(dir, small);
    for (int i = 0; i < 25; ++i) ASSERT_TRUE(st->InsertJob(Job("b" + std::to_string(i))).ok());
  }
  std::ifstream marker(dir + "/store.marker");
  std::stringstream text;
  text << marker.rdbuf();
  EXPECT_NE(text.str().find("jobs 30\n"), std::string::npos) << text.str();
  {
    auto st = *JobStore::Open(dir, small);
    EXPECT_EQ(st->InsertJob(Job("c"))->job.id, 26);
  }
  for (const char* suffix : {"", "-wal", "-shm"}) std::filesystem::remove(dir + "/loom.db" + suffix);
  small.init = true;
  auto st = *JobStore::Open(dir, small);
  EXPECT_EQ(st->InsertJob(Job("d"))->job.id, 31);
}

TEST(JobStore, AgentIdsAreUniqueAndSurviveReopen) {
  std::string dir = FreshDir("agents");
  std::string first;
  {
    auto st = *JobStore::Open(dir);
    auto a = st->InsertAgent("Node_0.example", "aa", "");
    ASSERT_TRUE(a.ok()) << a.status();
    EXPECT_EQ(a->id, "agent-1-node0.example");
    first = a->id;
    EXPECT_EQ(st->InsertAgent("", "bb", "cn=x")->id, "agent-2");
  }
  auto st = *JobStore::Open(dir);
  auto all = *st->Agents();
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].id, first);
  EXPECT_EQ(all[0].secret_sha256, "aa");
  EXPECT_EQ(all[1].cert_identity, "cn=x");
  EXPECT_EQ(st->InsertAgent("node", "cc", "")->id, "agent-3-node");
  EXPECT_FALSE(st->ExecRaw("DELETE FROM agents").ok());
}

// A child inserts jobs in a loop and writes each acknowledged key's index to a
// pipe after InsertJob returns; the parent SIGKILLs it mid-loop. Reopening must
// find an intact database that holds every acknowledged job exactly once.
TEST(JobStore, KillDashNineMidWriteLeavesConsistentDb) {
  std::string dir = FreshDir("kill9");
  for (int round = 0; round < 3; ++round) {
    int fds[2];
    ASSERT_EQ(pipe(fds), 0);
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      close(fds[0]);
      auto st = JobStore::Open(dir);
      if (!st.ok()) _exit(3);
      for (int i = 0;; ++i) {
        std::string key = "r" + std::to_string(round) + "-" + std::to_string(i);
        auto r = (*st)->InsertJob(Job(key, "kill"));
        if (!r.ok()) _exit(4);
        if ((*st)->Update(r->job.id, [](JobRecord& j) { j.state = v1::SCHEDULED; }).status().code() !=
            absl::StatusCode::kOk) {
          _exit(5);
        }
        if (write(fds[1], &i, sizeof i) != sizeof i) _exit(6);
      }
    }
    close(fds[1]);
    // Read acks for ~300 ms (deadline), at least a few, then kill.
    int last_ack = -1, v;
    auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(300 + 100 * round);
    while (std::chrono::steady_clock::now() < deadline || last_ack < 3) {
      if (read(fds[0], &v, sizeof v) != sizeof v) break;
      last_ack = v;
      if (std::chrono::steady_clock::now() > deadline + std::chrono::seconds(10)) break;
    }
    ASSERT_EQ(kill(pid, SIGKILL), 0);
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFSIGNALED(status)) << "child exited early with " << WEXITSTATUS(status);
    // Acks written before the kill but not yet read.
    while (read(fds[0], &v, sizeof v) == sizeof v) last_ack = v;
    close(fds[0]);
    ASSERT_GE(last_ack, 3);
    std::printf("kill -9 round %d: %d submissions acknowledged before SIGKILL\n", round, last_ack + 1);

    auto st = JobStore::Open(dir);
    ASSERT_TRUE(st.ok()) << st.status();
    EXPECT_EQ(*(*st)->IntegrityCheck(), "ok");
    ListQuery q;
    q.limit = 1000000;
    auto all = *(*st)->ListJobs(q);
    std::set<std::string> keys;
    for (const auto& j : all) EXPECT_TRUE(keys.insert(j.idempotency_key).second) << "duplicate " << j.idempotency_key;
    for (int i = 0; i <= last_ack; ++i) {
      std::string key = "r" + std::to_string(round) + "-" + std::to_string(i);
      ASSERT_TRUE(keys.count(key)) << "acknowledged " << key << " lost";
    }
    // Every row is either the state the child left it in or the insert that
    // the kill interrupted before its update; each has its submit event.
    for (const auto& j : all) {
      EXPECT_TRUE(j.state == v1::PENDING || j.state == v1::SCHEDULED);
      EXPECT_FALSE((*st)->Events(j.id)->empty());
    }
  }
}

}  // namespace
}  // namespace loom::runtime::service::store

namespace loom::runtime::service::store {
namespace {

TEST(JobStore, NewestFirstPagesAndCounts) {
  auto st = *JobStore::Open(FreshDir("newest"));
  for (int i = 1; i <= 7; ++i) {
    NewJob j = Job("", i % 2 ? "odd" : "even");
    j.submitter = "user" + std::to_string(i);
    ASSERT_TRUE(st->InsertJob(j).ok());
  }
  ASSERT_TRUE(st->Update(7, [](JobRecord& j) { j.state = v1::CANCELLED; }).ok());
  ListQuery q;
  q.newest_first = true;
  q.limit = 3;
  auto p1 = *st->ListJobs(q);
  ASSERT_EQ(p1.size(), 3u);
  EXPECT_EQ(p1[0].id, 7);
  EXPECT_EQ(p1[2].id, 5);
  EXPECT_EQ(p1[0].submitter, "user7");
  q.after_id = p1.back().id;
  auto p2 = *st->ListJobs(q);
  ASSERT_EQ(p2.size(), 3u);
  EXPECT_EQ(p2[0].id, 4);
  q.after_id = 2;
  auto last = *st->ListJobs(q);
  ASSERT_EQ(last.size(), 1u);
  EXPECT_EQ(last[0].id, 1);
  EXPECT_EQ(*st->CountJobs(ListQuery()), 7);
  q = ListQuery();
  q.states = {v1::PENDING};
  EXPECT_EQ(*st->CountJobs(q), 6);
  q.name_prefix = "odd";
  EXPECT_EQ(*st->CountJobs(q), 3);  // 1, 3, 5 (7 is cancelled)
}

// A loom.db written before jobs had a submitter gains the column at open;
// its jobs read back with an empty one.
TEST(JobStore, OlderDatabaseGainsTheSubmitterColumn) {
  const std::string dir = FreshDir("old_schema");
  {
    auto st = *JobStore::Open(dir);
    NewJob j = Job("k1");
    j.submitter = "alice";
    ASSERT_TRUE(st->InsertJob(j).ok());
    ASSERT_TRUE(st->ExecRaw("ALTER TABLE jobs DROP COLUMN submitter").ok());
  }
  auto st = JobStore::Open(dir);
  ASSERT_TRUE(st.ok()) << st.status();
  auto old = (*st)->GetJob(1);
  ASSERT_TRUE(old.ok()) << old.status();
  EXPECT_EQ(old->submitter, "");
  NewJob j = Job("k2");
  j.submitter = "bob";
  ASSERT_TRUE((*st)->InsertJob(j).ok());
  EXPECT_EQ((*st)->GetJob(2)->submitter, "bob");
}

}  // namespace
}  // namespace loom::runtime::service::store
