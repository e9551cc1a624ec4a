// ReplayCorpus(): feeds every file of a committed fuzz corpus folder (a data
// dependency of the test) to a fuzz target's body, as the fuzzer would, without
// sanitizers; a crash or an abort from a broken invariant fails the test.
#ifndef LOOM_BASE_TESTING_CORPUS_REPLAY_H_
#define LOOM_BASE_TESTING_CORPUS_REPLAY_H_

#include <dirent.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>

#include "gtest/gtest.h"

namespace loom::testing {

// Replays each file below `dir` (not its dot files) through `body` and
// expects at least `min_files` of them, so an emptied corpus fails.
template <typename Body>
void ReplayCorpus(const std::string& dir, Body body, size_t min_files = 3) {
  size_t n = 0;
  if (DIR* d = opendir(dir.c_str())) {
    while (struct dirent* e = readdir(d)) {
      if (e->d_name[0] == '.') continue;
      std::ifstream in(dir + "/" + e->d_name, std::ios::binary);
      const std::string b((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      body(reinterpret_cast<const uint8_t*>(b.data()), b.size());
      ++n;
    }
    closedir(d);
  }
  EXPECT_GE(n, min_files) << dir;
  std::printf("replayed %zu inputs from %s\n", n, dir.c_str());
}

}  // namespace loom::testing

#endif  // LOOM_BASE_TESTING_CORPUS_REPLAY_H_
