#include <map>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status.h"
#include "collectives/process_group.h"
#include "compiler/comm/communicator.h"

namespace loom::compiler::comm {
namespace {

collectives::ReduceOp ToOp(ReduceKind k) {
  switch (k) {
    case ReduceKind::kSum: return collectives::ReduceOp::kSum;
    case ReduceKind::kAvg: return collectives::ReduceOp::kAvg;
    case ReduceKind::kMax: return collectives::ReduceOp::kMax;
    case ReduceKind::kMin: return collectives::ReduceOp::kMin;
  }
  return collectives::ReduceOp::kSum;
}

// `t` with `axis` moved to the front (a strided view).
Tensor AxisFirst(const Tensor& t, int axis) {
  std::vector<int> dims = {axis};
  for (int d = 0; d < t.ndim(); ++d)
    if (d != axis) dims.push_back(d);
  return t.Permute(dims);
}

class PgCommunicator final : public Communicator {
 public:
  PgCommunicator(collectives::ProcessGroup* pg, int64_t timeout_ms) : pg_(pg), timeout_ms_(timeout_ms) {}
  int rank() const override { return pg_->rank(); }
  int size() const override { return pg_->size(); }

  // Device tensors (e.g. a CUDA executor's buffers) take the paths that
  // copy nothing on the host: all_reduce in place (in and out the same
  // tensor) and the leading-axis gather and scatter of contiguous tensors.
  absl::Status AllReduce(const Tensor& in, Tensor& out, ReduceKind kind) override {
    if (!SameTensor(in, out)) LOOM_RETURN_IF_ERROR(out.CopyFrom(in));
    collectives::AllReduceOptions o;
    o.op = ToOp(kind);
    o.timeout = absl::Milliseconds(timeout_ms_);
    LOOM_ASSIGN_OR_RETURN(auto w, pg_->AllReduce(out, o));
    return w->Wait();
  }

  absl::Status AllGather(const Tensor& in, Tensor& out, int axis) override {
    collectives::AllGatherOptions o;
    o.timeout = absl::Milliseconds(timeout_ms_);
    if (axis == 0) {
      Tensor src = in.Contiguous();
      LOOM_ASSIGN_OR_RETURN(auto w, pg_->AllGatherInto(out, src, o));
      return w->Wait();
    }
    // Gather the blocks with `axis` leading, then scatter them into place.
    Tensor& src = Staging(0, AxisFirst(in, axis));
    LOOM_RETURN_IF_ERROR(src.CopyFrom(AxisFirst(in, axis)));
    Tensor& gathered = Staging(1, AxisFirst(out, axis));
    LOOM_ASSIGN_OR_RETURN(auto w, pg_->AllGatherInto(gathered, src, o));
    LOOM_RETURN_IF_ERROR(w->Wait());
    Tensor view = AxisFirst(out, axis);
    return view.CopyFrom(gathered);
  }

  absl::Status ReduceScatter(const Tensor& in, Tensor& out, int axis, ReduceKind kind) override {
    collectives::ReduceScatterOptions o;
    o.op = ToOp(kind);
    o.timeout = absl::Milliseconds(timeout_ms_);
    if (axis == 0 && in.is_contiguous() && out.is_contiguous()) {
      LOOM_ASSIGN_OR_RETURN(auto w, pg_->ReduceScatterFrom(out, in, o));
      return w->Wait();
    }
    Tensor& src = Staging(2, AxisFirst(in, axis));
    LOOM_RETURN_IF_ERROR(src.CopyFrom(AxisFirst(in, axis)));
    Tensor& dst = Staging(3, AxisFirst(out, axis));
    LOOM_ASSIGN_OR_RETURN(auto w, pg_->ReduceScatterFrom(dst, src, o));
    LOOM_RETURN_IF_ERROR(w->Wait());
    Tensor view = AxisFirst(out, axis);
    return view.CopyFrom(dst);
  }

 private:
  static bool SameTensor(const Tensor& a, const Tensor& b) {
    return a.raw_data() == b.raw_data() && a.shape() == b.shape() && a.strides() == b.strides() &&
           a.dtype() == b.dtype();
  }
  // A contiguous buffer shaped like `like`, kept per (slot, shape, dtype).
  Tensor& Staging(int slot, const Tensor& like) {
    std::string key = absl::StrCat(slot, DTypeName(like.dtype()), ShapeToString(like.shape()));
    auto it = staging_.find(key);
    if (it == staging_.end()) it = staging_.emplace(key, Tensor::MustEmpty(like.shape(), like.dtype())).first;
    return it->second;
  }

  collectives::ProcessGroup* pg_;
  int64_t timeout_ms_;
  std::map<std::string, Tensor> staging_;
};

}  // namespace

std::unique_ptr<Communicator> MakeProcessGroupCommunicator(collectives::ProcessGroup* pg, int64_t timeout_ms) {
  return std::make_unique<PgCommunicator>(pg, timeout_ms);
}

}  // namespace loom::compiler::comm
