// Liveness-based memory planning: every value a node produces gets a byte range
// in one arena; values whose lifetimes overlap never share bytes.
//
// Lifetimes are measured in node positions of the graph's (topological) order:
// a value lives from the node that defines it to its last use; graph outputs
// live to the end. Graph inputs are not planned (the caller owns them).
// Offsets come from a greedy best-fit placement: buffers are taken in some
// order, each put in the smallest free gap among the already placed buffers it
// overlaps in time. The planner tries four orders (size, definition, lifetime,
// size x lifetime) and keeps the smallest arena. Sizes round up to
// `alignment` (64 bytes: cache lines, AVX-512 loads).
//
// The peak can never be below live_bytes_bound (the largest total size alive at
// one moment); for chains and the fwd/bwd graphs the tests use, the greedy plan
// reaches it exactly. (Optimal offset assignment is NP-hard in general, so on
// adversarial graphs the peak may exceed the bound.)
//
//   LOOM_ASSIGN_OR_RETURN(MemoryPlan plan, PlanMemory(g));
//   plan.peak_bytes;                      // arena size
//   plan.Find(value)->offset;
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/passes/pass.h"

namespace loom::compiler::passes {

struct BufferAssignment {
  int value = -1;
  int64_t offset = 0;
  int64_t size = 0;  // bytes, rounded up to the alignment
  int first = 0;     // defining node position
  int last = 0;      // last use position (nodes().size() for graph outputs)
};

struct MemoryPlan {
  int64_t alignment = 64;
  std::vector<BufferAssignment> buffers;
  std::vector<int> buffer_of_value;  // value id -> index into buffers, or -1
  int64_t peak_bytes = 0;            // arena size
  int64_t live_bytes_bound = 0;      // max over positions of the live bytes
  const BufferAssignment* Find(int value) const {
    if (value < 0 || value >= static_cast<int>(buffer_of_value.size()) || buffer_of_value[value] < 0) return nullptr;
    return &buffers[buffer_of_value[value]];
  }
  // "offset=128 size=64" for the values of node `node` (the planned dump).
  std::string Describe(const ir::Graph& g, int node) const;
};

// `external` lists node outputs that live outside the arena (the lowering's
// in-place updates); they get no buffer.
absl::StatusOr<MemoryPlan> PlanMemory(const ir::Graph& g, int64_t alignment = 64,
                                      const std::vector<int>& external = {});

// The planner as a pass: analyses, never changes the graph.
class MemoryPlanPass : public Pass {
 public:
  absl::string_view name() const override { return "memory-plan"; }
  absl::StatusOr<bool> Run(ir::Graph& g) override;
  const MemoryPlan& plan() const { return plan_; }

 private:
  MemoryPlan plan_;
};

// Offsets for buffers whose size, first and last positions are set (positions
// 0..`positions`): the live-bytes bound by a sweep, then the best of the
// greedy orders (by size, by first use, by lifetime, by size x lifetime), each
// placed by internal::PlaceBuffers, stopping early at the bound. Sets every
// offset. PlanMemory runs it over a graph's values, and the CUDA plan's arena
// pass over its launch list.
struct Placement {
  int64_t peak_bytes = 0;        // the arena size
  int64_t live_bytes_bound = 0;  // max over positions of the live bytes
};
Placement PlaceBest(std::vector<BufferAssignment>& bufs, int positions);

namespace internal {
// The placement PlaceBest runs for each of its orders: buffers in `order`,
// each at the best-fitting gap among the already placed buffers it overlaps
// in time (else above them); sets the offsets, returns the arena size.
int64_t PlaceBuffers(std::vector<BufferAssignment>& bufs, const std::vector<int>& order);
}  // namespace internal

}  // namespace loom::compiler::passes
