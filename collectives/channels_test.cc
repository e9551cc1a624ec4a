// ChannelPool and the channel configuration: slicing rule, agreement through
// the store, Run's scheduling and its failure path (the first failing slice
// aborts every channel so blocked slices return at once).
#include "collectives/channels.h"

#include <atomic>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "collectives/store/store_server.h"
#include "collectives/store/tcp_store.h"
#include "gtest/gtest.h"

namespace loom::collectives {
namespace {

// A transport that only records Abort (slices here do not send anything).
class FakeTransport : public transport::Transport {
 public:
  absl::string_view name() const override { return "fake"; }
  int rank() const override { return 0; }
  int size() const override { return 2; }
  absl::StatusOr<std::unique_ptr<transport::TransportRequest>> ISend(int, uint64_t, const void*, size_t,
                                                                     absl::Time) override {
    return absl::UnimplementedError("fake");
  }
  absl::StatusOr<std::unique_ptr<transport::TransportRequest>> IRecv(int, uint64_t, void*, size_t) override {
    return absl::UnimplementedError("fake");
  }
  void Abort(const absl::Status& reason) override {
    absl::MutexLock l(&mu_);
    if (aborted_.ok()) aborted_ = reason;
  }
  // Blocks until aborted (or 10 s), like a receive from a healthy but waiting peer.
  absl::Status WaitForAbort() {
    absl::MutexLock l(&mu_);
    mu_.AwaitWithTimeout(absl::Condition(+[](absl::Status* s) { return !s->ok(); }, &aborted_),
                         absl::Seconds(10));
    return aborted_.ok() ? absl::DeadlineExceededError("never aborted") : aborted_;
  }

 private:
  absl::Mutex mu_;
  absl::Status aborted_;
};

ExtraChannels Fakes(int extra, std::vector<FakeTransport*>* raw) {
  ExtraChannels e;
  for (int i = 0; i < extra; ++i) {
    auto t = std::make_unique<FakeTransport>();
    raw->push_back(t.get());
    e.transports.push_back(std::move(t));
  }
  return e;
}

TEST(Channels, SliceCount) {
  ChannelConfig c{4, 512 << 10};
  EXPECT_EQ(SliceCount(0, c), 1);
  EXPECT_EQ(SliceCount(1 << 20, c), 2);
  EXPECT_EQ(SliceCount((1 << 20) + (512 << 10), c), 3);
  EXPECT_EQ(SliceCount(64 << 20, c), 4);
  EXPECT_EQ(SliceCount(64 << 20, ChannelConfig{1, 512 << 10}), 1);
}

TEST(Channels, RunsEverySliceOnItsOwnChannel) {
  std::vector<FakeTransport*> raw;
  ChannelPool pool(Fakes(3, &raw));
  ASSERT_EQ(pool.channels(), 4);
  FakeTransport ch0;
  for (int slices : {1, 2, 4}) {
    std::vector<transport::Transport*> seen(4, nullptr);
    std::vector<std::thread::id> threads(4);
    absl::Status s = pool.Run(slices, &ch0, [&](int k, transport::Transport* t) {
      seen[k] = t;
      threads[k] = std::this_thread::get_id();
      return absl::OkStatus();
    });
    ASSERT_TRUE(s.ok()) << s;
    EXPECT_EQ(seen[0], &ch0);
    EXPECT_EQ(threads[0], std::this_thread::get_id());
    for (int k = 1; k < slices; ++k) {
      EXPECT_EQ(seen[k], raw[k - 1]);
      EXPECT_NE(threads[k], std::this_thread::get_id());
    }
    for (int k = slices; k < 4; ++k) EXPECT_EQ(seen[k], nullptr);
  }
}

TEST(Channels, FirstFailureAbortsTheOtherSlices) {
  std::vector<FakeTransport*> raw;
  ChannelPool pool(Fakes(2, &raw));
  FakeTransport ch0;
  absl::Time t0 = absl::Now();
  absl::Status s = pool.Run(3, &ch0, [&](int k, transport::Transport* t) -> absl::Status {
    if (k == 2) return absl::UnavailableError("slice 2: connection to rank 1 lost");
    return static_cast<FakeTransport*>(t)->WaitForAbort();  // would block for 10 s
  });
  EXPECT_LT(absl::Now() - t0, absl::Seconds(5));
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_NE(s.message().find("slice 2"), absl::string_view::npos) << s;
}

TEST(Channels, AgreeThroughTheStore) {
  store::StoreServer::Options o;
  o.secret = "x";
  auto server = store::StoreServer::Start(o);
  ASSERT_TRUE(server.ok()) << server.status();
  auto a = store::TcpStore::Connect((*server)->address(), "x");
  auto b = store::TcpStore::Connect((*server)->address(), "x");
  ASSERT_TRUE(a.ok() && b.ok());
  ChannelOptions o0;
  o0.channels = 3;
  o0.min_slice_bytes = 4096;
  auto c0 = AgreeChannelConfig(**a, 0, 2, absl::Seconds(5), o0);
  ChannelOptions o1;  // rank 1 follows rank 0, not its own options
  o1.channels = 5;
  auto c1 = AgreeChannelConfig(**b, 1, 2, absl::Seconds(5), o1);
  ASSERT_TRUE(c0.ok() && c1.ok());
  EXPECT_EQ(c0->channels, 3);
  EXPECT_EQ(c1->channels, 3);
  EXPECT_EQ(c1->min_slice_bytes, 4096u);

  auto single = AgreeChannelConfig(**a, 0, 1, absl::Seconds(5), ChannelOptions{});
  ASSERT_TRUE(single.ok());
  EXPECT_EQ(single->channels, 1);

  ChannelOptions nine;
  nine.channels = 9;
  auto bad = AgreeChannelConfig(**a, 0, 2, absl::Seconds(5), nine);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("channels: expected"), absl::string_view::npos) << bad.status();
  EXPECT_NE(bad.status().message().find("got 9"), absl::string_view::npos) << bad.status();

  ChannelOptions no_floor;
  no_floor.min_slice_bytes = 0;
  auto bad_floor = AgreeChannelConfig(**a, 0, 2, absl::Seconds(5), no_floor);
  EXPECT_EQ(bad_floor.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad_floor.status().message().find("channel_min_slice_bytes"), absl::string_view::npos)
      << bad_floor.status();
}

}  // namespace
}  // namespace loom::collectives
