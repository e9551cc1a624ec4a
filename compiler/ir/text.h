// The IR's text form: a printer and a parser that round-trip exactly,
// print(parse(print(g))) == print(g). Pass tests are written in it.
//
//   graph @mlp(%x: f32[4, 8], %w: f32[8, 16] param, %m: f32[8, 16] @"S(0)" state) {
//     %0 = matmul(%x, %w) {trans_b=false} : f32[4, 16]
//     %1, %2 = layernorm(%0, %g, %b) {eps=1.0000000000000001e-05} : f32[4, 16], f32[4], f32[4]
//     %3 = relu(%1) compute=bf16 : f32[4, 16] @"R"
//     %4 = fused(%3, %b) : f32[4, 16] graph @fused_0(%a: f32[4, 16], %b: f32[16]) {
//       %0 = add(%a, %b) : f32[4, 16]
//       %1 = relu(%0) : f32[4, 16]
//       return %1
//     }
//     return %4, %5 -> %w     # the second output replaces input %w after a step
//   }
//
// Grammar (whitespace and newlines are insignificant; '#' starts a comment):
//   graph   := 'graph' '@' NAME '(' [input {',' input}] ')' '{' {node} 'return' [out {',' out}] '}'
//   input   := '%' NAME ':' type ['param' | 'state' | 'const' | 'input']
//              (NAME may be quoted, %"onnx::Add_3", when it has characters
//              other than letters, digits, '_' and '.')
//   type    := DTYPE '[' [INT {',' INT}] ']' ['@' STRING]          (STRING: placement)
//   node    := '%' NAME {',' '%' NAME} '=' OP '(' [arg {',' arg}] ')' [attrs]
//              ['compute' '=' DTYPE] ':' type {',' type} [graph]  (graph: fused body)
//   attrs   := Attrs::ToString's syntax: '{' [NAME '=' value {',' ...}] '}'
//              value: INT | FLOAT | true | false | "string" | '[' INTs ']'
//   out     := '%' NAME ['->' '%' NAME]                         (the input it updates)
//
// The printer names graph inputs by their names and numbers node outputs %0, %1,
// ... in order; the parser accepts any unique names. Parse errors carry
// "line L, column C"; the parsed graph is verified (ir/verifier.h).
#pragma once

#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "compiler/ir/ir.h"

namespace loom::compiler::ir {

struct PrintOptions {
  // Optional trailing comment per node (e.g. the memory plan's offsets);
  // returns "" for none. Called with the node index in the top-level graph.
  std::function<std::string(int node)> node_comment;
};

std::string PrintGraph(const Graph& g, const PrintOptions& options = {});
absl::StatusOr<Graph> ParseGraph(absl::string_view text);

}  // namespace loom::compiler::ir
