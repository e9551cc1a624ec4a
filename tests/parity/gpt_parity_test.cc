// PyTorch parity of the compiled training step, on identical weights and
// batches: loss, logits and every parameter's gradient at step 0, then the loss
// curve of 50 AdamW steps (with warmup, weight decay and clipping).
// The reference is tests/parity/gpt_torch.py run by Debian's python3-torch.
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "base/rng.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "runtime/train/trainer.h"
#include "tests/parity/tensor_dir.h"

namespace loom {
namespace {

constexpr const char* kPython = "/usr/bin/python3";

bool TorchAvailable() {
  return std::system(absl::StrCat(kPython, " -c 'import torch' 2>/dev/null").c_str()) == 0;
}

std::string ScriptPath() {
  for (const char* p : {"tests/parity/gpt_torch.py", "loom/tests/parity/gpt_torch.py"})
    if (access(p, R_OK) == 0) return p;
  return "tests/parity/gpt_torch.py";
}

struct Case {
  std::string family;
  int n_layer, n_head, n_kv_head, d_model, seq_len, vocab, ffn, batch;
};

v1::JobSpec SpecOf(const Case& c) {
  v1::JobSpec s;
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
  return s;
}

void RunParity(const Case& c, int steps) {
  if (!TorchAvailable()) GTEST_SKIP() << kPython << " cannot import torch";
  v1::JobSpec spec = SpecOf(c);
  train::TrainerOptions opts;
  opts.keep_gradients = true;
  auto trainer = train::Trainer::Create(spec, opts);
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  train::Trainer& t = **trainer;

  const std::string dir = absl::StrCat(::testing::TempDir(), "/parity_", c.family, "_", getpid());
  ASSERT_TRUE(parity::SaveTensorDir(dir + "/w", t.Parameters()).ok());
  std::map<std::string, Tensor> batches;
  Philox rng(99, 0);
  for (int s = 0; s < steps; ++s)
    for (const char* xy : {"x", "y"}) {
      Tensor b = Tensor::MustEmpty({c.batch, c.seq_len}, DType::kI32);
      for (int64_t i = 0; i < b.numel(); ++i)
        b.data<int32_t>()[i] = static_cast<int32_t>(rng.Bits(s * 100000 + (xy[0] == 'y') * 50000 + i) % c.vocab);
      batches[absl::StrCat(xy, s)] = b;
    }
  ASSERT_TRUE(parity::SaveTensorDir(dir + "/b", batches).ok());
  nlohmann::json cfg = {{"family", c.family}, {"n_layer", c.n_layer}, {"n_head", c.n_head},
                        {"n_kv_head", c.n_kv_head}, {"d_model", c.d_model}, {"seq_len", c.seq_len},
                        {"vocab", c.vocab}, {"ffn_hidden", c.ffn}, {"norm_eps", 1e-5}, {"rope_theta", 10000.0},
                        {"lr", spec.train().lr()}, {"beta1", 0.9}, {"beta2", spec.train().beta2()},
                        {"eps", 1e-8}, {"weight_decay", spec.train().weight_decay()},
                        {"grad_clip", 1.0}, {"warmup_steps", 5}, {"threads", 2}};
  std::ofstream(dir + "/cfg.json") << cfg.dump();
  std::string cmd = absl::StrCat(kPython, " ", ScriptPath(), " --config ", dir, "/cfg.json --weights ", dir,
                                 "/w --batches ", dir, "/b --out ", dir, "/out --steps ", steps);
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  auto ref = parity::LoadTensorDir(dir + "/out");
  ASSERT_TRUE(ref.ok()) << ref.status();

  // Step 0: loss, logits and gradients.
  auto fwd = t.Forward(batches["x0"], batches["y0"]);
  ASSERT_TRUE(fwd.ok()) << fwd.status();
  double ref_loss = ref->at("loss").GetDouble(0);
  EXPECT_LT(std::fabs(fwd->first - ref_loss) / std::fabs(ref_loss), 1e-5) << fwd->first << " vs " << ref_loss;
  Tensor ref_logits = ref->at("logits");
  EXPECT_LT(RelativeError(fwd->second, ref_logits), 1e-5);
  auto loss0 = t.Step(batches["x0"], batches["y0"]);
  ASSERT_TRUE(loss0.ok()) << loss0.status();
  auto grads = t.LastGradients();
  ASSERT_EQ(grads.size(), t.param_info().size());
  for (const auto& [name, g] : grads) {
    double err = RelativeError(g, ref->at("grad." + name));
    EXPECT_LT(err, 1e-4) << "gradient of " << name;
  }
  // The loss curve.
  Tensor losses = ref->at("losses");
  double worst = std::fabs(*loss0 - losses.GetDouble(0)) / std::fabs(losses.GetDouble(0));
  for (int s = 1; s < steps; ++s) {
    auto l = t.Step(batches[absl::StrCat("x", s)], batches[absl::StrCat("y", s)]);
    ASSERT_TRUE(l.ok()) << l.status();
    double r = losses.GetDouble(s);
    worst = std::max(worst, std::fabs(*l - r) / std::fabs(r));
    EXPECT_LT(std::fabs(*l - r) / std::fabs(r), 1e-4) << "step " << s << ": " << *l << " vs " << r;
  }
  std::printf("%s: loss %.6f (torch %.6f), worst relative loss gap over %d steps %.2e\n", c.family.c_str(),
              fwd->first, ref_loss, steps, worst);
  for (const auto& [name, p] : t.Parameters()) {
    const Tensor& r = ref->at("final." + name);
    if (name.size() >= 11 && name.substr(name.size() - 11) == "c_attn.bias") {
      // The key bias adds q.b to every score of a row; softmax ignores it, so
      // its true gradient is 0 and both sides only see rounding noise, which
      // Adam normalises into full-size steps. Compare the q and v parts only.
      const int64_t C = c.d_model;
      for (int64_t part : {0, 2})
        EXPECT_LT(RelativeError(p.Narrow(0, part * C, C), r.Narrow(0, part * C, C)), 1e-4)
            << "final value of " << name << " part " << part;
      continue;
    }
    EXPECT_LT(RelativeError(p, r), 1e-4) << "final value of " << name;
  }
}

TEST(GptParity, OddSizesGpt) { RunParity({"gpt", 2, 3, 3, 96, 37, 256, 384, 2}, 50); }
TEST(GptParity, OddSizesLlamaGqa) { RunParity({"llama", 2, 6, 2, 96, 37, 256, 160, 2}, 50); }
TEST(GptParity, SmallVocabTinyGpt) { RunParity({"gpt", 1, 2, 2, 16, 5, 11, 64, 3}, 20); }

}  // namespace
}  // namespace loom
