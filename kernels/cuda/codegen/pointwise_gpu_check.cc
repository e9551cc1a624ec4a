// GPU check of the generated pointwise kernels: every op (op_cases.h) plus a
// copy, a fill, a fused chain and a mixed-dtype add, x {f32, bf16} x
// {contiguous, broadcast, permuted, sliced}, each against the registry's
// reference evaluated in f64 on the same (dtype-rounded) inputs.
//
// The output storage is poisoned with 0xFF bytes (NaN) before the launch; a row
// passes when ||out - ref|| / ||ref|| < 1e-5 (f32) or 1e-2 (bf16) and, for the
// sliced layout (strided output with an offset), every element outside the
// slice still holds the poison. Prints one line per row, a summary and a few
// bandwidth figures; exits 1 on any failure, 2 when there is no GPU.
//
//   bazel build //kernels/cuda/codegen:pointwise_gpu_check
//   bazel-bin/kernels/cuda/codegen/pointwise_gpu_check [substring filter]
// (staged for the GPU machine by bench/cuda/stage.sh; run there by bench/cuda/run_all.sh)
//
// Kernels are cached under $LOOM_KERNEL_CACHE (default ~/.cache/loom/kernels).
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/status.h"
#include "base/tensor.h"
#include "kernels/cuda/codegen/check_util.h"
#include "kernels/cuda/codegen/pointwise.h"
#include "kernels/cuda/codegen/pointwise_internal.h"
#include "kernels/cuda/device_runtime.h"
#include "kernels/registry.h"

namespace loom::kernels::cuda::codegen {
namespace {

using Ints = std::vector<int64_t>;

struct Row {
  std::string label, dtype, layout;
  double err = 0, tol = 0;
  bool pass = false;
  bool from_cache = false;
  std::string detail;
};

absl::StatusOr<Row> RunCase(cuda::DeviceRuntime* rt, const PwCheckCase& c, DType dt, const std::string& layout,
                            uint64_t seed) {
  LOOM_ASSIGN_OR_RETURN(PwCheckInstance inst, MakeCheckInstance(c, dt, layout, seed));
  Row row{inst.label, inst.dtype, inst.layout};
  row.tol = inst.tol;
  std::vector<Tensor> dev;
  std::vector<const void*> ptrs;
  for (const Tensor& s : inst.in_storage) {
    LOOM_ASSIGN_OR_RETURN(Tensor d, cuda::ToDevice(s, rt->device()));
    ptrs.push_back(d.raw_data());
    dev.push_back(d);
  }
  LOOM_ASSIGN_OR_RETURN(Tensor dout, rt->Empty(inst.out_storage_shape, inst.out_dtype));
  LOOM_RETURN_IF_ERROR(cuda::FillBytes(dout.raw_data(), dout.nbytes(), 0xFF, rt->compute_stream()));
  LOOM_ASSIGN_OR_RETURN(auto kern, PointwiseKernel::Compile(inst.spec));
  row.from_cache = kern->from_cache();
  LOOM_RETURN_IF_ERROR(kern->Launch(ptrs, dout.raw_data(), rt->compute_stream()));
  LOOM_RETURN_IF_ERROR(rt->SynchronizeCompute());
  LOOM_ASSIGN_OR_RETURN(Tensor hout, cuda::ToHost(dout));
  PwCheckResult res = EvaluateCheck(inst, hout);
  row.err = res.err;
  row.pass = res.pass;
  row.detail = res.detail;
  return row;
}

// Large launches timed for bytes/s (no assertion).
struct BwCase {
  std::string label;
  PwBody body;
  Ints shape;
  std::vector<Ints> strides;  // per input
  DType dt;
  PwSpec Spec() const {
    PwSpec spec;
    spec.body = &body;
    spec.out_shape = shape;
    spec.out_dtype = dt;
    for (const Ints& st : strides) spec.inputs.push_back({dt, st});
    return spec;
  }
};

std::vector<BwCase> BandwidthCases() {
  const Ints big = {8192, 4096};
  const Ints contig = {4096, 1}, row_bcast = {0, 1}, perm = {1, 8192};
  const PwBody gelu = SingleOpBody("gelu", kernels::Attrs{{"approximate", std::string("tanh")}}, 1);
  const PwBody add = SingleOpBody("add", {}, 2);
  const PwBody copy = CopyBody();
  return {
      {"gelu_tanh bf16 [8192,4096] contiguous", gelu, big, {contig}, DType::kBF16},
      {"add bf16 [8192,4096] + [4096] broadcast", add, big, {contig, row_bcast}, DType::kBF16},
      {"add f32 [8192,4096] contiguous", add, big, {contig, contig}, DType::kF32},
      {"copy bf16 [8192,4096] transposed", copy, big, {perm}, DType::kBF16},
  };
}

void Bandwidth(cuda::DeviceRuntime* rt, const BwCase& c) {
  const PwSpec spec = c.Spec();
  std::vector<Tensor> bufs;
  std::vector<const void*> ptrs;
  double bytes = 0;
  for (const PwOperand& op : spec.inputs) {
    int64_t span = 1;
    for (size_t d = 0; d < c.shape.size(); ++d) span += (c.shape[d] - 1) * op.strides[d];
    auto t = rt->Empty({span}, c.dt);
    if (!t.ok()) return;
    bufs.push_back(*t);
    ptrs.push_back(t->raw_data());
    bytes += static_cast<double>(span) * DTypeSize(c.dt);
  }
  auto out = rt->Empty(c.shape, c.dt);
  if (!out.ok()) return;
  bytes += static_cast<double>(out->nbytes());
  auto k = PointwiseKernel::Compile(spec);
  if (!k.ok()) {
    std::printf("bandwidth %s: %s\n", c.label.c_str(), std::string(k.status().message()).c_str());
    return;
  }
  auto start = cuda::StreamEvent::Create(), stop = cuda::StreamEvent::Create();
  if (!start.ok() || !stop.ok()) return;
  absl::Status st = (*k)->Launch(ptrs, out->raw_data(), rt->compute_stream());  // warm-up + load
  const int iters = 20;
  (void)start->Record(rt->compute_stream());
  for (int i = 0; i < iters && st.ok(); ++i) st = (*k)->Launch(ptrs, out->raw_data(), rt->compute_stream());
  (void)stop->Record(rt->compute_stream());
  (void)stop->Synchronize();
  auto ms = stop->ElapsedMsSince(*start);
  if (!st.ok() || !ms.ok()) {
    std::printf("bandwidth %s: %s\n", c.label.c_str(), std::string((st.ok() ? ms.status() : st).message()).c_str());
    return;
  }
  const double s = *ms / 1e3 / iters;
  std::printf("bandwidth %-40s %8.1f us  %7.1f GB/s\n", c.label.c_str(), s * 1e6, bytes / s / 1e9);
}

// Compiles every kernel of the matrix (no GPU): fills the cache to ship.
int CompileOnly() {
  int n = 0, failed = 0;
  uint64_t seed = 1;
  for (const PwCheckCase& c : AllCheckCases())
    for (DType dt : {DType::kF32, DType::kBF16})
      for (const char* layout : kCheckLayouts) {
        if (!LayoutApplies(c, layout)) continue;
        auto inst = MakeCheckInstance(c, dt, layout, ++seed);
        absl::Status s = inst.status();
        if (inst.ok()) s = PointwiseKernel::Compile(inst->spec).status();
        ++n;
        if (!s.ok()) {
          ++failed;
          std::printf("%s %s %s: %s\n", c.label.c_str(), std::string(DTypeName(dt)).c_str(), layout,
                      std::string(s.message()).c_str());
        }
      }
  for (const BwCase& c : BandwidthCases()) {
    ++n;
    absl::Status s = PointwiseKernel::Compile(c.Spec()).status();
    if (!s.ok()) {
      ++failed;
      std::printf("%s: %s\n", c.label.c_str(), std::string(s.message()).c_str());
    }
  }
  std::printf("pointwise_gpu_check --compile-only: %d kernels, %d failed\n", n, failed);
  return failed ? 1 : 0;
}

int Main(int argc, char** argv) {
  std::printf("pointwise_gpu_check: %s; kernel cache %s\n", NvrtcInfo().c_str(),
              std::getenv("LOOM_KERNEL_CACHE") ? std::getenv("LOOM_KERNEL_CACHE") : "(default)");
  if (argc > 1 && std::string(argv[1]) == "--compile-only") return CompileOnly();
  const std::string filter = argc > 1 ? argv[1] : "";
  auto rt = cuda::DeviceRuntime::Get(0);
  if (!rt.ok()) {
    std::printf("pointwise_gpu_check: no GPU: %s\n", std::string(rt.status().message()).c_str());
    return 2;
  }
  std::vector<Row> rows;
  uint64_t seed = 1;
  for (const PwCheckCase& c : AllCheckCases()) {
    if (!filter.empty() && !absl::StrContains(c.label, filter)) continue;
    for (DType dt : {DType::kF32, DType::kBF16})
      for (const char* layout : kCheckLayouts) {
        if (!LayoutApplies(c, layout)) continue;
        auto r = RunCase(*rt, c, dt, layout, ++seed);
        if (r.ok()) {
          rows.push_back(*r);
        } else {
          Row bad{c.label, std::string(DTypeName(dt)), layout};
          bad.err = INFINITY;
          bad.tol = dt == DType::kF32 ? 1e-5 : 1e-2;
          bad.detail = std::string(r.status().message());
          rows.push_back(bad);
        }
      }
  }
  int failed = 0;
  std::printf("%-28s %-5s %-11s %11s %8s %-6s %s\n", "case", "dtype", "layout", "rel_err", "tol", "result", "");
  for (const Row& r : rows) {
    if (!r.pass) ++failed;
    std::printf("%-28s %-5s %-11s %11.3e %8.0e %-6s %s%s\n", r.label.c_str(), r.dtype.c_str(), r.layout.c_str(),
                r.err, r.tol, r.pass ? "PASS" : "FAIL", r.from_cache ? "(cached) " : "", r.detail.c_str());
  }
  std::printf("pointwise_gpu_check: %zu passed, %d failed\n", rows.size() - failed, failed);

  if (filter.empty())
    for (const BwCase& c : BandwidthCases()) Bandwidth(*rt, c);
  return failed ? 1 : 0;
}

}  // namespace
}  // namespace loom::kernels::cuda::codegen

int main(int argc, char** argv) { return loom::kernels::cuda::codegen::Main(argc, argv); }
