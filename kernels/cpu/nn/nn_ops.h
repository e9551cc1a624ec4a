// The NN ops of the op catalogue, registered in the op registry by linking
// //kernels/cpu/nn (alwayslink). There is no C++ API per op: run them through
// the registry,
//
//   LOOM_ASSIGN_OR_RETURN(std::vector<Tensor> out,
//                         kernels::RunOp("layernorm", {x, w, b}, {{"eps", 1e-5}}));
//
// and the multi-tensor optimizer through kernels/cpu/nn/adamw.h.
//
// Contracts (shapes row-major, axis attrs accept negatives; "x: ..." errors are
// InvalidArgument naming the argument, prefixed with the op name by RunOp):
//
//   gelu(x) attr approximate "none" (default) | "tanh"      activations.cc
//   gelu_backward(dy, x) same attr -> dx
//   silu(x); silu_backward(dy, x) -> dx
//   softmax(x) attr axis (-1); softmax_backward(dy, y) -> dx  softmax.cc
//   log_softmax(x) attr axis (-1); log_softmax_backward(dy, y) -> dx
//   layernorm(x[..., C], w[C], b[C]) attr eps (1e-5) -> (y, mean[...], rstd[...])
//   layernorm_backward(dy, x, w, mean, rstd) -> (dx, dw, db)   norms.cc
//   rmsnorm(x[..., C], w[C]) attr eps (1e-6) -> (y, rstd[...])
//   rmsnorm_backward(dy, x, w, rstd) -> (dx, dw)
//   embedding(weight[V, C], ids[...] i32|i64) -> [..., C]     embedding.cc
//   embedding_backward(dy[..., C], ids) attr num_embeddings -> [V, C]
//   cross_entropy(logits[N, V], targets[N] i32|i64) attr ignore_index (-100)
//       -> (loss[] mean over non-ignored rows (0 if none), lse[N]) cross_entropy.cc
//   cross_entropy_backward(dloss[], logits, targets, lse) attr ignore_index -> dlogits
//   rope(x[B, T, H, D]) attrs theta (10000), offset (0), inverse (false);
//       interleaved pairs (x[2i], x[2i+1]) rotated by (offset + t) theta^(-2i/D)
//                                                               rope.cc
//   dropout(x[, offset]) attrs p (0, in [0, 1)), seed (0) -> x * mask / (1 - p);
//       element i kept iff Philox(seed, offset).Uniform(i) >= float(p); offset
//       a scalar whole number >= 0 (i32|i64|f32|f64; absent = 0), e.g. the
//       step; the gradient is dropout(dy[, offset]) (mask regenerated)
//                                                               dropout.cc
//   grad_norm(g_0, ..., g_k) -> sqrt(sum g^2) scalar            optim.cc
//   adamw(param, grad, m, v, grad_norm[], lr[], step[]) attrs beta1 (0.9),
//       beta2 (0.999), eps (1e-8), weight_decay (0.01), max_norm (0 = off)
//       -> (param', m', v')
//
// Dtypes: outputs take the float inputs' dtype (grad_norm: f64 only when every
// input is f64, else f32). The fast kernels run f32 (embedding: any dtype, it
// copies rows); other float dtypes run the f64 reference and convert back.
//
// Gradients: forward ops emit their *_backward op; rope's gradient is rope with
// `inverse` flipped; dropout's is dropout with the same seed and offset;
// embedding and cross_entropy give no gradient to ids or targets. Saved
// statistics (layernorm mean/rstd, rmsnorm rstd, cross_entropy lse) are
// treated as non-differentiable outputs: a gradient arriving there is
// ignored. *_backward ops have no_grad_reason "backward op of <op>"; grad_norm
// and adamw "optimizer".
//
// Numerics: row reductions sum f32 SIMD lanes per block of 256 and accumulate
// blocks in f64; dw/db and embedding_backward reduce in a fixed order, so all
// results are independent of the thread count. exp/tanh in the f32 kernels use
// a polynomial (~2 ulp); exp(-inf) gives ~1e-38 rather than 0.
#pragma once

#include "kernels/cpu/nn/adamw.h"
