// Subcommands of the `loom` binary. Each returns the process exit code.
#pragma once

#include <string>
#include <vector>

namespace loom::cli {

int RunDemo(const std::vector<std::string>& args);
// loom ops [--onnx]: the registry's ops, or the ONNX ops Loom imports.
int RunOps(const std::vector<std::string>& args);
// loom inspect MODEL.onnx [--dim NAME=N]... [--shape INPUT=D0,D1,...]... [--no-graph]
int RunInspect(const std::vector<std::string>& args);
int RunVersion(const std::vector<std::string>& args);

}  // namespace loom::cli
