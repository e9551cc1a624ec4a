#include "runtime/jobspec/fuzz/jobspec_fuzz_body.h"

#include <cstdio>
#include <cstdlib>
#include <string>

#include "runtime/jobspec/jobspec.h"

namespace loom::runtime::jobspec::fuzz {
namespace {

constexpr size_t kMaxMessageBytes = 4096;

// A YAML syntax error starts "malformed YAML" and must say where.
void CheckError(const absl::Status& s, const char* stage) {
  const std::string m(s.message());
  const bool yaml_syntax = m.rfind("malformed YAML", 0) == 0;
  const bool bad = m.empty() || m.size() > kMaxMessageBytes ||
                   (yaml_syntax && (m.find("line ") == std::string::npos || m.find("column ") == std::string::npos));
  if (!bad) return;
  std::fprintf(stderr, "%s: error breaks the contract (%zu bytes): %.300s\n", stage, m.size(), m.c_str());
  std::abort();
}

}  // namespace

void FuzzJobSpec(const uint8_t* data, size_t size) {
  auto spec = ParseJobSpecYaml(std::string(reinterpret_cast<const char*>(data), size));
  if (!spec.ok()) return CheckError(spec.status(), "ParseJobSpecYaml");
  ApplyDefaults(*spec);
  absl::Status valid = ValidateJobSpec(*spec);
  if (!valid.ok()) CheckError(valid, "ValidateJobSpec");
}

}  // namespace loom::runtime::jobspec::fuzz
