// Subcommands of the `loom` binary. Each returns the process exit code.
#pragma once

#include <string>
#include <vector>

namespace loom::runtime {

int RunDemo(const std::vector<std::string>& args);
// loom ops [--onnx]: the registry's ops, or the ONNX ops Loom imports.
int RunOps(const std::vector<std::string>& args);
// loom inspect MODEL.onnx [--dim NAME=N]... [--shape INPUT=D0,D1,...]... [--no-graph]
int RunInspect(const std::vector<std::string>& args);
int RunVersion(const std::vector<std::string>& args);

// "--name" for every flag a usage text (base/flags.h's format) names;
// "--[no-]x" gives --x and --no-x. --help is left out.
std::vector<std::string> FlagsInUsage(const std::string& usage);

// One subcommand as completion sees it.
struct CompletionEntry {
  std::string name;
  std::vector<std::string> flags;  // "--steps", ...
};
// A bash completion script for `loom`: subcommand names at the first word,
// the subcommand's flags at a word starting with '-', files otherwise.
std::string BashCompletionScript(const std::vector<CompletionEntry>& commands);

}  // namespace loom::runtime
