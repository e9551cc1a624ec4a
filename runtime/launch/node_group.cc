#include "runtime/launch/node_group.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"

namespace loom::runtime::launch {
namespace {

// Writes `text` to `path` through a private temporary file and a rename, so
// a reader on another node sees all of it or nothing.
absl::Status WriteAtomically(const std::string& path, const std::string& text) {
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  if (ec) return absl::FailedPreconditionError(absl::StrCat("rendezvous folder: cannot create it: ", ec.message()));
  const std::string tmp = absl::StrCat(path, ".tmp.", getpid());
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (fd < 0) return absl::FailedPreconditionError(absl::StrCat("rendezvous folder: cannot write ", tmp));
  bool ok = write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  ok = fsync(fd) == 0 && ok;
  close(fd);
  if (!ok || rename(tmp.c_str(), path.c_str()) != 0)
    return absl::FailedPreconditionError(absl::StrCat("rendezvous folder: cannot write ", path));
  return absl::OkStatus();
}

}  // namespace

absl::Status PublishRendezvous(const NodeGroup& g, const Rendezvous& r) {
  return WriteAtomically(g.rdzv_dir + "/coordinator", absl::StrCat(r.coordinator, "\n", r.join_token, "\n"));
}

absl::StatusOr<Rendezvous> AwaitRendezvous(const NodeGroup& g) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(g.rdzv_timeout_s);
  const std::string path = g.rdzv_dir + "/coordinator";
  while (true) {
    std::ifstream in(path);
    Rendezvous r;
    if (in && std::getline(in, r.coordinator) && std::getline(in, r.join_token) && !r.coordinator.empty() &&
        !r.join_token.empty())
      return r;
    if (std::chrono::steady_clock::now() >= deadline)
      return absl::DeadlineExceededError(absl::StrCat("node ", g.node_rank, ": node 0 published no coordinator in ",
                                                      path, " within ", g.rdzv_timeout_s,
                                                      " s (is the rendezvous folder shared by every node?)"));
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

}  // namespace loom::runtime::launch
