// What Loom allocates for a model and layout, measured for the planner's
// memory model (parallel/planner.h): its calibration tool
// (parallel:planner_calibrate) and its held-out tests
// (planner_memory_test, planner_layout_memory_test).
//
//   LocalProgramBytes   one rank's training step compiled the way the
//                       Trainer compiles a rank of a parallel layout
//                       (CompileParallel, any layout here) and lowered
//                       with do-nothing communicators (never run): the rank's
//                       state (its parameter and AdamW m, v blocks, from the
//                       program's inputs) and the program's arena.
//   EvalArenaBytes      the arena of a one-rank Trainer's evaluation
//                       program (forward with logits out).
//   TrainerPeakBytes    the high-water mark of a CountingAllocator installed as
//                       the default allocator around Trainer::Create and
//                       `steps` Steps on random tokens (batch tensors included).
//
//   v1::JobSpec spec = TrainSpec(ModelOf("gpt", 2, 4, 4, 64, 32, 256), 8);
//   LOOM_ASSIGN_OR_RETURN(int64_t peak, TrainerPeakBytes(spec, 3));
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "compiler/comm/communicator.h"
#include "parallel/planner.h"
#include "proto/loom/v1/job.pb.h"

namespace loom::tests::parallel::testing {

// A communicator of `n` ranks that moves nothing (for lowering only).
class NullCommunicator final : public compiler::comm::Communicator {
 public:
  explicit NullCommunicator(int n) : n_(n) {}
  int rank() const override { return 0; }
  int size() const override { return n_; }
  absl::Status AllReduce(const Tensor&, Tensor&, compiler::comm::ReduceKind) override { return absl::OkStatus(); }
  absl::Status AllGather(const Tensor&, Tensor&, int) override { return absl::OkStatus(); }
  absl::Status ReduceScatter(const Tensor&, Tensor&, int, compiler::comm::ReduceKind) override {
    return absl::OkStatus();
  }

 private:
  int n_;
};

// A model spec; ffn 0 takes the jobspec's default (4C for gpt, the llama
// rounding of 8C/3 up to a multiple of 64).
v1::ModelSpec ModelOf(const std::string& family, int n_layer, int n_head, int n_kv_head, int d_model, int seq_len,
                      int vocab, int ffn = 0);
// A training job for a one-rank Trainer (AdamW with clipping).
v1::JobSpec TrainSpec(const v1::ModelSpec& model, int64_t batch);
// "gpt L2 H4/4 C64 F256 T32 V256 B8".
std::string Describe(const v1::ModelSpec& model, int64_t batch);

struct LocalProgram {
  int64_t state_bytes = 0;
  int64_t arena_bytes = 0;
  int64_t total() const { return state_bytes + arena_bytes; }
};
absl::StatusOr<LocalProgram> LocalProgramBytes(const v1::ModelSpec& model, int64_t batch,
                                               const loom::parallel::Layout& layout);
absl::StatusOr<int64_t> EvalArenaBytes(const v1::ModelSpec& model, int64_t batch);
absl::StatusOr<int64_t> TrainerPeakBytes(const v1::JobSpec& spec, int steps);

}  // namespace loom::tests::parallel::testing
