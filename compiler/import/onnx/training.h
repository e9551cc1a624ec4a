// An imported language model as the trainer's forward graph.
//
// The trainer feeds two i32 [batch, seq_len] inputs, "x" (token ids) and "y"
// (the next-token targets: the inputs shifted by one), and expects the scalar
// loss as output 0 (and, for evaluation, the logits [batch * seq_len, vocab]
// as output 1). BuildTrainingGraph rewires an ImportedModel to that contract:
//
//   - the token input (named, or the model's only integer data input) is
//     computed as cast(x) in its dtype; a label input, when the loss target
//     names one, as cast(y); an i64 input that only indexes (embedding or
//     gather indices, which take i32 alike) is x or y itself, uncast; any
//     other data input is an error naming it;
//   - a model whose first output is a scalar is trained on that loss as it
//     is; otherwise its first output is the logits ([batch, seq_len, vocab]
//     or [batch * seq_len, vocab]) and the loss is
//     cross_entropy(logits, targets) with ignore_index, the targets being y
//     ("shifted_inputs") or the named label input (fed y);
//   - parameters and buffers keep their names and kinds;
//   - dropout nodes take the step (input kDropoutStep) as their mask offset,
//     so each step draws a new mask; the evaluation graph (return_logits)
//     drops them (the identity, as in eval mode).
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "compiler/import/onnx/importer.h"
#include "compiler/ir/ir.h"

namespace loom::compiler::import::onnx {

inline constexpr char kShiftedInputs[] = "shifted_inputs";
// The f32[] input a training graph with dropout takes: the step, as every
// dropout node's mask offset (kernels/cpu/nn/dropout.cc).
inline constexpr char kDropoutStep[] = "dropout_step";

struct TrainingGraphOptions {
  std::string token_input;                  // empty: the only integer data input
  std::string loss_kind;                    // "" (the model's own loss or cross_entropy) | "cross_entropy"
  std::string target = kShiftedInputs;      // or the name of a data input fed the targets
  int64_t ignore_index = -100;
  int64_t vocab = 0;                        // > 0: the logits' last dim must match
  bool return_logits = false;               // output 1: logits [batch * seq_len, vocab]
};

struct TrainingGraph {
  Graph graph;
  bool model_loss = false;   // the model computes its loss itself
  bool has_logits = false;   // output 1 exists (return_logits and the model has logits)
};

absl::StatusOr<TrainingGraph> BuildTrainingGraph(const ImportedModel& m, const TrainingGraphOptions& options);

}  // namespace loom::compiler::import::onnx
