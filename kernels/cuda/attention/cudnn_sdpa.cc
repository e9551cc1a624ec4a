// cuDNN fused attention through the backend graph API (cudnn_sdpa.h): the
// run-time loader, the operation graphs (forward, backward), plan building and
// caching, and the runs.
#include "kernels/cuda/attention/cudnn_sdpa.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <functional>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/status.h"

#ifdef LOOM_HAVE_CUDA
#include <cuda_runtime.h>
#include <cudnn_graph.h>
#include <dlfcn.h>

#include "kernels/cuda/device_runtime.h"
#include "kernels/cuda/run_timing.h"
#include "kernels/cuda/tuning_cache.h"
#endif

namespace loom::kernels::cuda::attention {
namespace {

absl::Status Bad(const char* what, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat("cudnn sdpa: ", what, ": ", why));
}

// Resolved element strides (batch, head, row; the last dimension is 1).
struct Str3 {
  int64_t b, h, r;
};
Str3 Resolve(const CudnnStrides& s, int64_t heads, int64_t rows, int64_t d) {
  if (s.batch == 0 && s.head == 0 && s.row == 0) return {heads * rows * d, rows * d, d};
  return {s.batch, s.head, s.row};
}

}  // namespace

absl::Status CudnnSdpaValidate(const CudnnSdpaArgs& a, bool backward) {
  if (a.dtype != DType::kBF16 && a.dtype != DType::kF16)
    return absl::UnimplementedError(
        absl::StrCat("cudnn sdpa: dtype: cuDNN fused attention takes bf16 or f16, got ", DTypeName(a.dtype)));
  struct Dim {
    const char* name;
    int64_t v;
  };
  for (const Dim& d : {Dim{"batch", a.batch}, Dim{"heads", a.heads}, Dim{"kv_heads", a.kv_heads},
                       Dim{"seq_q", a.seq_q}, Dim{"seq_k", a.seq_k}, Dim{"head_dim", a.head_dim}})
    if (d.v <= 0 || d.v > (int64_t{1} << 30)) return Bad(d.name, absl::StrCat("must be in [1, 2^30], got ", d.v));
  if (a.heads % a.kv_heads != 0)
    return Bad("kv_heads", absl::StrCat("must divide heads (", a.heads, "), got ", a.kv_heads));
  if (a.head_dim % 8 != 0 || a.head_dim > 128)
    return absl::UnimplementedError(absl::StrCat(
        "cudnn sdpa: head_dim: cuDNN fused attention takes multiples of 8 up to 128, got ", a.head_dim));
  if (!std::isfinite(a.scale) || a.scale < 0)
    return Bad("scale", absl::StrCat("must be finite and > 0 (0: 1/sqrt(D)), got ", a.scale));
  struct Ptr {
    const char* name;
    const void* p;
  };
  std::vector<Ptr> ptrs = {{"q", a.q}, {"k", a.k}, {"v", a.v}, {"o", a.o}};
  // A forward without lse is an inference one (its stats stay virtual).
  if (backward || a.lse != nullptr) ptrs.push_back({"lse", a.lse});
  if (backward) ptrs.insert(ptrs.end(), {{"dout", a.dout}, {"dq", a.dq}, {"dk", a.dk}, {"dv", a.dv}});
  for (const Ptr& p : ptrs) {
    if (p.p == nullptr) return Bad(p.name, "null");
    if (reinterpret_cast<uintptr_t>(p.p) % 16 != 0) return Bad(p.name, "must be 16-byte aligned");
  }
  struct St {
    const char* name;
    const CudnnStrides* s;
    int64_t heads, rows;
  };
  std::vector<St> sts = {{"q_strides", &a.q_strides, a.heads, a.seq_q},
                         {"k_strides", &a.k_strides, a.kv_heads, a.seq_k},
                         {"v_strides", &a.v_strides, a.kv_heads, a.seq_k},
                         {"o_strides", &a.o_strides, a.heads, a.seq_q}};
  if (backward)
    sts.insert(sts.end(), {{"dout_strides", &a.dout_strides, a.heads, a.seq_q},
                           {"dq_strides", &a.dq_strides, a.heads, a.seq_q},
                           {"dk_strides", &a.dk_strides, a.kv_heads, a.seq_k},
                           {"dv_strides", &a.dv_strides, a.kv_heads, a.seq_k}});
  for (const St& s : sts) {
    const CudnnStrides& x = *s.s;
    if (x.batch == 0 && x.head == 0 && x.row == 0) continue;
    if (x.batch <= 0 || x.head <= 0 || x.row <= 0)
      return Bad(s.name, absl::StrCat("strides must all be > 0 (or all 0: contiguous), got batch=", x.batch,
                                      " head=", x.head, " row=", x.row));
    if (x.batch % 8 || x.head % 8 || x.row % 8)
      return Bad(s.name, "strides must be multiples of 8 elements (16-byte aligned rows)");
    if (x.row < a.head_dim) return Bad(s.name, absl::StrCat("row stride ", x.row, " < head_dim ", a.head_dim));
  }
  return absl::OkStatus();
}

namespace {
std::mutex g_options_mu;
CudnnSdpaOptions g_options;
}  // namespace

absl::Status SetCudnnSdpaOptions(const CudnnSdpaOptions& o) {
  if (o.max_engine_configs < 1 || o.max_engine_configs > 16)
    return absl::InvalidArgumentError(
        absl::StrCat("cudnn sdpa: max_engine_configs: must be in [1, 16], got ", o.max_engine_configs));
  std::lock_guard<std::mutex> lock(g_options_mu);
  g_options = o;
  return absl::OkStatus();
}

CudnnSdpaOptions GetCudnnSdpaOptions() {
  std::lock_guard<std::mutex> lock(g_options_mu);
  return g_options;
}

#ifndef LOOM_HAVE_CUDA

absl::Status CudnnAvailable() { return absl::UnavailableError("cuDNN not found: Loom was built without CUDA"); }
std::string CudnnVersionString() { return "unavailable (built without CUDA)"; }
absl::Status CudnnSdpaForward(const CudnnSdpaArgs& a) {
  LOOM_RETURN_IF_ERROR(CudnnSdpaValidate(a, false));
  return CudnnAvailable();
}
absl::Status CudnnSdpaBackward(const CudnnSdpaArgs& a) {
  LOOM_RETURN_IF_ERROR(CudnnSdpaValidate(a, true));
  return CudnnAvailable();
}
absl::StatusOr<int64_t> CudnnSdpaWorkspaceBytes(const CudnnSdpaArgs& a, bool backward) {
  LOOM_RETURN_IF_ERROR(CudnnSdpaValidate(a, backward));
  return CudnnAvailable();
}
std::string CudnnSdpaEngineChoice(const CudnnSdpaArgs&, bool) { return ""; }

#else  // LOOM_HAVE_CUDA

namespace {

// ---------------------------------------------------------------- loader

struct CudnnApi {
  size_t (*GetVersion)() = nullptr;
  const char* (*GetErrorString)(cudnnStatus_t) = nullptr;
  void (*GetLastErrorString)(char*, size_t) = nullptr;  // optional
  cudnnStatus_t (*Create)(cudnnHandle_t*) = nullptr;
  cudnnStatus_t (*SetStream)(cudnnHandle_t, cudaStream_t) = nullptr;
  cudnnStatus_t (*CreateDesc)(cudnnBackendDescriptorType_t, cudnnBackendDescriptor_t*) = nullptr;
  cudnnStatus_t (*DestroyDesc)(cudnnBackendDescriptor_t) = nullptr;
  cudnnStatus_t (*Finalize)(cudnnBackendDescriptor_t) = nullptr;
  cudnnStatus_t (*SetAttr)(cudnnBackendDescriptor_t, cudnnBackendAttributeName_t, cudnnBackendAttributeType_t,
                           int64_t, const void*) = nullptr;
  cudnnStatus_t (*GetAttr)(cudnnBackendDescriptor_t const, cudnnBackendAttributeName_t, cudnnBackendAttributeType_t,
                           int64_t, int64_t*, void*) = nullptr;
  cudnnStatus_t (*Execute)(cudnnHandle_t, cudnnBackendDescriptor_t, cudnnBackendDescriptor_t) = nullptr;
  size_t version = 0;
  std::string library;
  std::string error;  // "" when loaded
};

const CudnnApi& Api() {
  static const CudnnApi* api = [] {
    auto* a = new CudnnApi();
    // The dynamic loader's search (LD_LIBRARY_PATH, the ld.so cache) finds it.
    const std::vector<std::string> names = {"libcudnn.so.9", "libcudnn.so"};
    void* h = nullptr;
    std::string last;
    for (const std::string& n : names) {
      if ((h = ::dlopen(n.c_str(), RTLD_NOW | RTLD_LOCAL)) != nullptr) {
        a->library = n;
        break;
      }
      if (const char* why = ::dlerror(); why != nullptr) last = why;
    }
    if (h == nullptr) {
      a->error = absl::StrCat("cuDNN not found: tried ", absl::StrJoin(names, ", "),
                              " (put its folder on LD_LIBRARY_PATH)", last.empty() ? "" : "; last: ", last);
      return a;
    }
    std::vector<std::string> missing;
    auto sym = [&](auto& fn, const char* name, bool required = true) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(::dlsym(h, name));
      if (fn == nullptr && required) missing.push_back(name);
    };
    sym(a->GetVersion, "cudnnGetVersion");
    sym(a->GetErrorString, "cudnnGetErrorString");
    sym(a->GetLastErrorString, "cudnnGetLastErrorString", false);
    sym(a->Create, "cudnnCreate");
    sym(a->SetStream, "cudnnSetStream");
    sym(a->CreateDesc, "cudnnBackendCreateDescriptor");
    sym(a->DestroyDesc, "cudnnBackendDestroyDescriptor");
    sym(a->Finalize, "cudnnBackendFinalize");
    sym(a->SetAttr, "cudnnBackendSetAttribute");
    sym(a->GetAttr, "cudnnBackendGetAttribute");
    sym(a->Execute, "cudnnBackendExecute");
    if (!missing.empty()) {
      a->error = absl::StrCat("cuDNN not found: ", a->library, " lacks ", absl::StrJoin(missing, ", "));
      return a;
    }
    a->version = a->GetVersion();
    if (a->version < 90000)
      a->error = absl::StrCat("cuDNN not found: ", a->library, " is version ", a->version, "; need 9.x");
    return a;
  }();
  return *api;
}

absl::Status Check(cudnnStatus_t s, const std::string& step) {
  if (s == CUDNN_STATUS_SUCCESS) return absl::OkStatus();
  const CudnnApi& api = Api();
  char last[1024] = "";
  if (api.GetLastErrorString != nullptr) api.GetLastErrorString(last, sizeof(last));
  std::string msg = absl::StrCat("cuDNN ", step, ": ", api.GetErrorString(s), " (", static_cast<int>(s), ")",
                                 last[0] ? absl::StrCat(": ", last) : "");
  if (static_cast<int>(s) / 1000 == 3) return absl::UnimplementedError(msg);
  return absl::InternalError(msg);
}

absl::Status CudaCheck(cudaError_t e, const char* step) {
  if (e == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat("cudnn sdpa: ", step, ": ", cudaGetErrorString(e)));
}

// ---------------------------------------------------------------- graph building

using Arr4 = std::array<int64_t, 4>;
struct TensorD {
  cudnnBackendDescriptor_t d = nullptr;
  Arr4 dims{}, strides{};
};

// The uids of the tensors in the variant pack.
enum Uid : int64_t {
  kQ = 1, kK, kV, kO, kStats, kScale, kNegInf, kOne, kDO, kDQ, kDK, kDV, kDQAccum,
  kFirstVirtual = 100,
};

// Owns every descriptor it creates (tensors, operations, graph, plan).
class Builder {
 public:
  Builder() = default;
  Builder(const Builder&) = delete;
  ~Builder() {
    for (auto it = owned_.rbegin(); it != owned_.rend(); ++it) Api().DestroyDesc(*it);
  }

  absl::StatusOr<cudnnBackendDescriptor_t> New(cudnnBackendDescriptorType_t t, const std::string& what) {
    cudnnBackendDescriptor_t d = nullptr;
    LOOM_RETURN_IF_ERROR(Check(Api().CreateDesc(t, &d), absl::StrCat("create ", what)));
    owned_.push_back(d);
    return d;
  }
  absl::Status Set(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t n, cudnnBackendAttributeType_t t,
                   int64_t count, const void* v, const std::string& what) {
    return Check(Api().SetAttr(d, n, t, count, v), absl::StrCat("set attribute ", static_cast<int>(n), " of ", what));
  }
  absl::Status SetDesc(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t n, cudnnBackendDescriptor_t v,
                       const std::string& what) {
    return Set(d, n, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &v, what);
  }
  absl::Status Fin(cudnnBackendDescriptor_t d, const std::string& what) {
    return Check(Api().Finalize(d), absl::StrCat("finalize ", what));
  }

  absl::StatusOr<TensorD> Tensor(int64_t uid, cudnnDataType_t dt, Arr4 dims, Arr4 strides, bool is_virtual,
                                 bool by_value = false, bool reorder_f16x16 = false) {
    const std::string what = absl::StrCat("tensor ", uid);
    LOOM_ASSIGN_OR_RETURN(cudnnBackendDescriptor_t d, New(CUDNN_BACKEND_TENSOR_DESCRIPTOR, what));
    const int64_t align = 16;
    const bool virt = is_virtual;
    LOOM_RETURN_IF_ERROR(Set(d, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt, what));
    LOOM_RETURN_IF_ERROR(Set(d, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims.data(), what));
    LOOM_RETURN_IF_ERROR(Set(d, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides.data(), what));
    LOOM_RETURN_IF_ERROR(Set(d, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid, what));
    LOOM_RETURN_IF_ERROR(Set(d, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align, what));
    LOOM_RETURN_IF_ERROR(Set(d, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &virt, what));
    if (by_value) {
      const bool t = true;
      LOOM_RETURN_IF_ERROR(Set(d, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &t, what));
    }
    if (reorder_f16x16) {
      const cudnnBackendTensorReordering_t r = CUDNN_TENSOR_REORDERING_F16x16;
      LOOM_RETURN_IF_ERROR(Set(d, CUDNN_ATTR_TENSOR_REORDERING_MODE, CUDNN_TYPE_TENSOR_REORDERING_MODE, 1, &r, what));
    }
    LOOM_RETURN_IF_ERROR(Fin(d, what));
    return TensorD{d, dims, strides};
  }
  absl::StatusOr<TensorD> Virtual(cudnnDataType_t dt, Arr4 dims, Arr4 strides) {
    return Tensor(next_uid_++, dt, dims, strides, true);
  }
  // Packed strides of dims.
  static Arr4 Packed(Arr4 d) { return {d[1] * d[2] * d[3], d[2] * d[3], d[3], 1}; }
  absl::StatusOr<TensorD> Virtual(cudnnDataType_t dt, Arr4 dims) { return Virtual(dt, dims, Packed(dims)); }
  absl::StatusOr<TensorD> Scalar(int64_t uid) {
    return Tensor(uid, CUDNN_DATA_FLOAT, {1, 1, 1, 1}, {1, 1, 1, 1}, false, /*by_value=*/true);
  }

  // y = mode(x[, b[, t]]).
  absl::Status Pointwise(const char* name, cudnnPointwiseMode_t mode, cudnnDataType_t prec, const TensorD& x,
                         const TensorD* b, const TensorD* t, const TensorD& y, int64_t axis = -1) {
    const std::string what = absl::StrCat("pointwise ", name);
    LOOM_ASSIGN_OR_RETURN(cudnnBackendDescriptor_t pw, New(CUDNN_BACKEND_POINTWISE_DESCRIPTOR, what));
    LOOM_RETURN_IF_ERROR(Set(pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode, what));
    LOOM_RETURN_IF_ERROR(Set(pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec, what));
    if (axis >= 0) LOOM_RETURN_IF_ERROR(Set(pw, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis, what));
    LOOM_RETURN_IF_ERROR(Fin(pw, what));
    LOOM_ASSIGN_OR_RETURN(cudnnBackendDescriptor_t op, New(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, what));
    LOOM_RETURN_IF_ERROR(SetDesc(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, pw, what));
    LOOM_RETURN_IF_ERROR(SetDesc(op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x.d, what));
    if (b != nullptr) LOOM_RETURN_IF_ERROR(SetDesc(op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, b->d, what));
    if (t != nullptr) LOOM_RETURN_IF_ERROR(SetDesc(op, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, t->d, what));
    LOOM_RETURN_IF_ERROR(SetDesc(op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, y.d, what));
    LOOM_RETURN_IF_ERROR(Fin(op, what));
    ops_.push_back(op);
    return absl::OkStatus();
  }
  // c = a @ b (batched over the first two dims; b's heads broadcast for GQA).
  absl::Status Matmul(const char* name, const TensorD& a, const TensorD& b, const TensorD& c) {
    const std::string what = absl::StrCat("matmul ", name);
    LOOM_ASSIGN_OR_RETURN(cudnnBackendDescriptor_t mm, New(CUDNN_BACKEND_MATMUL_DESCRIPTOR, what));
    const cudnnDataType_t f = CUDNN_DATA_FLOAT;
    LOOM_RETURN_IF_ERROR(Set(mm, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f, what));
    LOOM_RETURN_IF_ERROR(Fin(mm, what));
    LOOM_ASSIGN_OR_RETURN(cudnnBackendDescriptor_t op, New(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, what));
    LOOM_RETURN_IF_ERROR(SetDesc(op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, a.d, what));
    LOOM_RETURN_IF_ERROR(SetDesc(op, CUDNN_ATTR_OPERATION_MATMUL_BDESC, b.d, what));
    LOOM_RETURN_IF_ERROR(SetDesc(op, CUDNN_ATTR_OPERATION_MATMUL_CDESC, c.d, what));
    LOOM_RETURN_IF_ERROR(SetDesc(op, CUDNN_ATTR_OPERATION_MATMUL_DESC, mm, what));
    LOOM_RETURN_IF_ERROR(Fin(op, what));
    ops_.push_back(op);
    return absl::OkStatus();
  }
  absl::Status Reduce(const char* name, cudnnReduceTensorOp_t mode, const TensorD& x, const TensorD& y) {
    const std::string what = absl::StrCat("reduction ", name);
    LOOM_ASSIGN_OR_RETURN(cudnnBackendDescriptor_t r, New(CUDNN_BACKEND_REDUCTION_DESCRIPTOR, what));
    const cudnnDataType_t f = CUDNN_DATA_FLOAT;
    LOOM_RETURN_IF_ERROR(Set(r, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &mode, what));
    LOOM_RETURN_IF_ERROR(Set(r, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f, what));
    LOOM_RETURN_IF_ERROR(Fin(r, what));
    LOOM_ASSIGN_OR_RETURN(cudnnBackendDescriptor_t op, New(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, what));
    LOOM_RETURN_IF_ERROR(SetDesc(op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, x.d, what));
    LOOM_RETURN_IF_ERROR(SetDesc(op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, y.d, what));
    LOOM_RETURN_IF_ERROR(SetDesc(op, CUDNN_ATTR_OPERATION_REDUCTION_DESC, r, what));
    LOOM_RETURN_IF_ERROR(Fin(op, what));
    ops_.push_back(op);
    return absl::OkStatus();
  }
  absl::Status Reshape(const char* name, const TensorD& x, const TensorD& y) {
    const std::string what = absl::StrCat("reshape ", name);
    LOOM_ASSIGN_OR_RETURN(cudnnBackendDescriptor_t op, New(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR, what));
    LOOM_RETURN_IF_ERROR(SetDesc(op, CUDNN_ATTR_OPERATION_RESHAPE_XDESC, x.d, what));
    LOOM_RETURN_IF_ERROR(SetDesc(op, CUDNN_ATTR_OPERATION_RESHAPE_YDESC, y.d, what));
    LOOM_RETURN_IF_ERROR(Fin(op, what));
    ops_.push_back(op);
    return absl::OkStatus();
  }

  // One finalized execution plan: an engine config of the heuristics.
  struct Config {
    cudnnBackendDescriptor_t plan = nullptr;
    int64_t workspace = 0;
    int64_t engine = -1;  // cuDNN's global engine index
    std::string name;     // "engine 8 (heuristics mode 0, config 1)"
    int mode = 0;         // the heuristics mode and the index in its list
    int64_t index = 0;
  };
  // The one engine config to build (a choice from the TuningCache).
  struct Wanted {
    int mode = 0;
    int64_t index = 0, engine = -1;
  };

  // Operation graph -> heuristics (mode A, then the fallback list) -> every
  // engine config whose plan finalizes, up to max_configs, best-ranked first
  // (the fallback list adds only engines mode A did not offer). Sets configs_.
  // With `want`, only that config, when it still finalizes as the same engine.
  absl::Status BuildPlans(cudnnHandle_t handle, int max_configs, const Wanted* want = nullptr) {
    LOOM_ASSIGN_OR_RETURN(cudnnBackendDescriptor_t g, New(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, "operation graph"));
    LOOM_RETURN_IF_ERROR(Set(g, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                             static_cast<int64_t>(ops_.size()), ops_.data(), "operation graph"));
    // CUDNN_ATTR_OPERATIONGRAPH_HANDLE (deprecated name in 9.x headers, still read).
    LOOM_RETURN_IF_ERROR(Set(g, static_cast<cudnnBackendAttributeName_t>(800), CUDNN_TYPE_HANDLE, 1, &handle,
                             "operation graph"));
    LOOM_RETURN_IF_ERROR(Fin(g, "operation graph"));
    std::vector<std::string> tried;
    for (cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
      const std::string what = absl::StrCat("heuristics mode ", static_cast<int>(mode));
      LOOM_ASSIGN_OR_RETURN(cudnnBackendDescriptor_t h, New(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, what));
      LOOM_RETURN_IF_ERROR(SetDesc(h, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, g, what));
      LOOM_RETURN_IF_ERROR(Set(h, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode, what));
      if (absl::Status s = Fin(h, what); !s.ok()) {
        tried.push_back(std::string(s.message()));
        continue;
      }
      int64_t count = 0;
      if (absl::Status s = Check(Api().GetAttr(h, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0,
                                               &count, nullptr),
                                 what + " result count");
          !s.ok()) {
        tried.push_back(std::string(s.message()));
        continue;
      }
      if (count <= 0) {
        tried.push_back(absl::StrCat(what, ": no engine"));
        continue;
      }
      std::vector<cudnnBackendDescriptor_t> cfgs;
      for (int64_t i = 0; i < count; ++i) {
        LOOM_ASSIGN_OR_RETURN(cudnnBackendDescriptor_t c, New(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, "engine config"));
        cfgs.push_back(c);
      }
      int64_t got = 0;
      LOOM_RETURN_IF_ERROR(Check(
          Api().GetAttr(h, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &got, cfgs.data()),
          what + " results"));
      const size_t from_mode_a = configs_.size();
      for (int64_t i = 0; i < got && static_cast<int>(configs_.size()) < max_configs; ++i) {
        if (want != nullptr && (static_cast<int>(mode) != want->mode || i != want->index)) continue;
        const int64_t engine = EngineIndex(cfgs[i]);
        if (want != nullptr && engine != want->engine) continue;
        if (mode == CUDNN_HEUR_MODE_FALLBACK) {
          bool seen = false;
          for (size_t c = 0; c < from_mode_a; ++c) seen = seen || configs_[c].engine == engine;
          if (seen) continue;
        }
        const std::string pw = absl::StrCat("execution plan (", what, ", config ", i, ")");
        LOOM_ASSIGN_OR_RETURN(cudnnBackendDescriptor_t p, New(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, pw));
        LOOM_RETURN_IF_ERROR(Set(p, static_cast<cudnnBackendAttributeName_t>(400), CUDNN_TYPE_HANDLE, 1, &handle, pw));
        LOOM_RETURN_IF_ERROR(SetDesc(p, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, cfgs[i], pw));
        if (absl::Status s = Fin(p, pw); !s.ok()) {
          tried.push_back(std::string(s.message()));
          continue;
        }
        int64_t ws = 0, n = 0;
        LOOM_RETURN_IF_ERROR(Check(
            Api().GetAttr(p, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &n, &ws), pw + " workspace"));
        configs_.push_back({p, ws, engine,
                            absl::StrCat("engine ", engine, " (heuristics mode ", static_cast<int>(mode), ", config ",
                                         i, ")"),
                            static_cast<int>(mode), i});
      }
    }
    if (!configs_.empty()) return absl::OkStatus();
    return absl::UnimplementedError(
        absl::StrCat("cuDNN has no engine for this attention graph: ", absl::StrJoin(tried, "; ")));
  }

  const std::vector<Config>& configs() const { return configs_; }

 private:
  // The global engine index of an engine config, -1 when cuDNN does not say.
  int64_t EngineIndex(cudnnBackendDescriptor_t cfg) {
    absl::StatusOr<cudnnBackendDescriptor_t> e = New(CUDNN_BACKEND_ENGINE_DESCRIPTOR, "engine");
    if (!e.ok()) return -1;
    int64_t n = 0, idx = -1;
    if (Api().GetAttr(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &*e) !=
            CUDNN_STATUS_SUCCESS ||
        Api().GetAttr(*e, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &n, &idx) != CUDNN_STATUS_SUCCESS)
      return -1;
    return idx;
  }

  std::vector<cudnnBackendDescriptor_t> owned_;
  std::vector<cudnnBackendDescriptor_t> ops_;
  int64_t next_uid_ = kFirstVirtual;
  std::vector<Config> configs_;
};

cudnnDataType_t IoType(DType d) { return d == DType::kF16 ? CUDNN_DATA_HALF : CUDNN_DATA_BFLOAT16; }

struct Shape {
  int64_t b, h, hk, tq, tk, d;
  Str3 q, k, v, o, dout, dq, dk, dv;
};

Shape ShapeOf(const CudnnSdpaArgs& a) {
  Shape s{a.batch, a.heads, a.kv_heads, a.seq_q, a.seq_k, a.head_dim, {}, {}, {}, {}, {}, {}, {}, {}};
  s.q = Resolve(a.q_strides, s.h, s.tq, s.d);
  s.k = Resolve(a.k_strides, s.hk, s.tk, s.d);
  s.v = Resolve(a.v_strides, s.hk, s.tk, s.d);
  s.o = Resolve(a.o_strides, s.h, s.tq, s.d);
  s.dout = Resolve(a.dout_strides, s.h, s.tq, s.d);
  s.dq = Resolve(a.dq_strides, s.h, s.tq, s.d);
  s.dk = Resolve(a.dk_strides, s.hk, s.tk, s.d);
  s.dv = Resolve(a.dv_strides, s.hk, s.tk, s.d);
  return s;
}

// S' = causal-mask(S): row >= col keeps S, else the lowest float.
absl::StatusOr<TensorD> CausalMask(Builder& g, const TensorD& s, const TensorD& neg_inf) {
  LOOM_ASSIGN_OR_RETURN(TensorD row, g.Virtual(CUDNN_DATA_INT32, s.dims));
  LOOM_RETURN_IF_ERROR(g.Pointwise("row index", CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_INT32, s, nullptr, nullptr, row, 2));
  LOOM_ASSIGN_OR_RETURN(TensorD col, g.Virtual(CUDNN_DATA_INT32, s.dims));
  LOOM_RETURN_IF_ERROR(g.Pointwise("col index", CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_INT32, s, nullptr, nullptr, col, 3));
  LOOM_ASSIGN_OR_RETURN(TensorD keep, g.Virtual(CUDNN_DATA_BOOLEAN, s.dims));
  LOOM_RETURN_IF_ERROR(g.Pointwise("row >= col", CUDNN_POINTWISE_CMP_GE, CUDNN_DATA_BOOLEAN, row, &col, nullptr, keep));
  LOOM_ASSIGN_OR_RETURN(TensorD out, g.Virtual(CUDNN_DATA_FLOAT, s.dims));
  LOOM_RETURN_IF_ERROR(
      g.Pointwise("causal select", CUDNN_POINTWISE_BINARY_SELECT, CUDNN_DATA_FLOAT, s, &neg_inf, &keep, out));
  return out;
}

// scale * Q K^T, with the causal mask applied when asked: the scores both
// graphs start from.
absl::StatusOr<TensorD> MaskedScores(Builder& g, const TensorD& q, const TensorD& kt, const TensorD& scale,
                                     const Arr4& sd, bool causal) {
  const cudnnDataType_t f = CUDNN_DATA_FLOAT;
  LOOM_ASSIGN_OR_RETURN(TensorD s0, g.Virtual(f, sd));
  LOOM_RETURN_IF_ERROR(g.Matmul("Q K^T", q, kt, s0));
  LOOM_ASSIGN_OR_RETURN(TensorD s1, g.Virtual(f, sd));
  LOOM_RETURN_IF_ERROR(g.Pointwise("attn scale", CUDNN_POINTWISE_MUL, f, s0, &scale, nullptr, s1));
  if (!causal) return s1;
  LOOM_ASSIGN_OR_RETURN(TensorD neg_inf, g.Scalar(kNegInf));
  return CausalMask(g, s1, neg_inf);
}

// out [B, Hkv, Tk, D] = a b, a product over every query head: with GQA the
// per-query-head products are summed per kv head.
absl::Status MatmulIntoKvHeads(Builder& g, const char* name, const char* reduce_name, const TensorD& a,
                               const TensorD& b, const TensorD& out, const Shape& s, cudnnDataType_t io) {
  if (s.h == s.hk) return g.Matmul(name, a, b, out);
  LOOM_ASSIGN_OR_RETURN(TensorD per_head, g.Virtual(io, {s.b, s.h, s.tk, s.d}));
  LOOM_RETURN_IF_ERROR(g.Matmul(name, a, b, per_head));
  return g.Reduce(reduce_name, CUDNN_REDUCE_TENSOR_ADD, per_head, out);
}

// Forward: O = softmax(scale * Q K^T [masked]) V and Stats = max + log(sum
// exp), written unless `inference`.
absl::Status BuildForward(Builder& g, const Shape& s, cudnnDataType_t io, bool causal, bool inference) {
  const cudnnDataType_t f = CUDNN_DATA_FLOAT;
  LOOM_ASSIGN_OR_RETURN(TensorD q, g.Tensor(kQ, io, {s.b, s.h, s.tq, s.d}, {s.q.b, s.q.h, s.q.r, 1}, false));
  LOOM_ASSIGN_OR_RETURN(TensorD kt, g.Tensor(kK, io, {s.b, s.hk, s.d, s.tk}, {s.k.b, s.k.h, 1, s.k.r}, false));
  LOOM_ASSIGN_OR_RETURN(TensorD v, g.Tensor(kV, io, {s.b, s.hk, s.tk, s.d}, {s.v.b, s.v.h, s.v.r, 1}, false));
  LOOM_ASSIGN_OR_RETURN(TensorD o, g.Tensor(kO, io, {s.b, s.h, s.tq, s.d}, {s.o.b, s.o.h, s.o.r, 1}, false));
  LOOM_ASSIGN_OR_RETURN(TensorD scale, g.Scalar(kScale));
  const Arr4 sd = {s.b, s.h, s.tq, s.tk}, rd = {s.b, s.h, s.tq, 1};
  LOOM_ASSIGN_OR_RETURN(TensorD last, MaskedScores(g, q, kt, scale, sd, causal));
  LOOM_ASSIGN_OR_RETURN(TensorD mx, g.Virtual(f, rd));
  LOOM_RETURN_IF_ERROR(g.Reduce("row max", CUDNN_REDUCE_TENSOR_MAX, last, mx));
  LOOM_ASSIGN_OR_RETURN(TensorD sub, g.Virtual(f, sd));
  LOOM_RETURN_IF_ERROR(g.Pointwise("S - max", CUDNN_POINTWISE_SUB, f, last, &mx, nullptr, sub));
  LOOM_ASSIGN_OR_RETURN(TensorD ex, g.Virtual(f, sd));
  LOOM_RETURN_IF_ERROR(g.Pointwise("exp", CUDNN_POINTWISE_EXP, f, sub, nullptr, nullptr, ex));
  LOOM_ASSIGN_OR_RETURN(TensorD sum, g.Virtual(f, rd));
  LOOM_RETURN_IF_ERROR(g.Reduce("row sum", CUDNN_REDUCE_TENSOR_ADD, ex, sum));
  // cuDNN's fused engines match the softmax with its stats nodes; an
  // inference graph keeps them and makes the stats tensor virtual, so
  // nothing is written.
  LOOM_ASSIGN_OR_RETURN(TensorD stats, inference ? g.Virtual(f, rd)
                                                 : g.Tensor(kStats, f, rd, {s.h * s.tq, s.tq, 1, 1}, false));
  LOOM_ASSIGN_OR_RETURN(TensorD lg, g.Virtual(f, rd));
  LOOM_RETURN_IF_ERROR(g.Pointwise("log sum", CUDNN_POINTWISE_LOG, f, sum, nullptr, nullptr, lg));
  LOOM_RETURN_IF_ERROR(g.Pointwise("stats", CUDNN_POINTWISE_ADD, f, mx, &lg, nullptr, stats));
  LOOM_ASSIGN_OR_RETURN(TensorD p, g.Virtual(io, sd));  // P in the i/o type (bmm2's A)
  LOOM_RETURN_IF_ERROR(g.Pointwise("softmax", CUDNN_POINTWISE_DIV, f, ex, &sum, nullptr, p));
  return g.Matmul("P V", p, v, o);
}

// The backward graph. dQ = dS K goes through an f32 accumulator, with the K
// view in the i/o type (of the three forms timed, this one was fastest:
// kernels/cuda/attention/NOTES.md).
absl::Status BuildBackward(Builder& g, const Shape& s, cudnnDataType_t io, bool causal) {
  const cudnnDataType_t f = CUDNN_DATA_FLOAT;
  LOOM_ASSIGN_OR_RETURN(TensorD q, g.Tensor(kQ, io, {s.b, s.h, s.tq, s.d}, {s.q.b, s.q.h, s.q.r, 1}, false));
  LOOM_ASSIGN_OR_RETURN(TensorD kt, g.Tensor(kK, io, {s.b, s.hk, s.d, s.tk}, {s.k.b, s.k.h, 1, s.k.r}, false));
  LOOM_ASSIGN_OR_RETURN(TensorD vt, g.Tensor(kV, io, {s.b, s.hk, s.d, s.tk}, {s.v.b, s.v.h, 1, s.v.r}, false));
  LOOM_ASSIGN_OR_RETURN(TensorD o, g.Tensor(kO, io, {s.b, s.h, s.tq, s.d}, {s.o.b, s.o.h, s.o.r, 1}, false));
  LOOM_ASSIGN_OR_RETURN(TensorD dout,
                        g.Tensor(kDO, io, {s.b, s.h, s.tq, s.d}, {s.dout.b, s.dout.h, s.dout.r, 1}, false));
  LOOM_ASSIGN_OR_RETURN(TensorD stats,
                        g.Tensor(kStats, f, {s.b, s.h, s.tq, 1}, {s.h * s.tq, s.tq, 1, 1}, false));
  LOOM_ASSIGN_OR_RETURN(TensorD dq, g.Tensor(kDQ, io, {s.b, s.h, s.tq, s.d}, {s.dq.b, s.dq.h, s.dq.r, 1}, false));
  LOOM_ASSIGN_OR_RETURN(TensorD dk, g.Tensor(kDK, io, {s.b, s.hk, s.tk, s.d}, {s.dk.b, s.dk.h, s.dk.r, 1}, false));
  LOOM_ASSIGN_OR_RETURN(TensorD dv, g.Tensor(kDV, io, {s.b, s.hk, s.tk, s.d}, {s.dv.b, s.dv.h, s.dv.r, 1}, false));
  LOOM_ASSIGN_OR_RETURN(TensorD scale, g.Scalar(kScale));
  LOOM_ASSIGN_OR_RETURN(TensorD one, g.Scalar(kOne));
  const Arr4 sd = {s.b, s.h, s.tq, s.tk}, rd = {s.b, s.h, s.tq, 1};
  const Arr4 td = {s.b, s.h, s.tk, s.tq}, ts = {s.h * s.tq * s.tk, s.tq * s.tk, 1, s.tk};  // transposed view

  // softmax_sum = rowsum(dO * O).
  LOOM_ASSIGN_OR_RETURN(TensorD doo, g.Virtual(f, {s.b, s.h, s.tq, s.d}));
  LOOM_RETURN_IF_ERROR(g.Pointwise("dO * O", CUDNN_POINTWISE_MUL, f, dout, &o, nullptr, doo));
  LOOM_ASSIGN_OR_RETURN(TensorD red, g.Virtual(f, rd));
  LOOM_RETURN_IF_ERROR(g.Reduce("rowsum dO*O", CUDNN_REDUCE_TENSOR_ADD, doo, red));
  LOOM_ASSIGN_OR_RETURN(TensorD ssum, g.Virtual(f, rd));
  LOOM_RETURN_IF_ERROR(g.Pointwise("softmax sum", CUDNN_POINTWISE_MUL, f, red, &one, nullptr, ssum));

  // P = exp(scale * Q K^T [masked] - stats).
  LOOM_ASSIGN_OR_RETURN(TensorD last, MaskedScores(g, q, kt, scale, sd, causal));
  LOOM_ASSIGN_OR_RETURN(TensorD sub, g.Virtual(f, sd));
  LOOM_RETURN_IF_ERROR(g.Pointwise("S - stats", CUDNN_POINTWISE_SUB, f, last, &stats, nullptr, sub));
  LOOM_ASSIGN_OR_RETURN(TensorD p, g.Virtual(f, sd));
  LOOM_RETURN_IF_ERROR(g.Pointwise("exp", CUDNN_POINTWISE_EXP, f, sub, nullptr, nullptr, p));

  // dV = P^T dO (GQA: over every query head, then summed per kv head).
  LOOM_ASSIGN_OR_RETURN(TensorD pt, g.Virtual(io, td, ts));
  LOOM_RETURN_IF_ERROR(g.Reshape("P^T", p, pt));
  LOOM_RETURN_IF_ERROR(MatmulIntoKvHeads(g, "P^T dO", "dV over heads", pt, dout, dv, s, io));

  // dS = P * (dO V^T - softmax_sum) * scale.
  LOOM_ASSIGN_OR_RETURN(TensorD dp0, g.Virtual(f, sd));
  LOOM_RETURN_IF_ERROR(g.Matmul("dO V^T", dout, vt, dp0));
  LOOM_ASSIGN_OR_RETURN(TensorD dp1, g.Virtual(f, sd));
  LOOM_RETURN_IF_ERROR(g.Pointwise("dP * 1", CUDNN_POINTWISE_MUL, f, dp0, &one, nullptr, dp1));
  LOOM_ASSIGN_OR_RETURN(TensorD dp2, g.Virtual(f, sd));
  LOOM_RETURN_IF_ERROR(g.Pointwise("dP - sum", CUDNN_POINTWISE_SUB, f, dp1, &ssum, nullptr, dp2));
  LOOM_ASSIGN_OR_RETURN(TensorD ds0, g.Virtual(f, sd));
  LOOM_RETURN_IF_ERROR(g.Pointwise("dP * P", CUDNN_POINTWISE_MUL, f, dp2, &p, nullptr, ds0));
  LOOM_ASSIGN_OR_RETURN(TensorD ds, g.Virtual(f, sd));
  LOOM_RETURN_IF_ERROR(g.Pointwise("dS scale", CUDNN_POINTWISE_MUL, f, ds0, &scale, nullptr, ds));

  // dK = dS^T Q.
  LOOM_ASSIGN_OR_RETURN(TensorD dst, g.Virtual(io, td, ts));
  LOOM_RETURN_IF_ERROR(g.Reshape("dS^T", ds, dst));
  LOOM_RETURN_IF_ERROR(MatmulIntoKvHeads(g, "dS^T Q", "dK over heads", dst, q, dk, s, io));

  // dQ = dS K, through the f32 accumulator.
  LOOM_ASSIGN_OR_RETURN(TensorD kview, g.Virtual(io, {s.b, s.hk, s.tk, s.d}, {s.k.b, s.k.h, s.k.r, 1}));
  LOOM_RETURN_IF_ERROR(g.Reshape("K", kt, kview));
  LOOM_ASSIGN_OR_RETURN(TensorD acc, g.Tensor(kDQAccum, f, {s.b, s.h, s.tq, s.d}, Builder::Packed({s.b, s.h, s.tq, s.d}),
                                              false, false, /*reorder_f16x16=*/true));
  LOOM_RETURN_IF_ERROR(g.Matmul("dS K", ds, kview, acc));
  LOOM_RETURN_IF_ERROR(g.Pointwise("dQ from accumulator", CUDNN_POINTWISE_IDENTITY, f, acc, nullptr, nullptr, dq));
  return absl::OkStatus();
}

// ---------------------------------------------------------------- plans, handles, runs

struct Plan {
  std::unique_ptr<Builder> graph;  // owns the plan descriptors and everything they came from
  int64_t plan_workspace = 0;      // the largest engine config's
  int64_t accum_bytes = 0;  // f32 dQ accumulator at the start of the workspace (0: none)
  int chosen = -1;          // the engine config that runs (graph->configs()); -1: not timed yet
  std::string choice;       // which one and why
  std::string tuning_key;   // its TuningCache key ("" without a device tag)
  bool from_tuning = false;  // built with the one config the TuningCache names
  static int64_t Align(int64_t n) { return (n + 255) / 256 * 256; }
  int64_t Workspace() const { return Align(accum_bytes) + plan_workspace; }
};

struct State {
  std::mutex mu;  // guards everything; also serialises SetStream + Execute on a handle
  std::map<int, cudnnHandle_t> handles;
  std::map<std::string, std::shared_ptr<Plan>> plans;
  std::map<std::string, absl::Status> failures;
};
State& St() {
  static State* s = new State();
  return *s;
}

std::string PlanKey(const CudnnSdpaArgs& a, const Shape& s, bool backward, int dev) {
  auto str = [](const Str3& x) { return absl::StrCat(x.b, ",", x.h, ",", x.r); };
  const char* pass = backward ? "bwd" : a.lse == nullptr ? "fwd-inference" : "fwd";
  std::string k = absl::StrCat(pass, " dev", dev, " ", DTypeName(a.dtype), " B", s.b, " H", s.h,
                               "/", s.hk, " T", s.tq, "/", s.tk, " D", s.d, a.causal ? " causal" : "", " q", str(s.q),
                               " k", str(s.k), " v", str(s.v), " o", str(s.o));
  if (backward)
    absl::StrAppend(&k, " do", str(s.dout), " dq", str(s.dq), " dk", str(s.dk), " dv", str(s.dv));
  return k;
}

// The TuningCache key of a plan: the device, cuDNN's version, how many
// configs are timed, and the plan key. "" when the device is unknown.
std::string TuningKey(const std::string& plan_key, int dev, int max_configs) {
  cudaDeviceProp p{};
  if (cudaGetDeviceProperties(&p, dev) != cudaSuccess) return "";
  return absl::StrCat("cudnn ", DeviceTag(p.name, p.major, p.minor), " cudnn ", Api().version, " max", max_configs,
                      " ", plan_key);
}

// The engine config recorded for `tuning_key` ("mode index engine").
bool TunedConfig(const std::string& tuning_key, Builder::Wanted* w) {
  if (tuning_key.empty()) return false;
  std::optional<std::string> v = TuningCache::Global().Get(tuning_key);
  long long index = 0, engine = 0;
  if (!v || std::sscanf(v->c_str(), "%d %lld %lld", &w->mode, &index, &engine) != 3) return false;
  w->index = index;
  w->engine = engine;
  return index >= 0;
}

// The cached plan for `a` (built on first use; mu held).
absl::StatusOr<std::shared_ptr<Plan>> GetPlanLocked(State& st, const CudnnSdpaArgs& a, bool backward, int dev,
                                                    cudnnHandle_t* handle_out) {
  const Shape s = ShapeOf(a);
  const std::string key = PlanKey(a, s, backward, dev);
  auto hit = st.plans.find(key);
  if (hit != st.plans.end() && st.handles.count(dev)) {
    *handle_out = st.handles[dev];
    return hit->second;
  }
  if (auto f = st.failures.find(key); f != st.failures.end()) return f->second;
  cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
  LOOM_RETURN_IF_ERROR(CudaCheck(cudaStreamIsCapturing(static_cast<cudaStream_t>(a.stream), &cap), "stream query"));
  if (cap != cudaStreamCaptureStatusNone)
    return absl::FailedPreconditionError(absl::StrCat(
        "cudnn sdpa: ", key, ": no plan yet and the stream is capturing a CUDA graph (run the shape once before "
        "capture)"));
  if (!st.handles.count(dev)) {
    cudnnHandle_t h = nullptr;
    LOOM_RETURN_IF_ERROR(Check(Api().Create(&h), "cudnnCreate"));
    st.handles[dev] = h;
  }
  cudnnHandle_t handle = st.handles[dev];
  const cudnnDataType_t io = IoType(a.dtype);
  auto g = std::make_unique<Builder>();
  absl::Status built = backward ? BuildBackward(*g, s, io, a.causal)
                                : BuildForward(*g, s, io, a.causal, /*inference=*/a.lse == nullptr);
  const int max_configs = GetCudnnSdpaOptions().max_engine_configs;
  const std::string tuning_key = TuningKey(key, dev, max_configs);
  Builder::Wanted want;
  // A recorded choice builds only its config; if that fails, every config.
  const bool from_tuning =
      built.ok() && TunedConfig(tuning_key, &want) && g->BuildPlans(handle, max_configs, &want).ok();
  if (built.ok() && !from_tuning) built = g->BuildPlans(handle, max_configs);
  if (built.ok()) {
    auto plan = std::make_shared<Plan>();
    plan->tuning_key = tuning_key;
    plan->from_tuning = from_tuning;
    for (const Builder::Config& c : g->configs()) plan->plan_workspace = std::max(plan->plan_workspace, c.workspace);
    plan->accum_bytes = backward ? s.b * s.h * s.tq * s.d * int64_t{4} : 0;
    plan->graph = std::move(g);
    st.plans[key] = plan;
    *handle_out = handle;
    return plan;
  }
  absl::Status fail = absl::UnimplementedError(
      absl::StrCat("cudnn sdpa: ", key, ": cuDNN ", Api().version, " took no graph: ", built.message()));
  st.failures[key] = fail;
  return fail;
}

// Times every engine config of `plan` on the caller's buffers (TimeRuns)
// and keeps the fastest in plan.chosen; `verbose` prints the timings. One
// config: chosen untimed.
absl::Status ChooseConfig(Plan& plan, cudaStream_t stream, bool verbose,
                          const std::function<absl::Status(int)>& execute) {
  const std::vector<Builder::Config>& cfgs = plan.graph->configs();
  auto record = [&plan, &cfgs]() {
    const Builder::Config& c = cfgs[plan.chosen];
    if (!plan.tuning_key.empty())
      TuningCache::Global().Put(plan.tuning_key, absl::StrCat(c.mode, " ", c.index, " ", c.engine));
  };
  if (cfgs.size() == 1) {
    plan.chosen = 0;
    plan.choice = absl::StrCat(cfgs[0].name, plan.from_tuning ? ", from the tuning cache"
                                                              : ", the only config that finalized");
    if (!plan.from_tuning) record();
    return absl::OkStatus();
  }
  std::vector<std::pair<double, int>> times;
  std::string all;
  for (int c = 0; c < static_cast<int>(cfgs.size()); ++c) {
    absl::StatusOr<double> ms = TimeRuns(stream, [&] { return execute(c); });
    if (!ms.ok()) {
      cudaGetLastError();  // a config that fails to run is skipped
      absl::StrAppend(&all, all.empty() ? "" : ", ", cfgs[c].name, " failed");
      continue;
    }
    times.push_back({*ms, c});
    absl::StrAppend(&all, all.empty() ? "" : ", ", cfgs[c].name, " ", absl::StrFormat("%.3f ms", *ms));
  }
  if (times.empty()) return absl::InternalError(absl::StrCat("cudnn sdpa: every engine config failed: ", all));
  std::sort(times.begin(), times.end());
  plan.chosen = times[0].second;
  plan.choice = absl::StrCat(cfgs[plan.chosen].name, ", fastest of ", times.size(), " timed (", all, ")");
  record();
  if (verbose) std::fprintf(stderr, "cudnn sdpa: %s\n", plan.choice.c_str());
  return absl::OkStatus();
}

absl::Status Run(const CudnnSdpaArgs& a, bool backward) {
  LOOM_RETURN_IF_ERROR(CudnnSdpaValidate(a, backward));
  LOOM_RETURN_IF_ERROR(CudnnAvailable());
  int dev = 0;
  LOOM_RETURN_IF_ERROR(CudaCheck(cudaGetDevice(&dev), "cudaGetDevice"));
  State& st = St();
  std::lock_guard<std::mutex> lock(st.mu);
  cudnnHandle_t handle = nullptr;
  LOOM_ASSIGN_OR_RETURN(std::shared_ptr<Plan> plan, GetPlanLocked(st, a, backward, dev, &handle));
  cudaStream_t stream = static_cast<cudaStream_t>(a.stream);

  // Workspace: the caller's, or a stream-ordered block of the caching allocator.
  const int64_t need = plan->Workspace();
  void* ws = a.workspace;
  void* owned = nullptr;
  CachingAllocator* alloc = nullptr;
  if (need > 0 && (ws == nullptr || a.workspace_bytes < need)) {
    LOOM_ASSIGN_OR_RETURN(DeviceRuntime * rt, DeviceRuntime::Get(dev));
    alloc = rt->allocator();
    owned = alloc->AllocateOn(static_cast<size_t>(need), a.stream);
    if (owned == nullptr) return absl::ResourceExhaustedError(absl::StrCat("cudnn sdpa: workspace of ", need, " bytes"));
    ws = owned;
  }
  struct FreeOnExit {
    CachingAllocator* alloc;
    void* p;
    ~FreeOnExit() {
      if (p != nullptr) alloc->Free(p);
    }
  } free_on_exit{alloc, owned};

  const float scale = a.scale > 0 ? a.scale : static_cast<float>(1.0 / std::sqrt(static_cast<double>(a.head_dim)));
  const float neg_inf = std::numeric_limits<float>::lowest();
  const float one = 1.f;
  std::vector<int64_t> uids = {kQ, kK, kV, kO, kScale};
  std::vector<void*> ptrs = {const_cast<void*>(a.q), const_cast<void*>(a.k), const_cast<void*>(a.v), a.o,
                             const_cast<float*>(&scale)};
  if (a.lse != nullptr) uids.push_back(kStats), ptrs.push_back(a.lse);  // none in an inference forward
  if (a.causal) uids.push_back(kNegInf), ptrs.push_back(const_cast<float*>(&neg_inf));
  void* plan_ws = ws;
  if (backward) {
    uids.insert(uids.end(), {kOne, kDO, kDQ, kDK, kDV});
    ptrs.insert(ptrs.end(), {const_cast<float*>(&one), const_cast<void*>(a.dout), a.dq, a.dk, a.dv});
    if (plan->accum_bytes > 0) {
      uids.push_back(kDQAccum);
      ptrs.push_back(ws);
      plan_ws = static_cast<char*>(ws) + Plan::Align(plan->accum_bytes);
    }
  }
  if (plan->plan_workspace == 0) plan_ws = nullptr;
  Builder vp_owner;
  LOOM_ASSIGN_OR_RETURN(cudnnBackendDescriptor_t vp, vp_owner.New(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, "variant pack"));
  LOOM_RETURN_IF_ERROR(vp_owner.Set(vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64,
                                    static_cast<int64_t>(uids.size()), uids.data(), "variant pack"));
  LOOM_RETURN_IF_ERROR(vp_owner.Set(vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR,
                                    static_cast<int64_t>(ptrs.size()), ptrs.data(), "variant pack"));
  LOOM_RETURN_IF_ERROR(vp_owner.Set(vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &plan_ws,
                                    "variant pack"));
  LOOM_RETURN_IF_ERROR(vp_owner.Fin(vp, "variant pack"));
  LOOM_RETURN_IF_ERROR(Check(Api().SetStream(handle, stream), "cudnnSetStream"));
  const std::string what = absl::StrCat("execute (", backward ? "backward" : "forward", ")");
  // cuDNN 9.6 and later clear the dQ accumulator inside the backward
  // (attention_check's cuDNN rows prove it: their workspace starts as NaN
  // bytes, and every run after the first finds the last run's sums there);
  // before 9.6 the caller clears it.
  const bool clear_accum = backward && plan->accum_bytes > 0 && Api().version < 90600;
  auto execute = [&](int config) -> absl::Status {
    if (clear_accum)
      LOOM_RETURN_IF_ERROR(CudaCheck(cudaMemsetAsync(ws, 0, plan->accum_bytes, stream), "dQ accumulator memset"));
    return Check(Api().Execute(handle, plan->graph->configs()[config].plan, vp), what);
  };
  int config = plan->chosen;
  if (config < 0) {
    cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
    LOOM_RETURN_IF_ERROR(CudaCheck(cudaStreamIsCapturing(stream, &cap), "stream query"));
    if (cap != cudaStreamCaptureStatusNone) {
      config = 0;  // no timing inside a capture: the heuristics' first, this once
    } else {
      LOOM_RETURN_IF_ERROR(ChooseConfig(*plan, stream, GetCudnnSdpaOptions().verbose, execute));
      config = plan->chosen;
    }
  }
  return execute(config);
}

}  // namespace

absl::Status CudnnAvailable() {
  const CudnnApi& api = Api();
  if (!api.error.empty()) return absl::UnavailableError(api.error);
  return absl::OkStatus();
}

std::string CudnnVersionString() {
  const CudnnApi& api = Api();
  if (!api.error.empty()) return absl::StrCat("unavailable (", api.error, ")");
  return absl::StrCat(api.version / 10000, ".", (api.version / 100) % 100, ".", api.version % 100, " (", api.library,
                      ")");
}

absl::Status CudnnSdpaForward(const CudnnSdpaArgs& a) { return Run(a, false); }
absl::Status CudnnSdpaBackward(const CudnnSdpaArgs& a) { return Run(a, true); }

absl::StatusOr<int64_t> CudnnSdpaWorkspaceBytes(const CudnnSdpaArgs& a, bool backward) {
  LOOM_RETURN_IF_ERROR(CudnnSdpaValidate(a, backward));
  LOOM_RETURN_IF_ERROR(CudnnAvailable());
  int dev = 0;
  LOOM_RETURN_IF_ERROR(CudaCheck(cudaGetDevice(&dev), "cudaGetDevice"));
  State& st = St();
  std::lock_guard<std::mutex> lock(st.mu);
  cudnnHandle_t handle = nullptr;
  LOOM_ASSIGN_OR_RETURN(std::shared_ptr<Plan> plan, GetPlanLocked(st, a, backward, dev, &handle));
  return plan->Workspace();
}

std::string CudnnSdpaEngineChoice(const CudnnSdpaArgs& a, bool backward) {
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return "";
  State& st = St();
  std::lock_guard<std::mutex> lock(st.mu);
  auto it = st.plans.find(PlanKey(a, ShapeOf(a), backward, dev));
  return it == st.plans.end() ? "" : it->second->choice;
}

#endif  // LOOM_HAVE_CUDA

}  // namespace loom::kernels::cuda::attention
