#include "collectives/bench/bench_result.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "collectives/bench/bench_config.h"

namespace loom::collectives::bench {
namespace {

std::string JsonString(const std::string& s) {
  std::string o = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      o += '\\';
      o += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      absl::StrAppend(&o, absl::StrFormat("\\u%04x", c));
    } else {
      o += c;
    }
  }
  return o + "\"";
}

const BenchRow* TorchRow(const BenchReport& r, const BenchRow& x) {
  for (const BenchRow& t : r.rows) {
    if (t.impl.rfind("torch:", 0) == 0 && t.ranks == x.ranks && t.op == x.op && t.bytes == x.bytes) return &t;
  }
  return nullptr;
}

}  // namespace

double BenchRow::BusbwAt(double us) const {
  if (us <= 0) return 0;
  const double algbw = bytes / us / 1e3;
  return impl.rfind("pinned:", 0) == 0 ? algbw : algbw * BusFactor(op, ranks);
}

std::string FormatStagingBound(const BenchReport& r, int ranks) {
  std::string out;
  auto find = [&](const std::string& impl, int64_t bytes) -> const BenchRow* {
    for (const BenchRow& x : r.rows)
      if (x.impl == impl && x.ranks == ranks && x.op == "all_reduce" && x.bytes == bytes && x.na.empty()) return &x;
    return nullptr;
  };
  for (const BenchRow& x : r.rows) {
    if (x.impl != "loom:cuda:gloo" || x.ranks != ranks || x.op != "all_reduce") continue;
    const BenchRow* d2h = find("pinned:d2h", x.bytes);
    const BenchRow* h2d = find("pinned:h2d", x.bytes);
    const BenchRow* gloo = find("loom:gloo", x.bytes);
    if (!d2h || !h2d || !gloo) continue;
    double bound = std::min({d2h->busbw(), h2d->busbw(), gloo->busbw()});
    absl::StrAppend(&out, absl::StrFormat("# cuda:gloo all_reduce %s x%d: busbw %.3f GB/s = %.0f%% of min(pinned d2h "
                                          "%.3f, pinned h2d %.3f, loom:gloo %.3f) GB/s\n",
                                          FormatBytes(x.bytes), ranks, x.busbw(),
                                          bound > 0 ? 100 * x.busbw() / bound : 0.0, d2h->busbw(), h2d->busbw(),
                                          gloo->busbw()));
    if (x.median_us > 0 && d2h->median_us > 0 && h2d->median_us > 0 && gloo->median_us > 0) {
      const double mb = std::min({d2h->median_busbw(), h2d->median_busbw(), gloo->median_busbw()});
      absl::StrAppend(&out, absl::StrFormat("#   median of the rounds: busbw %.3f GB/s = %.0f%% of min(%.3f, %.3f, "
                                            "%.3f) GB/s\n",
                                            x.median_busbw(), mb > 0 ? 100 * x.median_busbw() / mb : 0.0,
                                            d2h->median_busbw(), h2d->median_busbw(), gloo->median_busbw()));
    }
    if (x.run_us > 0) {
      const double rest = x.run_us - x.to_host_us - x.inner_us - x.to_device_us;
      absl::StrAppend(&out, absl::StrFormat("#   per op %.0f us: staging run %.0f = wait for copies to host %.0f + "
                                            "inner ops %.0f + wait for copies to device %.0f + pipeline %.0f; the "
                                            "algorithm waited %.0f us for pieces or other ranks (inside the inner ops)\n",
                                            x.time_us, x.run_us, x.to_host_us, x.inner_us, x.to_device_us, rest,
                                            x.algorithm_host_us));
    }
  }
  return out;
}

void KeepFastest(std::vector<BenchRow>* rows) {
  std::vector<BenchRow> out;
  std::map<std::tuple<std::string, int, std::string, int64_t>, size_t> at;
  std::vector<std::vector<double>> times;  // per kept row: every measured round's time
  for (BenchRow& r : *rows) {
    auto [it, fresh] = at.try_emplace({r.impl, r.ranks, r.op, r.bytes}, out.size());
    if (fresh) times.emplace_back();
    if (r.na.empty() && r.time_us > 0) times[it->second].push_back(r.time_us);
    if (fresh) {
      out.push_back(std::move(r));
      continue;
    }
    BenchRow& kept = out[it->second];
    const bool measured = r.na.empty() && r.time_us > 0;
    if (measured && (!kept.na.empty() || kept.time_us <= 0 || r.time_us < kept.time_us)) {
      const bool ok = kept.ok && r.ok;  // a wrong result in any round stays visible
      kept = std::move(r);
      kept.ok = ok;
    } else if (!r.ok) {
      kept.ok = false;
    }
  }
  for (size_t i = 0; i < out.size(); ++i) {
    std::vector<double>& t = times[i];
    if (t.size() < 2) continue;
    std::sort(t.begin(), t.end());
    const size_t h = t.size() / 2;
    out[i].median_us = t.size() % 2 ? t[h] : (t[h - 1] + t[h]) / 2;
  }
  *rows = std::move(out);
}

std::string FormatTables(const BenchReport& r, int ranks, const std::vector<std::string>& ops) {
  std::string out;
  for (const std::string& op : ops) {
    std::vector<const BenchRow*> rows;
    for (const BenchRow& x : r.rows) if (x.ranks == ranks && x.op == op) rows.push_back(&x);
    if (rows.empty()) continue;
    std::stable_sort(rows.begin(), rows.end(), [](const BenchRow* a, const BenchRow* b) {
      if (a->bytes != b->bytes) return a->bytes < b->bytes;
      return (a->impl.rfind("torch:", 0) == 0) < (b->impl.rfind("torch:", 0) == 0);
    });
    absl::StrAppend(&out, absl::StrFormat(
        "\n## %s, %d ranks  (busbw = algbw x %.3f; vs torch = busbw / torch busbw, >1 = Loom faster)\n",
        op, ranks, BusFactor(op, ranks)));
    absl::StrAppend(&out, absl::StrFormat("%10s  %-11s %10s %12s %12s %9s  %s\n", "size", "impl",
                                          "time(us)", "algbw(GB/s)", "busbw(GB/s)", "vs torch", "check"));
    for (const BenchRow* x : rows) {
      if (!x->na.empty()) {
        absl::StrAppend(&out, absl::StrFormat("%10s  %-11s %s\n", FormatBytes(x->bytes), x->impl, x->na));
        continue;
      }
      std::string vs = "-";
      if (x->impl.rfind("loom:", 0) == 0) {
        const BenchRow* t = TorchRow(r, *x);
        if (t && t->na.empty() && t->time_us > 0) vs = absl::StrFormat("%.2fx", t->time_us / x->time_us);
        else if (t) vs = "n/a";
      }
      absl::StrAppend(&out, absl::StrFormat("%10s  %-11s %10.1f %12.3f %12.3f %9s  %s\n", FormatBytes(x->bytes),
                                            x->impl, x->time_us, x->algbw(), x->busbw(), vs,
                                            x->ok ? "ok" : "WRONG"));
    }
  }
  return out;
}

std::string VerificationLine(const BenchReport& r) {
  if (!r.failures.empty() || r.wrong > 0) {
    return absl::StrCat("verification: FAILED: ", r.wrong, " of ", r.checks, " results wrong, ",
                        r.failures.size(), " run(s) failed");
  }
  return absl::StrCat("verification: ok: all ", r.checks,
                      " results correct on every rank (every element, before and after timing)");
}

std::string FormatJson(const BenchReport& r) {
  std::string o = absl::StrFormat("{\"memcpy_gbps\": %.3f, \"cores\": %d, \"torch\": %s,\n \"results\": [",
                                  r.memcpy_gbps, r.cores, JsonString(r.torch_status));
  for (size_t i = 0; i < r.rows.size(); ++i) {
    const BenchRow& x = r.rows[i];
    absl::StrAppend(&o, i ? ",\n  " : "\n  ",
                    absl::StrFormat("{\"impl\": %s, \"ranks\": %d, \"op\": %s, \"bytes\": %d", JsonString(x.impl),
                                    x.ranks, JsonString(x.op), x.bytes));
    if (!x.na.empty()) {
      absl::StrAppend(&o, ", \"na\": ", JsonString(x.na), "}");
    } else {
      absl::StrAppend(&o, absl::StrFormat(", \"time_us\": %.3f, \"algbw_gbps\": %.4f, \"busbw_gbps\": %.4f, "
                                          "\"check\": %s}",
                                          x.time_us, x.algbw(), x.busbw(), x.ok ? "\"ok\"" : "\"WRONG\""));
    }
  }
  absl::StrAppend(&o, "],\n \"failures\": [");
  for (size_t i = 0; i < r.failures.size(); ++i) absl::StrAppend(&o, i ? ", " : "", JsonString(r.failures[i]));
  absl::StrAppend(&o, absl::StrFormat("],\n \"checks\": %d, \"wrong\": %d, \"verified\": %s}\n", r.checks, r.wrong,
                                      r.failures.empty() && r.wrong == 0 ? "true" : "false"));
  return o;
}

}  // namespace loom::collectives::bench
