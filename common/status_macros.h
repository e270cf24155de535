// Status propagation macros. Abseil 20220623 (Debian 12) ships neither
// ABSL_RETURN_IF_ERROR nor ASSIGN_OR_RETURN, so we carry the two we need.
#ifndef ROPE_COMMON_STATUS_MACROS_H_
#define ROPE_COMMON_STATUS_MACROS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define ROPE_CONCAT_INNER_(a, b) a##b
#define ROPE_CONCAT_(a, b) ROPE_CONCAT_INNER_(a, b)

// Evaluates `expr` (an absl::Status) once and returns it from the enclosing
// function if it is not OK.
#define ROPE_RETURN_IF_ERROR(expr)                   \
  do {                                               \
    ::absl::Status rope_status_ = (expr);            \
    if (!rope_status_.ok()) return rope_status_;     \
  } while (false)

// `lhs = value of expr` where expr is an absl::StatusOr<T>; returns the error
// from the enclosing function otherwise. `lhs` may be a declaration.
#define ROPE_ASSIGN_OR_RETURN(lhs, expr) \
  ROPE_ASSIGN_OR_RETURN_IMPL_(ROPE_CONCAT_(rope_statusor_, __LINE__), lhs, expr)
#define ROPE_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                \
  if (!tmp.ok()) return std::move(tmp).status();    \
  lhs = std::move(tmp).value()

#endif  // ROPE_COMMON_STATUS_MACROS_H_
