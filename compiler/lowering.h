// Lowering: Graph -> Program, a flat list of kernel calls over preplanned
// buffers.
//
// Lowering (once) plans memory (passes/memory_plan.h), allocates the arena (one
// allocation of plan.peak_bytes), creates every node output as a tensor view
// into it, resolves each node's KernelFn from the registry (fast CPU kernel when
// it takes the dtypes, else the reference; kernels::Impl::kReference forces the
// reference), and builds fused nodes' loops (fused_kernel.h). Running a Program
// (executor.h) then only binds the step's inputs and calls the kernels: no
// planning, lookup or allocation per step.
//
//   LOOM_ASSIGN_OR_RETURN(std::unique_ptr<Program> p, Lower(graph));
//   std::cout << p->ToString();   // the call list with buffer offsets
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/comm/communicator.h"
#include "compiler/ir/ir.h"
#include "compiler/passes/memory_plan.h"
#include "kernels/registry.h"

namespace loom::compiler {

struct LoweringOptions {
  kernels::Impl impl = kernels::Impl::kKernel;
  int64_t fused_chunk_elems = 16384;  // elements per fused-loop chunk
  // In-place updates: an output that updates input k (a parameter or optimizer
  // state) is written straight into the caller's input tensor k, instead of
  // the arena, when its node is the last reader of input k and the op is
  // elementwise or listed in in_place_ops. Saves the arena space and the copy
  // back; Executor::Run then modifies those inputs (which must be contiguous),
  // and ApplyUpdates has nothing left to do for them.
  bool in_place_updates = false;
  std::vector<std::string> in_place_ops = {"adamw"};
  // Communicators for collective ops, by their "group" attribute. A collective
  // whose group has none bound runs with one-rank semantics if its "world"
  // attribute is 1 (the default); otherwise lowering fails naming the group.
  comm::CommunicatorMap communicators;
};

struct KernelCall {
  std::string op;
  int node = -1;  // position in the lowered graph
  kernels::KernelFn fn;
  ir::Attrs attrs;
  std::vector<Tensor> inputs;   // arena views; graph-input positions are rebound per step
  std::vector<Tensor> outputs;  // arena views
  std::vector<std::pair<int, int>> bind;      // (input position, graph input index)
  std::vector<std::pair<int, int>> out_bind;  // (output position, graph input index): in-place updates
};

struct Program {
  ir::Graph graph;  // what was lowered
  passes::MemoryPlan plan;
  std::shared_ptr<void> arena;
  std::vector<KernelCall> calls;
  std::vector<ir::TensorMeta> input_metas;
  std::vector<bool> input_written;  // per graph input: updated in place by Run
  struct OutputSource {
    int input = -1;  // >= 0: the output is graph input `input`
    Tensor view;     // else: its arena view
    int updates = -1;
  };
  std::vector<OutputSource> outputs;
  int64_t scratch_bytes = 0;  // fused loops' chunk buffers (outside the arena)

  // One line per call: "3: test.add(%in0, @64) -> @128  f32[4, 16]".
  std::string ToString() const;
};

absl::StatusOr<std::unique_ptr<Program>> Lower(const ir::Graph& g, const LoweringOptions& options = {});

// The memory plan Lower would make for `g` (in-place updates taken out of the
// arena), without allocating the arena or binding communicators: what a
// planner reads to size a program it will not run.
absl::StatusOr<passes::MemoryPlan> PlanLoweredMemory(const ir::Graph& g, const LoweringOptions& options = {});

}  // namespace loom::compiler
