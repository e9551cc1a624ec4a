// Standalone coordinator daemon (the same code as `loom coordinator`).
#include <string>
#include <vector>

#include "runtime/service/coordinator_command.h"

int main(int argc, char** argv) {
  return loom::runtime::service::RunCoordinatorCommand(std::vector<std::string>(argv + 1, argv + argc));
}
