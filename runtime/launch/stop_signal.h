// How a worker stops. SIGTERM (an agent's kill order: a cancel, a group
// restart) and SIGINT get a handler that only writes the signal's number to a
// pipe; one thread reads it, closes the checkpoint commit gate (waiting for a
// commit already past its check), writes one line to stderr naming the last
// checkpoint step this process committed, and ends the process at once with
// 128 + the signal. So a worker stops within milliseconds of the signal,
// whatever its threads are doing (a step, a collective waiting on a peer that
// is gone), and commits no checkpoint after it: the signal is the cancel's
// acknowledgement.
//
// A handler rather than a blocked mask and sigwait: threads that libraries
// start before main (OpenBLAS's pool) keep the signal unblocked, and there the
// default action would end the process without closing the gate.
#pragma once

#include "runtime/checkpoint/checkpoint.h"

namespace loom::runtime::launch {

// Call once, early; `gate` must outlive the process.
void StopOnSignals(checkpoint::CommitGate* gate);

}  // namespace loom::runtime::launch
