#include <cctype>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "compiler/ir/text.h"

namespace loom::compiler::ir {
namespace {

// "%name", or %"name" when the name has characters the parser's plain names
// lack (imported models name values such as "onnx::Add_3").
std::string InputRef(const std::string& name) {
  bool plain = !name.empty();
  for (char c : name) plain = plain && (std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.');
  return plain ? absl::StrCat("%", name) : absl::StrCat("%\"", name, "\"");
}

std::string TypeString(const Value& v) {
  std::string s = v.meta.ToString();
  if (!v.placement.empty()) absl::StrAppend(&s, " @\"", v.placement, "\"");
  return s;
}

void PrintInto(const Graph& g, const PrintOptions& opt, int indent, std::string* out) {
  const std::string pad(indent, ' ');
  std::map<int, std::string> name;
  std::vector<std::string> ins;
  for (const GraphInput& in : g.inputs()) {
    name[in.value] = InputRef(in.name);
    std::string s = absl::StrCat(InputRef(in.name), ": ", TypeString(g.value(in.value)));
    if (in.kind != InputKind::kInput) absl::StrAppend(&s, " ", InputKindName(in.kind));
    ins.push_back(std::move(s));
  }
  absl::StrAppend(out, "graph @", g.name(), "(", absl::StrJoin(ins, ", "), ") {\n");
  int counter = 0;
  auto ref = [&](int v) {
    auto it = name.find(v);
    return it == name.end() ? absl::StrCat("%<undefined:", v, ">") : it->second;
  };
  for (size_t i = 0; i < g.nodes().size(); ++i) {
    const Node& n = g.nodes()[i];
    std::vector<std::string> outs, types, args;
    for (int v : n.outputs) {
      name[v] = absl::StrCat("%", counter++);
      outs.push_back(name[v]);
      types.push_back(TypeString(g.value(v)));
    }
    for (int v : n.inputs) args.push_back(ref(v));
    absl::StrAppend(out, pad, "  ", absl::StrJoin(outs, ", "), outs.empty() ? "" : " ", "= ", n.op, "(",
                    absl::StrJoin(args, ", "), ")");
    if (!n.attrs.values().empty()) absl::StrAppend(out, " ", n.attrs.ToString());
    if (n.compute_dtype) absl::StrAppend(out, " compute=", DTypeName(*n.compute_dtype));
    absl::StrAppend(out, " : ", absl::StrJoin(types, ", "));
    if (n.subgraph) {
      absl::StrAppend(out, " ");
      PrintInto(*n.subgraph, PrintOptions{}, indent + 2, out);
      out->pop_back();  // the nested graph's newline; a comment may follow
    }
    if (opt.node_comment) {
      std::string c = opt.node_comment(static_cast<int>(i));
      if (!c.empty()) absl::StrAppend(out, "  # ", c);
    }
    absl::StrAppend(out, "\n");
  }
  std::vector<std::string> rets;
  for (const GraphOutput& o : g.outputs()) {
    std::string s = ref(o.value);
    if (o.updates >= 0 && o.updates < static_cast<int>(g.inputs().size()))
      absl::StrAppend(&s, " -> ", InputRef(g.inputs()[o.updates].name));
    rets.push_back(std::move(s));
  }
  absl::StrAppend(out, pad, "  return", rets.empty() ? "" : " ", absl::StrJoin(rets, ", "), "\n", pad, "}\n");
}

}  // namespace

std::string PrintGraph(const Graph& g, const PrintOptions& options) {
  std::string out;
  PrintInto(g, options, 0, &out);
  return out;
}

}  // namespace loom::compiler::ir
