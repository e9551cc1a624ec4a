#include "runtime/service/dashboard/assets.h"

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

namespace loom::runtime::service::dashboard {
namespace {

const char kWeb[] = "runtime/service/dashboard/web";

std::string ReadFile(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Every file of web/ is in the table with its exact bytes, and nothing else is.
TEST(Assets, TableMatchesTheWebFolder) {
  std::set<std::string> on_disk;
  for (const auto& e : std::filesystem::recursive_directory_iterator(kWeb)) {
    if (e.is_directory()) continue;
    const std::string rel = e.path().lexically_relative(kWeb).string();
    on_disk.insert(rel);
    const Asset* a = FindAsset(rel);
    ASSERT_NE(a, nullptr) << rel;
    EXPECT_EQ(std::string(reinterpret_cast<const char*>(a->data), a->size), ReadFile(e.path())) << rel;
  }
  std::set<std::string> in_table;
  for (int i = 0; i < NumAssets(); ++i) in_table.insert(Assets()[i].path);
  EXPECT_EQ(in_table, on_disk);
  EXPECT_TRUE(on_disk.count("index.html"));
  EXPECT_TRUE(on_disk.count("app.js"));
  EXPECT_TRUE(on_disk.count("app.css"));
}

TEST(Assets, ContentTypesFollowTheExtension) {
  EXPECT_STREQ(FindAsset("index.html")->content_type, "text/html; charset=utf-8");
  EXPECT_STREQ(FindAsset("app.js")->content_type, "text/javascript; charset=utf-8");
  EXPECT_STREQ(FindAsset("app.css")->content_type, "text/css; charset=utf-8");
}

TEST(Assets, UnknownPathIsNull) {
  EXPECT_EQ(FindAsset("missing.js"), nullptr);
  EXPECT_EQ(FindAsset(""), nullptr);
  EXPECT_EQ(FindAsset("../BUILD.bazel"), nullptr);
}

}  // namespace
}  // namespace loom::runtime::service::dashboard
