// An imported model as the trainer's forward graph.
//
// The trainer feeds two inputs, "x" (the batch's model input) and "y" (its
// targets), and expects the scalar loss as output 0 (and, for evaluation,
// the logits [rows, classes] as output 1). What x and y hold depends on the
// batch kind (runtime/data/batch.h): token ids and next-token or masked-token
// targets, i32 [batch, seq_len]; or records of a .npy pair, e.g. f32 features
// [batch, features] and i32 labels [batch]. BuildTrainingGraph rewires an
// ImportedModel to that contract:
//
//   - x feeds the token input (named, else the model's only data input other
//     than the label input, else its only integer one) and takes its shape;
//     its dtype is i32 for an integer input and f32 for a floating one, cast
//     to the input's dtype where that differs, except that an i64 input
//     that only indexes (embedding or gather indices, which take i32 alike)
//     is x itself, uncast; y feeds the label input when the loss target
//     names one (i32, cast or uncast likewise); any other data input is an
//     error naming it;
//   - a model whose first output is a scalar is trained on that loss as it
//     is; otherwise its first output is the logits ([..., classes], read as
//     [rows, classes]) and the loss is cross_entropy(logits, y) with
//     ignore_index. y's shape is then x's when x is integer and holds one id
//     per row of logits (token windows: [batch, seq_len]), else the logits'
//     leading dims (a classifier: [batch]);
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
  std::string token_input;                  // empty: see the top of this file
  std::string loss_kind;                    // "" (the model's own loss or cross_entropy) | "cross_entropy"
  std::string target = kShiftedInputs;      // y, the batch's targets; or the name of a data input fed y
  int64_t ignore_index = -100;
  int64_t vocab = 0;                        // > 0: the logits' last dim must match
  bool return_logits = false;               // output 1: logits [rows, classes]
};

struct TrainingGraph {
  ir::Graph graph;
  bool model_loss = false;   // the model computes its loss itself
  bool has_logits = false;   // output 1 exists (return_logits and the model has logits)
};

absl::StatusOr<TrainingGraph> BuildTrainingGraph(const ImportedModel& m, const TrainingGraphOptions& options);

}  // namespace loom::compiler::import::onnx
