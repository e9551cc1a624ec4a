// Status helpers used across Loom.
//
// Abseil ships absl::Status / absl::StatusOr but no propagation macros. These two
// keep call sites short while appending nothing implicitly: context is added with
// loom::Annotate where it helps the reader of the error.
//
//   LOOM_RETURN_IF_ERROR(CheckShape(a, "a"));
//   LOOM_ASSIGN_OR_RETURN(Tensor t, Tensor::Empty(...));
#pragma once

#include "absl/strings/string_view.h"
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

#define LOOM_STATUS_CONCAT_INNER(a, b) a##b
#define LOOM_STATUS_CONCAT(a, b) LOOM_STATUS_CONCAT_INNER(a, b)

#define LOOM_RETURN_IF_ERROR(expr)                        \
  do {                                                    \
    ::absl::Status _loom_status = (expr);                 \
    if (!_loom_status.ok()) return _loom_status;          \
  } while (0)

#define LOOM_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                               \
  if (!tmp.ok()) return tmp.status();              \
  lhs = std::move(tmp).value()

#define LOOM_ASSIGN_OR_RETURN(lhs, expr) \
  LOOM_ASSIGN_OR_RETURN_IMPL(LOOM_STATUS_CONCAT(_loom_statusor_, __LINE__), lhs, expr)

namespace loom {

// Returns `s` with "context: " prepended to its message (same code). OK stays OK.
inline absl::Status Annotate(const absl::Status& s, absl::string_view context) {
  if (s.ok()) return s;
  return absl::Status(s.code(), absl::StrCat(context, ": ", s.message()));
}

}  // namespace loom
