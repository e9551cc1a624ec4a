#include "collectives/flight_recorder.h"

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"

namespace loom::collectives {

absl::string_view OpStateName(OpRecord::State s) {
  switch (s) {
    case OpRecord::State::kQueued: return "queued";
    case OpRecord::State::kRunning: return "running";
    case OpRecord::State::kOk: return "ok";
    case OpRecord::State::kFailed: return "failed";
  }
  return "?";
}

void FlightRecorder::Queued(uint64_t seq, std::string op, std::string dtype, int64_t numel) {
  absl::MutexLock l(&mu_);
  OpRecord r;
  r.seq = seq;
  r.op = std::move(op);
  r.dtype = std::move(dtype);
  r.numel = numel;
  r.queued = absl::Now();
  ops_.push_back(std::move(r));
  while (ops_.size() > capacity_) ops_.pop_front();
}

OpRecord* FlightRecorder::Find(uint64_t seq) {
  for (auto it = ops_.rbegin(); it != ops_.rend(); ++it) {
    if (it->seq == seq) return &*it;
  }
  return nullptr;
}

void FlightRecorder::Started(uint64_t seq) {
  absl::MutexLock l(&mu_);
  if (OpRecord* r = Find(seq)) {
    r->state = OpRecord::State::kRunning;
    r->started = absl::Now();
  }
}

void FlightRecorder::Finished(uint64_t seq, const absl::Status& s) {
  absl::MutexLock l(&mu_);
  if (OpRecord* r = Find(seq)) {
    r->state = s.ok() ? OpRecord::State::kOk : OpRecord::State::kFailed;
    r->finished = absl::Now();
    r->error = std::string(s.message());
  }
}

std::vector<OpRecord> FlightRecorder::Snapshot() {
  absl::MutexLock l(&mu_);
  return std::vector<OpRecord>(ops_.begin(), ops_.end());
}

std::string FlightRecorder::Dump() {
  auto us = [](absl::Time t) { return t == absl::Time() ? int64_t{0} : absl::ToUnixMicros(t); };
  std::string out;
  for (const OpRecord& r : Snapshot()) {
    absl::StrAppend(&out, "seq=", r.seq, " op=", r.op, " dtype=", r.dtype, " numel=", r.numel,
                    " state=", OpStateName(r.state), " queued_us=", us(r.queued),
                    " start_us=", us(r.started), " end_us=", us(r.finished), " error=\"",
                    absl::StrReplaceAll(r.error, {{"\"", "'"}, {"\n", " "}}), "\"\n");
  }
  return out;
}

absl::Status FlightRecorder::DumpToFile(const std::string& path) {
  std::string text = Dump();
  FILE* f = std::fopen(path.c_str(), "w");
  if (!f) return absl::UnavailableError(absl::StrCat("flight recorder: cannot write ", path));
  std::fwrite(text.data(), 1, text.size(), f);
  std::fclose(f);
  return absl::OkStatus();
}

}  // namespace loom::collectives
