// libFuzzer entry for the IR text parser (built by scripts/fuzz.sh).
#include "compiler/ir/fuzz/ir_text_fuzz_body.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  loom::compiler::ir::fuzz::FuzzIrText(data, size);
  return 0;
}
