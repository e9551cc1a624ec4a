// Fuzz body for the job-spec YAML parser and validator, shared by the
// libFuzzer target (jobspec_fuzz.cc, built by scripts/fuzz.sh with clang and
// ASan/UBSan) and by corpus_replay_test (a plain Bazel test replaying the
// committed corpus).
//
// Arbitrary bytes go through ParseJobSpecYaml, then ApplyDefaults and
// ValidateJobSpec. Besides never crashing, it aborts when an error breaks the
// contract of jobspec.h: an empty message, one over 4 KiB, or a YAML syntax
// error ("malformed YAML ...") without its line and column.
#pragma once

#include <cstddef>
#include <cstdint>

namespace loom::runtime::jobspec::fuzz {

void FuzzJobSpec(const uint8_t* data, size_t size);

}  // namespace loom::runtime::jobspec::fuzz
