// Replays every committed fuzz corpus file through the parsers (no sanitizer
// needed; a crash or an abort from a broken invariant fails the test).
#include <dirent.h>

#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "runtime/checkpoint/fuzz/fuzz_targets.h"

namespace loom::checkpoint::fuzz {
namespace {

std::vector<std::string> Files(const std::string& dir) {
  std::vector<std::string> out;
  if (DIR* d = opendir(dir.c_str())) {
    while (struct dirent* e = readdir(d)) {
      if (e->d_name[0] != '.') out.push_back(dir + "/" + e->d_name);
    }
    closedir(d);
  }
  return out;
}

std::string Slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

TEST(CorpusReplay, Safetensors) {
  auto files = Files("runtime/checkpoint/fuzz/corpus/safetensors");
  ASSERT_GT(files.size(), 3u);
  for (const std::string& f : files) {
    std::string b = Slurp(f);
    FuzzSafetensors(reinterpret_cast<const uint8_t*>(b.data()), b.size());
  }
  printf("replayed %zu safetensors inputs\n", files.size());
}

TEST(CorpusReplay, Manifest) {
  auto files = Files("runtime/checkpoint/fuzz/corpus/manifest");
  ASSERT_GT(files.size(), 3u);
  for (const std::string& f : files) {
    std::string b = Slurp(f);
    FuzzManifest(reinterpret_cast<const uint8_t*>(b.data()), b.size());
  }
  printf("replayed %zu manifest inputs\n", files.size());
}

}  // namespace
}  // namespace loom::checkpoint::fuzz
