// Worker "matrix": creates one ProcessGroup from ctx.arg ("<backend spec>
// [option=value ...]", e.g. "cpu:tcp channels=3 channel_min_slice_bytes=64":
// ProcessGroupOptions tuning fields) and loops over every op x dtype x size,
// checking each result against a local reference (floats within tolerance,
// integers and bools exactly). LOOM_FULL=1 adds larger sizes. Also exercises
// a subgroup.
#include <cmath>
#include <cstdlib>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/testing/full_sweep.h"
#include "collectives/process_group.h"
#include "collectives/testing/multiprocess.h"

namespace loom::collectives::testing {
namespace {

constexpr DType kDTypes[] = {DType::kF32, DType::kF64, DType::kBF16, DType::kF16,
                             DType::kI32, DType::kI64, DType::kBool};
constexpr ReduceOp kReduceOps[] = {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMin, ReduceOp::kMax,
                                   ReduceOp::kProduct};

// Small integers: exact in every dtype, products of <= 8 ranks stay small.
double Value(DType dt, int rank, int64_t i, int salt = 0) {
  if (dt == DType::kBool) return ((rank + i + salt) % 3) == 0 ? 1 : 0;
  return static_cast<double>((rank * 7 + i * 3 + salt) % 3 + 1) * ((i + rank) % 5 == 0 ? -1 : 1);
}

Tensor Make(DType dt, int64_t n, int rank, int salt = 0) {
  Tensor t = Tensor::MustEmpty({n}, dt);
  for (int64_t i = 0; i < n; ++i) t.SetDouble(i, Value(dt, rank, i, salt));
  return t;
}

double Combine(ReduceOp op, DType dt, double a, double b) {
  if (dt == DType::kBool) {
    bool x = a != 0, y = b != 0;
    return (op == ReduceOp::kSum || op == ReduceOp::kMax) ? (x || y) : (x && y);
  }
  switch (op) {
    case ReduceOp::kSum: case ReduceOp::kAvg: return a + b;
    case ReduceOp::kProduct: return a * b;
    case ReduceOp::kMin: return std::min(a, b);
    case ReduceOp::kMax: return std::max(a, b);
  }
  return 0;
}

// Reference reduction over ranks of Value(dt, r, offset + i).
std::vector<double> RefReduce(ReduceOp op, DType dt, int world, int64_t n, int64_t offset = 0,
                              int salt = 0) {
  std::vector<double> out(n);
  for (int64_t i = 0; i < n; ++i) {
    double acc = Value(dt, 0, offset + i, salt);
    for (int r = 1; r < world; ++r) acc = Combine(op, dt, acc, Value(dt, r, offset + i, salt));
    if (op == ReduceOp::kAvg) {
      acc = IsFloating(dt) ? acc / world : std::trunc(acc / world);
    }
    out[i] = acc;
  }
  return out;
}

double Tolerance(DType dt) {
  switch (dt) {
    case DType::kBF16: return 2e-2;
    case DType::kF16: return 2e-3;
    case DType::kF32: return 1e-5;
    case DType::kF64: return 1e-12;
    default: return 0;
  }
}

bool Matches(const Tensor& got, const std::vector<double>& want, DType dt, std::string* why,
             int64_t got_offset = 0) {
  if (got.numel() - got_offset < static_cast<int64_t>(want.size())) {
    *why = "size mismatch";
    return false;
  }
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    double g = got.GetDouble(got_offset + i), w = want[i];
    if (Tolerance(dt) == 0 && g != w) {
      *why = absl::StrCat("element ", i, ": got ", g, " want ", w);
      return false;
    }
    num += (g - w) * (g - w);
    den += w * w;
  }
  double rel = den == 0 ? std::sqrt(num) : std::sqrt(num / den);
  if (rel > Tolerance(dt)) {
    *why = absl::StrCat("relative error ", rel, " > ", Tolerance(dt));
    return false;
  }
  return true;
}

#define RUN_OP(ctx, label, expr)                                                        \
  [&]() -> bool {                                                                       \
    auto w = (expr);                                                                    \
    if (!w.ok()) {                                                                      \
      WORKER_EXPECT(ctx, false, label, ": ", w.status().ToString());                    \
      return false;                                                                     \
    }                                                                                   \
    absl::Status s = (*w)->Wait(absl::Now() + absl::Seconds(30));                       \
    WORKER_EXPECT(ctx, s.ok(), label, ": ", s.ToString());                              \
    return s.ok();                                                                      \
  }()

#define CHECK_MATCH(ctx, label, got, want, dt, ...)              \
  do {                                                           \
    std::string why;                                             \
    WORKER_EXPECT(ctx, Matches(got, want, dt, &why, ##__VA_ARGS__), label, ": ", why); \
  } while (0)

void RunMatrix(WorkerContext& ctx, ProcessGroup& pg, bool smoke) {
  const int n = pg.size(), r = pg.rank();
  std::vector<int64_t> sizes = smoke ? std::vector<int64_t>{33} : std::vector<int64_t>{0, 1, 37, 4099};
  if (!smoke && loom::testing::FullSweep()) sizes.push_back(300000);
  for (DType dt : kDTypes) {
    for (int64_t base : sizes) {
      std::string tag = absl::StrCat(DTypeName(dt), " n=", base);
      // all_reduce: every op; a larger size takes the ring path.
      for (ReduceOp op : kReduceOps) {
        if (dt == DType::kBool && op == ReduceOp::kAvg) continue;
        if (smoke && op != ReduceOp::kSum) continue;
        for (int64_t len : {base, base * 5 + 20000}) {
          if (smoke && len != base) continue;
          Tensor t = Make(dt, len, r);
          AllReduceOptions o;
          o.op = op;
          std::string l = absl::StrCat("all_reduce ", ReduceOpName(op), " ", DTypeName(dt), " n=", len);
          if (RUN_OP(ctx, l, pg.AllReduce(t, o))) CHECK_MATCH(ctx, l, t, RefReduce(op, dt, n, len), dt);
        }
      }
      // all_gather (list, uneven) and all_gather_into (flat).
      {
        std::vector<Tensor> outs;
        for (int i = 0; i < n; ++i) outs.push_back(Tensor::MustEmpty({base + i}, dt));
        Tensor in = Make(dt, base + r, r);
        std::string l = "all_gather " + tag;
        if (RUN_OP(ctx, l, pg.AllGather(outs, in, {}))) {
          for (int i = 0; i < n; ++i) {
            std::vector<double> want;
            for (int64_t k = 0; k < base + i; ++k) want.push_back(Value(dt, i, k));
            CHECK_MATCH(ctx, absl::StrCat(l, " from ", i), outs[i], want, dt);
          }
        }
      }
      {
        Tensor in = Make(dt, base, r);
        Tensor out = Tensor::MustEmpty({base * n}, dt);
        std::string l = "all_gather_into " + tag;
        if (RUN_OP(ctx, l, pg.AllGatherInto(out, in, {}))) {
          std::vector<double> want;
          for (int i = 0; i < n; ++i) for (int64_t k = 0; k < base; ++k) want.push_back(Value(dt, i, k));
          CHECK_MATCH(ctx, l, out, want, dt);
        }
      }
      if (smoke) continue;
      // broadcast from the last rank.
      {
        Tensor t = Make(dt, base, r);
        BroadcastOptions o;
        o.root = n - 1;
        std::string l = "broadcast " + tag;
        std::vector<double> want;
        for (int64_t k = 0; k < base; ++k) want.push_back(Value(dt, n - 1, k));
        if (RUN_OP(ctx, l, pg.Broadcast(t, o))) CHECK_MATCH(ctx, l, t, want, dt);
      }
      // reduce to the middle rank (sum and max).
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax}) {
        Tensor t = Make(dt, base, r);
        ReduceOptions o;
        o.root = n / 2;
        o.op = op;
        std::string l = absl::StrCat("reduce ", ReduceOpName(op), " ", tag);
        if (RUN_OP(ctx, l, pg.Reduce(t, o)) && r == o.root) CHECK_MATCH(ctx, l, t, RefReduce(op, dt, n, base), dt);
      }
      // reduce_scatter (list, uneven counts) and reduce_scatter_from (flat).
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMin}) {
        std::vector<Tensor> ins;
        int64_t off = 0, my_off = 0;
        for (int i = 0; i < n; ++i) {
          Tensor t = Tensor::MustEmpty({base + i}, dt);
          for (int64_t k = 0; k < base + i; ++k) t.SetDouble(k, Value(dt, r, off + k));
          if (i == r) my_off = off;
          off += base + i;
          ins.push_back(t);
        }
        Tensor out = Tensor::MustEmpty({base + r}, dt);
        ReduceScatterOptions o;
        o.op = op;
        std::string l = absl::StrCat("reduce_scatter ", ReduceOpName(op), " ", tag);
        if (RUN_OP(ctx, l, pg.ReduceScatter(out, ins, o))) {
          CHECK_MATCH(ctx, l, out, RefReduce(op, dt, n, base + r, my_off), dt);
        }
      }
      {
        Tensor in = Make(dt, base * n, r);
        Tensor out = Tensor::MustEmpty({base}, dt);
        std::string l = "reduce_scatter_from " + tag;
        if (RUN_OP(ctx, l, pg.ReduceScatterFrom(out, in, {}))) {
          CHECK_MATCH(ctx, l, out, RefReduce(ReduceOp::kSum, dt, n, base, base * r), dt);
        }
      }
      // all_to_all with uneven splits of 2-column rows: rank r sends (r + j + base) % 3 rows to j.
      {
        auto rows = [&](int from, int to) { return static_cast<int64_t>((from + to + base) % 3); };
        AllToAllOptions o;
        int64_t in_rows = 0, out_rows = 0;
        for (int j = 0; j < n; ++j) {
          o.input_split_sizes.push_back(rows(r, j));
          o.output_split_sizes.push_back(rows(j, r));
          in_rows += rows(r, j);
          out_rows += rows(j, r);
        }
        Tensor in = Tensor::MustEmpty({in_rows, 2}, dt);
        // Element k of the block for rank j: Value(dt, r, j * 100 + k).
        int64_t pos = 0;
        for (int j = 0; j < n; ++j) for (int64_t k = 0; k < rows(r, j) * 2; ++k) in.SetDouble(pos++, Value(dt, r, j * 100 + k));
        Tensor out = Tensor::MustEmpty({out_rows, 2}, dt);
        std::string l = "all_to_all " + tag;
        if (RUN_OP(ctx, l, pg.AllToAll(out, in, o))) {
          std::vector<double> want;
          for (int j = 0; j < n; ++j) for (int64_t k = 0; k < rows(j, r) * 2; ++k) want.push_back(Value(dt, j, r * 100 + k));
          CHECK_MATCH(ctx, l, out, want, dt);
        }
      }
      // gather to rank 0 and scatter from the last rank, uneven sizes.
      {
        Tensor in = Make(dt, base + r, r);
        std::vector<Tensor> outs;
        if (r == 0) for (int i = 0; i < n; ++i) outs.push_back(Tensor::MustEmpty({base + i}, dt));
        std::string l = "gather " + tag;
        if (RUN_OP(ctx, l, pg.Gather(outs, in, {})) && r == 0) {
          for (int i = 0; i < n; ++i) {
            std::vector<double> want;
            for (int64_t k = 0; k < base + i; ++k) want.push_back(Value(dt, i, k));
            CHECK_MATCH(ctx, l, outs[i], want, dt);
          }
        }
      }
      {
        std::vector<Tensor> ins;
        if (r == n - 1) for (int i = 0; i < n; ++i) ins.push_back(Make(dt, base + i, i, 1));
        Tensor out = Tensor::MustEmpty({base + r}, dt);
        ScatterOptions o;
        o.root = n - 1;
        std::string l = "scatter " + tag;
        if (RUN_OP(ctx, l, pg.Scatter(out, ins, o))) {
          std::vector<double> want;
          for (int64_t k = 0; k < base + r; ++k) want.push_back(Value(dt, r, k, 1));
          CHECK_MATCH(ctx, l, out, want, dt);
        }
      }
      // send/recv around the ring.
      if (n > 1) {
        Tensor s = Make(dt, base, r, 2);
        Tensor v = Tensor::MustEmpty({base}, dt);
        SendRecvOptions o;
        o.tag = 7;
        auto ws = pg.Send(s, (r + 1) % n, o);
        auto wr = pg.Recv(v, (r + n - 1) % n, o);
        WORKER_EXPECT(ctx, ws.ok() && wr.ok(), "send/recv issue");
        if (ws.ok() && wr.ok()) {
          absl::Status a = (*ws)->Wait(absl::Now() + absl::Seconds(30));
          absl::Status b = (*wr)->Wait(absl::Now() + absl::Seconds(30));
          WORKER_EXPECT(ctx, a.ok() && b.ok(), "send/recv ", tag, a.ToString(), b.ToString());
          std::vector<double> want;
          for (int64_t k = 0; k < base; ++k) want.push_back(Value(dt, (r + n - 1) % n, k, 2));
          CHECK_MATCH(ctx, "send/recv " + tag, v, want, dt);
        }
      }
    }
  }
  // send/recv between ranks 0 and 1 only, then a collective of every rank:
  // point-to-point ops take no collective tag number, so ranks that ran
  // none still meet the others.
  if (n > 2 && r < 2) {
    Tensor s = Make(DType::kF32, 5, r, 3), v = Tensor::MustEmpty({5}, DType::kF32);
    SendRecvOptions o;
    o.tag = 9;
    auto ws = pg.Send(s, 1 - r, o);
    auto wr = pg.Recv(v, 1 - r, o);
    WORKER_EXPECT(ctx, ws.ok() && wr.ok() && (*ws)->Wait(absl::Now() + absl::Seconds(30)).ok() &&
                           (*wr)->Wait(absl::Now() + absl::Seconds(30)).ok(),
                  "send/recv of ranks 0 and 1");
  }
  Tensor t = Make(DType::kF32, 33, r);
  if (RUN_OP(ctx, "all_reduce after a pair's send/recv", pg.AllReduce(t, {})))
    CHECK_MATCH(ctx, "all_reduce after a pair's send/recv", t, RefReduce(ReduceOp::kSum, DType::kF32, n, 33),
                DType::kF32);
  WORKER_EXPECT(ctx, RUN_OP(ctx, "barrier", pg.Barrier({})), "barrier");
}

// "<spec> [option=value ...]" -> ProcessGroupOptions (the tuning fields).
absl::StatusOr<ProcessGroupOptions> ParseMatrixArg(const std::string& arg) {
  std::vector<std::string> words = absl::StrSplit(arg, ' ', absl::SkipEmpty());
  ProcessGroupOptions o;
  if (words.empty()) return absl::InvalidArgumentError("matrix: no backend spec");
  o.backend = words[0];
  for (size_t i = 1; i < words.size(); ++i) {
    std::pair<std::string, std::string> kv = absl::StrSplit(words[i], absl::MaxSplits('=', 1));
    const auto& [key, value] = kv;
    int64_t n = 0;
    const bool number = absl::SimpleAtoi(value, &n);
    if (key == "gloo_transport") {
      o.gloo_transport = value;
    } else if (key == "channels" && number) {
      o.channels = static_cast<int>(n);
    } else if (key == "channel_min_slice_bytes" && number && n >= 0) {
      o.channel_min_slice_bytes = static_cast<size_t>(n);
    } else if (key == "gloo_native_min_bytes" && number) {
      o.gloo_native_min_bytes = n;
    } else if (key == "tcp_socket_buffer_bytes" && number) {
      o.tcp_socket_buffer_bytes = n;
    } else {
      return absl::InvalidArgumentError(absl::StrCat("matrix: bad option '", words[i], "'"));
    }
  }
  return o;
}

int MatrixWorker(WorkerContext& ctx) {
  auto parsed = ParseMatrixArg(ctx.arg);
  if (!parsed.ok()) {
    fprintf(stderr, "[rank %d] %s\n", ctx.rank, parsed.status().ToString().c_str());
    return 1;
  }
  ProcessGroupOptions o = *parsed;
  o.timeout = absl::Seconds(30);
  auto pg = ProcessGroup::Create(ctx.store, ctx.rank, ctx.world, o);
  if (!pg.ok()) {
    fprintf(stderr, "[rank %d] create: %s\n", ctx.rank, pg.status().ToString().c_str());
    return 1;
  }
  bool smoke = ctx.world > 4;
  RunMatrix(ctx, **pg, smoke);
  // Subgroup: the even ranks in reverse order.
  std::vector<int> members;
  for (int i = ctx.world - 1; i >= 0; --i) if (i % 2 == 0) members.push_back(i);
  auto sub = (*pg)->NewGroup(members);
  WORKER_EXPECT(ctx, sub.ok(), "new_group: ", sub.status().ToString());
  if (sub.ok() && *sub) {
    ProcessGroup& g = **sub;
    int m = static_cast<int>(members.size());
    WORKER_EXPECT(ctx, g.size() == m && members[g.rank()] == ctx.rank, "subgroup rank");
    Tensor t = Make(DType::kF32, 1000, g.rank());
    if (RUN_OP(ctx, "subgroup all_reduce", g.AllReduce(t, {}))) {
      CHECK_MATCH(ctx, "subgroup all_reduce", t, RefReduce(ReduceOp::kSum, DType::kF32, m, 1000), DType::kF32);
    }
    if (!smoke && m > 1) RunMatrix(ctx, g, /*smoke=*/true);
  } else if (sub.ok()) {
    WORKER_EXPECT(ctx, ctx.rank % 2 == 1, "non-member got no group");
  }
  WORKER_EXPECT(ctx, RUN_OP(ctx, "final barrier", (*pg)->Barrier({})), "final barrier");
  return 0;
}

LOOM_COLLECTIVES_WORKER(matrix, MatrixWorker);

}  // namespace
}  // namespace loom::collectives::testing
