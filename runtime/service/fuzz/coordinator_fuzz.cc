// libFuzzer entry for the coordinator's request handlers (built by scripts/fuzz.sh).
#include "runtime/service/fuzz/coordinator_fuzz_body.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  loom::runtime::service::fuzz::FuzzCoordinator(data, size);
  return 0;
}
