// Tiny ops registered under "test.*" for the compiler's own tests, so they do
// not depend on kernels/cpu. Linking :test_ops registers them.
//
//   test.add(a, b), test.mul(a, b)    broadcasting, elementwise
//   test.relu(x), test.exp(x), test.scale(x){s}, test.relu_grad(dy, x)  elementwise
//   test.matmul(a[M,K], b[K,N]) {trans_a, trans_b}
//   test.sum(x) -> []                 sum of all elements
//   test.sum_to(x) {shape}, test.broadcast_to(x) {shape}
//   test.dup(x) -> (x, 2x)            two outputs
//   test.fill() {shape, dtype, value}
//   test.grad_norm(g...) -> f32[]     sqrt(sum of squares)
//   test.adamw(p, g, m, v, gn[], lr[], step[]) {beta1, beta2, eps, weight_decay, max_norm}
//       -> (p', m', v'), the catalogue's semantics.
// Fast kernels take f32; references take f32 and f64.
#pragma once

namespace loom::compiler::testing {
// Forces the registrations to be linked (they also run at static init).
void RegisterTestOps();
}  // namespace loom::compiler::testing
