// Replays every committed fuzz corpus file through the IR text parser (no sanitizer
// needed; a crash or an abort from a broken invariant fails the test).
#include "base/testing/corpus_replay.h"

#include "compiler/ir/fuzz/ir_text_fuzz_body.h"
#include "gtest/gtest.h"

namespace loom::compiler::ir::fuzz {
namespace {

TEST(CorpusReplay, FuzzIrText) { loom::testing::ReplayCorpus("compiler/ir/fuzz/corpus", FuzzIrText); }

}  // namespace
}  // namespace loom::compiler::ir::fuzz
