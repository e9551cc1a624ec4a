// The compile pipeline from a forward graph to a Program, with named stages
// whose IR can be dumped (what `loom compile job.yaml --dump=<stage>` prints).
//
//   stage       what it is
//   initial     the forward graph as built
//   joint       forward + backward (autodiff.h) + optimizer update (optimizer.h)
//   optimized   after CSE and DCE
//   fused       after elementwise fusion (the graph that is lowered)
//   planned     the fused graph with each value's arena offset as a comment
//
//   LOOM_ASSIGN_OR_RETURN(Compilation c, Compile(forward, options));
//   LOOM_ASSIGN_OR_RETURN(std::string text, c.Dump("fused"));
//   Executor exec(std::move(c.program));
//
// Every dump is valid IR text: ParseGraph(c.Dump(s)) gives a graph that runs to
// the same result as the stage itself (tested).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/autodiff.h"
#include "compiler/ir/ir.h"
#include "compiler/lowering.h"
#include "compiler/optimizer.h"
#include "compiler/passes/cast_policy.h"
#include "compiler/passes/pass.h"

namespace loom::compiler {

// The stage names, in pipeline order.
const std::vector<std::string>& StageNames();

struct CompileOptions {
  bool differentiate = true;          // false: inference, "joint" == "initial"
  AutodiffOptions autodiff;
  std::optional<AdamWOptions> adamw;  // set: append the optimizer update
  bool simplify = true;               // passes/simplify.h (before CSE)
  bool cse = true;
  bool dce = true;
  bool fuse = true;
  passes::CastPolicy cast_policy;  // null: no compute dtypes are assigned
  // Set: activation checkpointing of the joint graph by blocks
  // (passes/checkpointing.h), after CSE and the cast policy, then DCE; the
  // "optimized" stage shows the recomputed ops. The block index of a parameter
  // name, or -1 (models::BlockOfParameter).
  std::function<int(const std::string& param)> checkpoint_blocks;
  bool checkpoint_selective = false;  // with checkpoint_blocks: recompute only the cheap ops
  bool lower = true;                  // false: stop after planning
  LoweringOptions lowering;
};

struct Compilation {
  std::map<std::string, ir::Graph> stages;
  std::vector<passes::PassReport> reports;  // the optimization passes, in order
  // Wall seconds of the steps before the passes: autodiff (BuildJointGraph)
  // and the optimizer update (AppendAdamW); 0 when not run.
  double autodiff_seconds = 0, optimizer_seconds = 0;
  passes::MemoryPlan plan;                  // of the "fused" graph
  std::unique_ptr<Program> program;
  // The IR text of `stage`; an unknown name is InvalidArgument listing the
  // valid ones.
  absl::StatusOr<std::string> Dump(absl::string_view stage) const;
};

absl::StatusOr<Compilation> Compile(const ir::Graph& forward, const CompileOptions& options = {});

}  // namespace loom::compiler
