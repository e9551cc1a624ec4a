#include "runtime/train/tb_events.h"

#include <unistd.h>

#include <chrono>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "runtime/checkpoint/crc32c.h"

namespace loom::runtime::train {
namespace {

void PutVarint(std::string* out, uint64_t v) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}

void PutTag(std::string* out, int field, int wire_type) { PutVarint(out, (uint64_t(field) << 3) | wire_type); }

template <typename T>
void PutFixed(std::string* out, T v) {
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));  // x86-64 is little-endian, as the format is
  out->append(b, sizeof(T));
}

void PutBytes(std::string* out, int field, absl::string_view bytes) {
  PutTag(out, field, 2);
  PutVarint(out, bytes.size());
  out->append(bytes.data(), bytes.size());
}

double Now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

uint32_t MaskedCrc32c(const void* data, size_t n) {
  uint32_t c = checkpoint::Crc32c(data, n);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

std::string EncodeFileVersionEvent(double wall_time) {
  std::string e;
  PutTag(&e, 1, 1);
  PutFixed<double>(&e, wall_time);
  PutBytes(&e, 3, "brain.Event:2");
  return e;
}

std::string EncodeScalarEvent(double wall_time, int64_t step, absl::string_view tag, float value) {
  std::string v;
  PutBytes(&v, 1, tag);
  PutTag(&v, 2, 5);
  PutFixed<float>(&v, value);
  std::string summary;
  PutBytes(&summary, 1, v);
  std::string e;
  PutTag(&e, 1, 1);
  PutFixed<double>(&e, wall_time);
  PutTag(&e, 2, 0);
  PutVarint(&e, static_cast<uint64_t>(step));
  PutBytes(&e, 5, summary);
  return e;
}

absl::StatusOr<std::unique_ptr<EventWriter>> EventWriter::Open(const std::string& dir) {
  char host[256] = "localhost";
  gethostname(host, sizeof(host) - 1);
  std::string path = absl::StrCat(dir, "/events.out.tfevents.", static_cast<int64_t>(Now()), ".", host);
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return absl::InternalError(absl::StrCat("cannot create ", path, ": ", std::strerror(errno)));
  std::unique_ptr<EventWriter> w(new EventWriter(f, path));
  absl::Status s = w->WriteRecord(EncodeFileVersionEvent(Now()));
  if (!s.ok()) return s;
  return w;
}

EventWriter::~EventWriter() {
  if (file_ != nullptr) std::fclose(file_);
}

absl::Status EventWriter::WriteRecord(const std::string& payload) {
  std::string rec;
  uint64_t len = payload.size();
  PutFixed<uint64_t>(&rec, len);
  PutFixed<uint32_t>(&rec, MaskedCrc32c(rec.data(), 8));
  rec += payload;
  PutFixed<uint32_t>(&rec, MaskedCrc32c(payload.data(), payload.size()));
  if (std::fwrite(rec.data(), 1, rec.size(), file_) != rec.size())
    return absl::InternalError(absl::StrCat("write to ", path_, " failed: ", std::strerror(errno)));
  return absl::OkStatus();
}

absl::Status EventWriter::AddScalar(absl::string_view tag, int64_t step, double value) {
  return WriteRecord(EncodeScalarEvent(Now(), step, tag, static_cast<float>(value)));
}

absl::Status EventWriter::Flush() {
  if (std::fflush(file_) != 0) return absl::InternalError(absl::StrCat("flush of ", path_, " failed"));
  return absl::OkStatus();
}

}  // namespace loom::runtime::train
