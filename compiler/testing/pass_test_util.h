// Pass tests in IR text: parse `before`, run the pass, check the reported
// change flag and that the printed result equals `expected` exactly.
//
//   ExpectPass<DeadCodeElimination>(R"IR(graph ...)IR", R"IR(graph ...)IR", /*changed=*/true);
#pragma once

#include <string>

#include "absl/strings/string_view.h"
#include "compiler/ir/text.h"
#include "compiler/ir/verifier.h"
#include "compiler/passes/pass.h"
#include "gtest/gtest.h"

namespace loom::compiler::testing {

inline void ExpectPassOn(passes::Pass& pass, absl::string_view before, absl::string_view expected, bool changed) {
  auto g = ir::ParseGraph(before);
  ASSERT_TRUE(g.ok()) << g.status();
  auto r = pass.Run(*g);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r, changed) << pass.name();
  ASSERT_TRUE(ir::Verify(*g).ok()) << ir::Verify(*g);
  std::string got = ir::PrintGraph(*g);
  EXPECT_EQ(got, std::string(expected));
  // The result must also survive the text form.
  auto again = ir::ParseGraph(got);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(ir::PrintGraph(*again), got);
}

template <typename P>
void ExpectPass(absl::string_view before, absl::string_view expected, bool changed) {
  P pass;
  ExpectPassOn(pass, before, expected, changed);
}

}  // namespace loom::compiler::testing
