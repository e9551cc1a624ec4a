// POSIX file helpers for checkpoints: full writes, fsync of files and folders,
// pread of exact byte ranges, atomic small-file replacement, tree removal.
//
// Every error is an absl::Status whose message names the path and the failing
// call (with strerror). Writes, fsyncs and renames go through a fault hook that
// tests set to inject failures (a full disk, an I/O error) at chosen points:
//
//   SetIoFaultHookForTesting([](absl::string_view op, const std::string& path) {
//     return op == "write" && absl::StrContains(path, "rank1") ? absl::DataLossError("ENOSPC")
//                                                              : absl::OkStatus();
//   });
//   ...
//   SetIoFaultHookForTesting(nullptr);
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace loom::runtime::checkpoint {

// op is one of "open", "write", "fsync", "rename", "mkdir".
using IoFaultHook = std::function<absl::Status(absl::string_view op, const std::string& path)>;
void SetIoFaultHookForTesting(IoFaultHook hook);

// Owns a file descriptor.
class ScopedFd {
 public:
  ScopedFd() = default;
  explicit ScopedFd(int fd) : fd_(fd) {}
  ~ScopedFd();
  ScopedFd(ScopedFd&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  ScopedFd& operator=(ScopedFd&& o) noexcept;
  ScopedFd(const ScopedFd&) = delete;
  ScopedFd& operator=(const ScopedFd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_ = -1;
};

// Creates (truncating) a file for writing.
absl::StatusOr<ScopedFd> CreateFile(const std::string& path);
absl::StatusOr<ScopedFd> OpenForRead(const std::string& path);
absl::StatusOr<uint64_t> FileSize(int fd, const std::string& path);

absl::Status WriteAll(int fd, const std::string& path, const void* data, size_t n);
absl::Status FsyncFile(int fd, const std::string& path);
absl::Status FsyncDir(const std::string& dir);
// Reads exactly n bytes at offset; a short file is DataLoss naming the path.
absl::Status PreadFully(int fd, const std::string& path, uint64_t offset, void* out, size_t n);

// Writes tmp file beside `path`, fsyncs it, renames it over `path`, fsyncs the folder.
absl::Status WriteFileAtomic(const std::string& path, absl::string_view contents);
// Whole file; FailedPrecondition when it exceeds max_bytes.
absl::StatusOr<std::string> ReadSmallFile(const std::string& path, size_t max_bytes);

absl::Status MakeDir(const std::string& path);
absl::Status RenamePath(const std::string& from, const std::string& to);
// rm -r; a missing path is OK.
absl::Status RemoveTree(const std::string& path);
// Entry names (no "." / ".."), unsorted.
absl::StatusOr<std::vector<std::string>> ListDir(const std::string& dir);
bool PathExists(const std::string& path);
bool IsDirectory(const std::string& path);

}  // namespace loom::runtime::checkpoint
