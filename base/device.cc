#include "base/device.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace loom {

absl::string_view DeviceKindName(DeviceKind k) { return k == DeviceKind::kCPU ? "cpu" : "cuda"; }

std::string Device::ToString() const {
  if (is_cpu()) return "cpu";
  return absl::StrCat("cuda:", index);
}

absl::StatusOr<Device> ParseDevice(absl::string_view s) {
  if (s == "cpu") return Device::CPU();
  if (s == "cuda") return Device::CUDA(0);
  if (s.substr(0, 5) == "cuda:") {
    int idx;
    if (absl::SimpleAtoi(s.substr(5), &idx) && idx >= 0) return Device::CUDA(idx);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown device '", s, "' (expected cpu, cuda or cuda:N)"));
}

}  // namespace loom
