// The store's wire format: length-prefixed binary frames of plain fields.
//
//   frame    := u32 length (little-endian, <= max_message_bytes) , payload
//   request  := u8 opcode , fields...
//   response := u8 absl::StatusCode , (code == OK ? fields... : string message)
//   string   := u32 length , bytes       i64 := 8 bytes little-endian
//   list     := u32 count , string*
//
// The first request on a connection must be kHello carrying the job secret.
// Decoding only copies bytes into strings/integers: nothing executable is ever
// deserialised. Every length is checked against what remains of the frame.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace loom::collectives::store::wire {

enum Op : uint8_t {
  kHello = 1,
  kSet = 2,
  kGet = 3,
  kAdd = 4,
  kWait = 5,
  kCompareAndSet = 6,
  kDelete = 7,
  kList = 8,
  kDeletePrefix = 9,
};

inline constexpr size_t kDefaultMaxMessageBytes = 64 << 20;  // 64 MiB
inline constexpr size_t kMaxKeyBytes = 4096;

class Encoder {
 public:
  Encoder& U8(uint8_t v) { buf_.push_back(static_cast<char>(v)); return *this; }
  Encoder& U32(uint32_t v);
  Encoder& I64(int64_t v);
  Encoder& Str(absl::string_view s);
  Encoder& List(const std::vector<std::string>& l);
  const std::string& bytes() const { return buf_; }

 private:
  std::string buf_;
};

// Reads fields from a frame; any overrun sets a sticky error.
class Decoder {
 public:
  explicit Decoder(absl::string_view data) : data_(data) {}
  uint8_t U8();
  uint32_t U32();
  int64_t I64();
  std::string Str();
  std::vector<std::string> List();
  bool ok() const { return ok_; }
  bool done() const { return ok_ && pos_ == data_.size(); }

 private:
  bool Need(size_t n);
  absl::string_view data_;
  size_t pos_ = 0;
  bool ok_ = true;
};

// Sends one frame. ResourceExhausted (nothing sent) when larger than max_bytes.
absl::Status WriteFrame(int fd, absl::string_view payload, size_t max_bytes, absl::Time deadline);
// Reads one frame. ResourceExhausted when the announced length exceeds max_bytes.
absl::Status ReadFrame(int fd, std::string* payload, size_t max_bytes, absl::Time deadline);

}  // namespace loom::collectives::store::wire
