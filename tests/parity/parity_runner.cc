#include "tests/parity/parity_runner.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/rng.h"
#include "base/status.h"
#include "compiler/cuda/cuda_executor.h"
#include "nlohmann/json.hpp"
#include "parallel/trainer.h"
#include "tests/parity/tensor_dir.h"

namespace loom::tests::parity {
namespace {

std::string FindScript(const ParityOptions& o) {
  if (!o.script.empty()) return o.script;
  for (const char* p : {"tests/parity/gpt_torch.py", "loom/tests/parity/gpt_torch.py"})
    if (access(p, R_OK) == 0) return p;
  return "tests/parity/gpt_torch.py";
}

v1::JobSpec SpecOf(const ParityCase& c, const ParityOptions& o) {
  v1::JobSpec s;
  s.set_device(o.device);
  auto* m = s.mutable_model();
  m->set_family(c.family);
  m->set_n_layer(c.n_layer);
  m->set_n_head(c.n_head);
  m->set_n_kv_head(c.n_kv_head);
  m->set_d_model(c.d_model);
  m->set_seq_len(c.seq_len);
  m->set_vocab(c.vocab);
  m->set_ffn_hidden(c.ffn);
  m->set_norm_eps(1e-5f);
  m->set_rope_theta(10000.f);
  m->set_dropout(c.dropout);
  auto* t = s.mutable_train();
  t->set_batch_size(c.batch);
  t->set_lr(2e-3f);
  t->set_beta1(0.9f);
  t->set_beta2(0.95f);
  t->set_eps(1e-8f);
  t->set_weight_decay(0.1f);
  t->set_grad_clip(1.0f);
  t->set_warmup_steps(5);
  t->set_seed(11);
  t->set_precision(o.precision);
  t->set_deterministic(o.deterministic);
  return s;
}

double Rel(double a, double b) { return std::fabs(a - b) / std::fabs(b); }

double WorstOf(const std::map<std::string, double>& m) {
  double w = 0;
  for (const auto& [k, v] : m) w = std::max(w, v);
  return w;
}

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Relative gap of a final parameter value against a reference. The key bias
// adds q.b to every score of a row; softmax ignores it, so its true gradient
// is 0 and every run only sees rounding noise, which Adam normalises into
// full-size steps: for c_attn.bias only the q and v parts are compared.
double FinalGap(const std::string& name, const Tensor& value, const Tensor& ref, int64_t d_model) {
  if (!EndsWith(name, "c_attn.bias")) return RelativeError(value, ref);
  double w = 0;
  for (int64_t part : {0, 2})
    w = std::max(w, RelativeError(value.Narrow(0, part * d_model, d_model), ref.Narrow(0, part * d_model, d_model)));
  return w;
}

// Random token batches x{s}, y{s} for s < steps (the same on every run).
std::map<std::string, Tensor> Batches(const ParityCase& c, int steps) {
  std::map<std::string, Tensor> batches;
  Philox rng(99, 0);
  for (int s = 0; s < steps; ++s)
    for (const char* xy : {"x", "y"}) {
      Tensor b = Tensor::MustEmpty({c.batch, c.seq_len}, DType::kI32);
      for (int64_t i = 0; i < b.numel(); ++i)
        b.data<int32_t>()[i] = static_cast<int32_t>(rng.Bits(s * 100000 + (xy[0] == 'y') * 50000 + i) % c.vocab);
      batches[absl::StrCat(xy, s)] = b;
    }
  return batches;
}

// gpt_torch.py on the inputs in `dir`, writing dir/out.
absl::StatusOr<std::map<std::string, Tensor>> RunTorch(const ParityOptions& o, const std::string& dir, int steps,
                                                       const std::string& device, const std::string& dtype,
                                                       const std::string& out, const std::string& flags = "") {
  std::string extra = o.precision == "bf16" && dtype == "f32" ? " --amp bf16" : "";
  if (!flags.empty()) extra += " " + flags;
  const std::string cmd = absl::StrCat(o.python, " ", FindScript(o), " --config ", dir, "/cfg.json --weights ", dir,
                                       "/w --batches ", dir, "/b --out ", dir, "/", out, " --steps ", steps,
                                        " --device ", device, " --dtype ", dtype, extra);
  if (int rc = std::system(cmd.c_str()); rc != 0)
    return absl::InternalError(absl::StrCat("the PyTorch reference failed (exit ", rc, "): ", cmd));
  return LoadTensorDir(absl::StrCat(dir, "/", out));
}

// Loom again from the same weights (dir/w) and batches, once per
// o.loom_seeds value S (loss seed S, eps and clip times S): each run's final
// gap to the f64 run goes to r.loom_noise_final_rel_f64.
absl::Status LoomNoiseRuns(const ParityCase& c, int steps, const ParityOptions& o, const v1::JobSpec& spec,
                           const parallel::TrainerOptions& topts, const std::string& dir,
                           std::map<std::string, Tensor>& batches, const std::map<std::string, Tensor>& f64,
                           ParityResult& r) {
  if (o.loom_seeds.empty()) return absl::OkStatus();
  LOOM_ASSIGN_OR_RETURN(auto init, LoadTensorDir(dir + "/w"));  // the same start for every run
  for (double S : o.loom_seeds) {
    v1::JobSpec scaled = spec;
    scaled.mutable_train()->set_eps(static_cast<float>(spec.train().eps() * S));
    scaled.mutable_train()->set_grad_clip(static_cast<float>(spec.train().grad_clip() * S));
    parallel::TrainerOptions so = topts;
    so.keep_gradients = false;
    so.loss_seed = S;
    so.init = init;
    LOOM_ASSIGN_OR_RETURN(auto trainer, parallel::Trainer::Create(scaled, so));
    for (int s = 0; s < steps; ++s)
      LOOM_RETURN_IF_ERROR(trainer->Step(batches[absl::StrCat("x", s)], batches[absl::StrCat("y", s)]).status());
    for (const auto& [name, p] : trainer->Parameters())
      r.loom_noise_final_rel_f64[name].push_back(FinalGap(name, p, f64.at("final." + name), c.d_model));
  }
  return absl::OkStatus();
}

}  // namespace

std::vector<std::string> StandardTorchNoiseRuns() {
  return {"--reverse-batch", "--loss-scale 3", "--loss-scale 0.37", "--reverse-batch --loss-scale 7.1"};
}

std::vector<double> StandardLoomSeeds() { return {3, 0.37, 7.1, 0.6}; }

double ParityResult::LoomFinalGap(const std::string& name) const {
  std::vector<double> v = {final_rel_f64.at(name)};
  if (auto it = loom_noise_final_rel_f64.find(name); it != loom_noise_final_rel_f64.end())
    v.insert(v.end(), it->second.begin(), it->second.end());
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

std::string ParityCase::Name() const {
  return absl::StrCat(family, " L", n_layer, " H", n_head, "/", n_kv_head, " C", d_model, " T", seq_len, " V",
                      vocab, " B", batch, dropout > 0 ? absl::StrCat(" dropout ", dropout) : "");
}

std::string ParityResult::Worst(const std::map<std::string, double>& m) {
  const std::pair<const std::string, double>* w = nullptr;
  for (const auto& kv : m)
    if (w == nullptr || kv.second > w->second) w = &kv;
  return w == nullptr ? "-" : absl::StrCat(w->first, " (", absl::StrFormat("%.2e", w->second), ")");
}

double ParityResult::WorstGrad() const { return WorstOf(grad_rel); }
double ParityResult::WorstFinal() const { return WorstOf(final_rel); }
double ParityResult::WorstLoss() const {
  double w = 0;
  for (double v : loss_rel) w = std::max(w, v);
  return w;
}

bool TorchAvailable(const ParityOptions& o) {
  std::string check = o.torch_device == "cuda" ? "import torch; assert torch.cuda.is_available()" : "import torch";
  return std::system(absl::StrCat(o.python, " -c '", check, "' >/dev/null 2>&1").c_str()) == 0;
}

absl::StatusOr<ParityResult> RunGptParity(const ParityCase& c, int steps, const ParityOptions& o) {
  if (steps < 1) return absl::InvalidArgumentError(absl::StrCat("steps must be >= 1, got ", steps));
  v1::JobSpec spec = SpecOf(c, o);
  parallel::TrainerOptions topts;
  topts.keep_gradients = true;
  if (!o.cuda_fusions || !o.cuda_epilogues)
    topts.make_cuda_executor = [o](const compiler::ir::Graph& g, const compiler::cuda::CudaOptions& base) {
      compiler::cuda::CudaOptions unfused = base;
      unfused.extra_fusions = o.cuda_fusions;
      unfused.gemm_epilogues = o.cuda_epilogues;
      return compiler::cuda::CudaExecutor::Create(g, unfused);
    };
  LOOM_ASSIGN_OR_RETURN(auto trainer, parallel::Trainer::Create(spec, topts));
  parallel::Trainer& t = *trainer;

  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/parity_", c.family, "_", getpid());
  LOOM_RETURN_IF_ERROR(SaveTensorDir(dir + "/w", t.Parameters()));
  std::map<std::string, Tensor> batches = Batches(c, steps);
  LOOM_RETURN_IF_ERROR(SaveTensorDir(dir + "/b", batches));
  nlohmann::json cfg = {{"family", c.family}, {"n_layer", c.n_layer}, {"n_head", c.n_head},
                        {"n_kv_head", c.n_kv_head}, {"d_model", c.d_model}, {"seq_len", c.seq_len},
                        {"vocab", c.vocab}, {"ffn_hidden", c.ffn}, {"norm_eps", 1e-5}, {"rope_theta", 10000.0},
                        {"lr", spec.train().lr()}, {"beta1", spec.train().beta1()}, {"beta2", spec.train().beta2()},
                        {"eps", spec.train().eps()}, {"weight_decay", spec.train().weight_decay()},
                        {"grad_clip", spec.train().grad_clip()}, {"warmup_steps", spec.train().warmup_steps()}, {"threads", o.threads},
                        {"dropout", c.dropout}, {"seed", spec.train().seed()}};
  std::ofstream(dir + "/cfg.json") << cfg.dump();
  LOOM_ASSIGN_OR_RETURN(auto ref, RunTorch(o, dir, steps, o.torch_device, "f32", "out"));

  ParityResult r;
  std::map<std::string, Tensor> ctl;
  if (!o.control_device.empty()) {
    LOOM_ASSIGN_OR_RETURN(ctl, RunTorch(o, dir, steps, o.control_device, "f32", "control"));
    r.control_loss_rel = 0;
    for (int s = 0; s < steps; ++s)
      r.control_loss_rel = std::max(r.control_loss_rel,
                                    Rel(ctl.at("losses").GetDouble(s), ref.at("losses").GetDouble(s)));
    for (const auto& p : t.param_info()) {
      r.control_grad_rel[p.name] = RelativeError(ctl.at("grad." + p.name), ref.at("grad." + p.name));
      r.control_final_rel[p.name] = FinalGap(p.name, ctl.at("final." + p.name), ref.at("final." + p.name), c.d_model);
    }
  }
  std::map<std::string, Tensor> f64;
  if (o.f64_reference) {
    LOOM_ASSIGN_OR_RETURN(f64, RunTorch(o, dir, steps, "cpu", "f64", "f64"));
  }
  std::vector<std::map<std::string, Tensor>> noise;
  if (o.f64_reference)
    for (size_t i = 0; i < o.noise_runs.size(); ++i) {
      LOOM_ASSIGN_OR_RETURN(auto run, RunTorch(o, dir, steps, o.torch_device, "f32", absl::StrCat("noise", i),
                                               o.noise_runs[i]));
      noise.push_back(std::move(run));
    }
  r.torch_loss0 = ref.at("loss").GetDouble(0);
  if (o.compare_logits) {
    LOOM_ASSIGN_OR_RETURN(auto fwd, t.Forward(batches["x0"], batches["y0"]));
    r.logits_rel = RelativeError(fwd.second, ref.at("logits"));
  }
  // Step 0 gives the loss at the initial weights and the gradients.
  LOOM_ASSIGN_OR_RETURN(float loss0, t.Step(batches["x0"], batches["y0"]));
  r.loss0 = loss0;
  r.loss0_rel = Rel(loss0, r.torch_loss0);
  LOOM_RETURN_IF_ERROR(SaveTensorDir(dir + "/loom_grad0", t.LastGradients()));
  for (const auto& [name, g] : t.LastGradients()) {
    r.grad_rel[name] = RelativeError(g, ref.at("grad." + name));
    if (!o.f64_reference) continue;
    r.grad_rel_f64[name] = RelativeError(g, f64.at("grad." + name));
    r.torch_grad_rel_f64[name] = RelativeError(ref.at("grad." + name), f64.at("grad." + name));
    for (const auto& run : noise)
      r.noise_grad_rel_f64[name] =
          std::max(r.noise_grad_rel_f64[name], RelativeError(run.at("grad." + name), f64.at("grad." + name)));
  }
  if (r.grad_rel.size() != t.param_info().size())
    return absl::InternalError(absl::StrCat("the trainer kept ", r.grad_rel.size(), " gradients for ",
                                            t.param_info().size(), " parameters"));
  const Tensor& losses = ref.at("losses");
  r.losses.push_back(loss0);
  for (int s = 1; s < steps; ++s) {
    LOOM_ASSIGN_OR_RETURN(float l, t.Step(batches[absl::StrCat("x", s)], batches[absl::StrCat("y", s)]));
    r.losses.push_back(l);
  }
  for (int s = 0; s < steps; ++s) {
    r.torch_losses.push_back(losses.GetDouble(s));
    r.loss_rel.push_back(Rel(r.losses[s], r.torch_losses[s]));
  }
  // Beside torch's outputs, for a look at a gap element by element.
  LOOM_RETURN_IF_ERROR(SaveTensorDir(dir + "/loom_final", t.Parameters()));
  for (const auto& [name, p] : t.Parameters()) {
    const std::string key = "final." + name;
    r.final_rel[name] = FinalGap(name, p, ref.at(key), c.d_model);
    if (!o.f64_reference) continue;
    const Tensor& ref64 = f64.at(key);  // RelativeError reads both sides as doubles
    r.final_rel_f64[name] = FinalGap(name, p, ref64, c.d_model);
    r.torch_final_rel_f64[name] = FinalGap(name, ref.at(key), ref64, c.d_model);
    if (!ctl.empty()) r.control_final_rel_f64[name] = FinalGap(name, ctl.at(key), ref64, c.d_model);
    for (const auto& run : noise)
      r.noise_final_rel_f64[name] = std::max(r.noise_final_rel_f64[name], FinalGap(name, run.at(key), ref64, c.d_model));
  }
  if (o.f64_reference) LOOM_RETURN_IF_ERROR(LoomNoiseRuns(c, steps, o, spec, topts, dir, batches, f64, r));
  return r;
}

NoiseVerdict FinalWithinNoise(const ParityResult& r, double factor, double floor) {
  NoiseVerdict v;
  for (const auto& entry : r.final_rel_f64) {
    const std::string& name = entry.first;
    const double loom_gap = r.LoomFinalGap(name);
    double torch_gap = r.torch_final_rel_f64.at(name);
    auto ctl = r.control_final_rel_f64.find(name);
    if (ctl != r.control_final_rel_f64.end()) torch_gap = std::max(torch_gap, ctl->second);
    auto nz = r.noise_final_rel_f64.find(name);
    if (nz != r.noise_final_rel_f64.end()) torch_gap = std::max(torch_gap, nz->second);
    const double ratio = torch_gap > 0 ? loom_gap / torch_gap : (loom_gap > 0 ? INFINITY : 0);
    if (v.worst.empty() || ratio > v.worst_ratio) {
      v.worst_ratio = ratio;
      v.worst = absl::StrCat(name, " (", absl::StrFormat("%.2f", ratio), ")");
    }
    if (loom_gap <= factor * torch_gap || loom_gap < floor) continue;
    v.ok = false;
    v.failures.push_back(absl::StrFormat("%s: loom %.2e > %g x torch %.2e (floor %.0e)", name, loom_gap, factor,
                                         torch_gap, floor));
  }
  if (r.final_rel_f64.empty()) {
    v.ok = false;
    v.failures.push_back("no f64 reference (ParityOptions::f64_reference is off)");
  }
  return v;
}

}  // namespace loom::tests::parity
