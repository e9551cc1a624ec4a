// The op list the pointwise test and GPU check sweep: every op the generator
// supports, with attributes and the input range each needs.
#pragma once

#include <string>
#include <vector>

#include "kernels/registry.h"

namespace loom::kernels::cuda::codegen {

struct PwOpCase {
  std::string label;  // unique: op plus attribute variant
  std::string op;
  int num_inputs;
  kernels::Attrs attrs;
  double lo = -2.0, hi = 2.0;  // uniform input range (div: the second input 0.5..2)
  unsigned bool_inputs = 0;    // bit k: input k is bool (the others take the row's dtype)
};

// Whether `op` writes bool (comparisons and logical ops).
inline bool PwOpWritesBool(const std::string& op) {
  return op == "equal" || op == "less" || op == "less_equal" || op == "greater" || op == "greater_equal" ||
         op == "logical_and" || op == "logical_or" || op == "logical_not";
}

// The input metas of case c over `shape`: bool where c says so, else `row`.
inline std::vector<kernels::TensorMeta> PwCaseInputs(const PwOpCase& c, DType row, const Shape& shape) {
  std::vector<kernels::TensorMeta> m;
  for (int k = 0; k < c.num_inputs; ++k) m.push_back({(c.bool_inputs >> k) & 1u ? DType::kBool : row, shape});
  return m;
}

inline std::vector<PwOpCase> AllPwOpCases() {
  using kernels::Attrs;
  const Attrs none{{"approximate", std::string("none")}}, tanh{{"approximate", std::string("tanh")}};
  return {
      {"add", "add", 2, {}},
      {"sub", "sub", 2, {}},
      {"mul", "mul", 2, {}},
      {"div", "div", 2, {}, 0.5, 2.0},
      {"maximum", "maximum", 2, {}},
      {"minimum", "minimum", 2, {}},
      {"pow", "pow", 2, {}, 0.5, 2.0},
      {"relu_backward", "relu_backward", 2, {}},
      {"neg", "neg", 1, {}},
      {"exp", "exp", 1, {}},
      {"log", "log", 1, {}, 0.5, 2.0},
      {"sqrt", "sqrt", 1, {}, 0.5, 2.0},
      {"rsqrt", "rsqrt", 1, {}, 0.5, 2.0},
      {"tanh", "tanh", 1, {}},
      {"sigmoid", "sigmoid", 1, {}},
      {"relu", "relu", 1, {}},
      {"abs", "abs", 1, {}},
      {"erf", "erf", 1, {}},
      {"sin", "sin", 1, {}},
      {"cos", "cos", 1, {}},
      {"reciprocal", "reciprocal", 1, {}, 0.5, 2.0},
      {"equal", "equal", 2, {}},
      {"less", "less", 2, {}},
      {"less_equal", "less_equal", 2, {}},
      {"greater", "greater", 2, {}},
      {"greater_equal", "greater_equal", 2, {}},
      {"logical_and", "logical_and", 2, {}, -2.0, 2.0, 3u},
      {"logical_or", "logical_or", 2, {}, -2.0, 2.0, 3u},
      {"logical_not", "logical_not", 1, {}, -2.0, 2.0, 1u},
      {"where", "where", 3, {}, -2.0, 2.0, 1u},
      {"scale", "scale", 1, Attrs{{"s", -1.5}}},
      {"add_scalar", "add_scalar", 1, Attrs{{"s", 2.5}}},
      {"pow_scalar_2.5", "pow_scalar", 1, Attrs{{"p", 2.5}}, 0.5, 2.0},
      {"pow_scalar_3", "pow_scalar", 1, Attrs{{"p", 3.0}}, 0.5, 2.0},
      {"pow_scalar_-0.5", "pow_scalar", 1, Attrs{{"p", -0.5}}, 0.5, 2.0},
      {"gelu_none", "gelu", 1, none},
      {"gelu_tanh", "gelu", 1, tanh},
      {"gelu_backward_none", "gelu_backward", 2, none},
      {"gelu_backward_tanh", "gelu_backward", 2, tanh},
      {"silu", "silu", 1, {}},
      {"silu_backward", "silu_backward", 2, {}},
      {"cast_bf16", "cast", 1, Attrs{{"dtype", std::string("bf16")}}},
      {"cast_f32", "cast", 1, Attrs{{"dtype", std::string("f32")}}},
      {"zeros_like", "zeros_like", 1, {}},
      {"ones_like", "ones_like", 1, {}},
  };
}

}  // namespace loom::kernels::cuda::codegen
