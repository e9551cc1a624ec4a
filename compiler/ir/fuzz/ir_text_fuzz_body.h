// Fuzz body for the IR text parser (compiler/ir/text.h), shared by the
// libFuzzer target (ir_text_fuzz.cc, built by scripts/fuzz.sh with clang and
// ASan/UBSan) and by corpus_replay_test (a plain Bazel test replaying the
// committed corpus).
//
// Arbitrary bytes go through ParseGraph. Besides never crashing, it aborts
// when an error comes without a message, or when a graph that parsed breaks
// the round trip text.h promises: print(parse(print(g))) == print(g).
#pragma once

#include <cstddef>
#include <cstdint>

namespace loom::compiler::ir::fuzz {

void FuzzIrText(const uint8_t* data, size_t size);

}  // namespace loom::compiler::ir::fuzz
