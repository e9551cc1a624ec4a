// Replays every committed fuzz corpus file through the coordinator's handlers (no sanitizer
// needed; a crash or an abort from a broken invariant fails the test).
#include <dirent.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "runtime/service/fuzz/coordinator_fuzz_body.h"

namespace loom::service::fuzz {
namespace {

TEST(CorpusReplay, FuzzCoordinator) {
  const std::string dir = "runtime/service/fuzz/corpus";
  std::vector<std::string> files;
  if (DIR* d = opendir(dir.c_str())) {
    while (struct dirent* e = readdir(d)) {
      if (e->d_name[0] != '.') files.push_back(dir + "/" + e->d_name);
    }
    closedir(d);
  }
  ASSERT_GE(files.size(), 3u) << dir;
  for (const std::string& f : files) {
    std::ifstream in(f, std::ios::binary);
    const std::string b((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    FuzzCoordinator(reinterpret_cast<const uint8_t*>(b.data()), b.size());
  }
  std::printf("replayed %zu inputs from %s\n", files.size(), dir.c_str());
}

}  // namespace
}  // namespace loom::service::fuzz
