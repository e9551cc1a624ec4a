// flight_recorder_diff: names the first rank and op that diverged.
//   flight_recorder_diff DIR          (reads DIR/<backend>.rank<R>.txt)
// Exit status: 0 no divergence, 1 divergence found (printed), 2 error.
#include <dirent.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "collectives/tools/flight_recorder_diff.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s DUMP_DIR\n", argv[0]);
    return 2;
  }
  std::vector<loom::collectives::tools::RankDump> dumps;
  DIR* d = opendir(argv[1]);
  if (!d) {
    fprintf(stderr, "cannot open %s\n", argv[1]);
    return 2;
  }
  while (dirent* e = readdir(d)) {
    std::string name = e->d_name;
    size_t p = name.find(".rank");
    if (p == std::string::npos || !absl::EndsWith(name, ".txt")) continue;
    int rank;
    if (!absl::SimpleAtoi(name.substr(p + 5, name.size() - p - 9), &rank)) continue;
    std::ifstream f(std::string(argv[1]) + "/" + name);
    std::stringstream ss;
    ss << f.rdbuf();
    dumps.push_back({rank, ss.str()});
  }
  closedir(d);
  auto r = loom::collectives::tools::FindDivergence(dumps);
  if (!r.ok()) {
    fprintf(stderr, "%s\n", r.status().ToString().c_str());
    return 2;
  }
  printf("%s\n", r->description.c_str());
  return r->found ? 1 : 0;
}
