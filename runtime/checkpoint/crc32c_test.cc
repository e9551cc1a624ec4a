#include "runtime/checkpoint/crc32c.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace loom::runtime::checkpoint {
namespace {

uint32_t BitwiseCrc(const std::string& s) {
  uint32_t c = ~0u;
  for (unsigned char b : s) {
    c ^= b;
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1u)));
  }
  return ~c;
}

TEST(Crc32c, CheckValue) {
  EXPECT_EQ(Crc32c("123456789", 9), 0xE3069283u);
  EXPECT_EQ(Crc32c("", 0), 0u);
}

TEST(Crc32c, MatchesBitwiseReferenceAndExtends) {
  std::string s;
  for (int i = 0; i < 1000; ++i) s.push_back(static_cast<char>((i * 131 + 7) & 0xff));
  for (size_t n : {1u, 7u, 8u, 9u, 63u, 1000u}) {
    std::string p = s.substr(0, n);
    EXPECT_EQ(Crc32c(p.data(), p.size()), BitwiseCrc(p)) << n;
    for (size_t cut = 0; cut <= n; cut += 3) {
      EXPECT_EQ(Crc32cExtend(Crc32c(p.data(), cut), p.data() + cut, n - cut), BitwiseCrc(p));
    }
  }
}

}  // namespace
}  // namespace loom::runtime::checkpoint
