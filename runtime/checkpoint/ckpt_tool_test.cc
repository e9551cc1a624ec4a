#include "runtime/checkpoint/ckpt_tool.h"

#include <sstream>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "runtime/checkpoint/loader.h"
#include "runtime/checkpoint/test_util.h"

namespace loom::runtime::checkpoint {
namespace {

int Tool(const std::vector<std::string>& args, std::string* out_text) {
  std::ostringstream out, err;
  int rc = RunCheckpointTool(args, out, err);
  *out_text = out.str() + err.str();
  return rc;
}

TEST(CkptTool, ExportImportVerifyInspect) {
  std::string root = testing::FreshDir("tool");
  ASSERT_TRUE(SaveCheckpoint(root, testing::SampleRequest(5)).ok());
  std::string text;
  ASSERT_EQ(Tool({"export", root, root + "/m.safetensors"}, &text), 0) << text;
  ASSERT_EQ(Tool({"inspect", root + "/m.safetensors"}, &text), 0) << text;
  EXPECT_TRUE(absl::StrContains(text, "w F32 [7, 10]")) << text;
  EXPECT_TRUE(absl::StrContains(text, "metadata loom.step = 5")) << text;
  std::string root2 = testing::FreshDir("tool2");
  ASSERT_EQ(Tool({"import", root + "/m.safetensors", root2, "5"}, &text), 0) << text;
  ASSERT_EQ(Tool({"verify", root2}, &text), 0) << text;
  EXPECT_TRUE(absl::StrContains(text, "step_000000000005 (step 5)")) << text;
  auto a = CheckpointReader::Open(LoadLatest(root)->ckpt)->ReadFull("w");
  auto b = CheckpointReader::Open(LoadLatest(root2)->ckpt)->ReadFull("w");
  EXPECT_TRUE(testing::BitwiseEqual(*a, *b));
  EXPECT_EQ(Tool({"verify", root + "/nowhere"}, &text), 1);
  EXPECT_EQ(Tool({"inspect", root + "/latest"}, &text), 1);
  EXPECT_TRUE(absl::StrContains(text, "latest")) << text;
  EXPECT_EQ(Tool({"frobnicate"}, &text), 2);
}

}  // namespace
}  // namespace loom::runtime::checkpoint
