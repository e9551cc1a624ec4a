#include "collectives/store/wire.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "collectives/internal/socket.h"

namespace loom::collectives::store::wire {

Encoder& Encoder::U32(uint32_t v) {
  for (int i = 0; i < 4; ++i) buf_.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  return *this;
}
Encoder& Encoder::I64(int64_t v) {
  uint64_t u = static_cast<uint64_t>(v);
  for (int i = 0; i < 8; ++i) buf_.push_back(static_cast<char>((u >> (8 * i)) & 0xff));
  return *this;
}
Encoder& Encoder::Str(absl::string_view s) {
  U32(static_cast<uint32_t>(s.size()));
  buf_.append(s.data(), s.size());
  return *this;
}
Encoder& Encoder::List(const std::vector<std::string>& l) {
  U32(static_cast<uint32_t>(l.size()));
  for (const auto& s : l) Str(s);
  return *this;
}

bool Decoder::Need(size_t n) {
  if (!ok_ || data_.size() - pos_ < n) {
    ok_ = false;
    return false;
  }
  return true;
}
uint8_t Decoder::U8() {
  if (!Need(1)) return 0;
  return static_cast<uint8_t>(data_[pos_++]);
}
uint32_t Decoder::U32() {
  if (!Need(4)) return 0;
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(static_cast<uint8_t>(data_[pos_ + i])) << (8 * i);
  pos_ += 4;
  return v;
}
int64_t Decoder::I64() {
  if (!Need(8)) return 0;
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(static_cast<uint8_t>(data_[pos_ + i])) << (8 * i);
  pos_ += 8;
  return static_cast<int64_t>(v);
}
std::string Decoder::Str() {
  uint32_t n = U32();
  if (!Need(n)) return {};
  std::string s(data_.substr(pos_, n));
  pos_ += n;
  return s;
}
std::vector<std::string> Decoder::List() {
  uint32_t n = U32();
  std::vector<std::string> out;
  // Each entry needs at least 4 bytes: bound the count before reserving.
  if (!Need(static_cast<size_t>(n) * 4)) return out;
  out.reserve(n);
  for (uint32_t i = 0; i < n && ok_; ++i) out.push_back(Str());
  return out;
}

absl::Status WriteFrame(int fd, absl::string_view payload, size_t max_bytes, absl::Time deadline) {
  if (payload.size() > max_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat("store: message of ", payload.size(),
                                                     " bytes exceeds the limit of ", max_bytes));
  }
  char hdr[4];
  uint32_t n = static_cast<uint32_t>(payload.size());
  for (int i = 0; i < 4; ++i) hdr[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  absl::Status s = internal::SendAll(fd, hdr, 4, deadline);
  if (!s.ok()) return s;
  return internal::SendAll(fd, payload.data(), payload.size(), deadline);
}

absl::Status ReadFrame(int fd, std::string* payload, size_t max_bytes, absl::Time deadline) {
  unsigned char hdr[4];
  absl::Status s = internal::RecvAll(fd, hdr, 4, deadline);
  if (!s.ok()) return s;
  uint32_t n = hdr[0] | (hdr[1] << 8) | (hdr[2] << 16) | (static_cast<uint32_t>(hdr[3]) << 24);
  if (n > max_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("store: message of ", n, " bytes exceeds the limit of ", max_bytes));
  }
  payload->resize(n);
  return internal::RecvAll(fd, payload->data(), n, deadline);
}

}  // namespace loom::collectives::store::wire
