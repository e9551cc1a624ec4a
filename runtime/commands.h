// Subcommands of the `loom` binary. Each returns the process exit code.
#pragma once

#include <string>
#include <vector>

namespace loom::cli {

int RunDemo(const std::vector<std::string>& args);
int RunOps(const std::vector<std::string>& args);
int RunVersion(const std::vector<std::string>& args);

}  // namespace loom::cli
