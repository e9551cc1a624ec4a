// The model, batch and run options of the training benchmark
// (bench/cuda/train_bench.cc), its named presets, and the FLOP count its MFU
// uses. Plain C++ (no CUDA), so the flags and presets are tested on the CPU
// (train_config_test.cc). bench/cuda/train_torch.py holds the same presets
// for the PyTorch side; the test checks that both agree.
//
// Presets (vocabularies padded as in nanoGPT / Llama 2; parameter counts are
// Loom's model builder's, compiler/models):
//
//   preset      family L   H   Hkv C     ffn   T     V      B   parameters
//   gpt2-124m   gpt    12  12  12  768   3072  1024  50304  16  124,475,904
//   gpt2-350m   gpt    24  16  16  1024  4096  1024  50304  16  354,871,296
//   llama-124m  llama  12  12  4   768   2048  2048  32000  8   124,668,672
//   llama-350m  llama  24  16  4   1024  2816  2048  32000  8   336,118,784
//   llama-1b    llama  22  32  4   2048  5632  2048  32000  8   1,100,048,384
//
// llama-1b has TinyLlama-1.1B's shapes; llama-124m / llama-350m are
// Llama-style models at the GPT-2 sizes (head dim 64, 4 kv heads, SwiGLU
// hidden near 8/3 C rounded up to a multiple of 256, untied output).
// Every preset trains on 16,384 tokens per step.
//
// Flags (`--name=value`): --preset=NAME first sets every shape field; then
// --family, --n_layer, --n_head, --n_kv_head (0: n_head; gpt's follows
// n_head unless given), --d_model, --ffn (0: the family's default),
// --seq_len, --vocab, --batch override fields; with any of them the run's
// preset is reported as "custom".
// The run: --data=DIR or --text=FILE (one of them), --torch=A.json,B.json
// (with --data), --warmup, --steps,
// --loss-tol, --f32, --no-graph, --attention=dispatch|flash, --no-fusions,
// --profile, --activation-checkpointing=none|blocks, --deterministic,
// --memory=standard|lean, --offload-optimizer-state, --residual=bf16|f32, --grads=f32|bf16,
// --embedding-backward=atomic|sorted.
// Every error is
// INVALID_ARGUMENT and names the flag.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "base/tensor.h"
#include "compiler/models/models.h"
#include "proto/loom/v1/job.pb.h"

namespace loom::bench::cuda {

struct TrainPreset {
  std::string name;
  std::string family;
  int n_layer, n_head, n_kv_head, d_model, ffn, seq_len, vocab, batch;
};

// The presets of the table above, in that order.
const std::vector<TrainPreset>& TrainPresets();

struct TrainFlags {
  std::string preset = "gpt2-124m";
  v1::ModelSpec spec;  // from the preset, then the shape flags
  int64_t batch = 0;
  std::string data;
  // --text=FILE instead of --data: parameters from Loom's initialisation
  // (compiler/models InitParameter, seed 1, one at a time), every step a
  // fresh batch of windows of FILE's bytes (token = byte; for models PyTorch
  // cannot hold, where there is no --torch side).
  std::string text;
  std::vector<std::string> torch;
  int warmup = 5, steps = 20;
  bool f32 = false, graph = true, flash = false, fusions = true, profile = false, checkpoint = false;
  bool deterministic = false;  // CudaOptions::deterministic (--deterministic)
  bool f32_residual = false;   // CudaOptions::f32_residual (--residual=f32; default bf16)
  bool lean = false;           // CudaOptions::memory kLean (--memory=lean; default standard)
  bool bf16_grads = false;     // CudaOptions::bf16_grads (--grads=bf16; default f32)
  bool sorted_embedding = false;  // CudaOptions::sorted_embedding_backward (--embedding-backward=sorted)
  bool offload = false;        // CudaOptions::offload_optimizer_state (--offload-optimizer-state)
  int64_t arena_offset_gib = 0;  // CudaOptions::arena_offset_bytes / 2^30 (--arena-offset-gib)
  bool poison_arena = false;     // CudaOptions::poison_arena (--poison-arena)
  int64_t arena_guard_bytes = 0; // CudaOptions::arena_guard_bytes (--arena-guard-bytes)
  double loss_tol = 2e-2;
};

// The model and run flags of argv[1..argc) (everything ParseTrainFlags takes),
// without requiring --data: the compile benchmark (compile_bench_flags.h)
// shares the model flags.
absl::StatusOr<TrainFlags> ParseModelFlags(int argc, const char* const* argv);

// Parses argv[1..argc). The spec is checked by the model builder
// (compiler::models::Parameters), so a shape it refuses is an error here,
// naming the flag of the field.
absl::StatusOr<TrainFlags> ParseTrainFlags(int argc, const char* const* argv);

// --text's batches: windows of a file's bytes, a token per byte. Step i's
// row r starts at an offset drawn from (i, r) (Philox, fixed seed): x is the
// window's seq_len bytes, y the byte after each. The same step gives the
// same batch in any run.
class TextBatches {
 public:
  // The file must hold seq_len + 2 bytes or more, and vocab be >= 256
  // (InvalidArgument naming --text or --vocab; NotFound when unreadable).
  static absl::StatusOr<TextBatches> Open(const std::string& path, int64_t seq_len, int64_t batch, int64_t vocab);
  // x and y of step i as [batch, seq_len] tensors of the given dtypes.
  std::pair<Tensor, Tensor> Batch(int64_t step, DType x_dtype, DType y_dtype) const;

 private:
  std::shared_ptr<const std::string> bytes_;
  int64_t seq_len_ = 0, batch_ = 0;
};

// DIR/config.json, written by train_torch.py --init with the model and batch
// of the weights and batches beside it, against this run's (f.data, f.spec,
// f.batch): FAILED_PRECONDITION naming the first field that differs.
absl::Status CheckDataConfig(const TrainFlags& f);

// Training FLOPs per token: 6 per parameter that a GEMM multiplies (every
// matrix except the lookup-only tables: gpt's wpe, llama's tok_embeddings;
// gpt's wte counts, it is also the output head) plus 12 L H D T for the
// attention scores and their weighted sum (forward 4 H D T per layer, backward
// twice that). Grouped-query attention shrinks wk / wv, which the parameter
// term sees; the attention term is per query head, so it does not change.
// SwiGLU's three matrices are all parameters.
double TrainFlopsPerToken(const v1::ModelSpec& spec, const std::vector<compiler::models::ParamInfo>& params);

}  // namespace loom::bench::cuda
