#include "compiler/import/onnx/inspect.h"

#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status.h"
#include "compiler/import/onnx/model_check.h"
#include "compiler/import/onnx/op_table.h"
#include "compiler/import/onnx/params.h"
#include "compiler/ir/text.h"

namespace loom::compiler::import::onnx {
namespace {

std::string OpsSection(const ::onnx::ModelProto& m, int* unsupported) {
  std::map<std::string, int> counts;
  for (const auto& n : m.graph().node())
    ++counts[n.domain().empty() || n.domain() == "ai.onnx" ? n.op_type() : n.domain() + "::" + n.op_type()];
  std::string s = absl::StrFormat("ops (%d types):\n", counts.size());
  for (const auto& [op, c] : counts) {
    const OpEntry* e = FindOp(op);
    if (e) {
      absl::StrAppendFormat(&s, "  %-28s %5d  supported  %-12s -> %s\n", op, c, e->family, e->lowers_to);
    } else {
      ++*unsupported;
      absl::StrAppendFormat(&s, "  %-28s %5d  UNSUPPORTED: %s\n", op, c, UnsupportedReason(op));
    }
  }
  return s;
}

std::string InputsSection(const ImportedModel& im) {
  std::string s;
  const ir::Graph& g = im.graph;
  auto meta = [&](const std::string& name) { return g.meta(g.inputs()[g.FindInput(name)].value).ToString(); };
  absl::StrAppendFormat(&s, "parameters: %d tensors, %d values (rule: %s)\n", im.params.size(), im.NumParameters(),
                        im.report.param_rule == ParamRule::kMetadata
                            ? absl::StrCat("metadata '", kParametersKey, "'")
                            : "reachability: floating initializers with a differentiable path to an output "
                              "through a data-dependent node");
  for (const std::string& p : im.params) absl::StrAppendFormat(&s, "  %-40s %s\n", p, meta(p));
  absl::StrAppendFormat(&s, "buffers (constants the graph reads): %d\n", im.buffers.size());
  for (const std::string& b : im.buffers) absl::StrAppendFormat(&s, "  %-40s %s\n", b, meta(b));
  absl::StrAppendFormat(&s, "data inputs: %d\n", im.data_inputs.size());
  for (const std::string& d : im.data_inputs) absl::StrAppendFormat(&s, "  %-40s %s\n", d, meta(d));
  absl::StrAppendFormat(&s, "outputs: %d\n", im.outputs.size());
  for (size_t i = 0; i < im.outputs.size(); ++i)
    absl::StrAppendFormat(&s, "  %-40s %s\n", im.outputs[i], g.meta(g.outputs()[i].value).ToString());
  return s;
}

}  // namespace

absl::StatusOr<InspectResult> InspectModel(const std::string& path, const ImportOptions& options, bool print_graph) {
  LOOM_ASSIGN_OR_RETURN(::onnx::ModelProto m, ReadModelFile(path, options.max_model_bytes));
  InspectResult r;
  int64_t init_values = 0;
  for (const auto& t : m.graph().initializer()) {
    int64_t n = 1;
    for (int64_t d : t.dims()) n = d >= 0 && (d == 0 || n <= (int64_t{1} << 40) / d) ? n * d : -1;
    init_values += n > 0 ? n : 0;
  }
  std::string opsets;
  for (const auto& o : m.opset_import()) absl::StrAppend(&opsets, opsets.empty() ? "" : ", ", o.domain().empty() ? "ai.onnx" : o.domain(), " ", o.version());
  absl::StrAppendFormat(&r.text, "model: %s\nproducer: %s %s, IR version %d, opsets: %s\nnodes: %d, initializers: %d (%d values)\n",
                        path, m.producer_name(), m.producer_version(), m.ir_version(), opsets, m.graph().node_size(),
                        m.graph().initializer_size(), init_values);
  int unsupported = 0;
  absl::StrAppend(&r.text, OpsSection(m, &unsupported));
  auto im = ImportModel(path, options);
  if (!im.ok()) {
    absl::StrAppend(&r.text, "import: FAILED: ", im.status().message(), "\n");
    return r;
  }
  r.imported = true;
  absl::StrAppend(&r.text, InputsSection(*im));
  absl::StrAppendFormat(&r.text, "import: %d ONNX nodes -> %d graph nodes (%d before recovery); %d ops folded at "
                        "import; %d values agreed with ONNX shape inference\n",
                        im->report.onnx_nodes, im->report.graph_nodes, im->report.converted_nodes,
                        im->report.folded_ops, im->report.shape_checked);
  absl::StrAppend(&r.text, "patterns matched: ", im->report.patterns.size(),
                  im->report.recovered ? "" : " (recovery passes off)", "\n");
  for (const std::string& p : im->report.patterns) absl::StrAppend(&r.text, "  ", p, "\n");
  if (print_graph) absl::StrAppend(&r.text, "\n", ir::PrintGraph(im->graph));
  return r;
}

std::string FormatSupportedOps() {
  std::string s = absl::StrFormat("ONNX ops Loom imports (default domain, opsets %d to %d):\n", kMinOpset, kMaxOpset);
  absl::StrAppendFormat(&s, "  %-28s %-6s %-12s %s\n", "op", "since", "family", "lowers to");
  for (const OpEntry& e : SupportedOps())
    absl::StrAppendFormat(&s, "  %-28s %-6d %-12s %s\n", e.op, e.since, e.family, e.lowers_to);
  absl::StrAppendFormat(&s, "%d ops\n", SupportedOps().size());
  return s;
}

}  // namespace loom::compiler::import::onnx
