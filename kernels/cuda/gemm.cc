// cuBLASLt GEMM: row-major Loom calls mapped onto column-major cuBLASLt.
//
// Row-major D[M,N] is column-major D^T[N,M], and D^T = op(B)^T op(A)^T, so the
// call passes B as cuBLASLt's "A" and A as its "B", with m' = N and n' = M. The
// bias vector (one value per row of D^T, i.e. per column of D) and the GELU aux
// matrix (ld = N) then need no other change.
#include "kernels/cuda/gemm.h"

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/cuda_util.h"
#include "kernels/cuda/run_timing.h"
#include "kernels/cuda/tuning_cache.h"

namespace loom::kernels::cuda {
namespace {

constexpr size_t kWorkspaceBytes = size_t{32} << 20;

absl::Status LtStatus(cublasStatus_t s, const char* what) {
  if (s == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": cuBLASLt status ", static_cast<int>(s)));
}
#define LT_RETURN_IF_ERROR(expr) LOOM_RETURN_IF_ERROR(LtStatus((expr), #expr))

int Alignment(const void* p) {
  uintptr_t v = reinterpret_cast<uintptr_t>(p);
  int a = 256;
  while (a > 1 && (v % a) != 0) a /= 2;
  return a;
}

using Key = std::tuple<int, int64_t, int64_t, int64_t, bool, bool, int, int, int, int, int, bool, bool>;

struct Choice {
  cublasLtMatmulAlgo_t algo;
  size_t workspace = 0;
  int index = 0, candidates = 0;
  bool tuned = false;
};

struct LtState {
  std::mutex mu;
  std::map<int, cublasLtHandle_t> handles;                  // per device
  std::map<std::pair<int, void*>, void*> workspaces;        // per (device, stream)
  // Per (device, shape key, autotune): a timed choice is never reused while
  // autotuning is off, whose choices must not depend on timing.
  std::map<std::tuple<int, Key, bool>, Choice> cache;
  bool autotune = true;
};

LtState& State() {
  static LtState* s = new LtState();
  return *s;
}

Key MakeKey(const GemmArgs& g) {
  return Key(static_cast<int>(g.dtype), g.m, g.n, g.k, g.trans_a, g.trans_b,
             static_cast<int>(g.epilogue), Alignment(g.a), Alignment(g.b), Alignment(g.d),
             g.aux ? Alignment(g.aux) : 0, g.beta != 0.0f, g.d_f32);
}

// The TuningCache key of a tuned shape: the device, cuBLASLt's version and
// every field of the shape key.
std::string TuningKey(int dev, const Key& k) {
  cudaDeviceProp p{};
  if (cudaGetDeviceProperties(&p, dev) != cudaSuccess) return "";
  const auto& [dt, m, n, kk, ta, tb, epi, al_a, al_b, al_d, al_aux, beta, d_f32] = k;
  return absl::StrCat("gemm ", DeviceTag(p.name, p.major, p.minor), " cublasLt ", cublasLtGetVersion(), " dt", dt,
                      " m", m, " n", n, " k", kk, " t", ta, tb, " epi", epi, " al", al_a, ",", al_b, ",", al_d, ",",
                      al_aux, " beta", beta, " df32", d_f32);
}

// The index of the heuristic's candidate a previous process timed fastest
// for this key, when the heuristic still offers the same number of them and
// that one is usable; -1 otherwise.
int CachedIndex(const std::string& tkey, int found, const cublasLtMatmulHeuristicResult_t* res) {
  if (tkey.empty()) return -1;
  std::optional<std::string> v = TuningCache::Global().Get(tkey);
  int index = -1, candidates = -1;
  if (!v || std::sscanf(v->c_str(), "%d %d", &index, &candidates) != 2) return -1;
  if (candidates != found || index < 0 || index >= found || res[index].state != CUBLAS_STATUS_SUCCESS) return -1;
  return index;
}

cublasLtEpilogue_t LtEpilogue(Epilogue e) {
  switch (e) {
    case Epilogue::kNone: return CUBLASLT_EPILOGUE_DEFAULT;
    case Epilogue::kBias: return CUBLASLT_EPILOGUE_BIAS;
    case Epilogue::kGelu: return CUBLASLT_EPILOGUE_GELU;
    case Epilogue::kBiasGelu: return CUBLASLT_EPILOGUE_GELU_BIAS;
    case Epilogue::kGeluAux: return CUBLASLT_EPILOGUE_GELU_AUX;
    case Epilogue::kBiasGeluAux: return CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    case Epilogue::kDGelu: return CUBLASLT_EPILOGUE_DGELU;
    case Epilogue::kDGeluBgrad: return CUBLASLT_EPILOGUE_DGELU_BGRAD;
  }
  return CUBLASLT_EPILOGUE_DEFAULT;
}

bool UsesBias(Epilogue e) {
  return e == Epilogue::kBias || e == Epilogue::kBiasGelu || e == Epilogue::kBiasGeluAux;
}
bool UsesAux(Epilogue e) {
  return e == Epilogue::kGeluAux || e == Epilogue::kBiasGeluAux || e == Epilogue::kDGelu ||
         e == Epilogue::kDGeluBgrad;
}

absl::Status Validate(const GemmArgs& g) {
  if (g.dtype != DType::kBF16 && g.dtype != DType::kF32)
    return absl::InvalidArgumentError(
        absl::StrCat("gemm: dtype: expected bf16 or f32, got ", DTypeName(g.dtype)));
  if (g.m <= 0 || g.n <= 0 || g.k <= 0)
    return absl::InvalidArgumentError(absl::StrCat("gemm: m, n, k: must be positive, got ", g.m, ", ",
                                                   g.n, ", ", g.k));
  if (!g.a) return absl::InvalidArgumentError("gemm: a: null");
  if (!g.b) return absl::InvalidArgumentError("gemm: b: null");
  if (!g.d) return absl::InvalidArgumentError("gemm: d: null");
  if (UsesBias(g.epilogue) && !g.bias)
    return absl::InvalidArgumentError(absl::StrCat("gemm: bias: null for epilogue ", EpilogueName(g.epilogue)));
  if (UsesAux(g.epilogue) && !g.aux)
    return absl::InvalidArgumentError(absl::StrCat("gemm: aux: null for epilogue ", EpilogueName(g.epilogue)));
  if (UsesAux(g.epilogue) && g.n % 8 != 0)
    return absl::InvalidArgumentError(absl::StrCat("gemm: n: must be a multiple of 8 for epilogue ",
                                                   EpilogueName(g.epilogue), ", got ", g.n));
  if (g.d_f32 && (g.dtype != DType::kBF16 || g.epilogue != Epilogue::kNone))
    return absl::InvalidArgumentError("gemm: d_f32: needs dtype bf16 and epilogue none");
  if (g.epilogue == Epilogue::kDGeluBgrad && !g.bias_grad)
    return absl::InvalidArgumentError("gemm: bias_grad: null for epilogue dgelu_bgrad");
  return absl::OkStatus();
}

// RAII holders for the descriptors of one call.
struct Descs {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  ~Descs() {
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (d) cublasLtMatrixLayoutDestroy(d);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

absl::Status BuildDescs(const GemmArgs& g, Descs& ds) {
  const cudaDataType_t t = g.dtype == DType::kBF16 ? CUDA_R_16BF : CUDA_R_32F;
  LT_RETURN_IF_ERROR(cublasLtMatmulDescCreate(&ds.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  // cuBLASLt's A is our B, its B is our A (see the file comment).
  cublasOperation_t ta = g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasOperation_t tb = g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  LT_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(ds.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
  LT_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(ds.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
  cublasLtEpilogue_t epi = LtEpilogue(g.epilogue);
  LT_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(ds.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
  // The bias pointer is set only for epilogues that read (or, for BGRAD, write)
  // it: cuBLASLt rejects a bias pointer with the default epilogue.
  const void* bias_ptr = g.epilogue == Epilogue::kDGeluBgrad ? g.bias_grad : UsesBias(g.epilogue) ? g.bias : nullptr;
  if (bias_ptr) {
    LT_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(ds.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias_ptr,
                                                      sizeof(bias_ptr)));
  }
  if (UsesAux(g.epilogue)) {
    void* aux = g.aux;
    int64_t ld = g.n;
    LT_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(ds.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux,
                                                      sizeof(aux)));
    LT_RETURN_IF_ERROR(
        cublasLtMatmulDescSetAttribute(ds.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof(ld)));
  }
  // Layouts in column-major terms. cuBLASLt A (our B): op gives [N,K].
  const uint64_t N = g.n, M = g.m, K = g.k;
  if (!g.trans_b) LT_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&ds.a, t, N, K, N));
  else LT_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&ds.a, t, K, N, K));
  if (!g.trans_a) LT_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&ds.b, t, K, M, K));
  else LT_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&ds.b, t, M, K, M));
  LT_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&ds.d, g.d_f32 ? CUDA_R_32F : t, N, M, N));
  LT_RETURN_IF_ERROR(cublasLtMatmulPreferenceCreate(&ds.pref));
  size_t ws = kWorkspaceBytes;
  LT_RETURN_IF_ERROR(cublasLtMatmulPreferenceSetAttribute(ds.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                          &ws, sizeof(ws)));
  uint32_t al_a = Alignment(g.b), al_b = Alignment(g.a), al_d = Alignment(g.d);
  LT_RETURN_IF_ERROR(cublasLtMatmulPreferenceSetAttribute(ds.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                                                          &al_a, sizeof(al_a)));
  LT_RETURN_IF_ERROR(cublasLtMatmulPreferenceSetAttribute(ds.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                                          &al_b, sizeof(al_b)));
  LT_RETURN_IF_ERROR(cublasLtMatmulPreferenceSetAttribute(ds.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                                                          &al_d, sizeof(al_d)));
  LT_RETURN_IF_ERROR(cublasLtMatmulPreferenceSetAttribute(ds.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                                                          &al_d, sizeof(al_d)));
  return absl::OkStatus();
}

absl::Status Launch(const GemmArgs& g, cublasLtHandle_t h, Descs& ds, const cublasLtMatmulAlgo_t* algo,
                    void* ws, size_t ws_bytes) {
  LT_RETURN_IF_ERROR(cublasLtMatmul(h, ds.op, &g.alpha, g.b, ds.a, g.a, ds.b, &g.beta, g.d, ds.d, g.d, ds.d,
                                    algo, ws, ws_bytes, AsStream(g.stream)));
  return absl::OkStatus();
}

}  // namespace

const char* EpilogueName(Epilogue e) {
  switch (e) {
    case Epilogue::kNone: return "none";
    case Epilogue::kBias: return "bias";
    case Epilogue::kGelu: return "gelu";
    case Epilogue::kBiasGelu: return "bias_gelu";
    case Epilogue::kGeluAux: return "gelu_aux";
    case Epilogue::kBiasGeluAux: return "bias_gelu_aux";
    case Epilogue::kDGelu: return "dgelu";
    case Epilogue::kDGeluBgrad: return "dgelu_bgrad";
  }
  return "?";
}

void SetGemmAutotune(bool on) {
  std::lock_guard<std::mutex> l(State().mu);
  State().autotune = on;
}

std::string GemmChoice(const GemmArgs& g) {
  int dev = 0;
  cudaGetDevice(&dev);
  LtState& st = State();
  std::lock_guard<std::mutex> l(st.mu);
  auto it = st.cache.find({dev, MakeKey(g), st.autotune});
  if (it == st.cache.end()) return "";
  const Choice& c = it->second;
  return absl::StrCat(DTypeName(g.dtype), " m=", g.m, " n=", g.n, " k=", g.k, " tA=", g.trans_a,
                      " tB=", g.trans_b, " epi=", EpilogueName(g.epilogue), " algo=#", c.index, " of ",
                      c.candidates, c.tuned ? " (tuned)" : " (heuristic)", " ws=", c.workspace, "B");
}

absl::Status Gemm(const GemmArgs& g) {
  LOOM_RETURN_IF_ERROR(Validate(g));
  int dev = 0;
  LOOM_CUDA_RETURN_IF_ERROR(cudaGetDevice(&dev));
  LtState& st = State();
  cublasLtHandle_t h = nullptr;
  void* ws = nullptr;
  bool autotune;
  {
    std::lock_guard<std::mutex> l(st.mu);
    auto hit = st.handles.find(dev);
    if (hit == st.handles.end()) {
      LT_RETURN_IF_ERROR(cublasLtCreate(&h));
      st.handles[dev] = h;
    } else {
      h = hit->second;
    }
    auto wit = st.workspaces.find({dev, g.stream});
    if (wit == st.workspaces.end()) {
      LOOM_CUDA_RETURN_IF_ERROR(cudaMalloc(&ws, kWorkspaceBytes));
      st.workspaces[{dev, g.stream}] = ws;
    } else {
      ws = wit->second;
    }
    autotune = st.autotune;
  }
  Descs ds;
  LOOM_RETURN_IF_ERROR(BuildDescs(g, ds));
  const auto key = std::make_tuple(dev, MakeKey(g), autotune);
  {
    std::lock_guard<std::mutex> l(st.mu);
    auto it = st.cache.find(key);
    if (it != st.cache.end()) {
      Choice c = it->second;
      return Launch(g, h, ds, &c.algo, ws, c.workspace);
    }
  }
  // New shape: ask the heuristic, optionally time its candidates.
  constexpr int kMaxCandidates = 8;
  cublasLtMatmulHeuristicResult_t res[kMaxCandidates] = {};
  int found = 0;
  LT_RETURN_IF_ERROR(cublasLtMatmulAlgoGetHeuristic(h, ds.op, ds.a, ds.b, ds.d, ds.d, ds.pref, kMaxCandidates,
                                                    res, &found));
  if (found == 0)
    return absl::UnimplementedError(absl::StrCat("gemm: cuBLASLt has no algorithm for ", DTypeName(g.dtype),
                                                 " m=", g.m, " n=", g.n, " k=", g.k, " epilogue ",
                                                 EpilogueName(g.epilogue)));
  Choice best;
  best.algo = res[0].algo;
  best.workspace = res[0].workspaceSize;
  best.candidates = found;
  const bool aliases = g.d == g.a || g.d == g.b || (g.aux && g.d == g.aux);
  const bool tune = autotune && found > 1 && g.beta == 0.0f && !aliases;
  const std::string tkey = tune ? TuningKey(dev, std::get<1>(key)) : "";
  if (const int cached = tune ? CachedIndex(tkey, found, res) : -1; cached >= 0) {
    // Timed by an earlier process (TuningCache): the same candidate, untimed.
    best.algo = res[cached].algo;
    best.workspace = res[cached].workspaceSize;
    best.index = cached;
    best.tuned = true;
  } else if (tune) {
    double best_ms = -1;
    for (int i = 0; i < found; ++i) {
      if (res[i].state != CUBLAS_STATUS_SUCCESS) continue;
      absl::StatusOr<double> ms =
          TimeRuns(g.stream, [&] { return Launch(g, h, ds, &res[i].algo, ws, res[i].workspaceSize); });
      if (!ms.ok()) {
        cudaGetLastError();  // an algorithm that fails to run is skipped
        continue;
      }
      if (best_ms < 0 || *ms < best_ms) {
        best_ms = *ms;
        best.algo = res[i].algo;
        best.workspace = res[i].workspaceSize;
        best.index = i;
      }
    }
    best.tuned = true;
    if (!tkey.empty()) TuningCache::Global().Put(tkey, absl::StrCat(best.index, " ", found));
  }
  {
    std::lock_guard<std::mutex> l(st.mu);
    st.cache[key] = best;
  }
  return Launch(g, h, ds, &best.algo, ws, best.workspace);
}

}  // namespace loom::kernels::cuda
