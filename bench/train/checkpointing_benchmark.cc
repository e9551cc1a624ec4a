// Activation checkpointing on the CPU: memory and step time of
// train.activation_checkpointing none, blocks and selective in one run, and
// `loom plan`'s prediction of the memory against what the trainer compiles.
//
// Config: GPT L12 H4 C256 T256 B8 (vocab 256), f32, AdamW with clipping,
// random tokens, one process (the CPU acceptance configuration).
//
//   bazel build //bench/train:checkpointing_benchmark
//   bazel-bin/bench/train/checkpointing_benchmark [--rounds 5] [--steps 2] [--threads 2]
//
// Memory, per mode (each defined apart):
//   arena      the training program's arena (Trainer::ArenaBytes: the one
//              preplanned allocation the executor runs the step in, every
//              activation, transient and gradient of the step);
//   plan       `loom plan`'s prediction of that arena for one rank
//              (runtime/plan PlanJob: gradients + activations; with
//              blocks / selective from the compiled program, without
//              checkpointing from the fitted coefficients), and its total
//              per rank (state + arena + workspace where it models one);
//   allocated  the high-water mark of a CountingAllocator around
//              Trainer::Create and the first step (state, arena, the
//              evaluation program, kernels' scratch: all Loom tensors);
//   RSS        the peak resident set (getrusage ru_maxrss) of a child
//              process that creates the trainer and runs 3 steps, so each
//              mode's RSS is its own (binary, libraries and heap included).
// Step time: the three trainers live in this process; each round runs
// `steps` steps of every mode, the order rotating from round to round
// (interleaved A/B), and the figure is the median over rounds of each
// round's mean step time. Every mode sees the same batches in the same
// order, so the losses must be bitwise equal (checked: the run fails if not).
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/allocator.h"
#include "base/rng.h"
#include "base/thread_pool.h"
#include "parallel/trainer.h"
#include "runtime/jobspec/jobspec.h"
#include "runtime/plan/planner_command.h"

namespace {

using loom::Tensor;

constexpr int64_t kB = 8, kT = 256, kV = 256;
const char* const kModes[] = {"none", "blocks", "selective"};

Tensor Tokens(uint64_t seed) {
  Tensor x = Tensor::MustEmpty({kB, kT}, loom::DType::kI32);
  loom::Philox rng(seed, 0);
  for (int64_t i = 0; i < x.numel(); ++i) x.data<int32_t>()[i] = static_cast<int32_t>(rng.Bits(i) % kV);
  return x;
}

absl::StatusOr<loom::v1::JobSpec> Spec(const std::string& mode) {
  auto spec = loom::runtime::jobspec::ParseJobSpecYaml(absl::StrCat(
      "model: {family: gpt, n_layer: 12, n_head: 4, d_model: 256, seq_len: 256, vocab: 256}\n"
      "train: {batch_size: 8, lr: 0.001, grad_clip: 1.0, weight_decay: 0.1, seed: 5, activation_checkpointing: ",
      mode, "}\n"));
  if (spec.ok()) loom::runtime::jobspec::ApplyDefaults(*spec);
  return spec;
}

double MiB(double bytes) { return bytes / (1024.0 * 1024.0); }

int Fail(const absl::Status& s) {
  std::fprintf(stderr, "checkpointing_benchmark: %s\n", std::string(s.message()).c_str());
  return 1;
}

// Child mode: one trainer, 3 steps, its peak RSS on stdout.
int RssChild(const std::string& mode) {
  auto spec = Spec(mode);
  if (!spec.ok()) return Fail(spec.status());
  auto t = loom::parallel::Trainer::Create(*spec);
  if (!t.ok()) return Fail(t.status());
  for (int s = 0; s < 3; ++s)
    if (auto l = (*t)->Step(Tokens(10 + 2 * s), Tokens(11 + 2 * s)); !l.ok()) return Fail(l.status());
  rusage u;
  getrusage(RUSAGE_SELF, &u);
  std::printf("rss_kib %ld\n", u.ru_maxrss);
  return 0;
}

double ChildRssMiB(const char* self, const std::string& mode, int threads) {
  const std::string cmd = absl::StrCat(self, " --rss ", mode, " --threads ", threads);
  FILE* p = popen(cmd.c_str(), "r");
  long kib = -1;
  if (p != nullptr && std::fscanf(p, "rss_kib %ld", &kib) != 1) kib = -1;
  if (p != nullptr) pclose(p);
  return kib / 1024.0;
}

struct Mode {
  std::string name;
  std::unique_ptr<loom::CountingAllocator> counting;  // outlives the trainer's tensors
  std::unique_ptr<loom::parallel::Trainer> trainer;
  int64_t arena = 0, allocated = 0, plan_arena = 0, plan_total = 0;
  double rss_mib = 0;
  std::vector<double> round_seconds;
  std::vector<float> losses;
};

}  // namespace

int main(int argc, char** argv) {
  int rounds = 5, steps = 2, threads = 2;
  std::string rss_mode;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string f = argv[i];
    if (f == "--rss") {
      rss_mode = argv[i + 1];
      continue;
    }
    int* dst = f == "--rounds" ? &rounds : f == "--steps" ? &steps : f == "--threads" ? &threads : nullptr;
    if (dst == nullptr || !absl::SimpleAtoi(argv[i + 1], dst) || *dst < 1) {
      std::fprintf(stderr, "usage: checkpointing_benchmark [--rounds N] [--steps N] [--threads N]\n");
      return 2;
    }
  }
  loom::SetNumThreads(threads);
  if (!rss_mode.empty()) return RssChild(rss_mode);

  char self[4096] = {0};  // this binary, for the RSS children (popen runs a shell)
  if (readlink("/proc/self/exe", self, sizeof(self) - 1) <= 0) return Fail(absl::InternalError("readlink /proc/self/exe"));
  std::vector<Mode> modes;
  for (const char* name : kModes) {
    Mode m;
    m.name = name;
    m.rss_mib = ChildRssMiB(self, name, threads);
    if (m.rss_mib <= 0) return Fail(absl::InternalError(absl::StrCat("the RSS child for ", name, " failed")));
    auto spec = Spec(name);
    if (!spec.ok()) return Fail(spec.status());
    loom::parallel::Hardware hw = loom::runtime::plan::DefaultHardware(*spec);
    auto plan = loom::runtime::plan::PlanJob(*spec, hw);
    if (!plan.ok()) return Fail(plan.status());
    const loom::parallel::MemoryEstimate& est = plan->ranked.at(0).memory;
    m.plan_arena = est.gradients + est.activations;
    m.plan_total = est.total();
    m.counting = std::make_unique<loom::CountingAllocator>(loom::CpuAllocator::Get());
    {
      loom::ScopedDefaultAllocator use(m.counting.get());
      auto t = loom::parallel::Trainer::Create(*spec);
      if (!t.ok()) return Fail(t.status());
      m.trainer = std::move(*t);
      auto l = m.trainer->Step(Tokens(10), Tokens(11));  // the first step, untimed
      if (!l.ok()) return Fail(l.status());
      m.losses.push_back(*l);
    }
    m.arena = m.trainer->ArenaBytes();
    m.allocated = m.counting->stats().peak_bytes;
    modes.push_back(std::move(m));
  }
  for (int r = 0; r < rounds; ++r) {
    for (size_t k = 0; k < modes.size(); ++k) {
      Mode& m = modes[(k + r) % modes.size()];
      const auto t0 = std::chrono::steady_clock::now();
      for (int s = 0; s < steps; ++s) {
        const int64_t n = m.trainer->step();  // batches by step: every mode sees the same ones
        auto l = m.trainer->Step(Tokens(10 + 2 * n), Tokens(11 + 2 * n));
        if (!l.ok()) return Fail(l.status());
        m.losses.push_back(*l);
      }
      m.round_seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() /
                                steps);
    }
  }
  bool same = true;
  for (const Mode& m : modes) same = same && m.losses == modes[0].losses;
  std::printf("GPT L12 H4 C256 T256 B8 V256, f32, %d threads; %d rounds x %d steps per mode, interleaved\n",
              threads, rounds, steps);
  std::printf("%-10s %10s %10s %8s %11s %10s %9s %11s %9s\n", "mode", "arena MiB", "plan MiB", "plan err",
              "plan total", "alloc MiB", "RSS MiB", "step s(med)", "vs none");
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
  };
  const double base = median(modes[0].round_seconds);
  for (const Mode& m : modes) {
    const double med = median(m.round_seconds);
    std::printf("%-10s %10.1f %10.1f %+7.1f%% %11.1f %10.1f %9.0f %11.3f %+8.1f%%\n", m.name.c_str(), MiB(m.arena),
                MiB(m.plan_arena), 100.0 * (m.plan_arena - m.arena) / m.arena, MiB(m.plan_total), MiB(m.allocated),
                m.rss_mib, med, 100.0 * (med / base - 1));
    std::printf("  rounds:");
    for (double s : m.round_seconds) std::printf(" %.3f", s);
    std::printf("\n");
  }
  for (size_t k = 1; k < modes.size(); ++k)
    std::printf("%s vs none: arena %+.1f%%, allocated %+.1f%%, RSS %+.1f%%, median step time %+.1f%%\n",
                modes[k].name.c_str(), 100.0 * (double(modes[k].arena) / modes[0].arena - 1),
                100.0 * (double(modes[k].allocated) / modes[0].allocated - 1),
                100.0 * (modes[k].rss_mib / modes[0].rss_mib - 1),
                100.0 * (median(modes[k].round_seconds) / base - 1));
  std::printf("losses over %zu steps: %s\n", modes[0].losses.size(), same ? "bitwise equal in every mode" : "DIFFER");
  return same ? 0 : 1;
}
