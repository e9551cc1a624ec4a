// The four tests/byom models as job specs, and the steps a user takes before
// `loom train`: export the model (tools/loom_export.py) and write the data
// (tests/byom/make_data.py). Shared by the parity and the parallel tests.
#pragma once

#include <string>
#include <vector>

namespace loom::tests::byom {

inline constexpr int kSteps = 50;
inline constexpr int kBatch = 4;
// Debian's python (torch 1.13), one thread, bounded.
inline constexpr char kPython[] = "OMP_NUM_THREADS=1 timeout 300 /usr/bin/python3";

struct ByomCase {
  std::string name;   // the FACTORY in tests/byom/models.py
  std::string data;   // the job spec's data section; DIR stands for the case folder
  std::string model;  // model keys after onnx
};

// gpt, gptj, bert, mlp.
const ByomCase& Case(const std::string& name);

// Exports the model to DIR/model.onnx and writes its data into DIR (gtest
// failures on error).
void ExportAndMakeData(const ByomCase& c, const std::string& dir);

// The job spec's YAML: the model, the data, 50 AdamW steps of batch 4 (lr
// 2e-3 after 5 warmup steps, weight decay 0.1, clipping at 1) and `extra`
// (more top-level keys, one per line).
std::string JobYaml(const ByomCase& c, const std::string& dir, const std::string& extra = "");

}  // namespace loom::tests::byom
