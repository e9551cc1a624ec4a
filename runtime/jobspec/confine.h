// Where a job may read and write: job names that are safe as path components,
// and paths confined to allowed root folders after following symlinks.
//
// The coordinator checks every submitted spec with these (ValidateJobName,
// ConfinePath for data.path, run_dir, checkpoint.dir and init_from); a worker
// checks the same paths again, against the roots its launch order names, right
// before it opens them (runtime/launch/worker_command.cc).
//
//   LOOM_RETURN_IF_ERROR(ValidateJobName("spec.name", spec.name()));
//   LOOM_RETURN_IF_ERROR(ConfinePath("spec.data.path", spec.data().path(), roots));
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace loom::jobspec {

// A job name: [a-z0-9][a-z0-9._-]{0,62}. InvalidArgument naming `field`.
absl::Status ValidateJobName(const std::string& field, const std::string& name);

// The absolute path `path` names once every symlink in it is followed: the
// longest existing prefix goes through realpath(3), the rest is appended as
// written (it does not exist yet, so it holds no link). InvalidArgument naming
// `field` when a component is `..` (never allowed, resolved or not).
absl::StatusOr<std::string> ResolvePath(const std::string& field, const std::string& path);

// OK when `path` is empty or resolves (ResolvePath) to a folder in `roots`
// (each resolved the same way) or below one; InvalidArgument naming `field`,
// the path, what it resolves to, and the roots otherwise. With no roots, only
// `..` is refused.
absl::Status ConfinePath(const std::string& field, const std::string& path, const std::vector<std::string>& roots);

}  // namespace loom::jobspec
