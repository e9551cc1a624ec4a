// Where a tensor lives: the host ("cpu") or CUDA device N ("cuda:N").
#pragma once

#include <string>
#include "absl/strings/string_view.h"

#include "absl/status/statusor.h"

namespace loom {

enum class DeviceKind : uint8_t { kCPU, kCUDA };

struct Device {
  DeviceKind kind = DeviceKind::kCPU;
  int index = 0;

  static Device CPU() { return {DeviceKind::kCPU, 0}; }
  static Device CUDA(int i = 0) { return {DeviceKind::kCUDA, i}; }
  bool is_cpu() const { return kind == DeviceKind::kCPU; }
  bool is_cuda() const { return kind == DeviceKind::kCUDA; }
  bool operator==(const Device& o) const { return kind == o.kind && index == o.index; }
  bool operator!=(const Device& o) const { return !(*this == o); }
  std::string ToString() const;  // "cpu", "cuda:0"
};

absl::string_view DeviceKindName(DeviceKind k);  // "cpu", "cuda"
// Parses "cpu", "cuda" (= cuda:0) or "cuda:N".
absl::StatusOr<Device> ParseDevice(absl::string_view s);

}  // namespace loom
