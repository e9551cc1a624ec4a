// Element types of Loom tensors.
//
// f64 exists for references and finite-difference gradient checks; f32 is the
// CPU compute type; bf16 and f16 are storage/compute types for mixed precision.
// bf16/f16 are stored as raw 16-bit patterns (BF16, F16 below) and converted
// with round-to-nearest-even.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include "absl/strings/string_view.h"

#include "absl/status/statusor.h"

namespace loom {

enum class DType : uint8_t { kF64, kF32, kBF16, kF16, kI32, kI64, kBool };

inline constexpr DType kAllDTypes[] = {DType::kF64, DType::kF32, DType::kBF16, DType::kF16,
                                       DType::kI32, DType::kI64, DType::kBool};

size_t DTypeSize(DType t);
absl::string_view DTypeName(DType t);  // "f32", "bf16", ...
absl::StatusOr<DType> ParseDType(absl::string_view name);
bool IsFloating(DType t);

// 16-bit float storage types. Arithmetic happens in float.
struct BF16 {
  uint16_t bits = 0;
  BF16() = default;
  explicit BF16(float f) : bits(FromFloat(f)) {}
  operator float() const {
    uint32_t u = static_cast<uint32_t>(bits) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
  static uint16_t FromFloat(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // NaN
    u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even
    return static_cast<uint16_t>(u >> 16);
  }
};

struct F16 {
  uint16_t bits = 0;
  F16() = default;
  explicit F16(float f) : bits(FromFloat(f)) {}
  operator float() const { return ToFloat(bits); }
  static uint16_t FromFloat(float f);
  static float ToFloat(uint16_t h);
};

// Maps C++ types to DType tags.
template <typename T> struct DTypeOf;
template <> struct DTypeOf<double> { static constexpr DType value = DType::kF64; };
template <> struct DTypeOf<float> { static constexpr DType value = DType::kF32; };
template <> struct DTypeOf<BF16> { static constexpr DType value = DType::kBF16; };
template <> struct DTypeOf<F16> { static constexpr DType value = DType::kF16; };
template <> struct DTypeOf<int32_t> { static constexpr DType value = DType::kI32; };
template <> struct DTypeOf<int64_t> { static constexpr DType value = DType::kI64; };
template <> struct DTypeOf<bool> { static constexpr DType value = DType::kBool; };

// Calls fn(T{}) with T the C++ type of `t`. Usage:
//   VisitDType(t, [&](auto tag) { using T = decltype(tag); ... });
template <typename Fn>
decltype(auto) VisitDType(DType t, Fn&& fn) {
  switch (t) {
    case DType::kF64: return fn(double{});
    case DType::kF32: return fn(float{});
    case DType::kBF16: return fn(BF16{});
    case DType::kF16: return fn(F16{});
    case DType::kI32: return fn(int32_t{});
    case DType::kI64: return fn(int64_t{});
    case DType::kBool: return fn(bool{});
  }
  return fn(float{});
}

}  // namespace loom
