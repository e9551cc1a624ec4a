// Command-line front end for checkpoints, meant to back `loom export` and
// `loom import` (runtime/commands.cc can call RunCheckpointTool directly).
//
//   ckpt_tool export CKPT OUT.safetensors   consolidate (CKPT: a root or a step folder)
//   ckpt_tool export --format hf [--family gpt|llama] SRC OUT.safetensors
//                                           parameters in Hugging Face's layout (SRC: a
//                                           run folder or a checkpoint; hf_export.h)
//   ckpt_tool import FILE ROOT [STEP]       a new checkpoint at ROOT from a consolidated file
//   ckpt_tool verify ROOT                   load the newest usable checkpoint, say what was skipped
//   ckpt_tool inspect FILE                  list a safetensors file's tensors
//
// Returns the exit code; messages go to `out` (results) and `err` (errors).
#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace loom::runtime::checkpoint {

int RunCheckpointTool(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace loom::runtime::checkpoint
