// The host-side half of the CUDA lowering: a pure function from a joint
// training graph to a launch plan. No CUDA here, so all of it is unit-tested on
// machines without a GPU; cuda_executor_build.cc turns each Launch into a
// kernel call over the planned device buffers.
//
// PlanCuda runs a pipeline of passes (plan.cc), each in its own file with its
// own test, over one PlanState (plan_state.h):
//   storage_dtypes      the mixed-precision policy (StorageDTypes): with bf16,
//                       every floating activation (forward and backward) is
//                       stored bf16 (the residual stream and its gradient
//                       too, unless f32_residual), except layernorm mean/rstd, cross-entropy
//                       loss/lse, sdpa lse, scalars (rank 0), grad_norm and
//                       adamw outputs, and parameter gradients (the grad
//                       operand of adamw, through adds; embedding_backward and
//                       the norms' weight grads), which stay f32. Graph inputs
//                       keep their dtype. Without bf16 every value keeps its
//                       graph dtype.
//   gemm_epilogues      matmul -> GEMM with its fusions (bf16): bias (+ tanh GELU
//                       with aux), dgelu, the weight gradient matmul + sum_to
//   attention_views     flash attention on strided windows (no copies)   [attn_views]
//   compose_copies      slice+reshape+permute, permute+reshape+concat    [compose_copies]
//   residual_grad       layernorm_backward / rmsnorm_backward + add -> dresidual [fold_residual_grad]
//   add_layernorm       add / fused adds -> layernorm or rmsnorm as one launch [add_layernorm]
//   gemm_accumulate     a sum of plain GEMM products as GEMMs adding into
//                       one buffer (beta 1)                              [accumulate_gemms]
//   lower_nodes         one launch per node in graph order (fusions at
//                       their head node), casts and bf16 shadows, reshape
//                       aliases, ONE multi-tensor AdamW launch
//   copy_back           outputs that update an input not written in place
//   fuse_cross_entropy  cross_entropy + its backward as one launch       [fuse_cross_entropy]
//   split_master        the parameters stored split (MemoryPolicy::split_master)
//   assign_arena        one device arena, best-fit offsets over launch
//                       liveness; graph inputs and bf16 shadows have their
//                       own buffers
// The fusion passes only decide; lower_nodes emits. The header of each
// plan_<pass>.h says what its pattern is.
//
//   LOOM_ASSIGN_OR_RETURN(CudaPlan p, PlanCuda(graph, /*bf16=*/true));
//   std::cout << p.Describe();
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/types/span.h"

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "compiler/ir/ir.h"

namespace loom::compiler::cuda {

enum class LaunchKind {
  kGemm,
  kPointwise,      // fused node or one elementwise op (codegen)
  kCopy,           // permute / slice / cast / broadcast_to: a strided copy (codegen, empty body)
  kSliceBackward,  // zero-fill + strided copy
  kConcat,         // one strided copy per input into its window of the output
  kFill,
  kEmbedding,
  kEmbeddingBackward,        // f32 atomics (kernels/cuda/embedding.h kEmbBwdAtomic)
  kEmbeddingBackwardSorted,  // sort + per-id sums, no atomics (PlanOptions::deterministic)
  kSumTo,
  kLayerNorm,
  kLayerNormBackward,
  kRmsNorm,
  kRmsNormBackward,
  kRope,
  kCrossEntropy,
  kCrossEntropyBackward,
  kCrossEntropyFused,  // forward + backward in one pass (PlanOptions::fuse_cross_entropy)
  kSdpa,
  kSdpaBackward,
  kGradNorm,
  kAdamW,
  kCopyBack,  // an output that updates an input but was not written in place
  // all_reduce / all_gather / reduce_scatter (op) on the leading axis, run
  // on the host between launches through the group's communicator
  // (plan_collectives.h, CudaOptions::communicators).
  kCollective,
  kVocabOnehot,  // this rank's vocabulary block one-hot (attrs: rank, num_classes, ignore_index)
  kRowReduce,    // sum / max (op) over trailing axes: rows = numel(out), cols = numel(in) / rows
};
const char* LaunchKindName(LaunchKind k);

enum class GemmEpilogue { kNone, kBias, kBiasGeluAux, kDGelu };
const char* GemmEpilogueName(GemmEpilogue e);

struct GemmPlan {
  int64_t m = 0, n = 0, k = 0;
  bool trans_a = false, trans_b = false;
  int64_t batch = 1;                         // > 1: `batch` GEMMs, element strides below
  int64_t stride_a = 0, stride_b = 0, stride_d = 0;
  GemmEpilogue epilogue = GemmEpilogue::kNone;
  DType ab_dtype = DType::kF32;  // A and B storage dtype (= compute dtype)
  DType d_dtype = DType::kF32;   // D storage dtype (f32 with bf16 A/B: mixed GEMM)
  bool weight_grad = false;      // the matmul+sum_to pattern
  // D += op(A) op(B) (beta 1): the GEMM adds its product into D, which an
  // earlier GEMM of the same sum wrote (gemm_accumulate).
  bool accumulate = false;
};

// One strided copy: for every index of `shape`, dst[dst_offset + idx . dst_strides]
// = src[src_offset + idx . src_strides] (element units; empty dst_strides =
// contiguous). Views compose into it: slice -> reshape -> permute in the
// forward and permute -> reshape -> concat in the backward are one copy each.
struct CopyGeom {
  Shape shape;
  int64_t src_offset = 0;
  std::vector<int64_t> src_strides;
  int64_t dst_offset = 0;
  std::vector<int64_t> dst_strides;
};

// The strides of `shape` viewing a tensor of (old_shape, old_strides) without a
// copy (PyTorch's view rule), or nullopt when a copy would be needed.
std::optional<std::vector<int64_t>> ViewStrides(absl::Span<const int64_t> old_shape,
                                                absl::Span<const int64_t> old_strides,
                                                absl::Span<const int64_t> shape);

// One flash-attention operand as a strided window of a plan value's bytes:
// logical [B, heads, T, D] `shape`, element `offset` and 4 element `strides`
// (the last 1) into `value`'s storage.
struct AttnView {
  int value = -1;
  Shape shape;
  int64_t offset = 0;
  std::vector<int64_t> strides;
};

struct Launch {
  LaunchKind kind = LaunchKind::kPointwise;
  std::string op;            // what it implements, e.g. "matmul+add+gelu"
  int node = -1;             // the main graph node (attrs, subgraph), -1 for casts
  std::vector<int> nodes;    // every graph node this launch covers
  std::vector<int> inputs;   // plan value ids read (for kGemm: a, b, [bias], [aux for kDGelu])
  std::vector<int> outputs;  // plan value ids written (kGemm: d, [aux for kBiasGeluAux])
  ir::Attrs attrs;
  GemmPlan gemm;
  int copy_back_input = -1;  // kCopyBack: the graph input index written
  // kCopy: one entry; kSliceBackward: one (after zero-filling the output);
  // kConcat: one per input, in input order.
  std::vector<CopyGeom> copies;
  // kSdpa / kSdpaBackward with strided operands (PlanOptions::attn_views):
  // q, k, v, o (forward) or dout, q, k, v, o, dq, dk, dv (backward); `inputs`
  // and `outputs` then name the values holding the bytes (for liveness).
  // Empty: contiguous operands, inputs/outputs as the graph's.
  std::vector<AttnView> attn;
};

struct CudaPlan {
  bool bf16 = false;
  // Per plan value: its storage meta. Ids [0, g.values().size()) are the graph's
  // values; casts and bf16 shadows are appended after.
  std::vector<ir::TensorMeta> metas;
  // Per plan value: the value that owns its bytes (itself, or for reshape and
  // in-place updates the aliased value); -1 for values never materialised
  // (matmul outputs folded into an epilogue or a weight-grad GEMM).
  std::vector<int> root;
  // Per plan value: graph input index when the value is (or aliases) a graph
  // input's own buffer, else -1.
  std::vector<int> input_of;
  // Per plan value: arena byte offset of a root value in the arena, else -1.
  std::vector<int64_t> offset;
  // Per graph input: the plan value of its bf16 shadow (a param read by a
  // GEMM under bf16), or -1.
  std::vector<int> shadow;
  // Per graph input: its f32 parameter is stored in the split layout
  // (MemoryPolicy::split_master; kernels/cuda/codegen/rowwise.h SplitF32):
  // the same 4 bytes an element, whose first half is the bf16 shadow the
  // GEMMs read, so the shadow takes no buffer of its own. Only the AdamW
  // launch touches the parameter itself.
  std::vector<bool> split;
  std::vector<Launch> launches;
  int64_t arena_bytes = 0;
  int64_t live_bytes_bound = 0;
  int64_t alignment = 256;
  // With PlanOptions::guard_bytes: the free bytes after each arena buffer,
  // from the end of its storage to the next aligned buffer at the earliest.
  // They are the buffer's only while it lives: from its first writer to its
  // last reader (launches.size() for a graph output), after which another
  // buffer may take them.
  struct Guard {
    int value;       // the root value the guard follows
    int writer;      // the first launch writing it
    int last;        // the last launch reading or writing it
    int64_t offset;  // arena byte offset of the guard
    int64_t bytes;
  };
  std::vector<Guard> guards;

  int64_t Bytes(int v) const;  // storage bytes of plan value v
  // One line per launch: "12: gemm matmul+add+gelu bf16 m=.. n=.. k=.. epi=bias_gelu_aux -> %26,%27".
  std::string Describe() const;
};

// What the training state costs on the device under bf16: the default is
// f32 parameters with bf16 shadows, f32 AdamW states and f32 parameter
// gradients (18 bytes a GEMM weight); all three together, 10 bytes.
struct MemoryPolicy {
  // Parameter gradients stored bf16 (a weight-gradient GEMM accumulates in
  // f32 and rounds once; the norms' weight gradients, the embedding
  // backward's and sums stay f32).
  bool bf16_param_grads = false;
  // AdamW's m and v (graph inputs and their updates) stored bf16, rounded
  // stochastically by the AdamW kernel.
  bool bf16_adam_states = false;
  // Parameters that only GEMMs (through the shadow) and AdamW read are
  // stored split (CudaPlan::split): exact f32 updates, no shadow buffer.
  bool split_master = false;
};

// Device memory by what it holds, in bytes (CudaBuildStats::memory).
struct DeviceMemory {
  int64_t params = 0;       // parameters (split ones included)
  int64_t shadows = 0;      // bf16 shadows with a buffer of their own
  int64_t states = 0;       // optimizer state (AdamW's m and v)
  int64_t other_inputs = 0; // buffers, the batch, lr, step
  int64_t arena = 0;        // activations and gradients: the plan's arena
  int64_t scratch = 0;      // the workspace the launches share
  int64_t total = 0;        // everything the executor allocated (tables too)
  int64_t host_states = 0;  // optimizer state in pinned host memory (offloaded)
};

// What the plan's buffers of graph `g` take before any is allocated: the
// inputs, shadows and arena (total is their sum; scratch, sized per launch at
// build, is left 0). With offload_optimizer_state the state is host_states.
DeviceMemory PlannedMemory(const ir::Graph& g, const CudaPlan& p, bool offload_optimizer_state);
// OK when `need.total` fits `free_bytes`; else ResourceExhausted naming what
// the step needs by kind, what the GPU has free, and the options that need
// less (train.memory: lean, train.offload_optimizer_state, activation
// checkpointing, a smaller batch).
absl::Status CheckDeviceMemory(const DeviceMemory& need, int64_t free_bytes);

// The storage dtype of every graph value (see the file comment), and under
// `memory` the gradients and AdamW states it names.
// f32_residual: the residual stream and its gradient stay f32 (PlanOptions::f32_residual).
std::vector<DType> StorageDTypes(const ir::Graph& g, bool bf16, const MemoryPolicy& memory = {},
                                 bool f32_residual = false);

// Which fusion passes run (all by default; off = one launch per op for that
// pattern, to bisect a problem).
struct PlanOptions {
  bool compose_copies = true;      // compose_copies (plan_copies.h)
  bool fold_residual_grad = true;  // residual_grad (plan_residual_grad.h)
  bool add_layernorm = true;       // add_layernorm (plan_add_layernorm.h)
  bool attn_views = true;          // attention_views (plan_attention.h)
  bool fuse_cross_entropy = true;  // fuse_cross_entropy (plan_fuse_ce.h)
  bool accumulate_gemms = true;    // gemm_accumulate (plan_gemm_accumulate.h)
  // gemm_epilogues' fusions in bf16 plans (bias, bias + tanh GELU, dgelu); false: every
  // GEMM plain, the bias add and GELU (backward) their own launches.
  bool gemm_epilogues = true;
  // Not a fusion: lower_nodes picks launches without atomics where there is a
  // choice (embedding_backward -> kEmbeddingBackwardSorted), so the step's
  // bits repeat run to run (CudaOptions::deterministic).
  bool deterministic = false;
  // embedding_backward -> kEmbeddingBackwardSorted alone, the rest as chosen
  // (CudaOptions::sorted_embedding_backward); deterministic implies it.
  bool sorted_embedding_backward = false;
  // This rank's index in each process group the graph's rank-dependent ops
  // name (shard_slice: its block's offset; vocab_onehot: its vocabulary
  // block). A group not listed is rank 0, which plans the same launches and
  // buffers (only offsets differ), so a job is checked without its ranks.
  std::map<std::string, int> group_rank;
  // The training state's device memory (bf16 plans only).
  MemoryPolicy memory;
  // bf16 plans: the residual stream (the embedding output and the adds that
  // build what the norms read) and its gradient stored f32, as autocast keeps
  // them; the norms read it in f32 and write their bf16 GEMM operand
  // directly. Costs bandwidth on the stream's adds and norms; keeps the deep
  // models' sums of many layer outputs from rounding to bf16 at every add.
  bool f32_residual = false;
  // Bytes kept free after every arena buffer (rounded up to the alignment),
  // listed in CudaPlan::guards: a check for launches that read or write past
  // their operands (CudaOptions::arena_guard_bytes). 0 in training.
  int64_t guard_bytes = 0;
};

// The fuse_cross_entropy rewrite over a finished launch list (before the
// arena plan); returns how many pairs it fused.
int FuseCrossEntropy(CudaPlan& p);

// Unimplemented naming the op (and node) for an op with no CUDA launch.
absl::StatusOr<CudaPlan> PlanCuda(const ir::Graph& g, bool bf16, const PlanOptions& options = {});

}  // namespace loom::compiler::cuda
