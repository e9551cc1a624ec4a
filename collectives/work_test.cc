#include "collectives/work.h"

#include <thread>

#include "collectives/process_group.h"
#include "gtest/gtest.h"

namespace loom::collectives {
namespace {

TEST(WorkTest, WaitDeadlineThenComplete) {
  auto w = std::make_shared<Work>();
  EXPECT_FALSE(w->IsCompleted());
  EXPECT_TRUE(absl::IsUnavailable(w->status()));
  EXPECT_TRUE(absl::IsDeadlineExceeded(w->Wait(absl::Now() + absl::Milliseconds(20))));
  ASSERT_TRUE(w->Start());
  std::thread t([w] {
    absl::SleepFor(absl::Milliseconds(20));
    w->Finish(absl::InternalError("boom"));
  });
  absl::Status s = w->Wait();
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_TRUE(w->IsCompleted());
  t.join();
}

TEST(WorkTest, AbortBeforeStartCancels) {
  auto w = std::make_shared<Work>();
  w->Abort();
  EXPECT_TRUE(absl::IsCancelled(w->Wait()));
  EXPECT_FALSE(w->Start());
}

TEST(WorkTest, AbortWhileRunningCallsHook) {
  auto w = std::make_shared<Work>();
  bool called = false;
  w->set_abort_hook([&] { called = true; });
  ASSERT_TRUE(w->Start());
  w->Abort();
  EXPECT_TRUE(called);
}

TEST(BackendSpecTest, Parses) {
  auto s = ParseBackendSpec("cpu:gloo,cuda:nccl");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->by_device.at(DeviceKind::kCPU), "gloo");
  EXPECT_EQ(s->by_device.at(DeviceKind::kCUDA), "nccl");
  EXPECT_EQ(s->default_backend, "gloo");
  auto d = ParseBackendSpec("ucx");
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->default_backend, "ucx");
  EXPECT_TRUE(d->by_device.empty());
}

TEST(BackendSpecTest, RejectsBadSpecs) {
  for (const char* bad : {"", "tpu:x", "cpu:", "cpu:a,cpu:b", "cpu:a:b"}) {
    auto s = ParseBackendSpec(bad);
    EXPECT_TRUE(absl::IsInvalidArgument(s.status())) << bad;
  }
}

}  // namespace
}  // namespace loom::collectives
