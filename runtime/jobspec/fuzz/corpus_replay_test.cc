// Replays every committed fuzz corpus file through the job-spec parser and validator (no sanitizer
// needed; a crash or an abort from a broken invariant fails the test).
#include "base/testing/corpus_replay.h"

#include "gtest/gtest.h"
#include "runtime/jobspec/fuzz/jobspec_fuzz_body.h"

namespace loom::runtime::jobspec::fuzz {
namespace {

TEST(CorpusReplay, FuzzJobSpec) { loom::testing::ReplayCorpus("runtime/jobspec/fuzz/corpus", FuzzJobSpec); }

}  // namespace
}  // namespace loom::runtime::jobspec::fuzz
