// `loom compile job.yaml --dump=<stage>`: prints the IR of the training step
// after any compiler stage (see compiler/compile.h for the stage names). The
// dump is valid IR text: it parses back and runs to the same result.
#pragma once

#include <string>
#include <vector>

namespace loom::runtime::train {

int RunCompileCommand(const std::vector<std::string>& args);

}  // namespace loom::runtime::train
