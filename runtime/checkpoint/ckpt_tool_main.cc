// ckpt_tool: see ckpt_tool.h.
#include <iostream>

#include "runtime/checkpoint/ckpt_tool.h"

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  return loom::runtime::checkpoint::RunCheckpointTool(args, std::cout, std::cerr);
}
