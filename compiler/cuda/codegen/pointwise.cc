// PointwiseKernel: NVRTC compilation, the on-disk CUBIN cache, and the launch
// (see pointwise.h). NVRTC and the CUDA runtime are used only when the build
// found the toolkit (LOOM_CODEGEN_CUDA); otherwise Compile stops after
// generating the source with Unavailable.
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <type_traits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status.h"
#include "compiler/cuda/codegen/pointwise.h"
#include "compiler/cuda/codegen/pointwise_internal.h"

#ifdef LOOM_CODEGEN_CUDA
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <nvrtc.h>
#endif

namespace loom::compiler::cuda_codegen {
namespace {

std::atomic<bool> g_nvrtc_disabled{false};

// Bump when the generator or the cache format changes meaning.
constexpr char kCodegenVersion[] = "loom-pw-1";
constexpr char kMagic[8] = {'L', 'O', 'O', 'M', 'C', 'B', 'N', '1'};

void PutU64(std::string& s, uint64_t v) {
  for (int k = 0; k < 8; ++k) s.push_back(static_cast<char>((v >> (8 * k)) & 0xff));
}
uint64_t GetU64(const std::string& s, size_t at) {
  uint64_t v = 0;
  for (int k = 0; k < 8; ++k) v |= static_cast<uint64_t>(static_cast<unsigned char>(s[at + k])) << (8 * k);
  return v;
}

std::string DefaultCacheDir() {
  if (const char* e = std::getenv("LOOM_KERNEL_CACHE"); e != nullptr && *e) return e;
  if (const char* h = std::getenv("HOME"); h != nullptr && *h) return absl::StrCat(h, "/.cache/loom/kernels");
  return "/tmp/loom_kernels";
}

// mkdir -p; true when the directory exists afterwards.
bool MakeDirs(const std::string& dir) {
  if (dir.empty()) return false;
  std::string cur;
  size_t pos = 0;
  while (pos != std::string::npos) {
    pos = dir.find('/', pos + 1);
    cur = dir.substr(0, pos);
    if (cur.empty()) continue;
    if (::mkdir(cur.c_str(), 0755) != 0 && errno != EEXIST) return false;
  }
  struct stat st;
  return ::stat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool ReadFile(const std::string& path, std::string* out) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return false;
  std::ostringstream ss;
  ss << f.rdbuf();
  *out = ss.str();
  return true;
}

// Writes atomically: a unique temporary file in the same folder, then rename.
bool WriteFileAtomic(const std::string& path, const std::string& data) {
  static std::atomic<uint64_t> counter{0};
  const std::string tmp = absl::StrCat(path, ".tmp.", ::getpid(), ".", counter.fetch_add(1));
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return false;
  size_t done = 0;
  while (done < data.size()) {
    ssize_t w = ::write(fd, data.data() + done, data.size() - done);
    if (w <= 0) {
      ::close(fd);
      ::unlink(tmp.c_str());
      return false;
    }
    done += static_cast<size_t>(w);
  }
  if (::close(fd) != 0 || ::rename(tmp.c_str(), path.c_str()) != 0) {
    ::unlink(tmp.c_str());
    return false;
  }
  return true;
}

#ifdef LOOM_CODEGEN_CUDA
// NVRTC is opened at run time (not linked): the library is ~100 MiB, binaries
// that never generate a kernel should not need it, and a GPU machine may only
// have another major version (e.g. libnvrtc.so.12 from PyTorch's wheels); its C
// API is the same. Search order: $LOOM_NVRTC_LIB, libnvrtc.so.13, .so.12, .so
// (through the loader's path), then the build's toolkit lib64.
struct NvrtcApi {
  nvrtcResult (*Version)(int*, int*) = nullptr;
  nvrtcResult (*CreateProgram)(nvrtcProgram*, const char*, const char*, int, const char* const*,
                               const char* const*) = nullptr;
  nvrtcResult (*CompileProgram)(nvrtcProgram, int, const char* const*) = nullptr;
  nvrtcResult (*GetProgramLogSize)(nvrtcProgram, size_t*) = nullptr;
  nvrtcResult (*GetProgramLog)(nvrtcProgram, char*) = nullptr;
  nvrtcResult (*GetCUBINSize)(nvrtcProgram, size_t*) = nullptr;
  nvrtcResult (*GetCUBIN)(nvrtcProgram, char*) = nullptr;
  nvrtcResult (*DestroyProgram)(nvrtcProgram*) = nullptr;
  const char* (*GetErrorString)(nvrtcResult) = nullptr;
  std::string version;  // "13.0"
  std::string library;  // the file that was opened
  std::string error;    // why it is unavailable; "" when loaded
};

const NvrtcApi& Nvrtc() {
  static const NvrtcApi* api = [] {
    auto* a = new NvrtcApi();
    std::vector<std::string> names;
    if (const char* e = std::getenv("LOOM_NVRTC_LIB"); e != nullptr && *e) names.push_back(e);
    names.insert(names.end(), {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"});
#ifdef LOOM_CUDA_ROOT
    names.push_back(std::string(LOOM_CUDA_ROOT) + "/lib64/libnvrtc.so");
#endif
    void* h = nullptr;
    for (const std::string& n : names)
      if ((h = ::dlopen(n.c_str(), RTLD_NOW | RTLD_LOCAL)) != nullptr) {
        a->library = n;
        break;
      }
    if (h == nullptr) {
      a->error = absl::StrCat("NVRTC library not found (tried ", absl::StrJoin(names, ", "),
                              "; set LOOM_NVRTC_LIB or LD_LIBRARY_PATH)");
      return a;
    }
    bool ok = true;
    auto sym = [&](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(::dlsym(h, name));
      ok = ok && fn != nullptr;
    };
    sym(a->Version, "nvrtcVersion");
    sym(a->CreateProgram, "nvrtcCreateProgram");
    sym(a->CompileProgram, "nvrtcCompileProgram");
    sym(a->GetProgramLogSize, "nvrtcGetProgramLogSize");
    sym(a->GetProgramLog, "nvrtcGetProgramLog");
    sym(a->GetCUBINSize, "nvrtcGetCUBINSize");
    sym(a->GetCUBIN, "nvrtcGetCUBIN");
    sym(a->DestroyProgram, "nvrtcDestroyProgram");
    sym(a->GetErrorString, "nvrtcGetErrorString");
    if (!ok) {
      a->error = "the NVRTC library lacks an expected symbol (needs NVRTC 11.1 or newer)";
      return a;
    }
    int major = 0, minor = 0;
    a->Version(&major, &minor);
    a->version = absl::StrCat(major, ".", minor);
    return a;
  }();
  return *api;
}

absl::StatusOr<std::string> NvrtcCompile(const GeneratedKernel& gen, const std::string& arch);
#endif

}  // namespace

absl::StatusOr<std::string> NvrtcCompileSource(const std::string& source, const std::string& name,
                                               const std::string& arch) {
#ifdef LOOM_CODEGEN_CUDA
  GeneratedKernel gen;
  gen.source = source;
  gen.name = name;
  return NvrtcCompile(gen, arch);
#else
  (void)source, (void)name, (void)arch;
  return absl::UnavailableError("pointwise codegen: this build has no CUDA toolkit (NVRTC)");
#endif
}

namespace {
#ifdef LOOM_CODEGEN_CUDA
absl::StatusOr<std::string> NvrtcCompile(const GeneratedKernel& gen, const std::string& arch) {
  const NvrtcApi& api = Nvrtc();
  if (!api.error.empty()) return absl::UnavailableError(absl::StrCat("pointwise codegen: ", api.error));
  nvrtcProgram prog;
  nvrtcResult r = api.CreateProgram(&prog, gen.source.c_str(), (gen.name + ".cu").c_str(), 0, nullptr, nullptr);
  if (r != NVRTC_SUCCESS)
    return absl::InternalError(absl::StrCat("nvrtcCreateProgram: ", api.GetErrorString(r)));
  const std::string arch_opt = "-arch=" + arch;
  const char* opts[] = {arch_opt.c_str(), "-std=c++17", "-default-device"};
  r = api.CompileProgram(prog, 3, opts);
  size_t log_size = 0;
  api.GetProgramLogSize(prog, &log_size);
  std::string log(log_size, '\0');
  if (log_size > 0) api.GetProgramLog(prog, &log[0]);
  while (!log.empty() && (log.back() == '\0' || log.back() == '\n')) log.pop_back();
  if (r != NVRTC_SUCCESS) {
    api.DestroyProgram(&prog);
    return absl::InternalError(absl::StrCat("NVRTC failed to compile ", gen.name, " for ", arch, ": ",
                                            api.GetErrorString(r), "\n", log, "\n--- source ---\n", gen.source));
  }
  size_t size = 0;
  r = api.GetCUBINSize(prog, &size);
  std::string cubin(size, '\0');
  if (r == NVRTC_SUCCESS && size > 0) r = api.GetCUBIN(prog, &cubin[0]);
  api.DestroyProgram(&prog);
  if (r != NVRTC_SUCCESS || size == 0)
    return absl::InternalError(absl::StrCat("nvrtcGetCUBIN for ", gen.name, " (arch ", arch,
                                            " must be a real sm_XX): ", api.GetErrorString(r)));
  return cubin;
}

absl::Status CudaStatus(cudaError_t e, absl::string_view what) {
  if (e == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorName(e), ": ", cudaGetErrorString(e)));
}
#endif

}  // namespace

std::string EncodeCacheEntry(const std::string& cubin) {
  std::string s(kMagic, sizeof(kMagic));
  PutU64(s, cubin.size());
  PutU64(s, HashString(cubin));
  s += cubin;
  return s;
}

std::string DecodeCacheEntry(const std::string& file) {
  if (file.size() < 24 + 4 || std::memcmp(file.data(), kMagic, sizeof(kMagic)) != 0) return "";
  const uint64_t size = GetU64(file, 8), hash = GetU64(file, 16);
  if (size != file.size() - 24) return "";
  std::string payload = file.substr(24);
  if (HashString(payload) != hash || payload.compare(0, 4, "\x7f" "ELF") != 0) return "";
  return payload;
}

void SetNvrtcDisabledForTesting(bool disabled) { g_nvrtc_disabled.store(disabled); }

std::string NvrtcInfo() {
#ifdef LOOM_CODEGEN_CUDA
  const NvrtcApi& api = Nvrtc();
  if (!api.error.empty()) return api.error;
  return absl::StrCat("NVRTC ", api.version, " (", api.library, ")");
#else
  return "built without CUDA";
#endif
}

int ChooseVectorPath(const GeneratedKernel& gen, absl::Span<const void* const> inputs,
                     absl::Span<const DType> in_dtypes, const void* out, DType out_dtype) {
  if (!gen.vectorizable) return 0;
  // The W-wide path needs every linearly accessed tensor aligned like its
  // vector type: min(16, W * element size) bytes.
  const uintptr_t w = static_cast<uintptr_t>(gen.vec_width);
  auto aligned = [w](const void* base, int64_t offset, DType t) {
    const uintptr_t p = reinterpret_cast<uintptr_t>(base) + static_cast<uintptr_t>(offset) * DTypeSize(t);
    return p % std::min<uintptr_t>(16, w * DTypeSize(t)) == 0;
  };
  const IndexPlan& plan = gen.plan;
  if (!aligned(out, plan.offsets[0], out_dtype)) return 0;
  for (size_t k = 0; k < inputs.size(); ++k)
    if (plan.access[k + 1] == IndexPlan::Access::kLinear && !aligned(inputs[k], plan.offsets[k + 1], in_dtypes[k]))
      return 0;
  return 1;
}

bool NvrtcAvailable() {
#ifdef LOOM_CODEGEN_CUDA
  return Nvrtc().error.empty();
#else
  return false;
#endif
}

absl::StatusOr<std::unique_ptr<PointwiseKernel>> PointwiseKernel::Compile(const PwSpec& spec,
                                                                          const CodegenOptions& o) {
  std::unique_ptr<PointwiseKernel> k(new PointwiseKernel());
  LOOM_ASSIGN_OR_RETURN(k->gen_, GeneratePointwiseSource(spec));
  for (const PwOperand& op : spec.inputs) k->in_dtypes_.push_back(op.dtype);
  k->out_dtype_ = spec.out_dtype;
  if (o.arch.rfind("sm_", 0) != 0)
    return absl::InvalidArgumentError(
        absl::StrCat("pointwise codegen: arch: expected a real architecture like \"sm_90\", got \"", o.arch, "\""));
#ifndef LOOM_CODEGEN_CUDA
  return absl::UnavailableError(absl::StrCat(
      "pointwise codegen: this build has no CUDA toolkit (NVRTC); generated ", k->gen_.name,
      " but cannot compile it"));
#else
  const std::string dir = o.cache_dir.empty() ? DefaultCacheDir() : o.cache_dir;
  // <hash of codegen version, arch, source>_nvrtc<version>.cubin
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx",
                static_cast<unsigned long long>(
                    HashString(absl::StrCat(kCodegenVersion, "\n", o.arch, "\n", k->gen_.source))));
  const std::string prefix = absl::StrCat(hex, "_nvrtc");
  auto try_load = [&](const std::string& path) {
    std::string file;
    if (!ReadFile(path, &file)) return false;
    std::string cubin = DecodeCacheEntry(file);
    if (cubin.empty()) return false;  // corrupt or short: recompile and overwrite
    k->cubin_ = std::move(cubin);
    k->from_cache_ = true;
    k->cache_path_ = path;
    return true;
  };
  const NvrtcApi& api = Nvrtc();
  if (!api.error.empty() || g_nvrtc_disabled.load()) {
    // No NVRTC here: any valid entry for this source and arch will do (e.g. a
    // cache filled on the build machine and shipped with the binary).
    std::vector<std::string> found;
    if (DIR* d = ::opendir(dir.c_str())) {
      while (struct dirent* e = ::readdir(d)) {
        std::string n = e->d_name;
        if (n.rfind(prefix, 0) == 0 && n.size() > 6 && n.compare(n.size() - 6, 6, ".cubin") == 0) found.push_back(n);
      }
      ::closedir(d);
    }
    std::sort(found.rbegin(), found.rend());
    for (const std::string& n : found)
      if (try_load(absl::StrCat(dir, "/", n))) return k;
    return absl::UnavailableError(absl::StrCat("pointwise codegen: ", api.error.empty() ? "NVRTC disabled" : api.error,
                                               "; and no cached CUBIN for ",
                                               k->gen_.name, " in ", dir));
  }
  const std::string path = absl::StrCat(dir, "/", prefix, api.version, ".cubin");
  if (try_load(path)) return k;
  LOOM_ASSIGN_OR_RETURN(k->cubin_, NvrtcCompile(k->gen_, o.arch));
  // The cache is an optimisation: a folder we cannot write is not an error.
  if (MakeDirs(dir) && WriteFileAtomic(path, EncodeCacheEntry(k->cubin_))) k->cache_path_ = path;
  return k;
#endif
}

// Loaded modules are shared process-wide by (kernel name, CUBIN hash) and never
// unloaded: identical regions (one per layer) load one module, and a kernel
// handle stays valid for CUDA graphs captured with it.
PointwiseKernel::~PointwiseKernel() = default;

absl::Status PointwiseKernel::EnsureLoaded() const {
#ifndef LOOM_CODEGEN_CUDA
  return absl::UnavailableError("pointwise codegen: this build has no CUDA");
#else
  std::lock_guard<std::mutex> lock(mu_);
  if (kernel_ != nullptr) return absl::OkStatus();
  static std::mutex table_mu;
  static auto* table = new std::map<std::string, std::pair<void*, void*>>();  // key -> (library, kernel)
  const std::string key = absl::StrCat(gen_.name, "/", HashString(cubin_));
  std::lock_guard<std::mutex> table_lock(table_mu);
  auto it = table->find(key);
  if (it == table->end()) {
    cudaLibrary_t lib = nullptr;
    LOOM_RETURN_IF_ERROR(CudaStatus(
        cudaLibraryLoadData(&lib, cubin_.data(), nullptr, nullptr, 0, nullptr, nullptr, 0),
        absl::StrCat("cudaLibraryLoadData(", gen_.name, ")")));
    cudaKernel_t kern = nullptr;
    absl::Status s = CudaStatus(cudaLibraryGetKernel(&kern, lib, gen_.name.c_str()),
                                absl::StrCat("cudaLibraryGetKernel(", gen_.name, ")"));
    if (!s.ok()) {
      cudaLibraryUnload(lib);
      return s;
    }
    it = table->emplace(key, std::make_pair(static_cast<void*>(lib), reinterpret_cast<void*>(kern))).first;
  }
  int dev = 0, sms = 0;
  LOOM_RETURN_IF_ERROR(CudaStatus(cudaGetDevice(&dev), "cudaGetDevice"));
  LOOM_RETURN_IF_ERROR(CudaStatus(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev),
                                  "cudaDeviceGetAttribute(multiProcessorCount)"));
  library_ = it->second.first;
  num_sms_ = sms > 0 ? sms : 132;
  kernel_ = it->second.second;
  return absl::OkStatus();
#endif
}

absl::Status PointwiseKernel::Launch(absl::Span<const void* const> inputs, void* out, StreamHandle stream) const {
  if (inputs.size() != in_dtypes_.size())
    return absl::InvalidArgumentError(absl::StrCat("pointwise launch ", gen_.name, ": inputs: expected ",
                                                   in_dtypes_.size(), " pointers, got ", inputs.size()));
#ifndef LOOM_CODEGEN_CUDA
  (void)out;
  (void)stream;
  return absl::UnavailableError("pointwise codegen: this build has no CUDA");
#else
  if (gen_.numel == 0) return absl::OkStatus();
  if (out == nullptr)
    return absl::InvalidArgumentError(absl::StrCat("pointwise launch ", gen_.name, ": out: null pointer"));
  for (size_t k = 0; k < inputs.size(); ++k)
    if (inputs[k] == nullptr)
      return absl::InvalidArgumentError(
          absl::StrCat("pointwise launch ", gen_.name, ": inputs[", k, "]: null pointer"));
  LOOM_RETURN_IF_ERROR(EnsureLoaded());
  int vec = ChooseVectorPath(gen_, inputs, in_dtypes_, out, out_dtype_);
  const int64_t threads = 256;
  const int64_t per_thread = vec ? gen_.vec_width : 1;
  int64_t blocks = (gen_.numel + threads * per_thread - 1) / (threads * per_thread);
  blocks = std::max<int64_t>(1, std::min<int64_t>(blocks, int64_t{num_sms_} * 16));
  std::vector<const void*> ptrs(inputs.begin(), inputs.end());
  std::vector<void*> args;
  for (const void*& p : ptrs) args.push_back(&p);
  args.push_back(&out);
  args.push_back(&vec);
  return CudaStatus(cudaLaunchKernel(reinterpret_cast<const void*>(kernel_), dim3(static_cast<unsigned>(blocks)),
                                     dim3(static_cast<unsigned>(threads)), args.data(), 0,
                                     static_cast<cudaStream_t>(stream)),
                    absl::StrCat("cudaLaunchKernel(", gen_.name, ")"));
#endif
}

}  // namespace loom::compiler::cuda_codegen
