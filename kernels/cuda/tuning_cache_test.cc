// TuningCache (tuning_cache.h): the file round trip, the last line of a key
// winning, malformed lines skipped, no file, and sanitised keys.
#include "kernels/cuda/tuning_cache.h"

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace loom::kernels::cuda {
namespace {

std::string TempFile(const std::string& name) {
  const char* t = std::getenv("TEST_TMPDIR");
  const std::string p = absl::StrCat(t ? t : "/tmp", "/tuning_", name, "_", ::getpid(), ".tsv");
  ::unlink(p.c_str());
  return p;
}

std::string Read(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

TEST(TuningCache, RoundTripThroughTheFile) {
  const std::string path = TempFile("roundtrip");
  TuningCache a;
  ASSERT_TRUE(a.Open(path).ok());  // missing file: empty
  EXPECT_EQ(a.size(), 0u);
  EXPECT_FALSE(a.Get("gemm H200 sm90 m=1").has_value());
  a.Put("gemm H200 sm90 m=1", "3 8");
  a.Put("sdpa H200 sm90 fwd", "2 0 0 0 1.5");
  a.Put("gemm H200 sm90 m=1", "4 8");  // retuned: the later line wins
  EXPECT_EQ(a.Get("gemm H200 sm90 m=1").value_or(""), "4 8");
  EXPECT_EQ(Read(path), "gemm H200 sm90 m=1\t3 8\nsdpa H200 sm90 fwd\t2 0 0 0 1.5\ngemm H200 sm90 m=1\t4 8\n");
  TuningCache b;
  ASSERT_TRUE(b.Open(path).ok());
  EXPECT_EQ(b.size(), 2u);
  EXPECT_EQ(b.Get("gemm H200 sm90 m=1").value_or(""), "4 8");
  EXPECT_EQ(b.Get("sdpa H200 sm90 fwd").value_or(""), "2 0 0 0 1.5");
  EXPECT_FALSE(b.Get("gemm H100 sm90 m=1").has_value()) << "another device is another key";
}

TEST(TuningCache, MalformedLinesAreSkipped) {
  const std::string path = TempFile("malformed");
  { std::ofstream(path) << "no tab here\n\tvalue only\nkey only\t\na\tb\tc\ngood key\t1 2\ntruncated"; }
  TuningCache c;
  ASSERT_TRUE(c.Open(path).ok());
  EXPECT_EQ(c.size(), 1u);
  EXPECT_EQ(c.Get("good key").value_or(""), "1 2");
}

TEST(TuningCache, WithoutAFileChoicesStayInMemory) {
  TuningCache c;
  c.Put("k", "v");
  EXPECT_EQ(c.Get("k").value_or(""), "v");
  const std::string path = TempFile("reopen");
  ASSERT_TRUE(c.Open(path).ok());
  EXPECT_FALSE(c.Get("k").has_value()) << "Open replaces the entries with the file's";
  ASSERT_TRUE(c.Open("").ok());
  c.Put("k2", "v2");
  EXPECT_EQ(::access(path.c_str(), F_OK), -1) << "nothing written without a file";
}

TEST(TuningCache, TabsAndNewlinesBecomeSpaces) {
  const std::string path = TempFile("clean");
  TuningCache c;
  ASSERT_TRUE(c.Open(path).ok());
  c.Put("a\tb\nc", "1\t2");
  TuningCache d;
  ASSERT_TRUE(d.Open(path).ok());
  EXPECT_EQ(d.Get("a b c").value_or(""), "1 2");
  EXPECT_EQ(d.Get("a\tb\nc").value_or(""), "1 2");
  EXPECT_EQ(DeviceTag("NVIDIA H200", 9, 0), "NVIDIA H200 sm90");
}

}  // namespace
}  // namespace loom::kernels::cuda
