#include <atomic>
#include <thread>

#include "absl/strings/str_cat.h"
#include "collectives/internal/socket.h"
#include "collectives/store/store_server.h"
#include "collectives/store/tcp_store.h"
#include "gtest/gtest.h"

namespace loom::collectives::store {
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

TEST_F(StoreTest, TenantsSeeOnlyTheirOwnKeys) {
  const std::string a = "tenant-a-secret-0123456789", b = "tenant-b-secret-0123456789";
  ASSERT_TRUE(server_->AddTenant(a, "job-1/0/").ok());
  ASSERT_TRUE(server_->AddTenant(b, "job-2/0/").ok());
  EXPECT_FALSE(server_->AddTenant("short", "job-3/").ok());
  EXPECT_TRUE(absl::IsAlreadyExists(server_->AddTenant("another-secret-0123456789", "job-1/0/")));
  auto ca = TcpStore::Connect(server_->address(), a);
  auto cb = TcpStore::Connect(server_->address(), b);
  ASSERT_TRUE(ca.ok() && cb.ok());
  ASSERT_TRUE((*ca)->Set("rank0", "A").ok());
  ASSERT_TRUE((*cb)->Set("rank0", "B").ok());
  EXPECT_EQ(*(*ca)->Get("rank0"), "A");
  EXPECT_EQ(*(*cb)->Get("rank0"), "B");
  EXPECT_EQ(*(*ca)->Add("n", 2), 2);
  EXPECT_EQ(*(*cb)->Add("n", 5), 5);
  EXPECT_EQ(*(*ca)->List(""), (std::vector<std::string>{"n", "rank0"}));
  EXPECT_TRUE((*ca)->Wait({"rank0", "n"}, absl::Seconds(1)).ok());
  EXPECT_EQ(*(*ca)->DeletePrefix(""), 2);
  EXPECT_EQ(*(*cb)->Get("rank0"), "B");  // untouched by the other tenant
  // The server's own secret sees the whole key space.
  auto admin = Client();
  EXPECT_EQ(*admin->Get("job-2/0/rank0"), "B");
  // Removing a tenant refuses its secret and drops its keys.
  server_->RemoveTenant(b);
  EXPECT_TRUE(absl::IsPermissionDenied(TcpStore::Connect(server_->address(), b).status()));
  EXPECT_TRUE(admin->List("job-2/").value().empty());
}

TEST_F(StoreTest, RetryRefusedSecretWaitsForTheTenant) {
  const std::string late = "late-tenant-secret-0123456789";
  TcpStore::Options o;
  o.retry_refused_secret = true;
  o.connect_timeout = absl::Seconds(10);
  std::thread admit([&] {
    absl::SleepFor(absl::Milliseconds(300));
    ASSERT_TRUE(server_->AddTenant(late, "job-9/0/").ok());
  });
  auto c = TcpStore::Connect(server_->address(), late, o);
  admit.join();
  ASSERT_TRUE(c.ok()) << c.status();
  // A secret nobody admits still fails, at the deadline, with PermissionDenied.
  o.connect_timeout = absl::Milliseconds(400);
  absl::Time t0 = absl::Now();
  auto bad = TcpStore::Connect(server_->address(), "never-admitted-secret-0123", o);
  EXPECT_TRUE(absl::IsPermissionDenied(bad.status())) << bad.status();
  EXPECT_LT(absl::Now() - t0, absl::Seconds(5));
}

TEST_F(StoreTest, RequestBeforeHelloRefused) {
  std::string host;
  int port;
  ASSERT_TRUE(internal::SplitHostPort(server_->address(), &host, &port).ok());
  auto fd = internal::Connect(host, port, absl::Now() + absl::Seconds(5));
  ASSERT_TRUE(fd.ok());
  wire::Encoder e;
  e.U8(wire::kGet).Str("a");
  ASSERT_TRUE(wire::WriteFrame(fd->get(), e.bytes(), 1 << 20, absl::Now() + absl::Seconds(5)).ok());
  std::string resp;
  ASSERT_TRUE(wire::ReadFrame(fd->get(), &resp, 1 << 20, absl::Now() + absl::Seconds(5)).ok());
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
  ASSERT_TRUE(wire::ReadFrame(fd->get(), &resp, 1 << 20, absl::Now() + absl::Seconds(5)).ok());
  EXPECT_EQ(static_cast<absl::StatusCode>(resp[0]), absl::StatusCode::kResourceExhausted);
}

TEST_F(StoreTest, MalformedFieldsRejected) {
  wire::Decoder d(std::string("\x05\x00\x00\x00ab", 6));
  d.Str();
  EXPECT_FALSE(d.ok());
  wire::Decoder l(std::string("\xff\xff\xff\xff", 4));
  EXPECT_TRUE(l.List().empty());
  EXPECT_FALSE(l.ok());
}

// After the hello, every op with a truncated body, an over-long key and an
// unknown op each get InvalidArgument naming the op; the connection stays open.
TEST_F(StoreTest, MalformedRequestsNameTheOp) {
  std::string host;
  int port;
  ASSERT_TRUE(internal::SplitHostPort(server_->address(), &host, &port).ok());
  auto fd = internal::Connect(host, port, absl::Now() + absl::Seconds(5));
  ASSERT_TRUE(fd.ok());
  auto call = [&](const std::string& req) {
    std::string resp;
    EXPECT_TRUE(wire::WriteFrame(fd->get(), req, 1 << 20, absl::Now() + absl::Seconds(5)).ok());
    EXPECT_TRUE(wire::ReadFrame(fd->get(), &resp, 1 << 20, absl::Now() + absl::Seconds(5)).ok());
    return resp;
  };
  auto error_of = [](const std::string& resp) {
    wire::Decoder d(resp);
    const auto code = static_cast<absl::StatusCode>(d.U8());
    return absl::Status(code, d.Str());
  };
  wire::Encoder hello;
  hello.U8(wire::kHello).Str("s3cret");
  ASSERT_EQ(call(hello.bytes()), std::string(1, '\0'));
  for (uint8_t op : {wire::kSet, wire::kGet, wire::kAdd, wire::kWait, wire::kCompareAndSet, wire::kDelete, wire::kList,
                     wire::kDeletePrefix}) {
    absl::Status s = error_of(call(std::string(1, static_cast<char>(op))));
    EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
    EXPECT_EQ(s.message(), absl::StrCat("store: malformed request (op ", op, ")"));
  }
  wire::Encoder long_key;
  long_key.U8(wire::kSet).Str(std::string(wire::kMaxKeyBytes + 1, 'k')).Str("v");
  EXPECT_EQ(error_of(call(long_key.bytes())).message(), "store: malformed request (op 2)");
  absl::Status unknown = error_of(call(std::string(1, '\x2a')));
  EXPECT_TRUE(absl::IsInvalidArgument(unknown)) << unknown;
  EXPECT_EQ(unknown.message(), "store: unknown op 42");
  wire::Encoder set;
  set.U8(wire::kSet).Str("k").Str("v");
  EXPECT_EQ(call(set.bytes()), std::string(1, '\0'));
}

}  // namespace
}  // namespace loom::collectives::store
