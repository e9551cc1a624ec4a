#include "tests/byom/byom_case.h"

#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "gtest/gtest.h"
#include "tests/testing/loom_cli.h"

namespace loom::tests::byom {

const ByomCase& Case(const std::string& name) {
  static const auto* cases = new std::vector<ByomCase>{
      {"gpt", "{path: DIR/tokens.u16, format: tokens, tokens_dtype: u16}", ", seq_len: 12, vocab: 67"},
      {"gptj", "{path: DIR/tokens.u16, format: tokens, tokens_dtype: u16}", ", seq_len: 12, vocab: 67"},
      {"bert",
       "{path: DIR/tokens.u16, format: tokens, tokens_dtype: u16, kind: mlm, "
       "mlm: {rate: 0.2, mask_token: 1, random_fraction: 0.1, keep_fraction: 0.1}}",
       ", seq_len: 12, vocab: 67"},
      {"mlp", "{path: DIR/x.npy, labels: DIR/y.npy, kind: pairs}", ", vocab: 7"},
  };
  for (const ByomCase& c : *cases)
    if (c.name == name) return c;
  std::abort();
}

void ExportAndMakeData(const ByomCase& c, const std::string& dir) {
  testing::CliResult r = testing::Shell(absl::StrCat("mkdir -p ", dir, " && ", kPython, " tools/loom_export.py ",
                                                     "tests/byom/models.py:", c.name, " --out ", dir, "/model.onnx"));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("(torchscript), opset 17"), std::string::npos) << r.output;
  r = testing::Shell(absl::StrCat(kPython, " tests/byom/make_data.py --model ", c.name, " --out ", dir));
  ASSERT_EQ(r.code, 0) << r.output;
}

std::string JobYaml(const ByomCase& c, const std::string& dir, const std::string& extra) {
  return absl::StrCat("name: byom-", c.name, "\nmodel: {onnx: ", dir, "/model.onnx", c.model,
                      "}\ndata: ", absl::StrReplaceAll(c.data, {{"DIR", dir}}), "\ntrain: {steps: ", kSteps,
                      ", batch_size: ", kBatch, ", lr: 2e-3, weight_decay: 0.1, grad_clip: 1.0, warmup_steps: 5, ",
                      "seed: 7, log_every: 1, eval_every: ", kSteps, ", eval_batches: 2}\n", extra);
}

}  // namespace loom::tests::byom
