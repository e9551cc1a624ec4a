#include "runtime/train/tb_events.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "gtest/gtest.h"

namespace loom::runtime::train {
namespace {

std::string RunChecker(const std::string& path) {
  std::string cmd = "/usr/bin/python3 runtime/train/tb_events_check.py '" + path + "' 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  EXPECT_NE(p, nullptr);
  std::string out;
  char buf[512];
  while (p && fgets(buf, sizeof(buf), p)) out += buf;
  int rc = p ? pclose(p) : -1;
  EXPECT_EQ(rc, 0) << out;
  return out;
}

std::string TmpDir(const char* name) {
  const char* t = std::getenv("TEST_TMPDIR");
  std::string d = std::string(t ? t : "/tmp") + "/" + name;
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  return d;
}

TEST(TbEventsTest, IndependentReaderDecodesScalars) {
  std::string dir = TmpDir("tb");
  std::string path;
  {
    auto w = EventWriter::Open(dir);
    ASSERT_TRUE(w.ok()) << w.status();
    path = (*w)->path();
    EXPECT_NE(path.find("events.out.tfevents."), std::string::npos);
    ASSERT_TRUE((*w)->AddScalar("train/loss", 1, 4.5).ok());
    ASSERT_TRUE((*w)->AddScalar("train/loss", 300, 2.25).ok());
    ASSERT_TRUE((*w)->AddScalar("train/tokens_per_s", 300, 6097).ok());
    ASSERT_TRUE((*w)->AddScalar("val/loss", 123456789012LL, -0.125).ok());
    ASSERT_TRUE((*w)->Flush().ok());
  }
  std::string out = RunChecker(path);
  EXPECT_NE(out.find("train/loss 1 4.5\n"), std::string::npos) << out;
  EXPECT_NE(out.find("train/loss 300 2.25\n"), std::string::npos) << out;
  EXPECT_NE(out.find("train/tokens_per_s 300 6097\n"), std::string::npos) << out;
  EXPECT_NE(out.find("val/loss 123456789012 -0.125\n"), std::string::npos) << out;
  EXPECT_NE(out.find("records 5\n"), std::string::npos) << out;
}

TEST(TbEventsTest, CheckerRejectsACorruptedRecord) {
  std::string dir = TmpDir("tb_bad");
  std::string path;
  {
    auto w = EventWriter::Open(dir);
    ASSERT_TRUE(w.ok());
    path = (*w)->path();
    ASSERT_TRUE((*w)->AddScalar("loss", 7, 1.0).ok());
  }
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(-6, std::ios::end);
  f.put('\x7f');
  f.close();
  std::string cmd = "/usr/bin/python3 runtime/train/tb_events_check.py '" + path + "' >/dev/null 2>&1";
  EXPECT_NE(std::system(cmd.c_str()), 0);
}

TEST(TbEventsTest, OpenFailsWithThePath) {
  auto w = EventWriter::Open("/nonexistent/dir/for/tb");
  ASSERT_FALSE(w.ok());
  EXPECT_NE(std::string(w.status().message()).find("/nonexistent/dir/for/tb"), std::string::npos);
}

}  // namespace
}  // namespace loom::runtime::train
