// CRC-32C (Castagnoli polynomial 0x1EDC6F41, reflected 0x82F63B78), the
// checksum stored per shard in checkpoint manifests.
//
// Software slicing-by-8, no hardware dependency. Incremental use:
//   uint32_t c = Crc32cExtend(0, a, na);
//   c = Crc32cExtend(c, b, nb);      // == Crc32c(a ++ b)
// Crc32c("123456789") == 0xE3069283 (the standard check value).
#pragma once

#include <cstddef>
#include <cstdint>

namespace loom::runtime::checkpoint {

uint32_t Crc32cExtend(uint32_t crc, const void* data, size_t n);
inline uint32_t Crc32c(const void* data, size_t n) { return Crc32cExtend(0, data, n); }

}  // namespace loom::runtime::checkpoint
