// Fuzz body for the coordinator's request handlers, shared by the libFuzzer
// target (coordinator_fuzz.cc, built by scripts/fuzz.sh with clang and
// ASan/UBSan) and by corpus_replay_test (a plain Bazel test replaying the
// committed corpus). No network: the Coordinator the gRPC services call is
// driven in-process, as server.cc drives it after authentication.
//
// Input: byte 0 picks the call (SubmitJob, GetJob, ListJobs, CancelJob,
// RegisterAgent, Heartbeat, PollOrders, ReportExit, ReportProgress,
// AppendLogs); the rest is that call's request message. Bytes the request
// type cannot decode are what gRPC rejects before any handler runs, so they
// stop there. NodeService calls come from the one agent registered at start
// ("agent-1-node"); a request naming another agent is refused as the server
// refuses it. The coordinator lives for the whole process, in a fresh data
// folder under $TMPDIR (or /tmp). Besides never crashing, it aborts when an
// error comes with an empty message or one over 4 KiB.
#pragma once

#include <cstddef>
#include <cstdint>

namespace loom::runtime::service::fuzz {

void FuzzCoordinator(const uint8_t* data, size_t size);

}  // namespace loom::runtime::service::fuzz
