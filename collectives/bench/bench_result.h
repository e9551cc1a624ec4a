// Results of `loom bench collectives` and how they are printed: one table per
// (ranks, op) with a row per (size, implementation), or one JSON document.
//
//   ## all_reduce, 2 ranks  (busbw = algbw x 1.000; vs torch = busbw / torch busbw)
//          size  impl           time(us)  algbw(GB/s)  busbw(GB/s)  vs torch  check
//         1 KiB  loom:gloo         152.3        0.007        0.007     2.45x  ok
//         1 KiB  torch:gloo        373.1        0.003        0.003         -  ok
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace loom::collectives::bench {

struct BenchRow {
  std::string impl;  // "loom:gloo", "torch:gloo", "pinned:d2h", "pinned:h2d"
  int ranks = 0;
  std::string op;
  int64_t bytes = 0;      // the full buffer
  double time_us = 0;     // per op, slowest rank
  bool ok = true;         // every rank's checks passed
  std::string na;         // non-empty: not measured, and why
  // cuda:gloo all_reduce, the slowest rank: per op, us on the staging thread
  // waiting for the copies to the host, in the inner ops, waiting for the
  // copies back, and the op's whole run; and the inner algorithm's threads'
  // own waits for pieces to land, or the shared-memory all_reduce's waits for
  // the other ranks (StagedBackend::Stats).
  double to_host_us = 0, inner_us = 0, to_device_us = 0, run_us = 0, algorithm_host_us = 0;
  // With several rounds (KeepFastest): the median of the rounds' times, the
  // mean of the middle two for an even count; 0 for one round.
  double median_us = 0;
  double algbw() const { return time_us > 0 ? bytes / time_us / 1e3 : 0; }  // GB/s
  double busbw() const { return BusbwAt(time_us); }  // pinned copy rows: algbw (one copy, no bus factor)
  double median_busbw() const { return BusbwAt(median_us); }  // 0 without a median
  double BusbwAt(double us) const;  // busbw of an op taking `us` (0 for us <= 0)
};

struct BenchReport {
  double memcpy_gbps = 0;
  int cores = 0;
  std::string torch_status;  // "torch 1.13.0" or why there is no torch column
  std::vector<BenchRow> rows;
  std::vector<std::string> failures;  // runs that did not complete
  int checks = 0;                     // (impl, ranks, op, size) results checked
  int wrong = 0;                      // of which had wrong elements
};

// Rows of the same (impl, ranks, op, bytes) from several rounds, collapsed
// into the fastest measured one (its phases with it), in the order each key
// first appeared, with the median of the measured rounds in median_us (two
// or more). Rows not measured (`na` set) keep their first.
void KeepFastest(std::vector<BenchRow>* rows);

// The tables for `ranks`, in the order of `ops`, over every impl present.
std::string FormatTables(const BenchReport& r, int ranks, const std::vector<std::string>& ops);
std::string FormatJson(const BenchReport& r);
// cuda:gloo all_reduce against its bound, one line per size at `ranks`:
//   # cuda:gloo all_reduce 4 MiB x2: busbw 9.1 GB/s = 87% of min(pinned d2h 20.3,
//     pinned h2d 19.8, loom:gloo 10.4) GB/s
// (pinned rows give bytes / time of one copy per rank, every rank copying at
// once), each followed by where the op's time went on the staging thread:
//   #   per op 1880 us: staging run 1850 = wait for copies to host 160 +
//     inner ops 1000 + wait for copies to device 160 + pipeline 530; the
//     algorithm waited 80 us for pieces or other ranks (inside the inner ops)
// "" when there is no cuda:gloo row.
std::string FormatStagingBound(const BenchReport& r, int ranks);
// "verification: ..." (one line, no newline).
std::string VerificationLine(const BenchReport& r);

}  // namespace loom::collectives::bench
