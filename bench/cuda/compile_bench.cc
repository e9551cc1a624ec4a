// Compile time of the CUDA training step: where the time goes from a job's
// model to a ready CudaExecutor, cold (an empty kernel cache) and warm.
//
//   compile_bench [--preset=llama-1b | shape flags] [--f32] [--attention=dispatch|flash]
//                 [--no-fusions] [--deterministic] [--activation-checkpointing=none|blocks]
//                 [--memory=standard|lean] [--offload-optimizer-state] [--residual=bf16|f32] [--grads=f32|bf16]
//                 [--kernel-cache=DIR] [--compile-threads=N] [--warm=N] [--no-cold] [--dry]
//
// Flags: compile_bench_flags.h. Each run builds the model's forward graph
// (compiler/models), compiles the training step as train_bench does (autodiff,
// AdamW with clipping, every optimization pass timed, compiler/compile.h),
// then CudaExecutor::Create with CudaOptions::stats: PlanCuda, device
// buffers, the build (a closure per launch, kernel sources generated) and the
// kernels' CUBINs (disk cache or NVRTC: kernels, distinct sources, cache
// hits, NVRTC compiles). Without a GPU the executor's build runs dry (fake
// addresses) and Create ends with the device error, which is expected here.
// With a GPU it then uploads every parameter (zeros; the optimizer state is
// zero-filled on the device, as the Trainer does), runs the first step
// (eager: cuBLASLt heuristics and autotuning, the SDPA dispatcher's choices,
// module loads) and the second (CUDA graph capture and replay), each
// synchronised. The first run uses the empty cache folder (cold); the warm
// runs reuse it. Prints one table (seconds; a column per run) and one RESULT
// line per run. Exit codes: 0 done, 1 a failure, 2 a bad flag.
#include <dirent.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status.h"
#include "bench/cuda/compile_bench_flags.h"
#include "compiler/compile.h"
#include "compiler/cuda/cuda_executor.h"
#include "compiler/models/models.h"
#include "kernels/cuda/tuning_cache.h"

namespace loom::bench::cuda {
namespace {

using Clock = std::chrono::steady_clock;
double Since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// One run: (row name, value) in table order.
struct Run {
  std::string name;
  struct Row {
    std::string name;
    double value;
    bool count;  // a count, not seconds
  };
  std::vector<Row> rows;
  double total = 0;  // seconds from the model to a ready executor
  bool dry = true;   // no GPU: the executor's build ran without a device
  void Add(const std::string& row, double v) { rows.push_back({row, v, false}); }
  void Count(const std::string& row, int n) { rows.push_back({row, static_cast<double>(n), true}); }
};

absl::StatusOr<compiler::Compilation> CompileStep(const TrainFlags& f, const compiler::ir::Graph& forward,
                                                  const std::vector<compiler::models::ParamInfo>& params) {
  std::map<std::string, bool> decays;
  for (const auto& p : params) decays[p.name] = p.weight_decay;
  compiler::CompileOptions co;
  co.lower = false;  // the CUDA executor lowers the fused graph itself
  compiler::AdamWOptions adam;
  adam.beta1 = 0.9, adam.beta2 = 0.95, adam.eps = 1e-8, adam.weight_decay = 0.1, adam.max_norm = 1.0;
  adam.decays = [decays](const std::string& n) {
    auto it = decays.find(n);
    return it != decays.end() && it->second;
  };
  co.adamw = adam;
  if (f.checkpoint) co.checkpoint_blocks = compiler::models::BlockOfParameter;
  return compiler::Compile(forward, co);
}

// The first and second steps on a GPU, after uploading every input.
absl::Status RunSteps(const compiler::ir::Graph& g, compiler::cuda::CudaExecutor& exec, Run* run) {
  auto t0 = Clock::now();
  std::vector<std::pair<int, Tensor>> per_step;
  for (size_t k = 0; k < g.inputs().size(); ++k) {
    const auto& in = g.inputs()[k];
    if (in.kind == compiler::ir::InputKind::kState) {  // fresh optimizer state, filled there as the Trainer does
      LOOM_RETURN_IF_ERROR(exec.ZeroInput(static_cast<int>(k)));
      continue;
    }
    const auto& m = g.meta(in.value);
    Tensor z = Tensor::Zeros(m.shape, m.dtype);
    if (in.name == "x" || in.name == "y" || in.name == "lr" || in.name == "step") {
      if (in.name == "step" && m.dtype == DType::kF32) z.data<float>()[0] = 1;
      per_step.push_back({static_cast<int>(k), z});
    } else {
      LOOM_RETURN_IF_ERROR(exec.SetInput(static_cast<int>(k), z));
    }
  }
  LOOM_RETURN_IF_ERROR(exec.Synchronize());
  run->Add("uploads (parameters; state zero-filled)", Since(t0));
  for (const char* row : {"step 1 (eager: GEMM/SDPA choices, loads)", "step 2 (graph capture + replay)"}) {
    t0 = Clock::now();
    LOOM_RETURN_IF_ERROR(exec.Step(per_step));
    LOOM_RETURN_IF_ERROR(exec.Synchronize());
    run->Add(row, Since(t0));
  }
  return absl::OkStatus();
}

absl::StatusOr<Run> OneRun(const CompileBenchFlags& f, const std::string& cache, const std::string& name) {
  Run run;
  run.name = name;
  const auto start = Clock::now();
  auto t0 = start;
  LOOM_ASSIGN_OR_RETURN(auto params, compiler::models::Parameters(f.model.spec));
  compiler::models::BuildOptions bo;
  bo.batch = f.model.batch;
  LOOM_ASSIGN_OR_RETURN(compiler::ir::Graph forward, compiler::models::BuildForward(f.model.spec, bo));
  run.Add("model graph (compiler/models)", Since(t0));
  t0 = Clock::now();
  LOOM_ASSIGN_OR_RETURN(compiler::Compilation c, CompileStep(f.model, forward, params));
  const double compile_s = Since(t0);
  double listed = c.autodiff_seconds + c.optimizer_seconds;
  run.Add("autodiff", c.autodiff_seconds);
  run.Add("optimizer (AdamW)", c.optimizer_seconds);
  for (const auto& r : c.reports) {
    run.Add(absl::StrCat("pass ", r.name), r.seconds);
    listed += r.seconds;
  }
  run.Add("compile: rest (verify, stage copies)", compile_s - listed);
  const compiler::ir::Graph& g = c.stages.at("fused");
  compiler::cuda::CudaOptions o;
  o.bf16 = !f.model.f32;
  o.attention = f.model.flash ? compiler::cuda::AttnRoute::kFlash : compiler::cuda::AttnRoute::kDispatch;
  o.extra_fusions = f.model.fusions;
  o.deterministic = f.model.deterministic;
  o.f32_residual = f.model.f32_residual;
  o.bf16_grads = f.model.bf16_grads;
  o.sorted_embedding_backward = f.model.sorted_embedding;
  if (f.model.lean) o.memory = compiler::cuda::CudaOptions::Memory::kLean;
  o.offload_optimizer_state = f.model.offload;
  o.kernel_cache = cache;
  o.compile_threads = f.compile_threads;
  compiler::cuda::CudaBuildStats st;
  o.stats = &st;
  t0 = Clock::now();
  absl::StatusOr<std::unique_ptr<compiler::cuda::CudaExecutor>> exec =
      absl::UnavailableError("compile_bench --dry: built without a device");
  if (f.dry) {
    absl::StatusOr<compiler::cuda::CudaBuildStats> d = compiler::cuda::DryBuild(g, o);
    if (!d.ok()) return d.status();
  } else {
    exec = compiler::cuda::CudaExecutor::Create(g, o);
  }
  const double create_s = Since(t0);
  if (!exec.ok() && !(st.dry && st.launches > 0 && exec.status().code() == absl::StatusCode::kUnavailable))
    return exec.status();
  run.Add("executor: PlanCuda", st.plan_seconds);
  run.Add("executor: device init", st.device_seconds);
  run.Add("executor: buffers", st.buffers_seconds);
  run.Add("executor: scratch sizes (cuDNN plans)", st.scratch_seconds);
  run.Add("executor: build (closures, sources)", st.build_seconds);
  run.Add("executor: kernels (cache / NVRTC)", st.kernels_seconds);
  run.Add("executor: rest", create_s - st.plan_seconds - st.device_seconds - st.buffers_seconds -
                                        st.scratch_seconds - st.build_seconds - st.kernels_seconds);
  run.total = Since(start);
  run.dry = st.dry;
  run.Add("TOTAL to a ready executor", run.total);
  run.Count("launches", st.launches);
  run.Count("generated kernels", st.kernels);
  run.Count("distinct sources", st.distinct_sources);
  run.Count("cache hits", st.cache_hits);
  run.Count("NVRTC compiles", st.nvrtc_compiles);
  run.Count("compile threads", st.compile_threads);
  run.Add("NVRTC seconds (sum over threads)", st.nvrtc_seconds);
  run.Count("timed choices on disk (choices.tsv)", static_cast<int>(kernels::cuda::TuningCache::Global().size()));
  const compiler::cuda::CudaBuildStats::Memory& mem = st.memory;
  for (auto [row, bytes] : std::vector<std::pair<const char*, int64_t>>{
           {"device GiB: parameters", mem.params},   {"device GiB: bf16 shadows", mem.shadows},
           {"device GiB: optimizer state", mem.states}, {"device GiB: other inputs", mem.other_inputs},
           {"device GiB: arena (activations, grads)", mem.arena}, {"device GiB: scratch", mem.scratch},
           {"device GiB: TOTAL", mem.total}, {"host GiB: optimizer state (offloaded)", mem.host_states}})
    run.Add(row, bytes / double(1 << 30));
  if (exec.ok()) {
    LOOM_RETURN_IF_ERROR(RunSteps(g, **exec, &run));
    run.Count("timed choices on disk after the steps", static_cast<int>(kernels::cuda::TuningCache::Global().size()));
  }
  std::printf("RESULT run=%s preset=%s dry=%d total_s=%.3f create_s=%.3f kernels=%d distinct=%d hits=%d nvrtc=%d "
              "threads=%d memory=%s device_gib=%.2f\n",
              name.c_str(), f.model.preset.c_str(), st.dry ? 1 : 0, run.total, create_s, st.kernels,
              st.distinct_sources, st.cache_hits, st.nvrtc_compiles, st.compile_threads,
              f.model.lean ? "lean" : "standard", mem.total / double(1 << 30));
  return run;
}

// Files in `dir` (-1 when it cannot be opened).
int CountEntries(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return -1;
  int n = 0;
  while (struct dirent* e = ::readdir(d))
    if (std::string(e->d_name) != "." && std::string(e->d_name) != "..") ++n;
  ::closedir(d);
  return n;
}

void RemoveFolder(const std::string& dir) {
  if (DIR* d = ::opendir(dir.c_str())) {
    while (struct dirent* e = ::readdir(d)) {
      const std::string n = e->d_name;
      if (n != "." && n != "..") ::unlink((dir + "/" + n).c_str());
    }
    ::closedir(d);
  }
  ::rmdir(dir.c_str());
}

void PrintTable(const std::vector<Run>& runs) {
  std::printf("%-44s", "phase (seconds, or a count)");
  for (const Run& r : runs) std::printf(" %9s", r.name.c_str());
  std::printf("\n");
  for (size_t i = 0; i < runs[0].rows.size(); ++i) {
    std::printf("%-44s", runs[0].rows[i].name.c_str());
    for (const Run& r : runs) {
      if (i >= r.rows.size()) std::printf(" %9s", "-");
      else if (r.rows[i].count) std::printf(" %9d", static_cast<int>(r.rows[i].value));
      else std::printf(" %9.3f", r.rows[i].value);
    }
    std::printf("\n");
  }
}

int Main(int argc, char** argv) {
  absl::StatusOr<CompileBenchFlags> f = ParseCompileBenchFlags(argc, argv);
  if (!f.ok()) {
    std::fprintf(stderr, "compile_bench: %s\n", std::string(f.status().message()).c_str());
    return 2;
  }
  std::string cache = f->kernel_cache;
  const bool made = cache.empty();
  if (made) {
    char tmpl[] = "/tmp/loom_compile_bench.XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) {
      std::perror("compile_bench: mkdtemp");
      return 1;
    }
    cache = tmpl;
  } else if (f->cold && CountEntries(cache) > 0) {
    std::fprintf(stderr, "compile_bench: --kernel-cache: %s is not empty; the cold run needs an empty folder "
                 "(or pass --no-cold)\n", cache.c_str());
    return 2;
  }
  std::printf("compile_bench: preset %s, %s, kernel cache %s%s\n", f->model.preset.c_str(),
              f->model.f32 ? "f32" : "bf16", cache.c_str(), made ? " (fresh, removed at the end)" : "");
  std::vector<Run> runs;
  int rc = 0;
  for (int r = 0; r < (f->cold ? 1 : 0) + f->warm; ++r) {
    const bool cold = f->cold && r == 0;
    absl::StatusOr<Run> run = OneRun(*f, cache, cold ? "cold" : absl::StrCat("warm", f->cold ? r : r + 1));
    if (!run.ok()) {
      std::fprintf(stderr, "compile_bench: %s\n", std::string(run.status().message()).c_str());
      rc = 1;
      break;
    }
    runs.push_back(std::move(*run));
  }
  if (!runs.empty()) PrintTable(runs);
  if (runs.size() > 1 && !runs[0].dry)
    std::printf("note: the warm runs of one process also reuse in-process choices (cuBLASLt, SDPA, cuDNN plans); "
                "a recompile in a new process: --no-cold over the same --kernel-cache\n");
  if (made) RemoveFolder(cache);
  return rc;
}

}  // namespace
}  // namespace loom::bench::cuda

int main(int argc, char** argv) { return loom::bench::cuda::Main(argc, argv); }
