#include "runtime/checkpoint/fuzz/fuzz_targets.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "runtime/checkpoint/crc32c.h"
#include "runtime/checkpoint/manifest.h"
#include "runtime/checkpoint/safetensors.h"

namespace loom::runtime::checkpoint::fuzz {
namespace {

void Check(bool ok, const char* what) {
  if (!ok) {
    fprintf(stderr, "fuzz invariant broken: %s\n", what);
    abort();
  }
}

}  // namespace

void FuzzSafetensors(const uint8_t* data, size_t size) {
  absl::string_view file(reinterpret_cast<const char*>(data), size);
  SafetensorsLimits limits;
  limits.max_header_bytes = 1 << 20;
  limits.max_tensors = 4096;
  auto index = ParseSafetensorsBuffer(file, "fuzz.safetensors", limits);
  if (!index.ok()) {
    Check(index.status().code() == absl::StatusCode::kInvalidArgument, "error code");
    return;
  }
  Check(index->data_start <= size, "data_start");
  uint32_t crc = 0;
  uint64_t prev_end = 0;
  for (const TensorEntry& t : index->tensors) {
    Check(t.begin >= prev_end && t.end >= t.begin, "sorted and disjoint");
    Check(index->data_start + t.end <= size, "in bounds");
    prev_end = t.end;
    std::vector<char> copy(t.nbytes());
    if (!copy.empty()) std::memcpy(copy.data(), file.data() + index->data_start + t.begin, copy.size());
    crc = Crc32cExtend(crc, copy.data(), copy.size());
  }
  (void)crc;
}

void FuzzManifest(const uint8_t* data, size_t size) {
  absl::string_view text(reinterpret_cast<const char*>(data), size);
  auto m = ParseManifest(text, "fuzz.json");
  if (!m.ok()) {
    Check(m.status().code() == absl::StatusCode::kInvalidArgument, "error code");
    return;
  }
  std::string again = ManifestToJson(*m);
  auto m2 = ParseManifest(again, "fuzz-reparsed.json");
  Check(m2.ok(), "a parsed manifest re-serialises to a valid one");
  Check(ManifestToJson(*m2) == again, "round trip is stable");
}

}  // namespace loom::runtime::checkpoint::fuzz
