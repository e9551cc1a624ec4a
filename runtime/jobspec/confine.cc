#include "runtime/jobspec/confine.h"

#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace loom::jobspec {
namespace {

namespace fs = std::filesystem;

bool IsNameChar(char c, bool first) {
  if ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9')) return true;
  return !first && (c == '.' || c == '_' || c == '-');
}

bool Within(const fs::path& p, const fs::path& root) {
  fs::path rel = p.lexically_relative(root);
  return !rel.empty() && *rel.begin() != "..";
}

}  // namespace

absl::Status ValidateJobName(const std::string& field, const std::string& name) {
  bool ok = !name.empty() && name.size() <= 63;
  for (size_t i = 0; ok && i < name.size(); ++i) ok = IsNameChar(name[i], i == 0);
  if (ok) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(field, ": must match [a-z0-9][a-z0-9._-]{0,62} (a folder name), got '",
                                                 name.substr(0, 80), name.size() > 80 ? "...'" : "'"));
}

absl::StatusOr<std::string> ResolvePath(const std::string& field, const std::string& path) {
  fs::path p(path);
  for (const fs::path& part : p) {
    if (part == "..") return absl::InvalidArgumentError(absl::StrCat(field, ": '..' is not allowed (got ", path, ")"));
  }
  std::error_code ec;
  fs::path prefix = (p.is_absolute() ? p : fs::current_path(ec) / p).lexically_normal();
  if (ec) return absl::InvalidArgumentError(absl::StrCat(field, ": cannot resolve '", path, "': ", ec.message()));
  if (prefix.has_filename() == false && prefix != prefix.root_path()) prefix = prefix.parent_path();  // "a/b/"
  fs::path rest;
  for (;;) {
    char buf[PATH_MAX];
    if (::realpath(prefix.c_str(), buf) != nullptr) return (fs::path(buf) / rest).lexically_normal().string();
    const int err = errno;
    struct stat sb;
    if (::lstat(prefix.c_str(), &sb) == 0) {  // it exists, yet does not resolve: a dangling or looping link
      return absl::InvalidArgumentError(absl::StrCat(field, ": cannot resolve '", prefix.string(), "' in '", path,
                                                     "': ", std::strerror(err)));
    }
    if (prefix == prefix.root_path() || !prefix.has_parent_path()) {
      return absl::InvalidArgumentError(absl::StrCat(field, ": cannot resolve '", path, "'"));
    }
    rest = rest.empty() ? prefix.filename() : prefix.filename() / rest;
    prefix = prefix.parent_path();
  }
}

absl::Status ConfinePath(const std::string& field, const std::string& path, const std::vector<std::string>& roots) {
  if (path.empty()) return absl::OkStatus();
  absl::StatusOr<std::string> real = ResolvePath(field, path);
  if (!real.ok() || roots.empty()) return real.status();
  for (const std::string& root : roots) {
    absl::StatusOr<std::string> r = ResolvePath("allowed root", root);
    if (r.ok() && Within(*real, *r)) return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(field, ": '", path, "' is outside the allowed roots (",
                                                 absl::StrJoin(roots, ", "), ")",
                                                 *real == path ? "" : absl::StrCat("; it resolves to ", *real)));
}

}  // namespace loom::jobspec
