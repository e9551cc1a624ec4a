#include <atomic>
#include <thread>

#include "collectives/internal/socket.h"
#include "collectives/store/store_server.h"
#include "collectives/store/tcp_store.h"
#include "gtest/gtest.h"

namespace loom::collectives {
namespace {

class StoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    StoreServer::Options o;
    o.secret = "s3cret";
    o.max_message_bytes = 1 << 20;
    auto s = StoreServer::Start(o);
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = std::move(*s);
  }
  std::shared_ptr<TcpStore> Client() {
    auto c = TcpStore::Connect(server_->address(), "s3cret");
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? *c : nullptr;
  }
  std::unique_ptr<StoreServer> server_;
};

TEST_F(StoreTest, BindsLoopbackByDefault) {
  EXPECT_EQ(server_->address().rfind("127.0.0.1:", 0), 0u) << server_->address();
}

TEST_F(StoreTest, AllOps) {
  auto c = Client();
  ASSERT_TRUE(c);
  EXPECT_TRUE(absl::IsNotFound(c->Get("a").status()));
  ASSERT_TRUE(c->Set("a", std::string("x\0y", 3)).ok());
  EXPECT_EQ(*c->Get("a"), std::string("x\0y", 3));
  EXPECT_EQ(*c->Add("n", 5), 5);
  EXPECT_EQ(*c->Add("n", -2), 3);
  EXPECT_EQ(*c->Get("n"), "3");
  EXPECT_TRUE(absl::IsInvalidArgument(c->Add("a", 1).status()));
  // compare_and_set: absent == "".
  EXPECT_EQ(*c->CompareAndSet("lock", "", "owner1"), "owner1");
  EXPECT_EQ(*c->CompareAndSet("lock", "", "owner2"), "owner1");
  EXPECT_EQ(*c->CompareAndSet("lock", "owner1", "owner2"), "owner2");
  ASSERT_TRUE(c->Set("p/1", "1").ok());
  ASSERT_TRUE(c->Set("p/2", "2").ok());
  ASSERT_TRUE(c->Set("q/1", "3").ok());
  auto l = c->List("p/");
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(*l, (std::vector<std::string>{"p/1", "p/2"}));
  EXPECT_EQ(*c->Delete("p/1"), true);
  EXPECT_EQ(*c->Delete("p/1"), false);
  EXPECT_EQ(*c->DeletePrefix("p/"), 1);
  EXPECT_EQ(*c->DeletePrefix("p/"), 0);
  EXPECT_TRUE(c->Wait({"q/1", "a"}, absl::Seconds(1)).ok());
  // Prefix stores see their own key space.
  PrefixStore ps(c, "grp");
  ASSERT_TRUE(ps.Set("k", "v").ok());
  EXPECT_EQ(*c->Get("grp/k"), "v");
  EXPECT_EQ(*ps.List(""), (std::vector<std::string>{"k"}));
}

TEST_F(StoreTest, WaitTimesOutNamingKeys) {
  auto c = Client();
  absl::Time t0 = absl::Now();
  absl::Status s = c->Wait({"never"}, absl::Milliseconds(200));
  EXPECT_TRUE(absl::IsDeadlineExceeded(s)) << s;
  EXPECT_NE(std::string(s.message()).find("never"), std::string::npos) << s;
  EXPECT_GE(absl::Now() - t0, absl::Milliseconds(190));
}

TEST_F(StoreTest, WaitWakesOnSetFromAnotherClient) {
  auto waiter = Client();
  auto setter = Client();
  std::thread t([&] {
    absl::SleepFor(absl::Milliseconds(50));
    ASSERT_TRUE(setter->Set("late", "1").ok());
  });
  EXPECT_TRUE(waiter->Wait({"late"}, absl::Seconds(10)).ok());
  EXPECT_EQ(*waiter->WaitGet("late", absl::Seconds(1)), "1");
  t.join();
}

TEST_F(StoreTest, ConcurrentAddsFromThreads) {
  auto shared = Client();
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      auto own = t % 2 ? Client() : shared;  // both shared and per-thread clients
      for (int i = 0; i < 100; ++i) ASSERT_TRUE(own->Add("ctr", 1).ok());
      ASSERT_TRUE(own->Set(absl::StrCat("t/", t), "done").ok());
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(*shared->Get("ctr"), "800");
  EXPECT_EQ(shared->List("t/")->size(), 8u);
}

TEST_F(StoreTest, WrongSecretRefused) {
  auto c = TcpStore::Connect(server_->address(), "wrong");
  ASSERT_FALSE(c.ok());
  EXPECT_TRUE(absl::IsPermissionDenied(c.status())) << c.status();
  EXPECT_NE(std::string(c.status().message()).find("secret"), std::string::npos);
}

TEST_F(StoreTest, RequestBeforeHelloRefused) {
  std::string host;
  int port;
  ASSERT_TRUE(internal::SplitHostPort(server_->address(), &host, &port).ok());
  auto fd = internal::Connect(host, port, absl::Now() + absl::Seconds(5));
  ASSERT_TRUE(fd.ok());
  store_wire::Encoder e;
  e.U8(store_wire::kGet).Str("a");
  ASSERT_TRUE(store_wire::WriteFrame(fd->get(), e.bytes(), 1 << 20, absl::Now() + absl::Seconds(5)).ok());
  std::string resp;
  ASSERT_TRUE(store_wire::ReadFrame(fd->get(), &resp, 1 << 20, absl::Now() + absl::Seconds(5)).ok());
  EXPECT_EQ(static_cast<absl::StatusCode>(resp[0]), absl::StatusCode::kPermissionDenied);
}

TEST_F(StoreTest, OversizeMessageRefused) {
  // Client side: refused before sending; the connection stays usable.
  TcpStore::Options small;
  small.max_message_bytes = 1024;
  auto c = TcpStore::Connect(server_->address(), "s3cret", small);
  ASSERT_TRUE(c.ok());
  absl::Status s = (*c)->Set("big", std::string(4096, 'x'));
  EXPECT_TRUE(absl::IsResourceExhausted(s)) << s;
  EXPECT_TRUE((*c)->Set("small", "x").ok());
  // Server side: a client with a larger limit sends 2 MiB; the server (1 MiB) refuses.
  auto big = Client();
  s = big->Set("big", std::string(2 << 20, 'x'));
  EXPECT_FALSE(s.ok());
  EXPECT_TRUE(absl::IsResourceExhausted(s) || absl::IsUnavailable(s)) << s;
  EXPECT_TRUE(absl::IsNotFound(Client()->Get("big").status()));
  // A forged length header far beyond the limit.
  std::string host;
  int port;
  ASSERT_TRUE(internal::SplitHostPort(server_->address(), &host, &port).ok());
  auto fd = internal::Connect(host, port, absl::Now() + absl::Seconds(5));
  ASSERT_TRUE(fd.ok());
  unsigned char hdr[4] = {0xff, 0xff, 0xff, 0x7f};
  ASSERT_TRUE(internal::SendAll(fd->get(), hdr, 4, absl::Now() + absl::Seconds(5)).ok());
  std::string resp;
  ASSERT_TRUE(store_wire::ReadFrame(fd->get(), &resp, 1 << 20, absl::Now() + absl::Seconds(5)).ok());
  EXPECT_EQ(static_cast<absl::StatusCode>(resp[0]), absl::StatusCode::kResourceExhausted);
}

TEST_F(StoreTest, MalformedFieldsRejected) {
  store_wire::Decoder d(std::string("\x05\x00\x00\x00ab", 6));
  d.Str();
  EXPECT_FALSE(d.ok());
  store_wire::Decoder l(std::string("\xff\xff\xff\xff", 4));
  EXPECT_TRUE(l.List().empty());
  EXPECT_FALSE(l.ok());
}

}  // namespace
}  // namespace loom::collectives
