// FlightRecorder: the last N ops of one backend on one rank, for hang and
// divergence diagnosis.
//
// Each op is recorded when queued (seq, op, dtype, numel), stamped when it
// starts and finishes, with its final state and error. When an op fails the
// backend dumps the recorder to "<dir>/<backend>.rank<R>.txt" (dir from
// BackendContext::flight_recorder_dir; nothing is written when empty).
//
// Dump format, one op per line, oldest first (stable; read by tools):
//   seq=<n> op=<name> dtype=<dt> numel=<n> state=<queued|running|ok|failed>
//   queued_us=<unix us> start_us=<..|0> end_us=<..|0> error="<message>"
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace loom::collectives {

struct OpRecord {
  enum class State { kQueued, kRunning, kOk, kFailed };
  uint64_t seq = 0;
  std::string op;
  std::string dtype;
  int64_t numel = 0;
  State state = State::kQueued;
  absl::Time queued, started, finished;
  std::string error;
};

class FlightRecorder {
 public:
  explicit FlightRecorder(size_t capacity = 512) : capacity_(capacity) {}
  void Queued(uint64_t seq, std::string op, std::string dtype, int64_t numel);
  void Started(uint64_t seq);
  void Finished(uint64_t seq, const absl::Status& s);
  std::vector<OpRecord> Snapshot();
  std::string Dump();
  absl::Status DumpToFile(const std::string& path);

 private:
  OpRecord* Find(uint64_t seq) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Mutex mu_;
  size_t capacity_;
  std::deque<OpRecord> ops_ ABSL_GUARDED_BY(mu_);
};

absl::string_view OpStateName(OpRecord::State s);

}  // namespace loom::collectives
