// The coordinator's data folder: one coordinator at a time, and a marker that
// remembers the folder has held a job store.
//
// DataDirLock takes flock(LOCK_EX | LOCK_NB) on <data_dir>/lock and holds it
// until destroyed (or the process dies); the file holds the holder's pid, which
// a refused second coordinator names in its error.
//
// IdMarker is <data_dir>/store.marker, written (tmp + fsync + rename + fsync
// of the folder) when a job store is first created there. It holds, per id
// kind ("jobs", "agents"), a reservation: every id ever handed out is at most
// that number. The job store reserves ids in blocks before it commits them, so
// a store recreated with --init (loom.db lost) continues after every id the
// lost store could have acknowledged, and ids never repeat.
//
//   LOOM_ASSIGN_OR_RETURN(auto lock, DataDirLock::Acquire(dir));
//   LOOM_ASSIGN_OR_RETURN(std::optional<IdMarker> m, IdMarker::Read(dir));
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"

namespace loom::runtime::service::store {

inline constexpr char kLockFile[] = "lock";
inline constexpr char kMarkerFile[] = "store.marker";

class DataDirLock {
 public:
  // FailedPrecondition naming the holder's pid when another process holds it.
  static absl::StatusOr<std::unique_ptr<DataDirLock>> Acquire(const std::string& data_dir);
  ~DataDirLock();
  DataDirLock(const DataDirLock&) = delete;
  DataDirLock& operator=(const DataDirLock&) = delete;

 private:
  explicit DataDirLock(int fd) : fd_(fd) {}
  int fd_;
};

struct IdMarker {
  std::map<std::string, int64_t> reserved;  // id kind -> highest id that may exist

  int64_t Get(const std::string& kind) const {
    auto it = reserved.find(kind);
    return it == reserved.end() ? 0 : it->second;
  }
  // nullopt when the folder has no marker; FailedPrecondition naming the file
  // when it cannot be parsed.
  static absl::StatusOr<std::optional<IdMarker>> Read(const std::string& data_dir);
  // Durable when it returns.
  absl::Status Write(const std::string& data_dir) const;
};

}  // namespace loom::runtime::service::store
