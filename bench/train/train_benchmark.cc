// Training throughput of Loom against PyTorch eager, side by side in one run.
//
// Config: GPT L=4 H=4 C=256 T=256 B=8, byte vocab, f32, random tokens,
// AdamW with clipping, the same thread count for both. Loom's initial weights and
// first batch are handed to PyTorch (tests/parity/gpt_torch.py); the tokens/s
// figures count only if the two first-step losses agree.
//
//   bazel build //bench/train:train_benchmark
//   bazel-bin/bench/train/train_benchmark [--steps N] [--threads N]
// Each side runs in its own process, so each peak RSS is its own.
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/rng.h"
#include "base/thread_pool.h"
#include "nlohmann/json.hpp"
#include "parallel/trainer.h"
#include "tests/parity/tensor_dir.h"

namespace {

using loom::Tensor;

Tensor RandomTokens(int64_t b, int64_t t, int64_t vocab, uint64_t seed) {
  Tensor x = Tensor::MustEmpty({b, t}, loom::DType::kI32);
  loom::Philox rng(seed, 0);
  for (int64_t i = 0; i < x.numel(); ++i) x.data<int32_t>()[i] = static_cast<int32_t>(rng.Bits(i) % vocab);
  return x;
}

double PeakRssMiB() {
  rusage u;
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss / 1024.0;
}

}  // namespace

int main(int argc, char** argv) {
  int steps = 10, threads = 2, warmup = 2;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string f = argv[i];
    int* dst = f == "--steps" ? &steps : f == "--threads" ? &threads : f == "--warmup" ? &warmup : nullptr;
    if (dst == nullptr || !absl::SimpleAtoi(argv[i + 1], dst)) {
      std::fprintf(stderr, "usage: train_benchmark [--steps N] [--threads N] [--warmup N]\n");
      return 2;
    }
  }
  loom::SetNumThreads(threads);
  loom::v1::JobSpec spec;
  auto* m = spec.mutable_model();
  m->set_family("gpt");
  m->set_n_layer(4);
  m->set_n_head(4);
  m->set_n_kv_head(4);
  m->set_d_model(256);
  m->set_seq_len(256);
  m->set_vocab(256);
  auto* tr = spec.mutable_train();
  tr->set_batch_size(8);
  tr->set_lr(1e-3f);
  tr->set_beta1(0.9f);
  tr->set_beta2(0.95f);
  tr->set_eps(1e-8f);
  tr->set_weight_decay(0.1f);
  tr->set_grad_clip(1.0f);
  tr->set_seed(5);
  const int64_t B = 8, T = 256, V = 256;

  // Hand PyTorch the same weights and first batch.
  std::string dir = absl::StrCat("/tmp/loom_train_bench_", getpid());
  auto trainer = loom::parallel::Trainer::Create(spec);
  if (!trainer.ok()) {
    std::fprintf(stderr, "%s\n", std::string(trainer.status().message()).c_str());
    return 1;
  }
  Tensor x0 = RandomTokens(B, T, V, 1), y0 = RandomTokens(B, T, V, 2);
  (void)loom::tests::parity::SaveTensorDir(dir + "/w", (*trainer)->Parameters());
  (void)loom::tests::parity::SaveTensorDir(dir + "/b", {{"x0", x0}, {"y0", y0}});
  nlohmann::json cfg = {{"family", "gpt"}, {"n_layer", 4}, {"n_head", 4}, {"d_model", 256}, {"seq_len", 256},
                        {"vocab", 256}, {"lr", 1e-3}, {"threads", threads}};
  std::ofstream(dir + "/cfg.json") << cfg.dump();

  // PyTorch in a child process (its own RSS).
  std::string cmd = absl::StrCat("/usr/bin/python3 bench/train/torch_train.py tests/parity ", dir, "/cfg.json ", dir,
                                 "/w ", dir, "/b ", steps, " ", warmup);
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  char buf[512];
  while (p && fgets(buf, sizeof(buf), p)) out += buf;
  int rc = p ? pclose(p) : -1;
  if (rc != 0) {
    std::fprintf(stderr, "torch side failed (%d): %s\n", rc, cmd.c_str());
    return 1;
  }
  nlohmann::json torch = nlohmann::json::parse(out.substr(out.rfind('{')));

  // Loom.
  double loss0 = 0;
  std::chrono::steady_clock::time_point t0;
  Tensor x = x0, y = y0;
  for (int s = 0; s < warmup + steps; ++s) {
    if (s == warmup) t0 = std::chrono::steady_clock::now();
    auto l = (*trainer)->Step(x, y);
    if (!l.ok()) {
      std::fprintf(stderr, "%s\n", std::string(l.status().message()).c_str());
      return 1;
    }
    if (s == 0) loss0 = *l;
    x = RandomTokens(B, T, V, 100 + 2 * s);
    y = RandomTokens(B, T, V, 101 + 2 * s);
  }
  double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  double loom_tps = steps * B * T / dt, loom_rss = PeakRssMiB();
  double torch_tps = torch["tokens_per_s"], torch_rss = torch["peak_rss_mib"], torch_loss0 = torch["loss0"];
  bool agree = std::fabs(loss0 - torch_loss0) <= 1e-4 * std::fabs(torch_loss0);
  std::printf("GPT L4 H4 C256 T256 B8, f32, %d threads, %d timed steps\n", threads, steps);
  std::printf("%-8s %12s %14s %14s\n", "", "loss@1", "tokens/s", "peak RSS MiB");
  std::printf("%-8s %12.6f %14.0f %14.0f\n", "loom", loss0, loom_tps, loom_rss);
  std::printf("%-8s %12.6f %14.0f %14.0f\n", "pytorch", torch_loss0, torch_tps, torch_rss);
  std::printf("ratio    tokens/s %.2fx, peak RSS %.2fx  (first-step losses %s)\n", loom_tps / torch_tps,
              loom_rss / torch_rss, agree ? "agree" : "DISAGREE: figures do not count");
  std::system(absl::StrCat("rm -rf ", dir).c_str());
  return agree ? 0 : 1;
}
