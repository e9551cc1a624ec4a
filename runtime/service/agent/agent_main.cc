// Standalone node agent (the same code as `loom agent`).
#include <string>
#include <vector>

#include "runtime/service/agent/agent_command.h"

int main(int argc, char** argv) {
  return loom::runtime::service::agent::RunAgentCommand(std::vector<std::string>(argv + 1, argv + argc));
}
