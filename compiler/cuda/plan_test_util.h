// Graphs and counters the CUDA plan's pass tests share (testonly).
#pragma once

#include <string>
#include <vector>

#include "compiler/cuda/plan.h"
#include "compiler/ir/ir.h"
#include "proto/loom/v1/job.pb.h"

namespace loom::compiler::cuda {

// The compiled joint training graph (the "fused" stage: forward, backward,
// AdamW with clipping) of a GPT (4 heads, T 64, vocab 256, batch 8) or a
// llama (4 heads, 2 kv heads, batch 4).
ir::Graph GptJoint(int n_layer = 2, int d_model = 128);
// Any model's (compiler/models), optionally with block activation checkpointing.
ir::Graph ModelJoint(const v1::ModelSpec& spec, int64_t batch, bool checkpoint_blocks = false);
ir::Graph LlamaJoint(int d_model, int n_layer = 1);
// The compiled forward-only graph ("fused" stage, no autodiff, no optimizer):
// an evaluation or inference program.
ir::Graph ModelForwardOnly(const v1::ModelSpec& spec, int64_t batch);
// Launches of kind k (and, when given, with that op name).
int CountOp(const CudaPlan& p, LaunchKind k, const std::string& op = "");
// Every fusion pass off.
PlanOptions NoFusions();
// What is wrong with p's arena, one line per problem (empty: nothing): two
// buffers live at the same launch that overlap, an offset not 256-aligned, a
// buffer past arena_bytes, a launch reading a value with no root. Live: from
// the first launch writing a root value to the last launch reading it (the
// end for graph outputs).
std::vector<std::string> ArenaProblems(const ir::Graph& g, const CudaPlan& p);

}  // namespace loom::compiler::cuda
