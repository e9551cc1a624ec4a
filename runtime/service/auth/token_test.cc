#include "runtime/service/auth/token.h"

#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "gtest/gtest.h"

namespace loom::runtime::service::auth {
namespace {

std::string FreshDir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  std::string d = std::string(tmp ? tmp : "/tmp") + "/" + name;
  std::filesystem::remove_all(d);
  return d;
}

TEST(Token, CreatedOnceWithMode0600AndReused) {
  std::string dir = FreshDir("tok");
  auto a = LoadOrCreateToken(dir);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->size(), 64u);
  EXPECT_EQ(a->find_first_not_of("0123456789abcdef"), std::string::npos);
  struct stat sb;
  ASSERT_EQ(stat((dir + "/token").c_str(), &sb), 0);
  EXPECT_EQ(sb.st_mode & 0777, 0600u);
  auto b = LoadOrCreateToken(dir);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(*a, *b);
  auto other = LoadOrCreateToken(FreshDir("tok2"));
  ASSERT_TRUE(other.ok());
  EXPECT_NE(*a, *other);
}

TEST(Token, RefusesWorldReadableFile) {
  std::string dir = FreshDir("tokmode");
  ASSERT_TRUE(LoadOrCreateToken(dir).ok());
  chmod((dir + "/token").c_str(), 0644);
  EXPECT_EQ(LoadOrCreateToken(dir).status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(Token, ClientFindsEnvThenDataDir) {
  std::string dir = FreshDir("tokcli");
  unsetenv("LOOM_TOKEN");
  EXPECT_EQ(FindClientToken(dir).status().code(), absl::StatusCode::kNotFound);
  auto t = LoadOrCreateToken(dir);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(*FindClientToken(dir), *t);
  setenv("LOOM_DATA_DIR", dir.c_str(), 1);
  EXPECT_EQ(*FindClientToken(), *t);
  setenv("LOOM_TOKEN", "from-env", 1);
  EXPECT_EQ(*FindClientToken(dir), "from-env");
  unsetenv("LOOM_TOKEN");
  unsetenv("LOOM_DATA_DIR");
}

TEST(Token, CheckAuthorization) {
  std::multimap<grpc::string_ref, grpc::string_ref> md;
  EXPECT_EQ(CheckAuthorization(md, "abc").error_code(), grpc::StatusCode::UNAUTHENTICATED);
  md.emplace("authorization", "Bearer abd");
  EXPECT_EQ(CheckAuthorization(md, "abc").error_code(), grpc::StatusCode::UNAUTHENTICATED);
  md.clear();
  md.emplace("authorization", "Basic abc");
  EXPECT_EQ(CheckAuthorization(md, "abc").error_code(), grpc::StatusCode::UNAUTHENTICATED);
  md.clear();
  md.emplace("authorization", "Bearer ab");
  EXPECT_EQ(CheckAuthorization(md, "abc").error_code(), grpc::StatusCode::UNAUTHENTICATED);
  md.clear();
  md.emplace("authorization", "Bearer abc");
  EXPECT_TRUE(CheckAuthorization(md, "abc").ok());
  EXPECT_FALSE(ConstantTimeEquals("", ""));  // an empty server token never matches
}

TEST(Token, JoinTokenIsAFileOfItsOwn) {
  std::string dir = FreshDir("tokjoin");
  auto user = LoadOrCreateToken(dir);
  auto join = LoadOrCreateToken(dir, kJoinTokenFile);
  ASSERT_TRUE(user.ok() && join.ok());
  EXPECT_NE(*user, *join);
  EXPECT_EQ(*ReadTokenFile(dir + "/join-token", /*check_mode=*/true), *join);
  struct stat sb;
  ASSERT_EQ(stat((dir + "/join-token").c_str(), &sb), 0);
  EXPECT_EQ(sb.st_mode & 0777, 0600u);
  chmod((dir + "/join-token").c_str(), 0640);
  EXPECT_EQ(ReadTokenFile(dir + "/join-token", true).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(ReadTokenFile(dir + "/none", true).status().code(), absl::StatusCode::kNotFound);
}

TEST(Token, Sha256AndAgentBearer) {
  // FIPS 180-2 test vector.
  EXPECT_EQ(Sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  std::string id, secret;
  EXPECT_TRUE(SplitAgentBearer(AgentBearer("agent-3-node.x", "ab12"), &id, &secret));
  EXPECT_EQ(id, "agent-3-node.x");
  EXPECT_EQ(secret, "ab12");
  EXPECT_FALSE(SplitAgentBearer("abcdef", &id, &secret));
  EXPECT_FALSE(SplitAgentBearer(":abc", &id, &secret));
  EXPECT_FALSE(SplitAgentBearer("abc:", &id, &secret));
  std::multimap<grpc::string_ref, grpc::string_ref> md;
  EXPECT_EQ(BearerOf(md), "");
  md.emplace("authorization", "Bearer x:y");
  EXPECT_EQ(BearerOf(md), "x:y");
}

}  // namespace
}  // namespace loom::runtime::service::auth

namespace loom::runtime::service::auth {
namespace {

TEST(TokenSet, NameOfMatchesWholeTokensOnly) {
  TokenSet set({{"default", "d-0123456789abcdef"}, {"alice", "a-0123456789abcdef"}});
  EXPECT_EQ(set.NameOf("d-0123456789abcdef"), "default");
  EXPECT_EQ(set.NameOf("a-0123456789abcdef"), "alice");
  EXPECT_EQ(set.NameOf("a-0123456789abcde"), "");
  EXPECT_EQ(set.NameOf("a-0123456789abcdefX"), "");
  EXPECT_EQ(set.NameOf(""), "");
}

TEST(TokensFile, ReadsNamesAndTokens) {
  const std::string dir = FreshDir("tokensfile");
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/tokens";
  std::ofstream(path) << "# comment\n\n  alice\t0123456789abcdef-a  \nbob.ci 0123456789abcdef-b\n";
  chmod(path.c_str(), 0600);
  auto t = ReadTokensFile(path);
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_EQ(t->size(), 2u);
  EXPECT_EQ((*t)[0].name, "alice");
  EXPECT_EQ((*t)[0].token, "0123456789abcdef-a");
  EXPECT_EQ((*t)[1].name, "bob.ci");
  chmod(path.c_str(), 0640);
  EXPECT_EQ(ReadTokensFile(path).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(ReadTokensFile(dir + "/missing").status().code(), absl::StatusCode::kNotFound);
  std::ofstream(path, std::ios::trunc) << "alice 0123456789abcdef-a extra\n";
  chmod(path.c_str(), 0600);
  auto bad = ReadTokensFile(path);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(bad.status().message()).find(path + ":1: expected 'name token', got 3 field(s)"),
            std::string::npos)
      << bad.status();
}

}  // namespace
}  // namespace loom::runtime::service::auth
