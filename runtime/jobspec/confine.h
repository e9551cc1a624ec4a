// Where a job may read and write: job names that are safe as path components,
// and paths confined to allowed root folders after following symlinks.
//
// The coordinator checks every submitted spec with these (ValidateJobName,
// ConfineSpecPaths for every path field); a worker
// checks the same paths again, against the roots its launch order names, right
// before it opens them (runtime/launch/worker_command.cc).
//
//   LOOM_RETURN_IF_ERROR(ValidateJobName("spec.name", spec.name()));
//   LOOM_RETURN_IF_ERROR(ConfinePath("spec.data.path", spec.data().path(), roots));
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/loom/v1/job.pb.h"

namespace loom::runtime::jobspec {

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

// A data path that may name several files: ConfinePath of the path itself,
// then of every file it reaches, so that a link inside an allowed folder
// cannot lead out of it: each entry of a directory (not recursive), each
// match of a glob (`*`, `?`, `[`).
absl::Status ConfineDataPath(const std::string& field, const std::string& path, const std::vector<std::string>& roots);

// Every path field of a job spec (data.path, data.val, data.labels,
// data.val_labels, run_dir, checkpoint.dir, init_from, model.onnx), each
// named `prefix` + its spec path ("spec." at submit, "" in a worker).
absl::Status ConfineJobPaths(const std::string& prefix, const std::string& data_path, const std::string& data_val,
                             const std::string& labels, const std::string& val_labels, const std::string& run_dir,
                             const std::string& checkpoint_dir, const std::string& init_from,
                             const std::string& onnx, const std::vector<std::string>& roots);

// data.tokenizer's paths, each named `prefix` + "data.tokenizer." + its key:
// the files (model, vocab, merges, json) with ConfinePath, and the tokenizer
// folder (dir) with ConfineDataPath, so that every file in it is inside the
// roots too (its loom-tokenizer.json names files inside the folder). A dir
// that names the description file itself confines the file and the folder
// that holds it.
absl::Status ConfineTokenizerPaths(const std::string& prefix, const v1::TokenizerSpec& tokenizer,
                                   const std::vector<std::string>& roots);

// Every path field of `spec`: ConfineJobPaths, then ConfineTokenizerPaths.
absl::Status ConfineSpecPaths(const std::string& prefix, const v1::JobSpec& spec,
                              const std::vector<std::string>& roots);

}  // namespace loom::runtime::jobspec
