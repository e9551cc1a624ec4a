// Replays every committed fuzz corpus file through the coordinator's request handlers (no sanitizer
// needed; a crash or an abort from a broken invariant fails the test).
#include "base/testing/corpus_replay.h"

#include "gtest/gtest.h"
#include "runtime/service/fuzz/coordinator_fuzz_body.h"

namespace loom::runtime::service::fuzz {
namespace {

TEST(CorpusReplay, FuzzCoordinator) { loom::testing::ReplayCorpus("runtime/service/fuzz/corpus", FuzzCoordinator); }

}  // namespace
}  // namespace loom::runtime::service::fuzz
