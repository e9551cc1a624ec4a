#include "runtime/jobspec/confine.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace loom::runtime::jobspec {
namespace {

namespace fs = std::filesystem;

std::string FreshDir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  std::string d = std::string(tmp ? tmp : "/tmp") + "/" + name;
  fs::remove_all(d);
  fs::create_directories(d);
  return fs::canonical(d).string();
}

TEST(JobName, FolderNamesOnly) {
  for (const std::string& ok : std::vector<std::string>{"a", "job", "gpt-2d", "a.b_c-1", "0", std::string(63, 'x')}) {
    EXPECT_TRUE(ValidateJobName("spec.name", ok).ok()) << ok;
  }
  const std::vector<std::string> bad_names = {"",   "-x",  ".x",  "_x",  "A", "Job", "../../x",
                                              "..", "a/b", "a b", "x\n", std::string(64, 'x')};
  for (const std::string& bad : bad_names) {
    absl::Status s = ValidateJobName("spec.name", bad);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(s.message().find("spec.name: must match"), std::string::npos) << s;
  }
}

TEST(ResolvePath, AbsoluteNormalAndNoDotDot) {
  std::string d = FreshDir("resolve");
  EXPECT_EQ(*ResolvePath("f", d + "/./a//b/"), d + "/a/b");
  ASSERT_EQ(chdir(d.c_str()), 0);
  EXPECT_EQ(*ResolvePath("f", "x/y"), d + "/x/y");
  absl::StatusOr<std::string> up = ResolvePath("spec.run_dir", d + "/a/../../etc");
  EXPECT_EQ(up.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(up.status().message().find("spec.run_dir: '..' is not allowed"), std::string::npos);
}

TEST(ConfinePath, InsideRootsAfterFollowingSymlinks) {
  std::string root = FreshDir("confine_root"), other = FreshDir("confine_other");
  std::ofstream(root + "/data.txt") << "hello";
  std::ofstream(other + "/secret.txt") << "secret";
  const std::vector<std::string> roots = {root};
  EXPECT_TRUE(ConfinePath("spec.data.path", root + "/data.txt", roots).ok());
  EXPECT_TRUE(ConfinePath("spec.run_dir", root + "/runs/new/deeper", roots).ok());  // not there yet
  EXPECT_TRUE(ConfinePath("spec.run_dir", root, roots).ok());
  EXPECT_TRUE(ConfinePath("spec.data.path", "", roots).ok());

  absl::Status s = ConfinePath("spec.data.path", "/etc/shadow", roots);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("spec.data.path: '/etc/shadow' is outside the allowed roots"), std::string::npos) << s;
  // A prefix that is not a path component does not count.
  EXPECT_FALSE(ConfinePath("f", root + "-sibling/x", roots).ok());

  // A symlink inside the root that leads out: a file through it, a folder
  // through it, and a path below it that does not exist yet.
  fs::create_symlink(other + "/secret.txt", root + "/innocent.txt");
  fs::create_symlink(other, root + "/escape");
  const std::vector<std::string> outside = {root + "/innocent.txt", root + "/escape/secret.txt",
                                            root + "/escape/new/run"};
  for (const std::string& p : outside) {
    s = ConfinePath("spec.data.path", p, roots);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << p;
    EXPECT_NE(s.message().find("it resolves to " + other), std::string::npos) << s;
  }
  // A link to nowhere would be followed when something is created there.
  fs::create_symlink(other + "/not-yet", root + "/dangling");
  s = ConfinePath("spec.run_dir", root + "/dangling", roots);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("cannot resolve"), std::string::npos) << s;
  EXPECT_FALSE(ConfinePath("spec.run_dir", root + "/dangling/sub", roots).ok());

  // Roots are resolved too: a root named through a symlink admits its target.
  fs::create_symlink(root, other + "/root-link");
  EXPECT_TRUE(ConfinePath("spec.data.path", root + "/data.txt", {other + "/root-link"}).ok());
  EXPECT_TRUE(ConfinePath("spec.data.path", other + "/root-link/data.txt", roots).ok());
  // No roots: anything but `..`.
  EXPECT_TRUE(ConfinePath("f", "/etc/shadow", {}).ok());
  EXPECT_FALSE(ConfinePath("f", "/etc/../etc/shadow", {}).ok());
}

// A folder or glob of shards inside a root may hold a link that leads out:
// every file the data path reaches is confined, not only the path as written.
TEST(ConfineDataPath, EveryShardAFolderOrGlobReachesIsInsideTheRoots) {
  std::string root = FreshDir("confine_data_root"), other = FreshDir("confine_data_other");
  fs::create_directories(root + "/shards");
  std::ofstream(root + "/shards/a.bin") << "a";
  std::ofstream(root + "/shards/b.bin") << "b";
  std::ofstream(other + "/secret.bin") << "secret";
  const std::vector<std::string> roots = {root};
  EXPECT_TRUE(ConfineDataPath("spec.data.path", root + "/shards", roots).ok());
  EXPECT_TRUE(ConfineDataPath("spec.data.path", root + "/shards/*.bin", roots).ok());
  EXPECT_TRUE(ConfineDataPath("spec.data.path", root + "/shards/none-*.bin", roots).ok());  // matches nothing
  EXPECT_FALSE(ConfineDataPath("spec.data.path", other + "/*.bin", roots).ok());
  fs::create_symlink(other + "/secret.bin", root + "/shards/c.bin");
  for (const std::string& p : {root + "/shards", root + "/shards/*.bin", root + "/shards/?.bin"}) {
    absl::Status s = ConfineDataPath("spec.data.path", p, roots);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << p;
    EXPECT_NE(s.message().find("it resolves to " + other + "/secret.bin"), std::string::npos) << s;
  }
  absl::Status s = ConfineJobPaths("spec.", "", "", root + "/shards/c.bin", "", "", "", "", "", roots);
  EXPECT_NE(s.message().find("spec.data.labels"), std::string::npos) << s;
  s = ConfineJobPaths("spec.", "", "", "", "", "", "", "", other + "/m.onnx", roots);
  EXPECT_NE(s.message().find("spec.model.onnx"), std::string::npos) << s;
}

// data.tokenizer's files and folder are confined like the data: each file
// field, the folder and every file in it (a link in it that leads out is
// refused), and the folder of a description file named directly.
TEST(ConfineTokenizerPaths, FilesAndTheFolderAreInsideTheRoots) {
  std::string root = FreshDir("confine_tok_root"), other = FreshDir("confine_tok_other");
  fs::create_directories(root + "/tok");
  std::ofstream(root + "/tok/loom-tokenizer.json") << "{}";
  std::ofstream(root + "/tok/m.model") << "m";
  std::ofstream(root + "/vocab.json") << "{}";
  std::ofstream(other + "/m.model") << "m";
  std::ofstream(other + "/loom-tokenizer.json") << "{}";
  const std::vector<std::string> roots = {root};
  v1::TokenizerSpec inside;
  inside.set_kind("gpt2");
  inside.set_vocab(root + "/vocab.json");
  inside.set_merges(root + "/merges.txt");
  EXPECT_TRUE(ConfineTokenizerPaths("spec.", inside, roots).ok());
  inside.Clear();
  inside.set_dir(root + "/tok");
  EXPECT_TRUE(ConfineTokenizerPaths("spec.", inside, roots).ok());
  inside.set_dir(root + "/tok/loom-tokenizer.json");
  EXPECT_TRUE(ConfineTokenizerPaths("spec.", inside, roots).ok());

  struct Case {
    std::string key, value, resolved;
  };
  for (const Case& c : std::vector<Case>{{"model", other + "/m.model", other + "/m.model"},
                                         {"vocab", "/etc/passwd", "/etc/passwd"},
                                         {"merges", other + "/merges.txt", other + "/merges.txt"},
                                         {"json", other + "/tokenizer.json", other + "/tokenizer.json"},
                                         {"dir", other, other},
                                         {"dir", other + "/loom-tokenizer.json", other + "/loom-tokenizer.json"}}) {
    v1::TokenizerSpec t;
    if (c.key == "model") t.set_model(c.value);
    if (c.key == "vocab") t.set_vocab(c.value);
    if (c.key == "merges") t.set_merges(c.value);
    if (c.key == "json") t.set_json(c.value);
    if (c.key == "dir") t.set_dir(c.value);
    absl::Status s = ConfineTokenizerPaths("spec.", t, roots);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.key << " " << c.value;
    EXPECT_NE(s.message().find("spec.data.tokenizer." + c.key + ": '" + c.value + "' is outside the allowed roots"),
              std::string::npos)
        << s;
  }
  // A link inside the folder that leads out, found whether the folder or its
  // description file is named.
  fs::create_symlink(other + "/m.model", root + "/tok/m2.model");
  for (const std::string& dir : {root + "/tok", root + "/tok/loom-tokenizer.json"}) {
    v1::TokenizerSpec t;
    t.set_dir(dir);
    absl::Status s = ConfineTokenizerPaths("spec.", t, roots);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << dir;
    EXPECT_NE(s.message().find("spec.data.tokenizer.dir: '" + root + "/tok/m2.model' is outside the allowed roots"),
              std::string::npos)
        << s;
    EXPECT_NE(s.message().find("it resolves to " + other + "/m.model"), std::string::npos) << s;
  }
  // The whole spec: data.path inside, the tokenizer outside.
  v1::JobSpec spec;
  spec.mutable_data()->set_path(root + "/vocab.json");
  spec.mutable_data()->mutable_tokenizer()->set_model(other + "/m.model");
  absl::Status s = ConfineSpecPaths("spec.", spec, roots);
  EXPECT_NE(s.message().find("spec.data.tokenizer.model: '" + other + "/m.model' is outside"), std::string::npos) << s;
  spec.mutable_data()->mutable_tokenizer()->set_model(root + "/tok/m.model");
  EXPECT_TRUE(ConfineSpecPaths("spec.", spec, roots).ok());
}

}  // namespace
}  // namespace loom::runtime::jobspec
