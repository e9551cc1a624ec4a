// libFuzzer entry for the manifest parser (built by run_fuzz.sh).
#include "runtime/checkpoint/fuzz/fuzz_targets.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  loom::runtime::checkpoint::fuzz::FuzzManifest(data, size);
  return 0;
}
