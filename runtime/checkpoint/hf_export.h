// `loom export --format hf`: a run's or a checkpoint's parameters as one
// safetensors file in Hugging Face's layout (hf_layout.h, HfLayout): GPT-2 as
// GPT2LMHeadModel's state_dict (`transformer.*` and the tied
// `lm_head.weight`), Llama as LlamaForCausalLM's (projections transposed to
// [out, in], q/k rows in rotate-half order). f32, metadata format=pt. The file
// loads with load_state_dict(strict=True) into those models of the same
// configuration, and back into Loom through `init_from`.
//
//   ExportHf("runs/gpt-small-20261204-1200", "gpt2-finetuned.safetensors");
//
// SRC is a run folder (model.safetensors and job.yaml, as `loom train` and
// `loom run` leave them), a checkpoint root (its newest usable checkpoint) or
// a step folder; the model spec comes from job.yaml or the checkpoint's
// manifest. Optimizer state is not exported. One parameter in memory at a
// time; the file appears atomically.
#pragma once

#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "base/tensor.h"
#include "proto/loom/v1/job.pb.h"

namespace loom::runtime::checkpoint {

// `family` ("" = the model's) must name the model's family (InvalidArgument
// otherwise, as for an unreadable SRC or spec).
absl::Status ExportHf(const std::string& src, const std::string& out_path, const std::string& family = "");

// The writer: `read(name)` gives a whole parameter in Loom's layout.
absl::Status WriteHf(const v1::ModelSpec& spec, const std::function<absl::StatusOr<Tensor>(const std::string&)>& read,
                     const std::string& out_path);

}  // namespace loom::runtime::checkpoint
