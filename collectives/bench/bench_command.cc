#include "collectives/bench/bench_command.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "collectives/bench/bench_config.h"
#include "collectives/bench/bench_result.h"
#include "collectives/bench/bench_worker.h"
#include "collectives/bench/launcher.h"
#include "collectives/bench/torch_peer.h"

namespace loom::collectives::bench {
namespace {

// Best of 5 single-thread memcpy of 256 MiB (pages touched first).
double MemcpyGBps() {
  const size_t n = size_t{256} << 20;
  std::unique_ptr<char[]> a(new char[n]), b(new char[n]);
  std::memset(a.get(), 1, n);
  std::memset(b.get(), 2, n);
  double best = 0;
  for (int i = 0; i < 5; ++i) {
    absl::Time t0 = absl::Now();
    std::memcpy(i % 2 ? a.get() : b.get(), i % 2 ? b.get() : a.get(), n);
    best = std::max(best, n / absl::ToDoubleSeconds(absl::Now() - t0) / 1e9);
  }
  return best;
}

// Runs one Loom backend at `n` ranks; appends rows; returns false if the run failed.
bool RunLoom(const BenchConfig& c, const std::string& backend, int n, BenchReport* report) {
  const std::vector<int64_t> sizes = Sizes(c);
  struct Item {
    int oi, si;
  };
  std::vector<Item> items;
  for (size_t oi = 0; oi < c.ops.size(); ++oi) {
    for (size_t si = 0; si < sizes.size(); ++si) {
      if (ElementsFor(c.ops[oi], sizes[si], n) > 0) items.push_back({static_cast<int>(oi), static_cast<int>(si)});
    }
  }
  size_t next = 0;
  auto collect = [&](store::Store& store) {
    while (next < items.size()) {
      BenchRow row;
      row.impl = "loom:" + backend;
      row.ranks = n;
      row.op = c.ops[items[next].oi];
      row.bytes = ElementsFor(row.op, sizes[items[next].si], n) * 4;
      int64_t wrong = 0;
      BenchRow d2h = row, h2d = row;  // cuda:gloo all_reduce: the pinned copies
      d2h.impl = "pinned:d2h";
      h2d.impl = "pinned:h2d";
      for (int r = 0; r < n; ++r) {
        auto v = store.Get(ResultKey(items[next].oi, items[next].si, r));
        if (!v.ok()) return;
        std::vector<std::string> w = absl::StrSplit(*v, ' ');
        double us = 0, d2h_us = 0, h2d_us = 0;
        int64_t bad = 0;
        if ((w.size() != 2 && w.size() != 4 && w.size() != 9) || !absl::SimpleAtod(w[0], &us) ||
            !absl::SimpleAtoi(w[1], &bad))
          return;
        if (w.size() >= 4 && (!absl::SimpleAtod(w[2], &d2h_us) || !absl::SimpleAtod(w[3], &h2d_us))) return;
        if (w.size() == 9 && us >= row.time_us) {  // the phases of the slowest rank
          if (!absl::SimpleAtod(w[4], &row.to_host_us) || !absl::SimpleAtod(w[5], &row.inner_us) ||
              !absl::SimpleAtod(w[6], &row.to_device_us) || !absl::SimpleAtod(w[7], &row.run_us) ||
              !absl::SimpleAtod(w[8], &row.algorithm_host_us))
            return;
        }
        row.time_us = std::max(row.time_us, us);
        d2h.time_us = std::max(d2h.time_us, d2h_us);
        h2d.time_us = std::max(h2d.time_us, h2d_us);
        wrong += bad;
      }
      if (d2h.time_us > 0) report->rows.push_back(d2h);
      if (h2d.time_us > 0) report->rows.push_back(h2d);
      row.ok = wrong == 0;
      ++report->checks;
      if (!row.ok) ++report->wrong;
      if (!c.json) {
        fprintf(stderr, "#   %s x%d %s %s: %.1f us%s\n", row.impl.c_str(), n, row.op.c_str(),
                FormatBytes(row.bytes).c_str(), row.time_us, row.ok ? "" : " WRONG");
      }
      report->rows.push_back(row);
      ++next;
    }
  };
  if (!c.json) fprintf(stderr, "# running loom:%s with %d ranks ...\n", backend.c_str(), n);
  LaunchResult res = LaunchRanks({.role = "loom:" + backend, .world = n,
                                  .deadline = absl::Seconds(c.timeout_s), .poll = collect});
  if (!res.ok() || next < items.size()) {
    report->failures.push_back(absl::StrCat("loom:", backend, " x", n, ": ", res.Summary(),
                                            next < items.size() ? " (incomplete results)" : ""));
    return false;
  }
  return true;
}

int Usage(const std::string& error) {
  fprintf(stderr, "loom bench collectives: %s\n\n%s", error.c_str(), kBenchUsage);
  return 2;
}

}  // namespace

int RunCollectivesBench(const std::vector<std::string>& args) {
  std::string role = LaunchedWorkerRole();
  if (!args.empty() && (args[0] == "-h" || args[0] == "--help")) {
    fputs(kBenchUsage, stdout);
    return 0;
  }
  auto config = ParseBenchFlags(args);
  if (!config.ok()) {
    if (!role.empty()) return 2;
    return Usage(std::string(config.status().message()));
  }
  const BenchConfig& c = *config;
  if (role.rfind("loom:", 0) == 0) return RunBenchWorker(role.substr(5), c);
  if (!role.empty()) {
    fprintf(stderr, "loom bench collectives: unknown worker role '%s'\n", role.c_str());
    return 2;
  }

  BenchReport report;
  report.cores = static_cast<int>(std::thread::hardware_concurrency());
  report.memcpy_gbps = MemcpyGBps();
  if (!c.json) {
    printf("# loom bench collectives: f32 sum; ops %s; sizes %s..%s x%d; backends %s; ranks %s%s\n",
           absl::StrJoin(c.ops, ",").c_str(), FormatBytes(c.min_bytes).c_str(), FormatBytes(c.max_bytes).c_str(),
           c.step, absl::StrJoin(c.backends, ",").c_str(), absl::StrJoin(c.ranks, ",").c_str(),
           c.rounds > 1 ? absl::StrCat("; fastest of ", c.rounds, " alternating rounds").c_str() : "");
    printf("# memcpy bandwidth (one thread, 256 MiB): %.2f GB/s  (the ceiling for busbw over loopback)\n",
           report.memcpy_gbps);
    printf("# this host: %d cores%s\n", report.cores,
           *std::max_element(c.ranks.begin(), c.ranks.end()) > report.cores
               ? "; ranks beyond the core count oversubscribe it (figures then measure scheduling)"
               : "");
    fflush(stdout);
  }
  for (int n : c.ranks) {
    // Alternating order (A B, B A, A B, ...), so that no backend always runs
    // first; each row keeps its fastest round.
    for (int round = 0; round < c.rounds; ++round) {
      std::vector<std::string> order = c.backends;
      if (round % 2 == 1) std::reverse(order.begin(), order.end());
      for (const std::string& b : order) RunLoom(c, b, n, &report);
    }
    if (c.rounds > 1) KeepFastest(&report.rows);
    if (c.torch != TorchMode::kOff) {
      if (!c.json) fprintf(stderr, "# running torch.distributed gloo with %d ranks ...\n", n);
      TorchRun t = RunTorchPeer(c, n);
      if (report.torch_status.empty() || t.available) report.torch_status = t.status;
      for (BenchRow& r : t.rows) {
        if (r.na.empty()) {
          ++report.checks;
          if (!r.ok) ++report.wrong;
        }
        report.rows.push_back(r);
      }
      if (!t.error.empty()) report.failures.push_back(t.error);
      if (!t.available && c.torch == TorchMode::kOn) report.failures.push_back(t.status);
    } else {
      report.torch_status = "no torch column: --torch=0";
    }
    if (!c.json) {
      if (n == c.ranks.front()) printf("# %s\n", report.torch_status.c_str());
      fputs(FormatTables(report, n, c.ops).c_str(), stdout);
      fputs(FormatStagingBound(report, n).c_str(), stdout);
      fflush(stdout);
    }
  }
  if (c.json) {
    fputs(FormatJson(report).c_str(), stdout);
  } else {
    printf("\n");
    for (const std::string& f : report.failures) printf("# FAILED: %s\n", f.c_str());
    printf("%s\n", VerificationLine(report).c_str());
  }
  fflush(stdout);
  return report.failures.empty() && report.wrong == 0 ? 0 : 1;
}

int RunBenchCommand(const std::vector<std::string>& args) {
  if (args.empty() || args[0] == "-h" || args[0] == "--help") {
    fprintf(args.empty() ? stderr : stdout, "usage: loom bench collectives [flags]   (--help for the flags)\n");
    return args.empty() ? 2 : 0;
  }
  if (args[0] == "collectives") return RunCollectivesBench({args.begin() + 1, args.end()});
  fprintf(stderr, "loom bench: unknown benchmark '%s' (known: collectives)\n", args[0].c_str());
  return 2;
}

}  // namespace loom::collectives::bench
