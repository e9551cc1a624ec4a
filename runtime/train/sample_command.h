// `loom sample`: a trained model's continuation of a prompt, on demand.
//
//   loom sample RUN_DIR|CHECKPOINT --prompt TEXT [--tokens N]
//       [--temperature T] [--top-k K] [--seed S] [--tokenizer-dir DIR]
//       [--device cpu|cuda]
//
// SRC is a run folder (model.safetensors and job.yaml, as `loom train` and
// `loom run` leave them), a checkpoint root (its newest usable checkpoint) or
// one step folder; the job spec comes from job.yaml or the checkpoint's
// manifest. The tokenizer: --tokenizer-dir, else the run folder's
// tokenizer/ (run_reporter.h), else the spec's data.tokenizer. The prompt is
// encoded with it, the evaluation program runs on one sequence
// (train.batch_size 1) and the prompt plus continuation are printed,
// decoded. Sampling is train/evaluate.h's SampleTokens: temperature 0 is
// greedy; the same seed gives the same text. Built-in model families only.
// Exit codes: 0, 2 bad usage or input (naming the flag, file or field), 1
// a failure while running.
#pragma once

#include <string>
#include <vector>

namespace loom::runtime::train {

int RunSampleCommand(const std::vector<std::string>& args);

}  // namespace loom::runtime::train
