#include "kernels/cuda/tuning_cache.h"

#include <fcntl.h>
#include <unistd.h>

#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"

namespace loom::kernels::cuda {
namespace {

std::string Clean(std::string s) {
  for (char& c : s)
    if (c == '\t' || c == '\n' || c == '\r') c = ' ';
  return s;
}

}  // namespace

TuningCache& TuningCache::Global() {
  static TuningCache* c = new TuningCache();
  return *c;
}

absl::Status TuningCache::Open(const std::string& path) {
  std::map<std::string, std::string> entries;
  if (!path.empty() && ::access(path.c_str(), F_OK) == 0) {
    std::ifstream f(path);
    if (!f) return absl::UnavailableError(absl::StrCat("tuning cache: cannot read ", path));
    std::string line;
    while (std::getline(f, line)) {
      const size_t tab = line.find('\t');
      if (tab == std::string::npos || tab == 0 || tab + 1 >= line.size()) continue;  // malformed
      if (line.find('\t', tab + 1) != std::string::npos) continue;
      entries[line.substr(0, tab)] = line.substr(tab + 1);
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  path_ = path;
  entries_ = std::move(entries);
  return absl::OkStatus();
}

std::string TuningCache::path() const {
  std::lock_guard<std::mutex> lock(mu_);
  return path_;
}

std::optional<std::string> TuningCache::Get(const std::string& key) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(Clean(key));
  if (it == entries_.end()) return std::nullopt;
  return it->second;
}

void TuningCache::Put(const std::string& key, const std::string& value) {
  const std::string k = Clean(key), v = Clean(value);
  if (k.empty() || v.empty()) return;
  std::lock_guard<std::mutex> lock(mu_);
  entries_[k] = v;
  if (path_.empty()) return;
  const std::string line = absl::StrCat(k, "\t", v, "\n");
  const int fd = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  if (fd < 0) return;
  const ssize_t w = ::write(fd, line.data(), line.size());
  (void)w;
  ::close(fd);
}

size_t TuningCache::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return entries_.size();
}

std::string DeviceTag(const std::string& name, int major, int minor) {
  return Clean(absl::StrCat(name, " sm", major, minor));
}

}  // namespace loom::kernels::cuda
