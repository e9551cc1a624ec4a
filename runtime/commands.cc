#include "runtime/commands.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <optional>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/flags.h"
#include "base/rng.h"
#include "compiler/import/onnx/inspect.h"
#include "compiler/import/onnx/model_check.h"
#include "base/thread_pool.h"
#include "kernels/cuda/cuda_device.h"
#include "kernels/registry.h"

namespace loom::runtime {
namespace {

constexpr char kVersion[] = "0.1.0";
#ifdef NDEBUG
constexpr char kBuildMode[] = "optimized";
#else
constexpr char kBuildMode[] = "debug assertions on";
#endif

using kernels::Attrs;
using kernels::Impl;
using kernels::RunOp;

Tensor Random(absl::Span<const int64_t> shape, uint64_t seed, double scale = 1.0) {
  Tensor t = Tensor::MustEmpty(shape, DType::kF32);
  Philox rng(seed, 0);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = static_cast<float>(scale * (2 * rng.Uniform(i) - 1));
  return t;
}

double Seconds(std::chrono::steady_clock::time_point a) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count();
}

// Runs `op` with the fast kernel (timed, best of `reps`) and the reference,
// printing the relative error of output 0 and the throughput.
bool Check(const char* label, const char* op, const std::vector<Tensor>& in, const Attrs& attrs,
           double flops, int reps) {
  std::printf("  %-34s ", label);
  std::fflush(stdout);
  double best = 1e30;
  absl::StatusOr<std::vector<Tensor>> out;
  for (int r = 0; r < reps; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    out = RunOp(op, in, attrs, Impl::kKernel);
    best = std::min(best, Seconds(t0));
    if (!out.ok()) break;
  }
  if (!out.ok()) {
    std::printf("FAILED: %s\n", std::string(out.status().message()).c_str());
    return false;
  }
  std::vector<Tensor> in64;
  for (const Tensor& t : in) in64.push_back(IsFloating(t.dtype()) ? t.To(DType::kF64) : t);
  auto ref = RunOp(op, in64, attrs, Impl::kReference);
  if (!ref.ok()) {
    std::printf("reference FAILED: %s\n", std::string(ref.status().message()).c_str());
    return false;
  }
  double err = RelativeError((*out)[0], (*ref)[0]);
  bool ok = err < 1e-4;
  std::printf("%8.3f ms  %7.1f GFLOP/s  rel.err %.2e  %s\n", best * 1e3, flops / best * 1e-9, err,
              ok ? "ok" : "MISMATCH");
  return ok;
}

}  // namespace

int RunDemo(const std::vector<std::string>& args) {
  FlagSet fs("loom demo", "", "Runs matmul and SDPA with the fast kernels, checked against the references, with timings.");
  if (std::optional<int> rc = fs.Parse(args)) return *rc;
  std::printf("Loom kernel demo: fast CPU kernels against their references (%d threads)\n",
              NumThreads());
  absl::Status cuda = kernels::cuda::CudaAvailable();
  std::printf("CUDA: %s\n", cuda.ok() ? "available" : std::string(cuda.message()).c_str());
  bool ok = true;
  const int64_t n = 512;
  ok &= Check("matmul 512x512x512", "matmul", {Random({n, n}, 1), Random({n, n}, 2)}, {},
              2.0 * n * n * n, 3);
  const int64_t b = 1, h = 4, t = 1024, d = 64;
  std::vector<Tensor> qkv = {Random({b, h, t, d}, 3), Random({b, h, t, d}, 4), Random({b, h, t, d}, 5)};
  double attn_flops = 4.0 * b * h * t * t * d;
  for (const char* impl : {"flash", "memeff", "math"}) {
    std::string label = std::string("sdpa T=1024 d=64 ") + impl;
    ok &= Check(label.c_str(), "sdpa", qkv, {{"impl", std::string(impl)}}, attn_flops, 3);
  }
  ok &= Check("sdpa T=1024 causal (auto)", "sdpa", qkv, {{"is_causal", true}}, attn_flops / 2, 3);
  std::printf("%s\n", ok ? "demo: all kernels agree with their references" : "demo: FAILED");
  return ok ? 0 : 1;
}

int RunOps(const std::vector<std::string>& args) {
  bool onnx = false;
  FlagSet fs("loom ops", "", "Lists the registered ops, their kernels and gradient rules.");
  fs.Bool("onnx", &onnx, "list the ONNX ops Loom imports instead");
  if (std::optional<int> rc = fs.Parse(args)) return *rc;
  if (onnx) {
    std::printf("%s", compiler::import::onnx::FormatSupportedOps().c_str());
    return 0;
  }
  const auto& reg = kernels::OpRegistry::Global();
  std::printf("%-24s %-10s %-6s %s\n", "op", "kernels", "grad", "doc");
  for (const std::string& name : reg.Names()) {
    const kernels::OpDef* d = reg.Find(name);
    std::string kernels;
    for (const auto& [kind, fn] : d->kernels) kernels += std::string(DeviceKindName(kind)) + " ";
    std::printf("%-24s %-10s %-6s %s\n", name.c_str(), kernels.c_str(), d->grad ? "yes" : "no",
                d->doc.c_str());
  }
  return 0;
}

namespace {

constexpr char kInspectAbout[] =
    "Prints the model's ops and whether Loom supports each, then imports it: parameters (and the\n"
    "rule that classified them), buffers, data inputs, outputs, the parameter count, the recovery\n"
    "patterns matched (attention, norms, GELU, linear layers, positions: one line each) and the\n"
    "imported graph as Loom IR. Exit 0 when the model imports, 2 when it does not.";

// Parses NAME=VALUE; false on a malformed argument.
bool SplitFlag(const std::string& arg, std::string* name, std::string* value) {
  const size_t eq = arg.find('=');
  if (eq == std::string::npos || eq == 0) return false;
  *name = arg.substr(0, eq);
  *value = arg.substr(eq + 1);
  return true;
}

// --dim/--shape flags into options; an error message, or "".
std::string ParseInspectFlag(const std::string& flag, const std::string& arg, compiler::import::onnx::ImportOptions& o) {
  std::string name, value;
  if (!SplitFlag(arg, &name, &value)) return flag + ": expected NAME=VALUE, got '" + arg + "'";
  if (flag == "--dim") {
    int64_t n = 0;
    if (!absl::SimpleAtoi(value, &n) || n < 0) return "--dim " + name + ": expected a non-negative integer, got '" + value + "'";
    o.dims[name] = n;
    return "";
  }
  Shape shape;
  for (absl::string_view d : absl::StrSplit(value, ',', absl::SkipEmpty())) {
    int64_t n = 0;
    if (!absl::SimpleAtoi(d, &n) || n < 0) return "--shape " + name + ": expected non-negative integers, got '" + value + "'";
    shape.push_back(n);
  }
  o.input_shapes[name] = shape;
  return "";
}

int InspectFail(const std::string& msg) {
  std::fprintf(stderr, "loom inspect: %s\n", msg.c_str());
  return 2;
}

// Symbolic dims not bound by --dim default to 1.
void DefaultSymbolicDims(const std::string& path, compiler::import::onnx::ImportOptions& o) {
  auto m = compiler::import::onnx::ReadModelFile(path, o.max_model_bytes);
  if (!m.ok()) return;
  for (const auto& in : m->graph().input())
    for (const auto& d : in.type().tensor_type().shape().dim())
      if (d.has_dim_param() && !o.dims.count(d.dim_param())) o.dims[d.dim_param()] = 1;
}

}  // namespace

int RunInspect(const std::vector<std::string>& args) {
  compiler::import::onnx::ImportOptions o;
  std::vector<std::string> positional, dims, shapes;
  bool graph = true;
  FlagSet fs("loom inspect", "MODEL.onnx", kInspectAbout);
  fs.Repeated("dim", &dims, "NAME=N", "bind a symbolic dim (unbound ones default to 1)")
      .Repeated("shape", &shapes, "INPUT=D0,D1,...", "an input's whole shape")
      .Bool("graph", &graph, "print the imported graph as Loom IR (default on)")
      .Bool("recover", &o.recover_patterns, "run the recovery passes (default on; --no-recover: the graph as converted)")
      .Positionals(&positional, "MODEL.onnx", 1, 1);
  if (std::optional<int> rc = fs.Parse(args)) return *rc;
  for (const std::string& d : dims)
    if (std::string e = ParseInspectFlag("--dim", d, o); !e.empty()) return InspectFail(e);
  for (const std::string& sh : shapes)
    if (std::string e = ParseInspectFlag("--shape", sh, o); !e.empty()) return InspectFail(e);
  const std::string& path = positional[0];
  DefaultSymbolicDims(path, o);
  auto r = compiler::import::onnx::InspectModel(path, o, graph);
  if (!r.ok()) return InspectFail(std::string(r.status().message()));
  std::printf("%s", r->text.c_str());
  return r->imported ? 0 : 2;
}

int RunVersion(const std::vector<std::string>& args) {
  FlagSet fs("loom version", "", "Prints the version, the build and whether CUDA is available.");
  if (std::optional<int> rc = fs.Parse(args)) return *rc;
  std::printf("loom %s\n", kVersion);
  std::printf("build: compiler %s, %s\n", __VERSION__, kBuildMode);
  absl::Status cuda = kernels::cuda::CudaAvailable();
  std::printf("cuda: %s\n", cuda.ok() ? "available" : std::string(cuda.message()).c_str());
  return 0;
}

std::vector<std::string> FlagsInUsage(const std::string& usage) {
  std::vector<std::string> flags;
  auto add = [&](const std::string& f) {
    if (f != "--help" && std::find(flags.begin(), flags.end(), f) == flags.end()) flags.push_back(f);
  };
  for (size_t i = usage.find("--"); i != std::string::npos; i = usage.find("--", i + 2)) {
    if (i > 0 && !std::isspace(static_cast<unsigned char>(usage[i - 1])) && usage[i - 1] != '[' &&
        usage[i - 1] != '(')
      continue;
    size_t j = i + 2;
    const bool negatable = usage.compare(j, 5, "[no-]") == 0;
    if (negatable) j += 5;
    size_t end = j;
    while (end < usage.size() && (std::isalnum(static_cast<unsigned char>(usage[end])) || usage[end] == '-')) ++end;
    if (end == j || !std::isalpha(static_cast<unsigned char>(usage[j]))) continue;
    const std::string name = usage.substr(j, end - j);
    add("--" + name);
    if (negatable) add("--no-" + name);
  }
  return flags;
}

std::string BashCompletionScript(const std::vector<CompletionEntry>& commands) {
  std::string names = "--help --version";
  std::string cases;
  for (const CompletionEntry& c : commands) {
    absl::StrAppend(&names, " ", c.name);
    std::vector<std::string> flags = c.flags;
    flags.push_back("--help");
    absl::StrAppend(&cases, "    ", c.name, ") flags=\"", absl::StrJoin(flags, " "), "\" ;;\n");
  }
  return absl::StrCat(
      "# bash completion for loom, generated by `loom completion bash` from its commands and flags.\n"
      "# Install: loom completion bash > /etc/bash_completion.d/loom (or source it from ~/.bashrc).\n"
      "_loom() {\n"
      "  local cur=\"${COMP_WORDS[COMP_CWORD]}\"\n"
      "  COMPREPLY=()\n"
      "  if [[ $COMP_CWORD -eq 1 ]]; then\n"
      "    COMPREPLY=($(compgen -W \"",
      names,
      "\" -- \"$cur\"))\n"
      "    return 0\n"
      "  fi\n"
      "  [[ $cur == -* ]] || return 0\n"
      "  local flags=\"\"\n"
      "  case \"${COMP_WORDS[1]}\" in\n",
      cases,
      "  esac\n"
      "  COMPREPLY=($(compgen -W \"$flags\" -- \"$cur\"))\n"
      "}\n"
      "complete -o bashdefault -o default -F _loom loom\n");
}

}  // namespace loom::runtime
