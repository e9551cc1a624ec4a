#include "compiler/fused_kernel.h"

#include <algorithm>
#include <map>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "base/status.h"
#include "base/thread_pool.h"

namespace loom::compiler {

absl::StatusOr<kernels::KernelFn> ResolveKernel(const kernels::OpDef& def, const std::vector<ir::TensorMeta>& inputs,
                                                const std::vector<ir::TensorMeta>& outputs, kernels::Impl impl) {
  if (impl == kernels::Impl::kKernel) {
    auto it = def.kernels.find(DeviceKind::kCPU);
    if (it != def.kernels.end() && it->second) {
      std::vector<DType> ok = {DType::kF32};
      auto dt = def.kernel_dtypes.find(DeviceKind::kCPU);
      if (dt != def.kernel_dtypes.end() && !dt->second.empty()) ok = dt->second;
      bool supported = true;
      auto check = [&](const ir::TensorMeta& m) {
        if (IsFloating(m.dtype) && std::find(ok.begin(), ok.end(), m.dtype) == ok.end()) supported = false;
      };
      for (const ir::TensorMeta& m : inputs) check(m);
      for (const ir::TensorMeta& m : outputs) check(m);
      if (supported) return it->second;
    }
  }
  if (!def.reference) return absl::UnimplementedError(absl::StrCat(def.name, ": no cpu kernel or reference"));
  return def.reference;
}

absl::StatusOr<std::shared_ptr<FusedKernel>> FusedKernel::Create(const ir::Graph& sub, kernels::Impl impl,
                                                                 int64_t chunk_elems) {
  if (sub.outputs().size() != 1) return absl::InvalidArgumentError("fused: the subgraph must have one output");
  auto k = std::shared_ptr<FusedKernel>(new FusedKernel());
  k->chunk_elems_ = std::max<int64_t>(1, chunk_elems);
  const ir::TensorMeta& out = sub.meta(sub.outputs()[0].value);
  Shape chunk_shape = out.shape;
  if (!chunk_shape.empty() && chunk_shape[0] > 0) {
    int64_t row = NumElements(out.shape) / chunk_shape[0];
    chunk_shape[0] = std::min(chunk_shape[0], std::max<int64_t>(1, k->chunk_elems_ / std::max<int64_t>(1, row)));
  }
  std::map<int, int> ref;  // subgraph value -> arg code
  for (size_t i = 0; i < sub.inputs().size(); ++i) ref[sub.inputs()[i].value] = -1 - static_cast<int>(i);
  for (size_t i = 0; i < sub.nodes().size(); ++i) {
    const ir::Node& n = sub.nodes()[i];
    LOOM_ASSIGN_OR_RETURN(const kernels::OpDef* def, kernels::OpRegistry::Global().Get(n.op));
    if (n.outputs.size() != 1 || !(sub.meta(n.outputs[0]) == out))
      return absl::InvalidArgumentError(absl::StrCat("fused: member ", n.op, " must produce ", out.ToString()));
    Member m;
    m.op = n.op;
    m.attrs = n.attrs;
    std::vector<ir::TensorMeta> in_metas;
    for (int v : n.inputs) {
      auto it = ref.find(v);
      if (it == ref.end()) return absl::InvalidArgumentError(absl::StrCat("fused: ", n.op, " uses an undefined value"));
      m.args.push_back(it->second);
      in_metas.push_back(sub.meta(v));
    }
    LOOM_ASSIGN_OR_RETURN(m.fn, ResolveKernel(*def, in_metas, {out}, impl));
    bool is_root = n.outputs[0] == sub.outputs()[0].value;
    if (is_root && i + 1 != sub.nodes().size())
      return absl::InvalidArgumentError("fused: the output must come from the last member");
    ref[n.outputs[0]] = static_cast<int>(k->members_.size());
    k->members_.push_back(std::move(m));
  }
  if (k->members_.empty()) return absl::InvalidArgumentError("fused: empty subgraph");
  const int num_slots = std::max(1, std::min(NumThreads(), 64));
  k->slots_.resize(num_slots);
  for (Slot& slot : k->slots_) {
    const size_t nm = k->members_.size();
    slot.arg_views.resize(nm);
    slot.out_views.resize(nm);
    slot.scratch.resize(nm);
    for (size_t i = 0; i < nm; ++i) {
      slot.arg_views[i].resize(k->members_[i].args.size());
      if (i + 1 < nm) {
        LOOM_ASSIGN_OR_RETURN(slot.scratch[i], Tensor::Empty(chunk_shape, out.dtype));
        k->scratch_bytes_ += static_cast<int64_t>(slot.scratch[i].nbytes());
      }
    }
  }
  k->free_slots_ = num_slots == 64 ? ~uint64_t{0} : (uint64_t{1} << num_slots) - 1;
  return k;
}

struct FusedKernel::Step {
  absl::Span<const Tensor> inputs;
  Tensor* out;
  int64_t rows, chunk_rows;
  bool split;
};

absl::Status FusedKernel::RunChunks(const Step& st, int64_t lo, int64_t hi, Slot& slot) {
  const Tensor& out = *st.out;
  for (int64_t c = lo; c < hi; ++c) {
    const int64_t r0 = c * st.chunk_rows;
    const int64_t k = std::min(st.chunk_rows, st.rows - r0);
    for (size_t mi = 0; mi < members_.size(); ++mi) {
      const Member& m = members_[mi];
      std::vector<Tensor>& args = slot.arg_views[mi];
      for (size_t j = 0; j < m.args.size(); ++j) {
        int a = m.args[j];
        if (a >= 0) {
          args[j] = slot.out_views[a];
        } else {
          const Tensor& t = st.inputs[-1 - a];
          bool narrow = st.split && st.rows != 1 && t.ndim() == out.ndim() && t.dim(0) == st.rows;
          args[j] = narrow ? t.Narrow(0, r0, k) : t;
        }
      }
      Tensor& o = slot.out_views[mi];
      if (mi + 1 == members_.size()) {
        o = st.split ? out.Narrow(0, r0, k) : out;
      } else {
        o = st.split ? slot.scratch[mi].Narrow(0, 0, k) : slot.scratch[mi];
      }
      absl::Status s = m.fn(args, absl::MakeSpan(&o, 1), m.attrs);
      if (!s.ok()) return Annotate(s, absl::StrCat("fused member ", m.op));
    }
  }
  return absl::OkStatus();
}

int FusedKernel::AcquireSlot() {
  uint64_t m = free_slots_.load();
  while (true) {
    if (m == 0) {  // cannot happen with <= NumThreads() concurrent ranges
      m = free_slots_.load();
      continue;
    }
    int s = __builtin_ctzll(m);
    if (free_slots_.compare_exchange_weak(m, m & ~(uint64_t{1} << s))) return s;
  }
}

void FusedKernel::ReleaseSlot(int s) { free_slots_.fetch_or(uint64_t{1} << s); }

absl::Status FusedKernel::Run(absl::Span<const Tensor> inputs, absl::Span<Tensor> outputs) {
  Step st;
  st.inputs = inputs;
  st.out = &outputs[0];
  st.split = st.out->ndim() > 0;
  st.rows = st.split ? st.out->dim(0) : 1;
  const int64_t row_elems = st.rows == 0 ? 0 : st.out->numel() / st.rows;
  st.chunk_rows = std::max<int64_t>(1, chunk_elems_ / std::max<int64_t>(1, row_elems));
  const int64_t num_chunks = (st.rows + st.chunk_rows - 1) / st.chunk_rows;
  if (num_chunks <= 1 || slots_.size() == 1 || NumThreads() > static_cast<int>(slots_.size())) {
    int s = AcquireSlot();
    absl::Status status = RunChunks(st, 0, num_chunks, slots_[s]);
    ReleaseSlot(s);
    return status;
  }
  struct Shared {
    FusedKernel* self;
    const Step* st;
    std::atomic<bool> failed{false};
    absl::Status first_error;
    std::mutex mu;
  } shared{this, &st};
  Shared* sp = &shared;
  ParallelFor(num_chunks, 1, [sp](int64_t lo, int64_t hi) {
    if (sp->failed.load()) return;
    int s = sp->self->AcquireSlot();
    absl::Status status = sp->self->RunChunks(*sp->st, lo, hi, sp->self->slots_[s]);
    sp->self->ReleaseSlot(s);
    if (!status.ok()) {
      std::lock_guard<std::mutex> lock(sp->mu);
      if (!sp->failed.exchange(true)) sp->first_error = status;
    }
  });
  return shared.first_error;
}

kernels::KernelFn FusedKernel::AsKernelFn(std::shared_ptr<FusedKernel> k) {
  return [k](absl::Span<const Tensor> in, absl::Span<Tensor> out, const ir::Attrs&) { return k->Run(in, out); };
}

}  // namespace loom::compiler
