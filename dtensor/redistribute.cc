#include "dtensor/redistribute.h"

#include "absl/strings/str_cat.h"
#include "base/status.h"
#include "dtensor/local_ops.h"

namespace loom::dtensor {
namespace {

using collectives::ProcessGroup;
using collectives::WorkPtr;

std::string Shape(const std::vector<int64_t>& s) { return ShapeToString(s); }

std::vector<int64_t> With(std::vector<int64_t> s, int d, int64_t v) {
  s[d] = v;
  return s;
}

// Executes one plan step on this rank.
class Executor {
 public:
  Executor(const std::vector<int64_t>& global, const DeviceMesh& mesh) : global_(global), mesh_(mesh) {}

  absl::StatusOr<Tensor> Run(const RedistributeStep& step, const Tensor& cur, const DTensorSpec& before_spec) {
    DTensorSpec after_spec = before_spec;
    after_spec.placements[step.mesh_dim] = step.to;
    LOOM_ASSIGN_OR_RETURN(before_, LocalShape(global_, before_spec, mesh_.coords()));
    LOOM_ASSIGN_OR_RETURN(after_, LocalShape(global_, after_spec, mesh_.coords()));
    m_ = step.mesh_dim;
    k_ = mesh_.shape().sizes[m_];
    me_ = mesh_.coords()[m_];
    group_ = mesh_.group(m_);
    what_ = step.ToString();
    const bool from_avg = step.from.is_partial() && step.from.op == PartialOp::kAvg;
    const bool to_avg = step.to.is_partial() && step.to.op == PartialOp::kAvg;
    switch (step.kind) {
      case StepKind::kAllGather:
        return AllGather(cur, step.from.dim);
      case StepKind::kAllReduce:
        return AllReduce(cur, from_avg);
      case StepKind::kReduceScatter:
        return ReduceScatter(cur, step.to.dim, from_avg);
      case StepKind::kAllToAll:
        return AllToAll(cur, step.from.dim, step.to.dim);
      case StepKind::kSlice: {
        Range r = ChunkRange(before_[step.to.dim], k_, me_);
        return SliceCopy(cur, step.to.dim, r.offset, r.length);
      }
      case StepKind::kPadToPartial: {
        const int d = step.from.dim;
        Range r = ChunkRange(after_[d], k_, me_);
        Tensor out = Tensor::Zeros(after_, cur.dtype());
        LOOM_RETURN_IF_ERROR(CopyRegion(out.Narrow(d, r.offset, r.length), cur));
        if (to_avg) ScaleInPlace(out, k_, 1);
        return out;
      }
      case StepKind::kScale: {
        Tensor out = cur.Clone();
        if (to_avg && !from_avg) ScaleInPlace(out, k_, 1);
        if (from_avg && !to_avg) ScaleInPlace(out, 1, k_);
        return out;
      }
      case StepKind::kZeroUnlessFirst:
        return me_ == 0 ? cur : Tensor::Zeros(cur.shape(), cur.dtype());
    }
    return absl::InternalError("redistribute: unknown step");
  }

 private:
  absl::Status Wait(absl::StatusOr<WorkPtr> w) {
    if (!w.ok()) return Annotate(w.status(), absl::StrCat("redistribute: ", what_));
    absl::Status s = (*w)->Wait(absl::Now() + mesh_.options().collective_timeout);
    return Annotate(s, absl::StrCat("redistribute: ", what_));
  }
  template <typename O>
  O Opts() const {
    O o;
    o.timeout = mesh_.options().collective_timeout;
    return o;
  }

  // S(d) -> R: gather blocks padded to the chunk size, then trim.
  absl::StatusOr<Tensor> AllGather(const Tensor& cur, int d) {
    const int64_t n = after_[d];
    if (k_ == 1) return cur;
    const int64_t c = ChunkRange(n, k_, 0).length;
    std::vector<int64_t> padded = With(before_, d, c);
    const int64_t pn = NumElements(padded);
    if (pn == 0) return Tensor::MustEmpty(after_, cur.dtype());
    // Only a short chunk needs padding.
    Tensor send = cur.dim(d) == c ? cur : ZeroPad(cur, padded);
    Tensor recv = Tensor::MustEmpty({k_ * pn}, cur.dtype());
    LOOM_RETURN_IF_ERROR(Wait(group_->AllGatherInto(recv, send, Opts<collectives::AllGatherOptions>())));
    // On dim 0, chunk j sits at row j * c of the padded buffer, and only the
    // trailing chunks are short or empty: the first n rows are the result.
    if (d == 0) return recv.Narrow(0, 0, NumElements(after_)).Reshape(after_);
    Tensor out = Tensor::MustEmpty(after_, cur.dtype());
    for (int64_t j = 0; j < k_; ++j) {
      Range r = ChunkRange(n, k_, j);
      if (r.length == 0) continue;
      LOOM_ASSIGN_OR_RETURN(Tensor blk, recv.Narrow(0, j * pn, pn).Reshape(padded));
      LOOM_RETURN_IF_ERROR(CopyRegion(out.Narrow(d, r.offset, r.length), blk.Narrow(d, 0, r.length)));
    }
    return out;
  }

  // P -> R: sum over the group (then / k for avg).
  absl::StatusOr<Tensor> AllReduce(const Tensor& cur, bool avg) {
    if (k_ == 1) return cur;
    Tensor t = cur.Clone();  // never write into the caller's tensor
    if (t.numel() == 0) return t;
    LOOM_RETURN_IF_ERROR(Wait(group_->AllReduce(t, Opts<collectives::AllReduceOptions>())));
    if (avg) ScaleInPlace(t, 1, k_);
    return t;
  }

  // P -> S(e): reduce-scatter chunks of e padded to the chunk size.
  absl::StatusOr<Tensor> ReduceScatter(const Tensor& cur, int e, bool avg) {
    if (k_ == 1) return cur;
    const int64_t n = before_[e];
    const int64_t c = ChunkRange(n, k_, 0).length;
    std::vector<int64_t> padded = With(before_, e, c);
    const int64_t pn = NumElements(padded);
    Range mine = ChunkRange(n, k_, me_);
    if (pn == 0) return Tensor::MustEmpty(after_, cur.dtype());
    Tensor send;
    if (e == 0) {
      // Chunk j belongs at row j * c: the padded input is cur followed by zeros.
      if (cur.numel() == k_ * pn) {
        LOOM_ASSIGN_OR_RETURN(send, cur.Reshape({k_ * pn}));
      } else {
        send = Tensor::Zeros({k_ * pn}, cur.dtype());
        LOOM_ASSIGN_OR_RETURN(Tensor flat, cur.Reshape({cur.numel()}));
        LOOM_RETURN_IF_ERROR(CopyRegion(send.Narrow(0, 0, cur.numel()), flat));
      }
    } else {
      send = Tensor::Zeros({k_ * pn}, cur.dtype());
      for (int64_t j = 0; j < k_; ++j) {
        Range r = ChunkRange(n, k_, j);
        if (r.length == 0) continue;
        LOOM_ASSIGN_OR_RETURN(Tensor blk, send.Narrow(0, j * pn, pn).Reshape(padded));
        LOOM_RETURN_IF_ERROR(CopyRegion(blk.Narrow(e, 0, r.length), cur.Narrow(e, r.offset, r.length)));
      }
    }
    Tensor recv = Tensor::MustEmpty(padded, cur.dtype());
    LOOM_RETURN_IF_ERROR(
        Wait(group_->ReduceScatterFrom(recv, send, Opts<collectives::ReduceScatterOptions>())));
    Tensor out = SliceCopy(recv, e, 0, mine.length);
    if (avg) ScaleInPlace(out, 1, k_);
    return out;
  }

  // S(d) -> S(e): block j of e goes to group rank j; rank j's chunk of d comes back.
  absl::StatusOr<Tensor> AllToAll(const Tensor& cur, int d, int e) {
    if (k_ == 1) return cur;
    const int64_t nd = after_[d], ne = before_[e];
    const int64_t cd = ChunkRange(nd, k_, 0).length, ce = ChunkRange(ne, k_, 0).length;
    std::vector<int64_t> padded = With(With(before_, d, cd), e, ce);
    const int64_t pn = NumElements(padded);
    Tensor out = Tensor::MustEmpty(after_, cur.dtype());
    if (pn == 0) return out;
    const int64_t my_d = ChunkRange(nd, k_, me_).length;
    const int64_t my_e = ChunkRange(ne, k_, me_).length;
    Tensor send = Tensor::Zeros({k_ * pn}, cur.dtype());
    for (int64_t j = 0; j < k_; ++j) {
      Range r = ChunkRange(ne, k_, j);
      if (r.length == 0 || my_d == 0) continue;
      LOOM_ASSIGN_OR_RETURN(Tensor blk, send.Narrow(0, j * pn, pn).Reshape(padded));
      LOOM_RETURN_IF_ERROR(
          CopyRegion(blk.Narrow(d, 0, my_d).Narrow(e, 0, r.length), cur.Narrow(e, r.offset, r.length)));
    }
    Tensor recv = Tensor::MustEmpty({k_ * pn}, cur.dtype());
    LOOM_RETURN_IF_ERROR(Wait(group_->AllToAll(recv, send, Opts<collectives::AllToAllOptions>())));
    for (int64_t j = 0; j < k_; ++j) {
      Range r = ChunkRange(nd, k_, j);
      if (r.length == 0 || my_e == 0) continue;
      LOOM_ASSIGN_OR_RETURN(Tensor blk, recv.Narrow(0, j * pn, pn).Reshape(padded));
      LOOM_RETURN_IF_ERROR(
          CopyRegion(out.Narrow(d, r.offset, r.length), blk.Narrow(d, 0, r.length).Narrow(e, 0, my_e)));
    }
    return out;
  }

  const std::vector<int64_t>& global_;
  const DeviceMesh& mesh_;
  std::vector<int64_t> before_, after_;
  int m_ = 0;
  int64_t k_ = 1, me_ = 0;
  ProcessGroup* group_ = nullptr;
  std::string what_;
};

absl::Status CheckSpecMesh(const DTensorSpec& spec, const DeviceMesh& mesh, absl::string_view arg) {
  if (!(spec.mesh == mesh.shape()))
    return absl::InvalidArgumentError(absl::StrCat(arg, ": mesh ", spec.mesh.ToString(), " != device mesh ",
                                                   mesh.shape().ToString()));
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckLocal(const Tensor& local, const std::vector<int64_t>& global_shape, const DTensorSpec& spec,
                        const DeviceMesh& mesh, absl::string_view arg, absl::string_view spec_arg) {
  if (!local.defined()) return absl::InvalidArgumentError(absl::StrCat(arg, ": undefined tensor"));
  if (!local.device().is_cpu())
    return absl::InvalidArgumentError(absl::StrCat(arg, ": expected a CPU tensor, got ", local.DebugString()));
  for (size_t i = 0; i < global_shape.size(); ++i) {
    if (global_shape[i] < 0)
      return absl::InvalidArgumentError(absl::StrCat("global_shape: dim ", i, " is ", global_shape[i],
                                                     "; sizes must be >= 0"));
  }
  LOOM_RETURN_IF_ERROR(CheckSpecMesh(spec, mesh, spec_arg));
  LOOM_RETURN_IF_ERROR(Annotate(spec.Validate(static_cast<int>(global_shape.size())), spec_arg));
  LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> want, LocalShape(global_shape, spec, mesh.coords()));
  std::vector<int64_t> got(local.shape().begin(), local.shape().end());
  if (got != want)
    return absl::InvalidArgumentError(absl::StrCat(arg, ": expected shape ", Shape(want), " (global ",
                                                   Shape(global_shape), " under ", spec_arg, " ", spec.ToString(),
                                                   " at coords ", Shape(mesh.coords()), "), got ", Shape(got)));
  return absl::OkStatus();
}

absl::StatusOr<Tensor> Redistribute(const Tensor& local, const std::vector<int64_t>& global_shape,
                                    const DTensorSpec& from_spec, const DTensorSpec& to_spec,
                                    const DeviceMesh& mesh) {
  LOOM_RETURN_IF_ERROR(CheckLocal(local, global_shape, from_spec, mesh, "local", "from_spec"));
  LOOM_RETURN_IF_ERROR(CheckSpecMesh(to_spec, mesh, "to_spec"));
  LOOM_ASSIGN_OR_RETURN(std::vector<RedistributeStep> plan,
                        PlanRedistribute(from_spec, to_spec, static_cast<int>(global_shape.size())));
  Tensor cur = local.Contiguous();
  DTensorSpec state = from_spec;
  Executor ex(global_shape, mesh);
  for (const RedistributeStep& step : plan) {
    LOOM_ASSIGN_OR_RETURN(cur, ex.Run(step, cur, state));
    state.placements[step.mesh_dim] = step.to;
  }
  return cur;
}

}  // namespace loom::dtensor
