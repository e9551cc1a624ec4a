// Consolidated export read by an independent Python reader, and the round trip
// export -> import -> save -> load.
#include "runtime/checkpoint/export.h"

#include <cstdlib>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "runtime/checkpoint/loader.h"
#include "runtime/checkpoint/safetensors.h"
#include "runtime/checkpoint/test_util.h"

namespace loom::runtime::checkpoint {
namespace {

using testing::BitwiseEqual;
using testing::FreshDir;
using testing::GridShards;
using testing::Pattern;

std::vector<std::pair<std::string, Tensor>> Params() {
  return {{"embed.weight", Pattern({6, 5}, DType::kF32, 1)},  {"layers.0.wq", Pattern({4, 4}, DType::kBF16, 2)},
          {"layers.0.norm", Pattern({7}, DType::kF16, 3)},    {"opt.step", Pattern({}, DType::kI64, 4)},
          {"opt.m.embed", Pattern({6, 5}, DType::kF64, 5)},   {"mask", Pattern({3, 2}, DType::kBool, 6)},
          {"ids", Pattern({5}, DType::kI32, 7)}};
}

std::string SaveSharded(const std::string& root) {
  SaveRequest req;
  req.step = 7;
  req.world_size = 4;
  req.layout = "tp=2 x dp=2";
  for (const auto& [name, t] : Params()) {
    std::vector<int> parts(t.ndim(), 1);
    if (t.ndim() >= 1) parts[0] = 2;
    if (t.ndim() >= 2) parts[1] = 2;
    req.tensors.push_back(GridShards(name, t, parts));
  }
  EXPECT_TRUE(SaveCheckpoint(root, req).ok());
  return root + "/" + StepDirName(7);
}

TEST(Export, IndependentPythonReaderAgrees) {
  std::string root = FreshDir("export_py");
  SaveSharded(root);
  std::string out = root + "/model.safetensors";
  ASSERT_TRUE(ExportCheckpoint(root, out).ok());
  // Expected names, dtypes, shapes and values, for the Python reader.
  std::vector<std::string> items;
  for (const auto& [name, t] : Params()) {
    std::vector<std::string> vals;
    for (int64_t i = 0; i < t.numel(); ++i) vals.push_back(absl::StrCat(t.GetDouble(i)));
    items.push_back(absl::StrCat("\"", name, "\": {\"dtype\": \"", SafetensorsDTypeName(t.dtype()),
                                 "\", \"shape\": [", absl::StrJoin(t.shape(), ", "), "], \"values\": [",
                                 absl::StrJoin(vals, ", "), "]}"));
  }
  std::string expected = root + "/expected.json";
  std::ofstream(expected) << "{" << absl::StrJoin(items, ",\n") << "}\n";
  std::string cmd = absl::StrCat("timeout 30 /usr/bin/python3 runtime/checkpoint/testdata/read_safetensors.py ", out, " ",
                                 expected, " > ", root, "/py.log 2>&1");
  int rc = system(cmd.c_str());
  std::ifstream log(root + "/py.log");
  std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
  EXPECT_EQ(rc, 0) << text;
  EXPECT_NE(text.find("OK: 7 tensors match"), std::string::npos) << text;
}

TEST(Export, RoundTripExportImportSaveLoad) {
  std::string root = FreshDir("export_rt");
  std::string step_dir = SaveSharded(root);
  std::string out = root + "/model.safetensors";
  ASSERT_TRUE(ExportCheckpoint(step_dir, out).ok());  // a step folder works too
  auto imported = ImportConsolidated(out);
  ASSERT_TRUE(imported.ok()) << imported.status();
  EXPECT_EQ(imported->metadata.at("loom.step"), "7");
  EXPECT_EQ(imported->metadata.at("loom.layout"), "tp=2 x dp=2");
  auto params = Params();
  ASSERT_EQ(imported->tensors.size(), params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    EXPECT_EQ(imported->tensors[i].first, params[i].first);
    EXPECT_TRUE(BitwiseEqual(imported->tensors[i].second, params[i].second)) << params[i].first;
  }
  // Start a new run from the imported file: save, reload, same tensors.
  std::string root2 = FreshDir("export_rt2");
  ASSERT_TRUE(SaveCheckpoint(root2, RequestFromTensors(imported->tensors, 0)).ok());
  auto r = LoadLatest(root2);
  ASSERT_TRUE(r.ok());
  auto reader = CheckpointReader::Open(r->ckpt);
  for (const auto& [name, t] : params) EXPECT_TRUE(BitwiseEqual(*reader->ReadFull(name), t)) << name;
  // Exporting that again gives the same bytes except metadata.
  std::string out2 = root2 + "/again.safetensors";
  ASSERT_TRUE(ExportConsolidated(r->ckpt, out2).ok());
  auto again = ImportConsolidated(out2);
  ASSERT_TRUE(again.ok());
  for (size_t i = 0; i < params.size(); ++i) EXPECT_TRUE(BitwiseEqual(again->tensors[i].second, params[i].second));
}

// A file exported earlier (and read on the GPU machine by the `safetensors`
// package and PyTorch, see README.md) still imports to the same tensors.
TEST(Export, GoldenFileStillReads) {
  auto imported = ImportConsolidated("runtime/checkpoint/testdata/device_check/model.safetensors");
  ASSERT_TRUE(imported.ok()) << imported.status();
  auto params = Params();
  ASSERT_EQ(imported->tensors.size(), params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    EXPECT_EQ(imported->tensors[i].first, params[i].first);
    EXPECT_TRUE(BitwiseEqual(imported->tensors[i].second, params[i].second)) << params[i].first;
  }
}

TEST(Export, Errors) {
  std::string root = FreshDir("export_err");
  auto s = ExportCheckpoint(root, root + "/x.safetensors");
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
  EXPECT_FALSE(ImportConsolidated(root + "/absent.safetensors").ok());
}

}  // namespace
}  // namespace loom::runtime::checkpoint
