// Fuzz bodies for the checkpoint parsers, shared by the libFuzzer targets
// (built by run_fuzz.sh with clang and ASan/UBSan) and by corpus_replay_test
// (plain Bazel test replaying the committed corpus).
//
// Each body parses arbitrary bytes; on success it exercises everything a
// reader would then rely on (reading every tensor's byte range from the
// buffer; re-serialising the manifest and parsing it again) and aborts if an
// invariant breaks. Never crashing, never reading out of bounds, is the contract.
#pragma once

#include <cstddef>
#include <cstdint>

namespace loom::runtime::checkpoint::fuzz {

void FuzzSafetensors(const uint8_t* data, size_t size);
void FuzzManifest(const uint8_t* data, size_t size);

}  // namespace loom::runtime::checkpoint::fuzz
