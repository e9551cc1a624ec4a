// Graphs and counters the CUDA plan's pass tests share (testonly).
#pragma once

#include <string>

#include "compiler/cuda/plan.h"
#include "compiler/ir/ir.h"

namespace loom::compiler::cuda {

// The compiled joint training graph (the "fused" stage: forward, backward,
// AdamW with clipping) of a GPT (4 heads, T 64, vocab 256, batch 8) or a
// llama (4 heads, 2 kv heads, batch 4).
ir::Graph GptJoint(int n_layer = 2, int d_model = 128);
ir::Graph LlamaJoint(int d_model, int n_layer = 1);
// Launches of kind k (and, when given, with that op name).
int CountOp(const CudaPlan& p, LaunchKind k, const std::string& op = "");
// Every fusion pass off.
PlanOptions NoFusions();

}  // namespace loom::compiler::cuda
