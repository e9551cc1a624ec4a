// Replays every committed fuzz corpus file through the checkpoint parsers (no sanitizer
// needed; a crash or an abort from a broken invariant fails the test).
#include "base/testing/corpus_replay.h"

#include "gtest/gtest.h"
#include "runtime/checkpoint/fuzz/fuzz_targets.h"

namespace loom::runtime::checkpoint::fuzz {
namespace {

TEST(CorpusReplay, Safetensors) {
  loom::testing::ReplayCorpus("runtime/checkpoint/fuzz/corpus/safetensors", FuzzSafetensors, 4);
}
TEST(CorpusReplay, Manifest) {
  loom::testing::ReplayCorpus("runtime/checkpoint/fuzz/corpus/manifest", FuzzManifest, 4);
}

}  // namespace
}  // namespace loom::runtime::checkpoint::fuzz
