// The CUDA lowering's own small kernels (sm_90), over raw device pointers.
// dtype codes: storage dtype of each operand, kF32 or kBF16 (ids kI32/kI64).
// Every function launches asynchronously on `stream` (a cudaStream_t) and
// returns the launch error as a cudaError_t value (0 = success); no host sync,
// so every one of them can be captured in a CUDA graph.
//
// Determinism: everything except EmbeddingBackward (f32 atomics) gives the same
// bits run to run. Reductions (sum_to, grad_norm, the loss) use fixed
// partitions and fixed-order combines.
#pragma once

#include <cstdint>


namespace loom::compiler::cuda::kern {

// Storage dtype codes (no Loom/absl headers here: nvcc compiles this file).
enum Dt : int { kF32 = 0, kBF16 = 1, kI32 = 2, kI64 = 3 };

using Stream = void*;

// out[i, :] = w[ids[i], :]  (rows = number of ids, cols = C)
int Embedding(Dt wdt, Dt odt, Dt idt, int64_t rows, int64_t cols, int64_t vocab, const void* w,
              const void* ids, void* out, Stream s);
// dw[V, C] (f32) = 0, then dw[ids[i], :] += dy[i, :]  (f32 atomics)
int EmbeddingBackward(Dt dydt, Dt idt, int64_t rows, int64_t cols, int64_t vocab, const void* dy,
                      const void* ids, float* dw, Stream s);
// out[c] = sum_r x[r, c]; workspace: SumRowsWorkspaceFloats floats.
int64_t SumRowsWorkspaceFloats(int64_t rows, int64_t cols);
int SumRows(Dt xdt, Dt odt, int64_t rows, int64_t cols, const void* x, void* out, float* workspace, Stream s);
// Sum of squares of one tensor into partials[0, GradNormPartials(n)).
int GradNormPartials(int64_t n);
int SumSquaresPartial(Dt dt, int64_t n, const void* x, float* partials, Stream s);
// Multi-tensor grad norm: one launch over every tensor's chunks (partials:
// one float per chunk, GradNormChunks summed over the tensors), then out[0] =
// sqrt(fixed-order sum of the partials). The tables come from GradNormUpload.
struct GradNormEntry {
  const void* x = nullptr;
  int64_t numel = 0;
  int dt = kF32;  // kF32 or kBF16
};
int64_t GradNormChunks(int64_t n);
int GradNormUpload(const GradNormEntry* host_entries, int n, void** dev_entries, void** dev_chunks,
                   int64_t* num_chunks);
int GradNormMulti(const void* dev_entries, const void* dev_chunks, int64_t num_chunks, float* partials, float* out,
                  Stream s);
// out[0] = sqrt(sum of partials[0, total)).
int SqrtSum(const float* partials, int64_t total, float* out, Stream s);
// Fill n elements with value.
int Fill(Dt dt, int64_t n, double value, void* out, Stream s);

// Cross entropy: lse[r], row_loss[r] (0 for ignored rows), then loss[0] =
// sum(row_loss) / max(1, n_valid) and (when n_valid_out) the valid count.
int CrossEntropyForward(Dt ldt, Dt tdt, int64_t rows, int64_t vocab, const void* logits, const void* targets,
                        int64_t ignore_index, float* lse, float* row_loss, float* loss, Stream s);
// dlogits = dloss[0] / n_valid * (softmax - onehot); ignored rows 0. workspace:
// 1 float (the valid count).
int CrossEntropyBackward(Dt ldt, Dt tdt, int64_t rows, int64_t vocab, const float* dloss, const void* logits,
                         const void* targets, const float* lse, int64_t ignore_index, void* dlogits,
                         float* workspace, Stream s);

// Both in one launch sequence, for a training step whose dloss is ready before
// the forward would run: lse, loss as CrossEntropyForward, dlogits as
// CrossEntropyBackward, reading each row of logits once from memory (bf16,
// vocab % 8 == 0, 16-byte aligned: the row stays in shared memory between the
// two passes up to vocab 102400, beyond that the second pass re-reads it, as
// env LOOM_CUDA_CE_FUSED_REREAD=1 forces; otherwise the two kernels in turn).
// workspace: rows + 1 floats.
int CrossEntropyFused(Dt ldt, Dt tdt, int64_t rows, int64_t vocab, const float* dloss, const void* logits,
                      const void* targets, int64_t ignore_index, float* lse, float* loss, void* dlogits,
                      float* workspace, Stream s);

// A simple, exact attention for any head_dim <= 256 (f32 or bf16 storage, f32
// math), layout [B, H, T, D]; lse [B, H, Tq] (natural log of scaled scores).
// Deterministic backward (no atomics): one pass over queries (dq), one over
// keys (dk, dv). workspace: B*H*Tq floats (delta).
struct AttnArgs {
  Dt dtype = kF32;
  int64_t batch = 0, heads = 0, kv_heads = 0, seq_q = 0, seq_k = 0, head_dim = 0;
  bool causal = false;
  float scale = 0.f;
  const void *q = nullptr, *k = nullptr, *v = nullptr;
  void* o = nullptr;
  float* lse = nullptr;
  const void* dout = nullptr;
  void *dq = nullptr, *dk = nullptr, *dv = nullptr;
  float* workspace = nullptr;
};
int AttentionForward(const AttnArgs& a, Stream s);
int AttentionBackward(const AttnArgs& a, Stream s);

// Multi-tensor AdamW reading lr, step and the global grad norm from device
// memory (graph replay sees new values). Same arithmetic as the CPU adamw op:
//   clip = max_norm > 0 ? min(1, max_norm / (gn + 1e-6)) : 1;  g *= clip
//   m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2
//   p = p * (1 - lr wd) - lr/bc1 * m / (sqrt(v)/sqrt(bc2) + eps)
struct AdamWEntry {
  float* param = nullptr;
  const void* grad = nullptr;
  float* m = nullptr;
  float* v = nullptr;
  void* param_bf16 = nullptr;  // optional bf16 shadow refreshed after the update
  int64_t numel = 0;
  double weight_decay = 0.0;
  int grad_bf16 = 0;
};
struct AdamWConsts {
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8, max_norm = 0.0;
  const float* lr = nullptr;
  const void* step = nullptr;
  int step_dtype = 0;  // 0 f32, 1 i32, 2 i64
  const float* grad_norm = nullptr;
};
// entries/chunks: device tables built by AdamWUpload (chunks = {entry, start}).
int AdamWUpload(const AdamWEntry* host_entries, int n, void** dev_entries, void** dev_chunks, int64_t* num_chunks);
int AdamWStep(const void* dev_entries, const void* dev_chunks, int64_t num_chunks, const AdamWConsts& c, Stream s);

// RMSNorm over the last dim of [rows, cols] (x, y, dy, dx: dt; w, rstd, dw: f32):
//   y = x * rstd * w, rstd = 1 / sqrt(mean(x^2) + eps)
//   dx = rstd * (dy * w - x * rstd * mean(dy * w * x * rstd)), dw = sum_rows dy * x * rstd
// The backward's dw goes through `workspace` (SumRowsWorkspaceFloats(rows, cols)).
int RmsNormForward(Dt dt, int64_t rows, int64_t cols, const void* x, const float* w, double eps, void* y,
                   float* rstd, Stream s);
int RmsNormBackward(Dt dt, int64_t rows, int64_t cols, const void* dy, const void* x, const float* w,
                    const float* rstd, void* dx, float* dw, float* workspace, Stream s);
// Interleaved rotary embedding of x[B, T, H, D] (pairs (2i, 2i+1)), angle
// (offset + t) * theta^(-2i/D), negated when inverse.
int Rope(Dt dt, int64_t B, int64_t T, int64_t H, int64_t D, double theta, int64_t offset, bool inverse,
         const void* x, void* y, Stream s);

// Converts n f32 values to bf16 (device to device).
int CastF32ToBF16(int64_t n, const float* x, void* out, Stream s);

}  // namespace loom::compiler::cuda::kern
