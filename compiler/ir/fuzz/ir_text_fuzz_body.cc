#include "compiler/ir/fuzz/ir_text_fuzz_body.h"

#include <cstdio>
#include <cstdlib>
#include <string>

#include "compiler/ir/text.h"

namespace loom::compiler::ir::fuzz {

void FuzzIrText(const uint8_t* data, size_t size) {
  auto g = ParseGraph(absl::string_view(reinterpret_cast<const char*>(data), size));
  if (!g.ok()) {
    const std::string m(g.status().message());
    if (m.empty()) {
      std::fprintf(stderr, "ParseGraph: an error without a message\n");
      std::abort();
    }
    return;
  }
  const std::string printed = PrintGraph(*g);
  auto again = ParseGraph(printed);
  if (!again.ok()) {
    std::fprintf(stderr, "ParseGraph rejects PrintGraph's output: %s\n--- text\n%s\n",
                 std::string(again.status().message()).c_str(), printed.c_str());
    std::abort();
  }
  const std::string reprinted = PrintGraph(*again);
  if (reprinted != printed) {
    std::fprintf(stderr, "round trip differs\n--- first\n%s\n--- second\n%s\n", printed.c_str(), reprinted.c_str());
    std::abort();
  }
}

}  // namespace loom::compiler::ir::fuzz
