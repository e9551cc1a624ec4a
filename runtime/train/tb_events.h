// TensorBoard event files: scalar summaries that `tensorboard --logdir RUN`
// reads, written without TensorFlow.
//
// File: events.out.tfevents.<unix seconds>.<hostname> in the given folder. It
// is a TFRecord stream; each record is
//   uint64 length (little-endian) | uint32 masked_crc32c(length bytes)
//   | payload | uint32 masked_crc32c(payload)
// with masked(c) = ((c >> 15) | (c << 17)) + 0xa282ead8. Each payload is an
// `Event` protobuf, encoded by hand (field numbers from TensorBoard's
// event.proto / summary.proto):
//   Event   { double wall_time = 1; int64 step = 2; string file_version = 3;
//             Summary summary = 5; }
//   Summary { repeated Value value = 1; }
//   Value   { string tag = 1; float simple_value = 2; }
// The first record carries file_version "brain.Event:2".
//
//   LOOM_ASSIGN_OR_RETURN(auto w, EventWriter::Open(run_dir));
//   w->AddScalar("train/loss", step, loss);
//   w->Flush();
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace loom::runtime::train {

class EventWriter {
 public:
  static absl::StatusOr<std::unique_ptr<EventWriter>> Open(const std::string& dir);
  ~EventWriter();

  absl::Status AddScalar(absl::string_view tag, int64_t step, double value);
  absl::Status Flush();
  const std::string& path() const { return path_; }

 private:
  EventWriter(std::FILE* f, std::string path) : file_(f), path_(std::move(path)) {}
  absl::Status WriteRecord(const std::string& payload);

  std::FILE* file_;
  std::string path_;
};

// Exposed for tests: the record framing and the Event encoding.
uint32_t MaskedCrc32c(const void* data, size_t n);
std::string EncodeScalarEvent(double wall_time, int64_t step, absl::string_view tag, float value);
std::string EncodeFileVersionEvent(double wall_time);

}  // namespace loom::runtime::train
