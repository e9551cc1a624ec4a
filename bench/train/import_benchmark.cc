// Imported GPT-2 against the built-in gpt family, in one process: the built-in
// config written as a PyTorch module (bench/train/gpt2_onnx.py), exported by
// torch 1.13's ONNX exporter, imported by Loom (compiler/import/onnx, with the
// recovery passes of compiler/passes/recover.h) and trained through the same
// Trainer as the built-in family. Both sides start from the same weights (the
// built-in trainer's initial parameters, written into the exported graph as
// initializers, nn.Linear's [out, in] layout transposed) and train on the same
// batches; the timed rounds alternate between the sides, each side's figure
// is its best round. The tokens/s count only when the two sides' losses agree
// at every step (relative 1e-4 in f32, 1e-2 in bf16).
//
//   bazel build //bench/train:import_benchmark
//   bazel-bin/bench/train/import_benchmark [--device cpu|cuda] [--config small|gpt2]
//       [--onnx GRAPH.onnx] [--steps N] [--warmup N] [--rounds N] [--threads N]
//       [--unrecovered] [--opset N]
//
// --config small (the default on the CPU): L4 H4 C256 T256, vocab 256, batch 8,
// f32: bench/train's GPT. --config gpt2 (the default on cuda): GPT-2 124M,
// L12 H12 C768 T1024, vocab 50304, batch 16, bf16 on cuda.
// --onnx: a graph gpt2_onnx.py exported beforehand (for a machine without
// torch 1.13, such as the GPU machine: bench/cuda/stage.sh exports one);
// otherwise /usr/bin/python3 bench/train/gpt2_onnx.py exports it now.
// The imported side passes the job check `loom run` makes first
// (runtime/train/onnx_model.h CheckOnnxJob: on cuda, its training step plans
// onto the CUDA executor's launches), then trains through the Trainer as
// `loom train` does.
// --unrecovered adds a third side: the imported graph as converted (no
// recovery passes), to show what they are worth.
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/rng.h"
#include "base/status.h"
#include "base/thread_pool.h"
#include "onnx/onnx_pb.h"
#include "parallel/trainer.h"
#include "runtime/train/job_model.h"
#include "runtime/train/onnx_model.h"

namespace loom::bench::train {
namespace {

struct Flags {
  std::string device = "cpu", config, onnx;
  int steps = 10, warmup = 2, rounds = 3, threads = 2, opset = 14;
  bool unrecovered = false;
};

struct Config {
  int64_t L, H, C, T, V, B;
  std::string name;
};

bool ParseFlags(int argc, char** argv, Flags* f) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--unrecovered") {
      f->unrecovered = true;
      continue;
    }
    if (i + 1 >= argc) return false;
    const std::string v = argv[++i];
    if (a == "--device") f->device = v;
    else if (a == "--config") f->config = v;
    else if (a == "--onnx") f->onnx = v;
    else if (a == "--steps") { if (!absl::SimpleAtoi(v, &f->steps)) return false; }
    else if (a == "--warmup") { if (!absl::SimpleAtoi(v, &f->warmup)) return false; }
    else if (a == "--rounds") { if (!absl::SimpleAtoi(v, &f->rounds)) return false; }
    else if (a == "--threads") { if (!absl::SimpleAtoi(v, &f->threads)) return false; }
    else if (a == "--opset") { if (!absl::SimpleAtoi(v, &f->opset)) return false; }
    else return false;
  }
  if (f->config.empty()) f->config = f->device == "cuda" ? "gpt2" : "small";
  return (f->device == "cpu" || f->device == "cuda") && (f->config == "small" || f->config == "gpt2") &&
         f->steps > 0 && f->warmup >= 0 && f->rounds > 0 && f->threads > 0;
}

Config ConfigOf(const Flags& f) {
  if (f.config == "gpt2") return {12, 12, 768, 1024, 50304, 16, "GPT-2 124M (L12 H12 C768 T1024 V50304 B16)"};
  return {4, 4, 256, 256, 256, 8, "GPT L4 H4 C256 T256 V256 B8"};
}

void TrainSettings(v1::JobSpec& s, const Config& c, const Flags& f) {
  auto* m = s.mutable_model();
  m->set_seq_len(c.T);
  m->set_vocab(c.V);
  auto* tr = s.mutable_train();
  tr->set_batch_size(c.B);
  tr->set_lr(1e-3f);
  tr->set_beta1(0.9f);
  tr->set_beta2(0.95f);
  tr->set_eps(1e-8f);
  tr->set_weight_decay(0.1f);
  tr->set_grad_clip(1.0f);
  tr->set_seed(5);
  tr->set_precision(f.device == "cuda" ? "bf16" : "f32");
  s.set_device(f.device);
}

v1::JobSpec BuiltinSpec(const Config& c, const Flags& f) {
  v1::JobSpec s;
  auto* m = s.mutable_model();
  m->set_family("gpt");
  m->set_n_layer(static_cast<int>(c.L));
  m->set_n_head(static_cast<int>(c.H));
  m->set_n_kv_head(static_cast<int>(c.H));
  m->set_d_model(static_cast<int>(c.C));
  TrainSettings(s, c, f);
  return s;
}

v1::JobSpec OnnxSpec(const Config& c, const Flags& f, const std::string& path) {
  v1::JobSpec s;
  auto* m = s.mutable_model();
  m->set_family("onnx");
  m->set_onnx(path);
  m->mutable_loss()->set_target("shifted_inputs");
  m->mutable_loss()->set_ignore_index(-100);
  TrainSettings(s, c, f);
  return s;
}

// Runs gpt2_onnx.py; returns the exported graph's path.
absl::StatusOr<std::string> Export(const Config& c, const Flags& f, const std::string& dir) {
  const std::string cfg = dir + "/cfg.json", out = dir + "/graph.onnx";
  std::ofstream(cfg) << absl::StrCat("{\"n_layer\": ", c.L, ", \"n_head\": ", c.H, ", \"d_model\": ", c.C,
                                     ", \"seq_len\": ", c.T, ", \"vocab\": ", c.V, ", \"batch\": ", c.B, "}");
  const std::string cmd = absl::StrCat("/usr/bin/python3 bench/train/gpt2_onnx.py --cfg ", cfg, " --out ", out,
                                       " --opset ", f.opset, " > ", dir, "/export.log 2>&1");
  const int rc = std::system(cmd.c_str());
  if (rc != 0)
    return absl::FailedPreconditionError(absl::StrCat("'", cmd, "' failed (", rc, ", exit 3: no torch); see ", dir,
                                                      "/export.log, or pass --onnx"));
  return out;
}

// The exported graph with Loom's parameters written in as initializers
// (graph inputs named as nn.Module's state_dict become initializers).
absl::StatusOr<std::string> WithWeights(const std::string& graph_path, const std::map<std::string, Tensor>& loom,
                                        const std::string& out_path) {
  ::onnx::ModelProto model;
  {
    std::ifstream in(graph_path, std::ios::binary);
    if (!in || !model.ParseFromIstream(&in)) return absl::InvalidArgumentError("--onnx: cannot read " + graph_path);
  }
  auto* g = model.mutable_graph();
  std::vector<::onnx::ValueInfoProto> kept;
  for (const auto& in : g->input()) {
    const std::string name = in.name() == "wte.weight" ? "wte" : in.name() == "wpe.weight" ? "wpe" : in.name();
    auto it = loom.find(name);
    if (it == loom.end()) {
      kept.push_back(in);
      continue;
    }
    Shape want;
    for (const auto& d : in.type().tensor_type().shape().dim()) want.push_back(d.dim_value());
    Tensor t = it->second.To(DType::kF32).Contiguous();
    if (t.ndim() == 2 && name != "wte" && name != "wpe") t = t.Transpose(0, 1).Contiguous();  // nn.Linear: [out, in]
    if (t.shape() != want)
      return absl::InvalidArgumentError(absl::StrCat("--onnx: input '", in.name(), "' is ", ShapeToString(want),
                                                     ", Loom's '", name, "' is ", ShapeToString(it->second.shape())));
    ::onnx::TensorProto* init = g->add_initializer();
    init->set_name(in.name());
    init->set_data_type(::onnx::TensorProto::FLOAT);
    for (int64_t d : want) init->add_dims(d);
    init->set_raw_data(std::string(static_cast<const char*>(t.raw_data()), t.nbytes()));
  }
  if (g->initializer_size() != static_cast<int>(loom.size()))
    return absl::InvalidArgumentError(absl::StrCat("--onnx: ", g->initializer_size(), " of Loom's ", loom.size(),
                                                   " parameters found among the graph's inputs"));
  g->clear_input();
  for (const auto& in : kept) *g->add_input() = in;
  std::ofstream out(out_path, std::ios::binary);
  if (!out || !model.SerializeToOstream(&out)) return absl::InternalError("cannot write " + out_path);
  return out_path;
}

Tensor RandomTokens(int64_t b, int64_t t, int64_t vocab, uint64_t seed) {
  Tensor x = Tensor::MustEmpty({b, t}, DType::kI32);
  Philox rng(seed, 0);
  for (int64_t i = 0; i < x.numel(); ++i) x.data<int32_t>()[i] = static_cast<int32_t>(rng.Bits(i) % vocab);
  return x;
}

struct Side {
  std::string name;
  std::unique_ptr<parallel::Trainer> trainer;
  std::vector<double> losses, rounds;
  int64_t step = 0;
};

// `n` steps on the shared batch sequence; returns the seconds they took.
absl::StatusOr<double> Run(Side& s, int n, const Config& c) {
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < n; ++i, ++s.step) {
    Tensor x = RandomTokens(c.B, c.T, c.V, 100 + 2 * s.step), y = RandomTokens(c.B, c.T, c.V, 101 + 2 * s.step);
    LOOM_ASSIGN_OR_RETURN(float loss, s.trainer->Step(x, y));
    s.losses.push_back(loss);
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::string LoadAverage() {
  std::ifstream in("/proc/loadavg");
  std::string a, b, c;
  in >> a >> b >> c;
  return absl::StrCat(a, " ", b, " ", c);
}

absl::StatusOr<std::vector<Side>> MakeSides(const Config& c, const Flags& f, const std::string& dir) {
  std::vector<Side> sides(1);
  sides[0].name = "built-in gpt";
  LOOM_ASSIGN_OR_RETURN(sides[0].trainer, parallel::Trainer::Create(BuiltinSpec(c, f)));
  std::string graph = f.onnx;
  if (graph.empty()) {
    LOOM_ASSIGN_OR_RETURN(graph, Export(c, f, dir));
  }
  LOOM_ASSIGN_OR_RETURN(std::string model, WithWeights(graph, sides[0].trainer->Parameters(), dir + "/model.onnx"));
  for (bool recover : {true, false}) {
    if (!recover && !f.unrecovered) continue;
    Side s;
    s.name = recover ? "imported" : "imported, as converted";
    const v1::JobSpec spec = OnnxSpec(c, f, model);
    if (recover) {  // the check `loom submit` and `loom run` make (on cuda: the model lowers to CUDA)
      LOOM_RETURN_IF_ERROR(runtime::train::CheckOnnxJob(spec));
      std::printf("job check passed (model.onnx, device %s)\n", f.device.c_str());
    }
    LOOM_ASSIGN_OR_RETURN(parallel::TrainerModel imported, runtime::train::BuildModel(spec, recover));
    LOOM_ASSIGN_OR_RETURN(s.trainer, parallel::Trainer::Create(spec, std::move(imported)));
    sides.push_back(std::move(s));
  }
  return sides;
}

absl::Status Main(const Flags& f) {
  const Config c = ConfigOf(f);
  SetNumThreads(f.threads);
  const std::string dir = absl::StrCat("/tmp/loom_import_bench_", getpid());
  std::system(absl::StrCat("mkdir -p ", dir).c_str());
  std::printf("%s, %s, %s, %d threads; load average at start: %s\n", c.name.c_str(), f.device.c_str(),
              f.device == "cuda" ? "bf16" : "f32", f.threads, LoadAverage().c_str());
  LOOM_ASSIGN_OR_RETURN(std::vector<Side> sides, MakeSides(c, f, dir));
  for (Side& s : sides) LOOM_RETURN_IF_ERROR(Run(s, std::max(1, f.warmup), c).status());
  const double tokens = static_cast<double>(f.steps) * c.B * c.T;
  for (int r = 0; r < f.rounds; ++r) {
    for (size_t k = 0; k < sides.size(); ++k) {
      Side& s = sides[(k + r) % sides.size()];  // alternate who goes first
      LOOM_ASSIGN_OR_RETURN(double sec, Run(s, f.steps, c));
      s.rounds.push_back(tokens / sec);
    }
  }
  const double tol = f.device == "cuda" ? 1e-2 : 1e-4;
  bool agree = true;
  std::printf("%-24s %10s %10s   %s\n", "", "loss@1", "best tok/s", "tokens/s per round");
  for (Side& s : sides) {
    double worst = 0;
    for (size_t i = 0; i < s.losses.size(); ++i)
      worst = std::max(worst, std::fabs(s.losses[i] - sides[0].losses[i]) / std::fabs(sides[0].losses[i]));
    agree = agree && worst <= tol;
    std::string per;
    for (double t : s.rounds) absl::StrAppend(&per, absl::StrFormat("%.0f ", t));
    std::printf("%-24s %10.6f %10.0f   %s(losses vs built-in: max rel %.1e over %zu steps)\n", s.name.c_str(),
                s.losses[0], *std::max_element(s.rounds.begin(), s.rounds.end()), per.c_str(), worst, s.losses.size());
  }
  const double base = *std::max_element(sides[0].rounds.begin(), sides[0].rounds.end());
  for (size_t k = 1; k < sides.size(); ++k)
    std::printf("ratio %-22s %.3f of the built-in family's tokens/s\n", sides[k].name.c_str(),
                *std::max_element(sides[k].rounds.begin(), sides[k].rounds.end()) / base);
  std::printf("load average at end: %s; losses %s\n", LoadAverage().c_str(),
              agree ? "agree" : "DISAGREE: the figures do not count");
  std::system(absl::StrCat("rm -rf ", dir).c_str());
  return agree ? absl::OkStatus() : absl::InternalError("the sides' losses disagree");
}

}  // namespace
}  // namespace loom::bench::train

int main(int argc, char** argv) {
  loom::bench::train::Flags f;
  if (!loom::bench::train::ParseFlags(argc, argv, &f)) {
    std::fprintf(stderr,
                 "usage: import_benchmark [--device cpu|cuda] [--config small|gpt2] [--onnx GRAPH.onnx] [--steps N] "
                 "[--warmup N] [--rounds N] [--threads N] [--unrecovered] [--opset N]\n");
    return 2;
  }
  absl::Status s = loom::bench::train::Main(f);
  if (!s.ok()) {
    std::fprintf(stderr, "import_benchmark: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  return 0;
}
