// `loom bench collectives` as its own small binary (same code, same flags);
// the test runs this one so it does not need the whole `loom` binary.
#include <string>
#include <vector>

#include "collectives/bench/bench_command.h"

int main(int argc, char** argv) {
  return loom::collectives::bench::RunCollectivesBench(std::vector<std::string>(argv + 1, argv + argc));
}
