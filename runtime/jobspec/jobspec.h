// Job specifications written as YAML.
//
// ParseJobSpecYaml maps a YAML document onto loom.v1.JobSpec by the proto's own
// field names, recursively: an unknown key, a key given twice in one mapping,
// a value of the wrong type or a malformed document is an InvalidArgument that
// names the key path, the value (at most 200 bytes of it: EchoValue) and the
// line and column ("model.n_head: expected an integer, got 'four' (line 3,
// column 11)").
//
// ApplyDefaults fills defaults: a numeric field that has one takes it when it
// is 0, which is how the gRPC API says "absent" (proto3 cannot tell 0 from
// absent); in YAML such a key is left out for the default, and an explicit 0
// is an error naming it. ValidateJobSpec checks every numeric field's range
// (docs/user-guide.md, "Ranges"), products of sizes in 64-bit arithmetic and
// the cross-field rules (d_model divisible by n_head, the data file exists,
// ...), again naming the key and value.
//
//   LOOM_ASSIGN_OR_RETURN(loom::v1::JobSpec spec, LoadJobSpec("job.yaml"));
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "proto/loom/v1/job.pb.h"

namespace loom::runtime::jobspec {

// Upper bounds of sizes that other checks use too (the full table of ranges
// is in jobspec.cc and docs/user-guide.md, "Ranges").
inline constexpr int kMaxLayers = 1024;
inline constexpr int kMaxHeads = 1024;
inline constexpr int kMaxTp = 1024;
inline constexpr int kMaxRanksPerGpu = 64;              // resources.ranks_per_gpu
inline constexpr int kMaxThreadsPerRank = 1024;         // resources.threads_per_rank
inline constexpr int64_t kMaxRanks = 65536;               // dp x tp
inline constexpr int64_t kMaxParameters = 1000000000000;  // a built-in model's parameter count

absl::StatusOr<v1::JobSpec> ParseJobSpecYaml(absl::string_view yaml);
// Reads, parses, applies defaults and validates. Errors name the file.
absl::StatusOr<v1::JobSpec> LoadJobSpec(const std::string& path);
// Reads, parses and applies defaults without validating, which opens the
// files the spec names (data.tokenizer's are read): for a caller that checks
// where those paths lead first (the worker, runtime/jobspec/confine.h), then
// calls ValidateJobSpec. Errors name the file.
absl::StatusOr<v1::JobSpec> ReadJobSpec(const std::string& path);
void ApplyDefaults(v1::JobSpec& spec);
// parallel.backend when the spec names none: NCCL serves one rank per GPU, so
// ranks sharing a GPU (ranks_per_gpu > 1) meet through Gloo.
std::string DefaultBackend(int32_t ranks_per_gpu);
absl::Status ValidateJobSpec(const v1::JobSpec& spec);
// Every string field of the spec (paths, names, patterns, ...) holds at most
// kMaxStringBytes. ValidateJobSpec checks it first; the coordinator also
// checks it before it resolves any path.
inline constexpr size_t kMaxStringBytes = 4096;
absl::Status ValidateStringSizes(const v1::JobSpec& spec);
// The spec back as YAML (for the run folder and `loom compile`).
std::string ToYaml(const v1::JobSpec& spec);

}  // namespace loom::runtime::jobspec
