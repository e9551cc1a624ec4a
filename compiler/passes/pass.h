// Graph passes and the pipeline that runs them.
//
// A pass rewrites (or analyses) a Graph in place and reports whether it changed
// anything (CONVENTIONS item 6):
//
//   class MyPass : public Pass {
//    public:
//     absl::string_view name() const override { return "my-pass"; }
//     absl::StatusOr<bool> Run(Graph& g) override;
//   };
//
//   PassPipeline p;
//   p.Add<DeadCodeElimination>().Add<CommonSubexpressionElimination>();
//   LOOM_ASSIGN_OR_RETURN(std::vector<PassReport> r, p.Run(g));   // r[i].changed
//
// The pipeline verifies the graph after every pass (ir/verifier.h) and puts the
// pass's name in front of any error.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "compiler/ir/ir.h"

namespace loom::compiler::passes {

class Pass {
 public:
  virtual ~Pass() = default;
  virtual absl::string_view name() const = 0;
  // Returns whether the graph changed.
  virtual absl::StatusOr<bool> Run(ir::Graph& g) = 0;
};

struct PassReport {
  std::string name;
  bool changed = false;
  double seconds = 0;  // wall time of the pass and the verification after it
};

class PassPipeline {
 public:
  template <typename P, typename... Args>
  PassPipeline& Add(Args&&... args) {
    passes_.push_back(std::make_unique<P>(std::forward<Args>(args)...));
    return *this;
  }
  PassPipeline& Add(std::unique_ptr<Pass> p) {
    passes_.push_back(std::move(p));
    return *this;
  }
  // Runs each pass once, in order; verifies after each.
  absl::StatusOr<std::vector<PassReport>> Run(ir::Graph& g);
  size_t size() const { return passes_.size(); }

 private:
  std::vector<std::unique_ptr<Pass>> passes_;
};

}  // namespace loom::compiler::passes
