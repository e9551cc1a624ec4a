// Reads every rank's flight-recorder dump and names the first rank and op
// that diverged: a mismatched collective (different op, dtype or size at the
// same sequence number), or a missing/extra one (a sequence number some ranks
// issued and others did not).
//
//   std::vector<RankDump> dumps = ...;           // text of "<backend>.rank<R>.txt"
//   auto report = FindDivergence(dumps);
//   // "seq 3: rank 1 issued an extra all_reduce (f32, 100 elements) that ranks 0, 2 never issued"
//
// Ops are compared by sequence number, which every rank assigns in issue order.
// Ranks' recorders keep the last N ops; comparison starts at the newest seq
// that every dump still holds.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "collectives/flight_recorder.h"

namespace loom::collectives::tools {

struct RankDump {
  int rank = 0;
  std::string text;
};

struct Divergence {
  bool found = false;
  uint64_t seq = 0;
  int rank = -1;           // the rank to blame
  std::string kind;        // "mismatch", "extra", "missing"
  std::string description;
};

// Parses one dump (the format in flight_recorder.h). InvalidArgument names the bad line.
absl::StatusOr<std::vector<OpRecord>> ParseFlightRecorderDump(absl::string_view text);
absl::StatusOr<Divergence> FindDivergence(const std::vector<RankDump>& dumps);

}  // namespace loom::collectives::tools
