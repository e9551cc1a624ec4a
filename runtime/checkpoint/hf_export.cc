#include "runtime/checkpoint/hf_export.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "base/status.h"
#include "google/protobuf/text_format.h"
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/checkpoint/export.h"
#include "runtime/checkpoint/hf_layout.h"
#include "runtime/checkpoint/init_from.h"
#include "runtime/checkpoint/loader.h"
#include "runtime/jobspec/jobspec.h"

namespace loom::runtime::checkpoint {
namespace {

bool IsFile(const std::string& path) {
  std::error_code ec;
  return std::filesystem::is_regular_file(path, ec);
}

absl::StatusOr<v1::JobSpec> SpecFromYaml(const std::string& path) {
  std::ifstream in(path);
  if (!in.is_open()) return absl::InvalidArgumentError(absl::StrCat(path, ": cannot read the job spec"));
  std::stringstream ss;
  ss << in.rdbuf();
  auto spec = jobspec::ParseJobSpecYaml(ss.str());
  if (!spec.ok()) return Annotate(spec.status(), path);
  jobspec::ApplyDefaults(*spec);
  return spec;
}

absl::StatusOr<v1::JobSpec> SpecFromManifest(const CheckpointInfo& ckpt) {
  v1::JobSpec spec;
  if (ckpt.manifest.job_spec.empty() || !google::protobuf::TextFormat::ParseFromString(ckpt.manifest.job_spec, &spec))
    return absl::InvalidArgumentError(absl::StrCat(ckpt.dir, ": the manifest records no readable job spec"));
  jobspec::ApplyDefaults(spec);
  return spec;
}

absl::Status CheckFamily(const v1::JobSpec& spec, const std::string& family) {
  if (!family.empty() && family != "gpt" && family != "llama")
    return absl::InvalidArgumentError(absl::StrCat("--family: expected gpt or llama, got '", family, "'"));
  if (!family.empty() && family != spec.model().family())
    return absl::InvalidArgumentError(
        absl::StrCat("--family: ", family, ", but the model is model.family = ", spec.model().family()));
  return absl::OkStatus();
}

}  // namespace

absl::Status WriteHf(const v1::ModelSpec& spec, const std::function<absl::StatusOr<Tensor>(const std::string&)>& read,
                     const std::string& out_path) {
  LOOM_ASSIGN_OR_RETURN(std::vector<ParamSource> layout, HfLayout(spec));
  std::vector<TensorToWrite> entries;
  for (const ParamSource& s : layout) entries.push_back({s.tensor, DType::kF32, s.stored_shape, nullptr});
  return WriteSafetensorsStreamed(out_path, entries, {{"format", "pt"}}, [&](size_t i) -> absl::StatusOr<Tensor> {
    LOOM_ASSIGN_OR_RETURN(Tensor t, read(layout[i].param));
    return StoredFromLoom(layout[i], t);
  });
}

absl::Status ExportHf(const std::string& src, const std::string& out_path, const std::string& family) {
  const std::string model_file = src + "/model.safetensors", job = src + "/job.yaml";
  if (IsFile(model_file) && IsFile(job)) {  // a run folder
    LOOM_ASSIGN_OR_RETURN(v1::JobSpec spec, SpecFromYaml(job));
    LOOM_RETURN_IF_ERROR(CheckFamily(spec, family));
    auto params = InitSource::Open(model_file, spec.model());
    if (!params.ok()) return Annotate(params.status(), "the run's parameters");
    return WriteHf(
        spec.model(), [&](const std::string& name) { return (*params)->Read(name); }, out_path);
  }
  std::error_code ec;
  if (!std::filesystem::is_directory(src, ec))
    return absl::InvalidArgumentError(absl::StrCat(src, ": not a run folder or a checkpoint"));
  CheckpointInfo ckpt;
  if (IsFile(absl::StrCat(src, "/", kManifestName))) {
    LOOM_ASSIGN_OR_RETURN(ckpt, OpenCheckpoint(src, Verify::kFull));
  } else {
    auto latest = LoadLatest(src, Verify::kFull);
    if (!latest.ok())
      return absl::InvalidArgumentError(absl::StrCat(src, ": not a run folder (model.safetensors and job.yaml) or a ",
                                                     "checkpoint: ", latest.status().message()));
    ckpt = latest->ckpt;
  }
  LOOM_ASSIGN_OR_RETURN(v1::JobSpec spec, SpecFromManifest(ckpt));
  LOOM_RETURN_IF_ERROR(CheckFamily(spec, family));
  LOOM_ASSIGN_OR_RETURN(CheckpointReader reader, CheckpointReader::Open(ckpt));
  return WriteHf(
      spec.model(), [&](const std::string& name) { return reader.ReadFull(name); }, out_path);
}

}  // namespace loom::runtime::checkpoint
