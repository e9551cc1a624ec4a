// `loom train job.yaml`: single-process training with live progress.
//
// Writes into the run folder (run_dir, or runs/<name>-<time>): job.yaml (the
// spec with defaults), metrics.jsonl (one JSON object per logged step and per
// validation), loss.svg (the loss curve), sample.txt (generated text).
// Exit codes: 0 done, 1 runtime failure, 2 bad input (the message names the key
// and value).
#pragma once

#include <string>
#include <vector>

namespace loom::train {

int RunTrainCommand(const std::vector<std::string>& args);

}  // namespace loom::train
