// Which job store writes reach the disk with an fsync of their own. A VFS
// registered as SQLite's default wraps the real one and counts the xSync
// calls on every file, so the test sees exactly what SQLite asks the kernel
// to flush: state changes sync, progress and wait reasons do not, and a
// progress write is durable once a later state change has synced.
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "gtest/gtest.h"
#include "runtime/service/store/job_store.h"
#include "sqlite3.h"

namespace loom::runtime::service::store {
namespace {

std::atomic<int> g_syncs{0};
sqlite3_vfs* g_real = nullptr;

// A file of the counting VFS: the real VFS's file follows this header.
struct CountingFile {
  sqlite3_file base;
  sqlite3_file* real() { return reinterpret_cast<sqlite3_file*>(this + 1); }
};
sqlite3_file* Real(sqlite3_file* f) { return reinterpret_cast<CountingFile*>(f)->real(); }

int Close(sqlite3_file* f) { return Real(f)->pMethods->xClose(Real(f)); }
int Read(sqlite3_file* f, void* b, int n, sqlite3_int64 o) { return Real(f)->pMethods->xRead(Real(f), b, n, o); }
int Write(sqlite3_file* f, const void* b, int n, sqlite3_int64 o) {
  return Real(f)->pMethods->xWrite(Real(f), b, n, o);
}
int Truncate(sqlite3_file* f, sqlite3_int64 n) { return Real(f)->pMethods->xTruncate(Real(f), n); }
int Sync(sqlite3_file* f, int flags) {
  ++g_syncs;
  return Real(f)->pMethods->xSync(Real(f), flags);
}
int FileSize(sqlite3_file* f, sqlite3_int64* n) { return Real(f)->pMethods->xFileSize(Real(f), n); }
int Lock(sqlite3_file* f, int l) { return Real(f)->pMethods->xLock(Real(f), l); }
int Unlock(sqlite3_file* f, int l) { return Real(f)->pMethods->xUnlock(Real(f), l); }
int CheckReserved(sqlite3_file* f, int* r) { return Real(f)->pMethods->xCheckReservedLock(Real(f), r); }
int FileControl(sqlite3_file* f, int op, void* a) { return Real(f)->pMethods->xFileControl(Real(f), op, a); }
int SectorSize(sqlite3_file* f) { return Real(f)->pMethods->xSectorSize(Real(f)); }
int DeviceCharacteristics(sqlite3_file* f) { return Real(f)->pMethods->xDeviceCharacteristics(Real(f)); }
int ShmMap(sqlite3_file* f, int i, int sz, int ext, void volatile** p) {
  return Real(f)->pMethods->xShmMap(Real(f), i, sz, ext, p);
}
int ShmLock(sqlite3_file* f, int off, int n, int flags) { return Real(f)->pMethods->xShmLock(Real(f), off, n, flags); }
void ShmBarrier(sqlite3_file* f) { Real(f)->pMethods->xShmBarrier(Real(f)); }
int ShmUnmap(sqlite3_file* f, int del) { return Real(f)->pMethods->xShmUnmap(Real(f), del); }
int Fetch(sqlite3_file* f, sqlite3_int64 o, int n, void** p) { return Real(f)->pMethods->xFetch(Real(f), o, n, p); }
int Unfetch(sqlite3_file* f, sqlite3_int64 o, void* p) { return Real(f)->pMethods->xUnfetch(Real(f), o, p); }

sqlite3_io_methods MethodsFor(const sqlite3_io_methods* real) {
  sqlite3_io_methods m{};
  m.iVersion = real->iVersion;
  m.xClose = Close, m.xRead = Read, m.xWrite = Write, m.xTruncate = Truncate, m.xSync = Sync;
  m.xFileSize = FileSize, m.xLock = Lock, m.xUnlock = Unlock, m.xCheckReservedLock = CheckReserved;
  m.xFileControl = FileControl, m.xSectorSize = SectorSize, m.xDeviceCharacteristics = DeviceCharacteristics;
  if (real->iVersion >= 2) m.xShmMap = ShmMap, m.xShmLock = ShmLock, m.xShmBarrier = ShmBarrier, m.xShmUnmap = ShmUnmap;
  if (real->iVersion >= 3) m.xFetch = Fetch, m.xUnfetch = Unfetch;
  return m;
}

int Open(sqlite3_vfs*, sqlite3_filename name, sqlite3_file* f, int flags, int* out_flags) {
  auto* cf = reinterpret_cast<CountingFile*>(f);
  cf->base.pMethods = nullptr;
  int rc = g_real->xOpen(g_real, name, cf->real(), flags, out_flags);
  if (rc == SQLITE_OK && cf->real()->pMethods != nullptr) {
    // One table per io_methods version the real VFS hands out.
    static sqlite3_io_methods methods[4];
    const int v = cf->real()->pMethods->iVersion;
    if (methods[v].xClose == nullptr) methods[v] = MethodsFor(cf->real()->pMethods);
    cf->base.pMethods = &methods[v];
  }
  return rc;
}

// Registers the counting VFS as the default, wrapping the default it replaces.
void InstallCountingVfs() {
  static sqlite3_vfs vfs;
  if (g_real != nullptr) return;
  g_real = sqlite3_vfs_find(nullptr);
  vfs = *g_real;
  vfs.zName = "loom-sync-counting";
  vfs.szOsFile = static_cast<int>(sizeof(CountingFile)) + g_real->szOsFile;
  vfs.pAppData = nullptr;
  vfs.xOpen = Open;
  vfs.xDelete = [](sqlite3_vfs*, const char* n, int d) { return g_real->xDelete(g_real, n, d); };
  vfs.xAccess = [](sqlite3_vfs*, const char* n, int f, int* r) { return g_real->xAccess(g_real, n, f, r); };
  vfs.xFullPathname = [](sqlite3_vfs*, const char* n, int sz, char* out) {
    return g_real->xFullPathname(g_real, n, sz, out);
  };
  ASSERT_EQ(sqlite3_vfs_register(&vfs, /*makeDflt=*/1), SQLITE_OK);
}

std::string FreshDir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  std::string d = std::string(tmp ? tmp : "/tmp") + "/" + name;
  std::filesystem::remove_all(d);
  return d;
}

class JobStoreSync : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(InstallCountingVfs());
    dir_ = FreshDir("sync");
    auto st = JobStore::Open(dir_);
    ASSERT_TRUE(st.ok()) << st.status();
    store_ = std::move(*st);
    auto job = store_->InsertJob(NewJob{"k", "j", "spec", 0, 2});
    ASSERT_TRUE(job.ok()) << job.status();
    id_ = job->job.id;
  }
  // Syncs that `write` asks for.
  template <typename F>
  int SyncsOf(F write) {
    const int before = g_syncs.load();
    write();
    return g_syncs.load() - before;
  }

  std::string dir_;
  std::unique_ptr<JobStore> store_;
  int64_t id_ = 0;
};

TEST_F(JobStoreSync, StateChangesSyncAndProgressDoesNot) {
  EXPECT_GE(SyncsOf([&] {
              ASSERT_TRUE(store_->Update(id_, [](JobRecord& j) { j.state = v1::SCHEDULED; }, "placed").ok());
            }),
            1);
  for (int step = 1; step <= 20; ++step) {
    const int syncs = SyncsOf([&] { ASSERT_TRUE(store_->UpdateProgress(id_, step, step / 10 * 10 - 1).ok()); });
    EXPECT_EQ(syncs, 0) << "progress write of step " << step;
  }
  const int syncs = SyncsOf([&] { ASSERT_TRUE(store_->SetWaitReasons({{id_, "waiting"}}).ok()); });
  EXPECT_EQ(syncs, 0) << "wait reason write";
  EXPECT_EQ(*store_->Pragma("synchronous"), "2") << "left at NORMAL after a progress write";
  EXPECT_GE(SyncsOf([&] {
              ASSERT_TRUE(store_->Update(id_, [](JobRecord& j) { j.state = v1::RUNNING; }, "launched").ok());
            }),
            1);
}

TEST_F(JobStoreSync, ProgressOnlyRisesAndStopsAtTheEnd) {
  ASSERT_TRUE(store_->Update(id_, [](JobRecord& j) { j.state = v1::SCHEDULED; }).ok());
  ASSERT_TRUE(store_->UpdateProgress(id_, 30, 19).ok());
  ASSERT_TRUE(store_->UpdateProgress(id_, 25, 29).ok());  // a late report: the step stays, the checkpoint rises
  auto j = store_->GetJob(id_);
  ASSERT_TRUE(j.ok());
  EXPECT_EQ(j->current_step, 30);
  EXPECT_EQ(j->last_checkpoint_step, 29);
  ASSERT_TRUE(store_->Update(id_, [](JobRecord& r) { r.state = v1::CANCELLED; }).ok());
  ASSERT_TRUE(store_->UpdateProgress(id_, 40, 39).ok());
  j = store_->GetJob(id_);
  EXPECT_EQ(j->current_step, 30) << "progress written after the job ended";
}

TEST_F(JobStoreSync, ProgressIsKeptAcrossAReopen) {
  ASSERT_TRUE(store_->Update(id_, [](JobRecord& j) { j.state = v1::SCHEDULED; }).ok());
  ASSERT_TRUE(store_->UpdateProgress(id_, 7, 5).ok());
  ASSERT_TRUE(store_->Update(id_, [](JobRecord& j) { j.state = v1::RUNNING; }).ok());  // syncs the WAL, progress too
  ASSERT_TRUE(store_->UpdateProgress(id_, 9, 5).ok());
  store_.reset();
  auto st = JobStore::Open(dir_);
  ASSERT_TRUE(st.ok()) << st.status();
  auto j = (*st)->GetJob(id_);
  ASSERT_TRUE(j.ok());
  EXPECT_EQ(j->state, v1::RUNNING);
  EXPECT_EQ(j->current_step, 9);
  EXPECT_EQ(j->last_checkpoint_step, 5);
}

}  // namespace
}  // namespace loom::runtime::service::store
