// `loom train job.yaml`: single-process training with live progress.
//
// Writes into the run folder (run_dir, or runs/<name>-<time>): job.yaml (the
// spec with defaults), metrics.jsonl (one JSON object per logged step and per
// validation), loss.svg (the loss curve), sample.txt (generated text),
// model.safetensors (the final parameters).
// `--init FILE` (or init_from in the spec) starts from the parameters in FILE
// (Loom's or Hugging Face's layout, runtime/checkpoint/init_from.h). With
// checkpoint.dir it saves every checkpoint.every steps and resumes from the
// newest checkpoint there (checkpointer.h; one saved by a parallel job too).
// The run itself is train_loop.h, which `loom worker` shares.
// Exit codes: 0 done, 1 runtime failure, 2 bad input (the message names the key
// and value).
#pragma once

#include <string>
#include <vector>

namespace loom::collectives {
class ProcessGroup;
}
namespace loom::runtime::checkpoint {
class CommitGate;
}

namespace loom::runtime::train {

int RunTrainCommand(const std::vector<std::string>& args);

// The same run as one rank of a `loom run` / service job with device: cuda
// (world size 1): the step's loss is averaged across `world` on the GPU by the
// process group's CUDA backend (NCCL under "cpu:gloo,cuda:nccl") before it is
// reported. `world` must outlive the call.
// `gate` (optional): checkpoints commit through it (`loom worker` closes it
// on SIGTERM).
int RunTrainCommand(const std::vector<std::string>& args, collectives::ProcessGroup* world,
                    checkpoint::CommitGate* gate = nullptr);

}  // namespace loom::runtime::train
