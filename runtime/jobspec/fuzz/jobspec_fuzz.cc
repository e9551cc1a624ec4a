// libFuzzer entry for the job-spec parser and validator (built by scripts/fuzz.sh).
#include "runtime/jobspec/fuzz/jobspec_fuzz_body.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  loom::runtime::jobspec::fuzz::FuzzJobSpec(data, size);
  return 0;
}
