#include "runtime/service/store/data_dir.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace loom::runtime::service::store {
namespace {

constexpr char kMarkerHeader[] = "# loom data folder: it has held a job store (loom.db); ids reserved so far";

absl::Status WriteAll(int fd, const std::string& s, const std::string& path) {
  size_t done = 0;
  while (done < s.size()) {
    ssize_t n = ::write(fd, s.data() + done, s.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return absl::UnavailableError(absl::StrCat("cannot write ", path, ": ", std::strerror(errno)));
    done += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

absl::Status FsyncPath(const std::string& path, int flags) {
  int fd = ::open(path.c_str(), flags | O_CLOEXEC);
  if (fd < 0) return absl::UnavailableError(absl::StrCat("cannot open ", path, ": ", std::strerror(errno)));
  int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) return absl::UnavailableError(absl::StrCat("cannot fsync ", path, ": ", std::strerror(errno)));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<DataDirLock>> DataDirLock::Acquire(const std::string& data_dir) {
  const std::string path = absl::StrCat(data_dir, "/", kLockFile);
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) {
    return absl::UnavailableError(absl::StrCat("data_dir: cannot open ", path, ": ", std::strerror(errno)));
  }
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    char holder[32] = {0};
    ssize_t n = ::pread(fd, holder, sizeof holder - 1, 0);
    ::close(fd);
    if (err == EWOULDBLOCK) {
      std::string pid = n > 0 ? std::string(absl::StripAsciiWhitespace(holder)) : "unknown";
      return absl::FailedPreconditionError(absl::StrCat("data_dir: ", data_dir,
                                                        " is in use by another coordinator (pid ", pid, ", holding ",
                                                        path, "); one coordinator per data folder"));
    }
    return absl::UnavailableError(absl::StrCat("data_dir: cannot lock ", path, ": ", std::strerror(err)));
  }
  std::string pid = absl::StrCat(::getpid(), "\n");
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, pid.data(), pid.size(), 0) != static_cast<ssize_t>(pid.size())) {
    ::close(fd);
    return absl::UnavailableError(absl::StrCat("data_dir: cannot write ", path, ": ", std::strerror(errno)));
  }
  return std::unique_ptr<DataDirLock>(new DataDirLock(fd));
}

DataDirLock::~DataDirLock() { ::close(fd_); }

absl::StatusOr<std::optional<IdMarker>> IdMarker::Read(const std::string& data_dir) {
  const std::string path = absl::StrCat(data_dir, "/", kMarkerFile);
  std::ifstream in(path);
  if (!in) {
    if (::access(path.c_str(), F_OK) != 0 && errno == ENOENT) return std::optional<IdMarker>();
    return absl::UnavailableError(absl::StrCat("cannot read ", path));
  }
  IdMarker m;
  std::string line;
  while (std::getline(in, line)) {
    absl::string_view l = absl::StripAsciiWhitespace(line);
    if (l.empty() || l[0] == '#') continue;
    std::vector<std::string> f = absl::StrSplit(l, ' ', absl::SkipEmpty());
    int64_t v = 0;
    if (f.size() != 2 || !absl::SimpleAtoi(f[1], &v) || v < 0) {
      return absl::FailedPreconditionError(
          absl::StrCat(path, ": expected lines '<kind> <highest id>', got '", l.substr(0, 64), "'"));
    }
    m.reserved[f[0]] = v;
  }
  return std::optional<IdMarker>(std::move(m));
}

absl::Status IdMarker::Write(const std::string& data_dir) const {
  const std::string path = absl::StrCat(data_dir, "/", kMarkerFile);
  const std::string tmp = path + ".tmp";
  std::string text = absl::StrCat(kMarkerHeader, "\n");
  for (const auto& [kind, v] : reserved) absl::StrAppend(&text, kind, " ", v, "\n");
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return absl::UnavailableError(absl::StrCat("cannot create ", tmp, ": ", std::strerror(errno)));
  absl::Status s = WriteAll(fd, text, tmp);
  if (s.ok() && ::fsync(fd) != 0) s = absl::UnavailableError(absl::StrCat("cannot fsync ", tmp));
  ::close(fd);
  if (s.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) {
    s = absl::UnavailableError(absl::StrCat("cannot rename ", tmp, ": ", std::strerror(errno)));
  }
  if (s.ok()) s = FsyncPath(data_dir, O_RDONLY | O_DIRECTORY);
  return s;
}

}  // namespace loom::runtime::service::store
