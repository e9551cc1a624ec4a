#include "runtime/train/sample_command.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/status.h"
#include "compiler/models/models.h"
#include "google/protobuf/text_format.h"
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/checkpoint/init_from.h"
#include "runtime/checkpoint/loader.h"
#include "runtime/data/tokenizer.h"
#include "runtime/jobspec/jobspec.h"
#include "runtime/train/evaluate.h"
#include "runtime/train/trainer.h"

namespace loom::train {
namespace {

constexpr char kUsage[] =
    "usage: loom sample RUN_DIR|CHECKPOINT --prompt TEXT [--tokens N] [--temperature T] [--top-k K] [--seed S]\n"
    "                   [--tokenizer-dir DIR] [--device cpu|cuda]";

int Fail(int code, absl::string_view msg) {
  std::fprintf(stderr, "loom sample: %s\n", std::string(msg).c_str());
  return code;
}

struct Args {
  std::string src, prompt, tokenizer_dir, device;
  bool has_prompt = false;
  SampleOptions sample;
};

// "" or the error, naming the flag.
std::string Parse(const std::vector<std::string>& args, Args* a) {
  a->sample.tokens = 100;
  a->sample.seed = 0;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& f = args[i];
    if (f.rfind("--", 0) != 0) {
      if (!a->src.empty()) return absl::StrCat("unexpected argument '", f, "'");
      a->src = f;
      continue;
    }
    if (i + 1 >= args.size()) return absl::StrCat(f, ": missing its value");
    const std::string& v = args[++i];
    bool ok = true;
    if (f == "--prompt") {
      a->prompt = v, a->has_prompt = true;
    } else if (f == "--tokenizer-dir") {
      a->tokenizer_dir = v;
    } else if (f == "--device") {
      a->device = v;
      ok = v == "cpu" || v == "cuda";
    } else if (f == "--tokens") {
      ok = absl::SimpleAtoi(v, &a->sample.tokens) && a->sample.tokens > 0;
    } else if (f == "--temperature") {
      ok = absl::SimpleAtod(v, &a->sample.temperature) && a->sample.temperature >= 0;
    } else if (f == "--top-k") {
      ok = absl::SimpleAtoi(v, &a->sample.top_k) && a->sample.top_k >= 0;
    } else if (f == "--seed") {
      ok = absl::SimpleAtoi(v, &a->sample.seed);
    } else {
      return absl::StrCat("unknown flag '", f, "'");
    }
    if (!ok) return absl::StrCat(f, ": bad value '", v, "'");
  }
  if (a->src.empty()) return "give a run folder or a checkpoint";
  if (!a->has_prompt) return "--prompt: give the text to continue";
  return "";
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
  LOOM_ASSIGN_OR_RETURN(auto infos, models::Parameters(spec->model()));
  LOOM_ASSIGN_OR_RETURN(checkpoint::CheckpointReader reader, checkpoint::CheckpointReader::Open(ckpt));
  for (const models::ParamInfo& p : infos) {
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
  if (std::string err = Parse(args, &a); !err.empty()) return Fail(2, absl::StrCat(err, "\n", kUsage));
  v1::JobSpec spec;
  TrainerOptions options;
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
  auto trainer = Trainer::Create(spec, std::move(options));
  if (!trainer.ok()) return Fail(1, trainer.status().message());
  auto ids = SampleTokens(**trainer, spec, prompt, a.sample, (*tok)->vocab_size());
  if (!ids.ok()) return Fail(1, ids.status().message());
  auto text = (*tok)->Decode(*ids);
  if (!text.ok()) return Fail(1, text.status().message());
  std::printf("%s%s\n", a.prompt.c_str(), text->c_str());
  return 0;
}

}  // namespace loom::train
