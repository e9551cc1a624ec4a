"""Build settings for Debian's cpp-httplib, shared by the operator's targets.

Debian ships the split build of cpp-httplib: the header declares and
libcpp-httplib.so defines, so every user compiles with the same feature macros
as the library and links it (see also runtime/service/metrics).
"""

HTTPLIB_DEFINES = [
    "CPPHTTPLIB_OPENSSL_SUPPORT",
    "CPPHTTPLIB_ZLIB_SUPPORT",
    "CPPHTTPLIB_BROTLI_SUPPORT",
]

HTTPLIB_LINKOPTS = ["-lcpp-httplib", "-lz", "-lbrotlidec", "-lbrotlienc", "-lpthread"]
