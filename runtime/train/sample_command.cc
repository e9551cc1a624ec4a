#include "runtime/train/sample_command.h"

#include <cstdio>
#include <filesystem>
#include <optional>
#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/flags.h"
#include "base/status.h"
#include "compiler/models/models.h"
#include "google/protobuf/text_format.h"
#include "parallel/trainer.h"
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/checkpoint/init_from.h"
#include "runtime/checkpoint/loader.h"
#include "runtime/data/tokenizer.h"
#include "runtime/jobspec/jobspec.h"
#include "runtime/train/evaluate.h"

namespace loom::runtime::train {
namespace {


int Fail(int code, absl::string_view msg) {
  std::fprintf(stderr, "loom sample: %s\n", std::string(msg).c_str());
  return code;
}

struct Args {
  std::string src, prompt, tokenizer_dir, device;
  bool has_prompt = false;
  SampleOptions sample;
};

// nullopt when the flags parsed into `a`, else the exit code (--help: 0).
std::optional<int> Parse(const std::vector<std::string>& args, Args* a) {
  a->sample.tokens = 100;
  int64_t seed = 0;
  std::vector<std::string> positional;
  FlagSet fs("loom sample", "RUN_DIR|CHECKPOINT", "Continues a prompt with a trained model and prints the decoded text.");
  fs.String("prompt", &a->prompt, "TEXT", "the text to continue (required)")
      .Int("tokens", &a->sample.tokens, "N", "tokens to generate (default 100)", 1)
      .Double("temperature", &a->sample.temperature, "T", "sampling temperature (0: greedy)", 0)
      .Int("top-k", &a->sample.top_k, "K", "sample among the K likeliest tokens (0: all)", 0)
      .Int64("seed", &seed, "S", "sampling seed (the same seed, the same tokens)", 0)
      .String("tokenizer-dir", &a->tokenizer_dir, "DIR", "the tokenizer folder (default: the run's)")
      .String("device", &a->device, "cpu|cuda", "where the model runs")
      .Positionals(&positional, "RUN_DIR|CHECKPOINT", 1, 1);
  if (std::optional<int> rc = fs.Parse(args)) return rc;
  a->src = positional[0];
  a->sample.seed = static_cast<uint64_t>(seed);
  a->has_prompt = fs.Seen("prompt");
  if (!a->device.empty() && a->device != "cpu" && a->device != "cuda")
    return fs.UsageError(absl::StrCat("--device: expected cpu or cuda, got '", a->device, "'"));
  if (!a->has_prompt) return fs.UsageError("--prompt: give the text to continue");
  return std::nullopt;
}

bool IsFile(const std::string& p) {
  std::error_code ec;
  return std::filesystem::is_regular_file(p, ec);
}

absl::StatusOr<v1::JobSpec> SpecFromYaml(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  auto spec = jobspec::ParseJobSpecYaml(ss.str());
  if (!spec.ok()) return Annotate(spec.status(), path);
  jobspec::ApplyDefaults(*spec);
  return spec;
}

// The spec and the parameters of a run folder or a checkpoint.
absl::Status LoadModel(const std::string& src, v1::JobSpec* spec, std::map<std::string, Tensor>* params) {
  if (IsFile(src + "/model.safetensors") && IsFile(src + "/job.yaml")) {
    LOOM_ASSIGN_OR_RETURN(*spec, SpecFromYaml(src + "/job.yaml"));
    auto init = checkpoint::InitSource::Open(src + "/model.safetensors", spec->model());
    if (!init.ok()) return Annotate(init.status(), "the run's parameters");
    LOOM_ASSIGN_OR_RETURN(*params, (*init)->ReadAll());
    return absl::OkStatus();
  }
  std::error_code ec;
  if (!std::filesystem::is_directory(src, ec))
    return absl::InvalidArgumentError(absl::StrCat(src, ": not a run folder or a checkpoint"));
  checkpoint::CheckpointInfo ckpt;
  if (IsFile(absl::StrCat(src, "/", checkpoint::kManifestName))) {
    LOOM_ASSIGN_OR_RETURN(ckpt, checkpoint::OpenCheckpoint(src));
  } else {
    auto latest = checkpoint::LoadLatest(src);
    if (!latest.ok())
      return absl::InvalidArgumentError(absl::StrCat(src, ": not a run folder (model.safetensors and job.yaml) or a ",
                                                     "checkpoint: ", latest.status().message()));
    ckpt = latest->ckpt;
  }
  if (!google::protobuf::TextFormat::ParseFromString(ckpt.manifest.job_spec, spec))
    return absl::InvalidArgumentError(absl::StrCat(ckpt.dir, ": the manifest records no readable job spec"));
  jobspec::ApplyDefaults(*spec);
  LOOM_ASSIGN_OR_RETURN(auto infos, compiler::models::Parameters(spec->model()));
  LOOM_ASSIGN_OR_RETURN(checkpoint::CheckpointReader reader, checkpoint::CheckpointReader::Open(ckpt));
  for (const compiler::models::ParamInfo& p : infos) {
    auto t = reader.ReadFull(p.name);
    if (!t.ok()) return Annotate(t.status(), ckpt.dir);
    (*params)[p.name] = t->To(DType::kF32);
  }
  return absl::OkStatus();
}

// --tokenizer-dir, the run folder's tokenizer/, or data.tokenizer.
absl::StatusOr<std::unique_ptr<data::Tokenizer>> FindTokenizer(const Args& a, const v1::JobSpec& spec) {
  if (!a.tokenizer_dir.empty()) return data::LoadTokenizerFolder(a.tokenizer_dir, "--tokenizer-dir");
  const std::string recorded = a.src + "/tokenizer";
  if (IsFile(recorded + "/" + data::kTokenizerDescription)) return data::LoadTokenizerFolder(recorded, recorded);
  return data::LoadTokenizer(spec.data().tokenizer());
}

}  // namespace

int RunSampleCommand(const std::vector<std::string>& args) {
  Args a;
  if (std::optional<int> rc = Parse(args, &a)) return *rc;
  v1::JobSpec spec;
  parallel::TrainerOptions options;
  if (absl::Status s = LoadModel(a.src, &spec, &options.init); !s.ok())
    return Fail(absl::IsInvalidArgument(s) ? 2 : 1, s.message());
  if (spec.model().family() != "gpt" && spec.model().family() != "llama")
    return Fail(2, absl::StrCat("model.family: ", spec.model().family(), ": only the built-in gpt and llama sample"));
  auto tok = FindTokenizer(a, spec);
  if (!tok.ok()) return Fail(2, tok.status().message());
  if ((*tok)->vocab_size() > spec.model().vocab())
    return Fail(2, absl::StrCat("the tokenizer has ", (*tok)->vocab_size(), " ids, the model only ",
                                spec.model().vocab(), " (model.vocab)"));
  std::vector<int32_t> prompt;
  if (absl::Status s = (*tok)->Encode(a.prompt, &prompt); !s.ok()) return Fail(1, s.message());
  if (prompt.empty() && (*tok)->eot_id() >= 0) prompt.push_back((*tok)->eot_id());
  if (prompt.empty()) return Fail(2, "--prompt: the bytes tokenizer has no end-of-text id to start from; give text");
  spec.mutable_train()->set_batch_size(1);
  if (!a.device.empty()) spec.set_device(a.device);
  spec.clear_init_from();
  auto trainer = parallel::Trainer::Create(spec, std::move(options));
  if (!trainer.ok()) return Fail(1, trainer.status().message());
  auto ids = SampleTokens(**trainer, spec, prompt, a.sample, (*tok)->vocab_size());
  if (!ids.ok()) return Fail(1, ids.status().message());
  auto text = (*tok)->Decode(*ids);
  if (!text.ok()) return Fail(1, text.status().message());
  std::printf("%s%s\n", a.prompt.c_str(), text->c_str());
  return 0;
}

}  // namespace loom::runtime::train
