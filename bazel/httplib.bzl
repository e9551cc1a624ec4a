"""Flags for code that uses Debian's cpp-httplib.

Debian's cpp-httplib is the split build: the header declares, the shared
library (built with OpenSSL, zlib and brotli support) defines. HTTPLIB_DEFINES
match its pkg-config Cflags so both sides see the same classes.
"""

HTTPLIB_DEFINES = [
    "CPPHTTPLIB_OPENSSL_SUPPORT",
    "CPPHTTPLIB_ZLIB_SUPPORT",
    "CPPHTTPLIB_BROTLI_SUPPORT",
]

HTTPLIB_LINKOPTS = ["-lcpp-httplib", "-lz", "-lbrotlidec", "-lbrotlienc", "-lpthread"]
