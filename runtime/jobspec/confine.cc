#include "runtime/jobspec/confine.h"

#include <limits.h>
#include <stdlib.h>
#include <glob.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "base/echo.h"
#include "base/status.h"
#include "absl/strings/str_join.h"

namespace loom::runtime::jobspec {
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
                                                 EchoValue(name), "'"));
}

absl::StatusOr<std::string> ResolvePath(const std::string& field, const std::string& path) {
  fs::path p(path);
  for (const fs::path& part : p) {
    if (part == "..") return absl::InvalidArgumentError(absl::StrCat(field, ": '..' is not allowed (got ", EchoValue(path), ")"));
  }
  std::error_code ec;
  fs::path prefix = (p.is_absolute() ? p : fs::current_path(ec) / p).lexically_normal();
  if (ec) return absl::InvalidArgumentError(absl::StrCat(field, ": cannot resolve '", EchoValue(path), "': ", ec.message()));
  if (prefix.has_filename() == false && prefix != prefix.root_path()) prefix = prefix.parent_path();  // "a/b/"
  fs::path rest;
  for (;;) {
    char buf[PATH_MAX];
    if (::realpath(prefix.c_str(), buf) != nullptr) return (fs::path(buf) / rest).lexically_normal().string();
    const int err = errno;
    struct stat sb;
    if (::lstat(prefix.c_str(), &sb) == 0) {  // it exists, yet does not resolve: a dangling or looping link
      return absl::InvalidArgumentError(absl::StrCat(field, ": cannot resolve '", EchoValue(prefix.string()), "' in '", EchoValue(path),
                                                     "': ", std::strerror(err)));
    }
    if (prefix == prefix.root_path() || !prefix.has_parent_path()) {
      return absl::InvalidArgumentError(absl::StrCat(field, ": cannot resolve '", EchoValue(path), "'"));
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
  return absl::InvalidArgumentError(absl::StrCat(field, ": '", EchoValue(path), "' is outside the allowed roots (",
                                                 absl::StrJoin(roots, ", "), ")",
                                                 *real == path ? "" : absl::StrCat("; it resolves to ", EchoValue(*real))));
}

absl::Status ConfineDataPath(const std::string& field, const std::string& path, const std::vector<std::string>& roots) {
  if (path.empty()) return absl::OkStatus();
  std::vector<std::string> reached;
  if (path.find_first_of("*?[") != std::string::npos) {
    glob_t g;
    if (::glob(path.c_str(), 0, nullptr, &g) == 0) {
      for (size_t i = 0; i < g.gl_pathc; ++i) reached.emplace_back(g.gl_pathv[i]);
    }
    ::globfree(&g);
    // The folder the pattern starts in.
    const fs::path fixed = fs::path(path.substr(0, path.find_first_of("*?["))).parent_path();
    LOOM_RETURN_IF_ERROR(ConfinePath(field, fixed.empty() ? "." : fixed.string(), roots));
  } else {
    LOOM_RETURN_IF_ERROR(ConfinePath(field, path, roots));
    std::error_code ec;
    if (fs::is_directory(path, ec)) {
      for (const auto& e : fs::directory_iterator(path, ec)) reached.push_back(e.path().string());
    }
  }
  for (const std::string& f : reached) LOOM_RETURN_IF_ERROR(ConfinePath(field, f, roots));
  return absl::OkStatus();
}

absl::Status ConfineJobPaths(const std::string& prefix, const std::string& data_path, const std::string& data_val,
                             const std::string& labels, const std::string& val_labels, const std::string& run_dir,
                             const std::string& checkpoint_dir, const std::string& init_from,
                             const std::string& onnx, const std::vector<std::string>& roots) {
  LOOM_RETURN_IF_ERROR(ConfineDataPath(prefix + "data.path", data_path, roots));
  LOOM_RETURN_IF_ERROR(ConfineDataPath(prefix + "data.val", data_val, roots));
  LOOM_RETURN_IF_ERROR(ConfineDataPath(prefix + "data.labels", labels, roots));
  LOOM_RETURN_IF_ERROR(ConfineDataPath(prefix + "data.val_labels", val_labels, roots));
  LOOM_RETURN_IF_ERROR(ConfinePath(prefix + "run_dir", run_dir, roots));
  LOOM_RETURN_IF_ERROR(ConfinePath(prefix + "checkpoint.dir", checkpoint_dir, roots));
  LOOM_RETURN_IF_ERROR(ConfinePath(prefix + "init_from", init_from, roots));
  return ConfinePath(prefix + "model.onnx", onnx, roots);
}

absl::Status ConfineTokenizerPaths(const std::string& prefix, const v1::TokenizerSpec& tokenizer,
                                   const std::vector<std::string>& roots) {
  const std::string field = prefix + "data.tokenizer.";
  LOOM_RETURN_IF_ERROR(ConfinePath(field + "model", tokenizer.model(), roots));
  LOOM_RETURN_IF_ERROR(ConfinePath(field + "vocab", tokenizer.vocab(), roots));
  LOOM_RETURN_IF_ERROR(ConfinePath(field + "merges", tokenizer.merges(), roots));
  LOOM_RETURN_IF_ERROR(ConfinePath(field + "json", tokenizer.json(), roots));
  const std::string& dir = tokenizer.dir();
  if (dir.empty()) return absl::OkStatus();
  std::error_code ec;
  if (fs::is_directory(dir, ec)) return ConfineDataPath(field + "dir", dir, roots);
  LOOM_RETURN_IF_ERROR(ConfinePath(field + "dir", dir, roots));  // the description file
  const fs::path folder = fs::path(dir).parent_path();
  return ConfineDataPath(field + "dir", folder.empty() ? "." : folder.string(), roots);
}

absl::Status ConfineSpecPaths(const std::string& prefix, const v1::JobSpec& spec,
                              const std::vector<std::string>& roots) {
  const v1::DataSpec& d = spec.data();
  LOOM_RETURN_IF_ERROR(ConfineJobPaths(prefix, d.path(), d.val(), d.labels(), d.val_labels(), spec.run_dir(),
                                       spec.checkpoint().dir(), spec.init_from(), spec.model().onnx(), roots));
  return ConfineTokenizerPaths(prefix, d.tokenizer(), roots);
}

}  // namespace loom::runtime::jobspec
