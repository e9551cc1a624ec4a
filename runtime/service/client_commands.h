// The job-control subcommands of the `loom` CLI, as gRPC clients of the
// coordinator's JobService:
//
//   loom submit JOB.yaml [--key K] [--wait-for-capacity] [--watch]
//   loom jobs [--state STATE]... [--name-prefix P] [--limit N]
//   loom status JOB_ID [--watch]
//   loom cancel JOB_ID
//   loom logs JOB_ID [--rank N] [--follow]
//
// Common flags: --coordinator HOST:PORT (env LOOM_COORDINATOR, default
// 127.0.0.1:7070), --data-dir DIR (where the token is found unless env
// LOOM_TOKEN is set), --json (one JSON object per line instead of text),
// --timeout-s N (default 30), --tls-ca PEM (env LOOM_TLS_CA: use TLS and
// verify the coordinator against it) with --tls-cert/--tls-key (env
// LOOM_TLS_CERT/LOOM_TLS_KEY) for mutual TLS. `submit` validates the YAML locally first, then
// retries UNAVAILABLE with the same idempotency key (a random one unless
// --key is given) until acknowledged or the timeout, so a coordinator restart
// never loses or duplicates the submission.
//
// Exit codes: 0 success (with --watch: the job SUCCEEDED), 1 runtime failure
// (unreachable coordinator, job FAILED/CANCELLED when watched), 2 bad usage or
// input (INVALID_ARGUMENT, NOT_FOUND, FAILED_PRECONDITION, UNAUTHENTICATED...).
#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace loom::runtime::service {

// `cmd` is one of submit, jobs, status, cancel, logs.
int RunClientCommand(const std::string& cmd, const std::vector<std::string>& args, std::ostream& out,
                     std::ostream& err);

// Wrappers with the `loom` binary's command signature (stdout/stderr).
int RunSubmitCommand(const std::vector<std::string>& args);
int RunJobsCommand(const std::vector<std::string>& args);
int RunStatusCommand(const std::vector<std::string>& args);
int RunCancelCommand(const std::vector<std::string>& args);
int RunLogsCommand(const std::vector<std::string>& args);

}  // namespace loom::runtime::service
