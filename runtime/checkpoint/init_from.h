// Initial parameters from a safetensors file (`init_from:` in the job spec,
// `loom train --init PATH`), in Loom's or Hugging Face's layout (hf_layout.h).
// No optimizer state is read.
//
// Open reads the header, maps every tensor onto the model (PlanInit) and, for
// a GPT-2 file that carries `lm_head.weight`, checks that it equals wte. Then
// a process reads whole parameters (Read, ReadAll), or a rank of a parallel
// job reads only its block of each (ReadBlock): the rows and columns of the
// stored tensor that the block needs are read by byte range, converted to f32
// and brought into Loom's layout.
//
// Errors: InvalidArgument prefixed "init_from: PATH:" naming the tensor or the
// spec field (the caller exits 2); an I/O failure keeps its own code.
//
//   LOOM_ASSIGN_OR_RETURN(auto src, InitSource::Open(spec.init_from(), spec.model()));
//   LOOM_ASSIGN_OR_RETURN(Tensor wq, src->ReadBlock("layers.0.attention.wq", {0, 32}, {64, 32}));
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "base/tensor.h"
#include "proto/loom/v1/job.pb.h"
#include "runtime/checkpoint/hf_layout.h"
#include "runtime/checkpoint/safetensors.h"

namespace loom::runtime::checkpoint {

class InitSource {
 public:
  static absl::StatusOr<std::unique_ptr<InitSource>> Open(const std::string& path, const v1::ModelSpec& spec);
  // For a parameter list that is not a built-in family's (an imported ONNX
  // graph's initializers): names map one to one (PlanOneToOne).
  static absl::StatusOr<std::unique_ptr<InitSource>> OpenOneToOne(
      const std::string& path, const std::vector<compiler::models::ParamInfo>& params);

  const InitPlan& plan() const { return plan_; }
  // The rectangle [offsets, offsets + lengths) of a parameter, f32, in Loom's layout.
  absl::StatusOr<Tensor> ReadBlock(const std::string& param, const std::vector<int64_t>& offsets,
                                   const std::vector<int64_t>& lengths) const;
  absl::StatusOr<Tensor> Read(const std::string& param) const;
  // Every parameter of the model, by name.
  absl::StatusOr<std::map<std::string, Tensor>> ReadAll() const;
  // One line for logs: the file, its layout, the tensors ignored, notes.
  std::string Describe() const;

 private:
  InitSource() = default;
  static absl::StatusOr<std::unique_ptr<InitSource>> OpenFile(const std::string& path);
  absl::Status Index();
  absl::Status CheckTied(const std::string& a, const std::string& b) const;

  std::string label_;
  std::unique_ptr<SafetensorsReader> reader_;
  InitPlan plan_;
  std::map<std::string, size_t> by_param_;
};

// The rectangle [offsets, offsets + lengths) of a stored tensor, in its own
// dtype, read by byte range (one pread per contiguous run).
absl::StatusOr<Tensor> ReadRect(const SafetensorsReader& reader, const TensorEntry& entry,
                                const std::vector<int64_t>& offsets, const std::vector<int64_t>& lengths);

}  // namespace loom::runtime::checkpoint
