// Redistribute / DTensor over gloo on loopback, ranks as processes.
//
// One rendezvous per mesh (test parameter "4" = 1-d mesh of 4 ranks, "2x2" =
// (dp=2, tp=2)); inside, every placement pair x shape x dtype is checked
// against slicing the full tensor computed locally. Shapes are uneven and
// include empty chunks and zero-length dims. Values are small integers, so
// results are exact except where P(avg) divides terms (floats: tolerance;
// integer P(avg) -> P(sum) truncates by contract and is skipped).
// LOOM_FULL=1 adds dtypes, shapes and a (2, 3) mesh.
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/testing/full_sweep.h"
#include "collectives/process_group.h"
#include "collectives/testing/multiprocess.h"
#include "dtensor/device_mesh.h"
#include "dtensor/dtensor.h"
#include "dtensor/local_ops.h"
#include "gtest/gtest.h"

namespace loom::dtensor {
namespace {

using collectives::testing::WorkerContext;

MeshShape ParseMesh(const std::string& arg) {
  MeshShape m;
  const char* names[] = {"dp", "tp", "pp"};
  std::vector<std::string> parts = absl::StrSplit(arg, 'x');
  for (size_t i = 0; i < parts.size(); ++i) {
    int64_t k = 1;
    (void)absl::SimpleAtoi(parts[i], &k);
    m.names.push_back(parts.size() == 1 ? "x" : names[i]);
    m.sizes.push_back(k);
  }
  return m;
}

Tensor MakeFull(const std::vector<int64_t>& shape, DType dt) {
  Tensor t = Tensor::MustEmpty(shape, dt);
  for (int64_t i = 0; i < t.numel(); ++i) t.SetDouble(i, static_cast<double>((i * 7) % 11 - 5));
  return t;
}

Tensor Block(const Tensor& full, const std::vector<Range>& block) {
  Tensor v = full;
  for (int d = 0; d < full.ndim(); ++d) v = v.Narrow(d, block[d].offset, block[d].length);
  Tensor out = Tensor::MustEmpty(v.shape(), v.dtype());
  (void)CopyRegion(out, v);
  return out;
}

// This rank's local tensor under `spec`: its block, split into terms along
// each partial mesh dim (the terms reduce back to the block exactly).
Tensor MakeLocal(const Tensor& full, const DTensorSpec& spec, const std::vector<int64_t>& coords) {
  std::vector<int64_t> shape(full.shape().begin(), full.shape().end());
  Tensor t = Block(full, *LocalBlock(shape, spec, coords));
  for (int m = 0; m < spec.mesh.ndim(); ++m) {
    const Placement& p = spec.placements[m];
    if (!p.is_partial()) continue;
    const int64_t k = spec.mesh.sizes[m], c = coords[m];
    const double w = c == 0 ? -(k - 1) : 1;  // weights of the noise sum to 0 over the group
    for (int64_t i = 0; i < t.numel(); ++i) {
      double noise = static_cast<double>((i * 5 + m * 3) % 5 - 2);
      double base = t.GetDouble(i);
      if (p.op == PartialOp::kSum && c != 0) base = 0;
      t.SetDouble(i, base + w * noise);
    }
  }
  return t;
}

double Tolerance(DType dt) {
  switch (dt) {
    case DType::kBF16: return 2e-2;
    case DType::kF32: return 1e-6;
    case DType::kF64: return 1e-12;
    default: return 0;
  }
}

std::vector<Placement> Placements(int ndim) {
  std::vector<Placement> out = {Placement::Replicate()};
  for (int d = 0; d < ndim; ++d) out.push_back(Placement::Shard(d));
  out.push_back(Placement::Partial(PartialOp::kSum));
  out.push_back(Placement::Partial(PartialOp::kAvg));
  return out;
}

std::vector<DTensorSpec> AllSpecs(const MeshShape& mesh, int ndim) {
  std::vector<Placement> pl = Placements(ndim);
  std::vector<DTensorSpec> out;
  int total = 1;
  for (int i = 0; i < mesh.ndim(); ++i) total *= static_cast<int>(pl.size());
  for (int code = 0; code < total; ++code) {
    DTensorSpec s{mesh, {}};
    for (int i = 0, c = code; i < mesh.ndim(); ++i, c /= static_cast<int>(pl.size()))
      s.placements.push_back(pl[c % pl.size()]);
    out.push_back(s);
  }
  return out;
}

bool HasAvgToSum(const DTensorSpec& a, const DTensorSpec& b) {
  for (size_t m = 0; m < a.placements.size(); ++m)
    if (a.placements[m].is_partial() && a.placements[m].op == PartialOp::kAvg && b.placements[m].is_partial() &&
        b.placements[m].op == PartialOp::kSum)
      return true;
  return false;
}

struct Case {
  std::vector<int64_t> shape;
  std::vector<DType> dtypes;
};

std::vector<Case> Cases(const MeshShape& mesh) {
  const std::vector<DType> all = {DType::kF32, DType::kF64, DType::kBF16, DType::kI32, DType::kI64};
  std::vector<Case> cases;
  if (mesh.ndim() == 1) {
    cases = {{{7, 5}, all}, {{3, 2}, all}, {{0, 4}, all}, {{1, 6}, all},
             {{10}, {DType::kF32}}, {{3, 4, 2}, {DType::kF32}}, {{}, {DType::kF32, DType::kI64}}};
  } else if (!loom::testing::FullSweep()) {
    cases = {{{7, 5}, {DType::kF32, DType::kI64}}, {{3, 1}, {DType::kBF16}}};
  } else {
    cases = {{{7, 5}, all}, {{3, 1}, all}, {{0, 3}, {DType::kF32}}, {{5, 4}, {DType::kF64}},
             {{4, 3, 2}, {DType::kF32}}};
  }
  return cases;
}

// Checks one pair; returns false (and logs) on a mismatch.
void CheckPair(WorkerContext& ctx, const DeviceMesh& mesh, const Tensor& full, const DTensorSpec& from,
               const DTensorSpec& to) {
  std::vector<int64_t> shape(full.shape().begin(), full.shape().end());
  const std::string what = absl::StrCat(DTypeName(full.dtype()), ShapeToString(shape), " ", from.ToString(),
                                        " -> ", to.ToString());
  Tensor in = MakeLocal(full, from, mesh.coords());
  auto out = Redistribute(in, shape, from, to, mesh);
  WORKER_EXPECT(ctx, out.ok(), what, ": ", out.status().ToString());
  if (!out.ok()) return;
  auto want_shape = LocalShape(shape, to, mesh.coords());
  std::vector<int64_t> got_shape(out->shape().begin(), out->shape().end());
  WORKER_EXPECT(ctx, got_shape == *want_shape, what, ": shape ", ShapeToString(got_shape));
  if (got_shape != *want_shape) return;
  const bool exact_ok = IsFloating(full.dtype()) || !HasAvgToSum(from, to);
  Tensor ref, got;
  if (!to.has_partial()) {
    ref = Block(full, *LocalBlock(shape, to, mesh.coords()));
    got = *out;
  } else {
    auto back = FullTensor(*out, shape, to, mesh);
    WORKER_EXPECT(ctx, back.ok(), what, ": full_tensor: ", back.status().ToString());
    if (!back.ok()) return;
    ref = full;
    got = *back;
  }
  if (!exact_ok) return;
  double err = RelativeError(got.To(DType::kF64), ref.To(DType::kF64));
  WORKER_EXPECT(ctx, err <= Tolerance(full.dtype()), what, ": relative error ", err);
}

void CheckApi(WorkerContext& ctx, const DeviceMesh& mesh) {
  const MeshShape& ms = mesh.shape();
  std::vector<int64_t> shape = {5, 3};
  Tensor full = MakeFull(shape, DType::kF32);
  DTensorSpec spec{ms, std::vector<Placement>(ms.ndim(), Placement::Shard(0))};
  // Distribute from each rank's own tensor, then from rank 0's (others pass garbage).
  auto d = Distribute(full, spec, mesh);
  WORKER_EXPECT(ctx, d.ok(), d.status().ToString());
  if (d.ok()) {
    Tensor want = Block(full, *LocalBlock(shape, spec, mesh.coords()));
    WORKER_EXPECT(ctx, RelativeError(ToLocal(*d), want) == 0, "distribute local");
    auto back = FullTensor(*d, mesh);
    WORKER_EXPECT(ctx, back.ok() && RelativeError(*back, full) == 0, "full_tensor");
  }
  Tensor mine = mesh.rank() == 0 ? full : Tensor::Zeros(shape, DType::kF32);
  auto b = Distribute(mine, DTensorSpec::Replicated(ms), mesh, {.src_rank = 0});
  WORKER_EXPECT(ctx, b.ok() && RelativeError(b->local, full) == 0, "distribute src_rank 0");
  auto fl = FromLocal(full, shape, spec, mesh);
  WORKER_EXPECT(ctx, ms.num_ranks() == 1 ? fl.ok() : !fl.ok(), "from_local shape check");
  if (!fl.ok()) {
    WORKER_EXPECT(ctx, std::string(fl.status().message()).find("local: expected shape") != std::string::npos,
                  fl.status().ToString());
  }

  // Errors name the field, and fail before any collective (so no rank hangs).
  auto has = [&](const absl::Status& s, absl::string_view field) {
    WORKER_EXPECT(ctx, s.code() == absl::StatusCode::kInvalidArgument, field, ": ", s.ToString());
    WORKER_EXPECT(ctx, std::string(s.message()).find(std::string(field)) != std::string::npos, field, ": ",
                  s.ToString());
  };
  DTensorSpec rep = DTensorSpec::Replicated(ms);
  has(Redistribute(Tensor::Zeros({4, 4}, DType::kF32), shape, rep, spec, mesh).status(), "local");
  has(Redistribute(Tensor(), shape, rep, spec, mesh).status(), "local");
  has(Redistribute(full, {5, -3}, rep, spec, mesh).status(), "global_shape");
  MeshShape other = ms;
  other.names[0] = "zz";
  has(Redistribute(full, shape, DTensorSpec::Replicated(other), spec, mesh).status(), "from_spec");
  DTensorSpec bad = spec;
  bad.placements[0] = Placement::Shard(4);
  has(Redistribute(full, shape, rep, bad, mesh).status(), "to_spec");
  has(Redistribute(full, shape, rep, DTensorSpec::Replicated(other), mesh).status(), "to_spec");
  has(Distribute(full, spec, mesh, {.src_rank = 99}).status(), "options.src_rank");
  has(mesh.group("zz").status(), "zz");
  auto g = mesh.group(ms.names.back());
  WORKER_EXPECT(ctx, g.ok() && (*g)->size() == ms.sizes.back() && (*g)->rank() == mesh.coords().back(),
                "group accessor");
}

int RedistWorker(WorkerContext& ctx) {
  MeshShape ms = ParseMesh(ctx.arg);
  collectives::ProcessGroupOptions po;
  po.backend = "cpu:gloo";
  po.timeout = absl::Seconds(30);
  auto pg = collectives::ProcessGroup::Create(ctx.store, ctx.rank, ctx.world, po);
  if (!pg.ok()) {
    fprintf(stderr, "[rank %d] process group: %s\n", ctx.rank, pg.status().ToString().c_str());
    return 2;
  }
  std::shared_ptr<collectives::ProcessGroup> world(std::move(*pg));
  // A mesh that does not match the world size is refused before any collective.
  MeshShape wrong{{"x"}, {ms.num_ranks() + 1}};
  auto bad = DeviceMesh::Create(world, wrong);
  WORKER_EXPECT(ctx, !bad.ok() && std::string(bad.status().message()).find("world size") != std::string::npos,
                bad.status().ToString());
  DeviceMeshOptions mo;
  mo.collective_timeout = absl::Seconds(20);
  auto mesh = DeviceMesh::Create(world, ms, mo);
  if (!mesh.ok()) {
    fprintf(stderr, "[rank %d] mesh: %s\n", ctx.rank, mesh.status().ToString().c_str());
    return 2;
  }
  CheckApi(ctx, **mesh);
  int pairs = 0;
  absl::Time start = absl::Now();
  for (const Case& c : Cases(ms)) {
    std::vector<DTensorSpec> specs = AllSpecs(ms, static_cast<int>(c.shape.size()));
    for (DType dt : c.dtypes) {
      Tensor full = MakeFull(c.shape, dt);
      for (const auto& from : specs)
        for (const auto& to : specs) {
          CheckPair(ctx, **mesh, full, from, to);
          ++pairs;
          if (ctx.failures > 20) return 1;
        }
    }
  }
  if (ctx.rank == 0)
    fprintf(stderr, "mesh %s: %d pairs in %.2f s\n", ms.ToString().c_str(), pairs,
            absl::ToDoubleSeconds(absl::Now() - start));
  return 0;
}
LOOM_COLLECTIVES_WORKER(redist, RedistWorker);

class RedistributeTest : public ::testing::TestWithParam<std::string> {};

TEST_P(RedistributeTest, EveryPlacementPair) {
  MeshShape ms = ParseMesh(GetParam());
  if (ms.num_ranks() > 4 && !loom::testing::FullSweep()) GTEST_SKIP() << "runs with --full: the 6-rank mesh";
  collectives::testing::RunResult r = collectives::testing::RunRanks(
      {.worker = "redist", .world = static_cast<int>(ms.num_ranks()), .arg = GetParam(),
       .deadline = absl::Seconds(loom::testing::FullSweep() ? 240 : 50)});
  EXPECT_TRUE(r.ok()) << r.Summary();
}

INSTANTIATE_TEST_SUITE_P(Meshes, RedistributeTest, ::testing::Values("1", "2", "3", "4", "2x2", "2x3"),
                         [](const auto& info) {
                           std::string s = info.param;
                           for (char& ch : s)
                             if (ch == 'x') ch = '_';
                           return absl::StrCat("mesh_", s);
                         });

}  // namespace
}  // namespace loom::dtensor

int main(int argc, char** argv) {
  int rc;
  if (loom::collectives::testing::MaybeRunWorker(&rc)) return rc;
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
