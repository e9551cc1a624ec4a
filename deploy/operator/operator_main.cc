// `loom_operator`, the operator's executable (see operator_command.h).
#include <string>
#include <vector>

#include "deploy/operator/operator_command.h"

int main(int argc, char** argv) {
  return loom::deploy::operator_::RunOperatorCommand(std::vector<std::string>(argv + 1, argv + argc));
}
