#include "compiler/import/onnx/op_table.h"

#include <algorithm>

namespace loom::compiler::import::onnx {

const std::vector<OpEntry>& SupportedOps() {
  static const std::vector<OpEntry>* table = [] {
    auto* t = new std::vector<OpEntry>;
    for (auto family : {ElementwiseOps, ShapeOps, IndexOps, ConstantOps, ReduceOps, NnOps, EinsumOps, LossOps}) {
      std::vector<OpEntry> f = family();
      t->insert(t->end(), f.begin(), f.end());
    }
    std::sort(t->begin(), t->end(), [](const OpEntry& a, const OpEntry& b) { return a.op < b.op; });
    return t;
  }();
  return *table;
}

const OpEntry* FindOp(const std::string& op_type) {
  const auto& t = SupportedOps();
  auto it = std::lower_bound(t.begin(), t.end(), op_type, [](const OpEntry& e, const std::string& s) { return e.op < s; });
  return it != t.end() && it->op == op_type ? &*it : nullptr;
}

std::string UnsupportedReason(const std::string& op_type) {
  if (op_type == "Loop" || op_type == "If" || op_type == "Scan" || op_type == "SequenceMap")
    return "control flow is not supported (Loom's IR is a static dataflow graph; export with the loop unrolled)";
  if (op_type == "NonZero" || op_type == "Unique" || op_type == "NonMaxSuppression" || op_type == "Compress")
    return "its output shape depends on the data, and Loom's IR has static shapes";
  return "op is not supported (`loom ops --onnx` lists the supported ones)";
}

}  // namespace loom::compiler::import::onnx
