#include "runtime/checkpoint/file_io.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <mutex>

#include "absl/strings/str_cat.h"
#include "base/status.h"

namespace loom::runtime::checkpoint {
namespace {

std::mutex& HookMu() {
  static std::mutex mu;
  return mu;
}
IoFaultHook& Hook() {
  static IoFaultHook hook;
  return hook;
}

absl::Status CheckHook(absl::string_view op, const std::string& path) {
  IoFaultHook hook;
  {
    std::lock_guard<std::mutex> l(HookMu());
    hook = Hook();
  }
  if (!hook) return absl::OkStatus();
  absl::Status s = hook(op, path);
  if (s.ok()) return s;
  return absl::Status(s.code(), absl::StrCat(op, " ", path, ": ", s.message(), " (injected)"));
}

absl::Status Errno(absl::string_view op, const std::string& path, int err) {
  std::string msg = absl::StrCat(op, " ", path, ": ", strerror(err));
  if (err == ENOENT) return absl::NotFoundError(msg);
  if (err == ENOSPC || err == EIO || err == EDQUOT) return absl::DataLossError(msg);
  return absl::InternalError(msg);
}

}  // namespace

void SetIoFaultHookForTesting(IoFaultHook hook) {
  std::lock_guard<std::mutex> l(HookMu());
  Hook() = std::move(hook);
}

ScopedFd::~ScopedFd() {
  if (fd_ >= 0) close(fd_);
}

ScopedFd& ScopedFd::operator=(ScopedFd&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) close(fd_);
    fd_ = o.fd_;
    o.fd_ = -1;
  }
  return *this;
}

absl::StatusOr<ScopedFd> CreateFile(const std::string& path) {
  LOOM_RETURN_IF_ERROR(CheckHook("open", path));
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Errno("open", path, errno);
  return ScopedFd(fd);
}

absl::StatusOr<ScopedFd> OpenForRead(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Errno("open", path, errno);
  return ScopedFd(fd);
}

absl::StatusOr<uint64_t> FileSize(int fd, const std::string& path) {
  struct stat st;
  if (fstat(fd, &st) != 0) return Errno("fstat", path, errno);
  if (!S_ISREG(st.st_mode)) return absl::InvalidArgumentError(absl::StrCat(path, ": not a regular file"));
  return static_cast<uint64_t>(st.st_size);
}

absl::Status WriteAll(int fd, const std::string& path, const void* data, size_t n) {
  LOOM_RETURN_IF_ERROR(CheckHook("write", path));
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return Errno("write", path, errno);
    }
    if (w == 0) return absl::DataLossError(absl::StrCat("write ", path, ": wrote 0 bytes"));
    p += w;
    n -= static_cast<size_t>(w);
  }
  return absl::OkStatus();
}

absl::Status FsyncFile(int fd, const std::string& path) {
  LOOM_RETURN_IF_ERROR(CheckHook("fsync", path));
  if (fsync(fd) != 0) return Errno("fsync", path, errno);
  return absl::OkStatus();
}

absl::Status FsyncDir(const std::string& dir) {
  LOOM_RETURN_IF_ERROR(CheckHook("fsync", dir));
  int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return Errno("open", dir, errno);
  ScopedFd owned(fd);
  if (fsync(fd) != 0) return Errno("fsync", dir, errno);
  return absl::OkStatus();
}

absl::Status PreadFully(int fd, const std::string& path, uint64_t offset, void* out, size_t n) {
  char* p = static_cast<char*>(out);
  while (n > 0) {
    ssize_t r = pread(fd, p, n, static_cast<off_t>(offset));
    if (r < 0) {
      if (errno == EINTR) continue;
      return Errno("pread", path, errno);
    }
    if (r == 0) {
      return absl::DataLossError(absl::StrCat(path, ": file is truncated (needed ", n, " more bytes at offset ",
                                              offset, ")"));
    }
    p += r;
    n -= static_cast<size_t>(r);
    offset += static_cast<uint64_t>(r);
  }
  return absl::OkStatus();
}

absl::Status WriteFileAtomic(const std::string& path, absl::string_view contents) {
  std::string tmp = absl::StrCat(path, ".tmp.", getpid());
  {
    LOOM_ASSIGN_OR_RETURN(ScopedFd fd, CreateFile(tmp));
    absl::Status s = WriteAll(fd.get(), tmp, contents.data(), contents.size());
    if (s.ok()) s = FsyncFile(fd.get(), tmp);
    if (!s.ok()) {
      unlink(tmp.c_str());
      return s;
    }
  }
  absl::Status s = RenamePath(tmp, path);
  if (!s.ok()) {
    unlink(tmp.c_str());
    return s;
  }
  size_t slash = path.rfind('/');
  return FsyncDir(slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash)));
}

absl::StatusOr<std::string> ReadSmallFile(const std::string& path, size_t max_bytes) {
  LOOM_ASSIGN_OR_RETURN(ScopedFd fd, OpenForRead(path));
  LOOM_ASSIGN_OR_RETURN(uint64_t size, FileSize(fd.get(), path));
  if (size > max_bytes) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, ": file is ", size, " bytes, above the limit of ", max_bytes));
  }
  std::string out(static_cast<size_t>(size), '\0');
  LOOM_RETURN_IF_ERROR(PreadFully(fd.get(), path, 0, out.data(), out.size()));
  return out;
}

absl::Status MakeDir(const std::string& path) {
  LOOM_RETURN_IF_ERROR(CheckHook("mkdir", path));
  if (mkdir(path.c_str(), 0755) != 0 && errno != EEXIST) return Errno("mkdir", path, errno);
  return absl::OkStatus();
}

absl::Status RenamePath(const std::string& from, const std::string& to) {
  LOOM_RETURN_IF_ERROR(CheckHook("rename", to));
  if (rename(from.c_str(), to.c_str()) != 0) return Errno(absl::StrCat("rename ", from, " ->"), to, errno);
  return absl::OkStatus();
}

absl::Status RemoveTree(const std::string& path) {
  struct stat st;
  if (lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return absl::OkStatus();
    return Errno("lstat", path, errno);
  }
  if (S_ISDIR(st.st_mode)) {
    LOOM_ASSIGN_OR_RETURN(std::vector<std::string> names, ListDir(path));
    for (const std::string& n : names) LOOM_RETURN_IF_ERROR(RemoveTree(absl::StrCat(path, "/", n)));
    if (rmdir(path.c_str()) != 0 && errno != ENOENT) return Errno("rmdir", path, errno);
  } else if (unlink(path.c_str()) != 0 && errno != ENOENT) {
    return Errno("unlink", path, errno);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> ListDir(const std::string& dir) {
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return Errno("opendir", dir, errno);
  std::vector<std::string> out;
  while (struct dirent* e = readdir(d)) {
    std::string n = e->d_name;
    if (n != "." && n != "..") out.push_back(n);
  }
  closedir(d);
  return out;
}

bool PathExists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

bool IsDirectory(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

}  // namespace loom::runtime::checkpoint
