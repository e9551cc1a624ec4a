// The shared NVRTC / on-disk CUBIN cache / kernel loading machinery of the
// code generators (nvrtc_cache.h). NVRTC and the CUDA runtime are used only
// when the build found the toolkit (LOOM_CODEGEN_CUDA).
#include "kernels/cuda/codegen/nvrtc_cache.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status.h"

#ifdef LOOM_CODEGEN_CUDA
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <nvrtc.h>
#endif

namespace loom::kernels::cuda::codegen {
namespace {

std::atomic<bool> g_nvrtc_disabled{false};

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

absl::StatusOr<std::string> NvrtcCompile(const std::string& source, const std::string& name, const std::string& arch,
                                         absl::string_view who) {
  const NvrtcApi& api = Nvrtc();
  if (!api.error.empty()) return absl::UnavailableError(absl::StrCat(who, ": ", api.error));
  nvrtcProgram prog;
  nvrtcResult r = api.CreateProgram(&prog, source.c_str(), (name + ".cu").c_str(), 0, nullptr, nullptr);
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
    return absl::InternalError(absl::StrCat("NVRTC failed to compile ", name, " for ", arch, ": ",
                                            api.GetErrorString(r), "\n", log, "\n--- source ---\n", source));
  }
  size_t size = 0;
  r = api.GetCUBINSize(prog, &size);
  std::string cubin(size, '\0');
  if (r == NVRTC_SUCCESS && size > 0) r = api.GetCUBIN(prog, &cubin[0]);
  api.DestroyProgram(&prog);
  if (r != NVRTC_SUCCESS || size == 0)
    return absl::InternalError(absl::StrCat("nvrtcGetCUBIN for ", name, " (arch ", arch,
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

std::string KernelCacheDir(const std::string& cache_dir) { return cache_dir.empty() ? DefaultCacheDir() : cache_dir; }

bool MakeCacheDir(const std::string& dir) { return MakeDirs(dir); }

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

bool BuiltWithCuda() {
#ifdef LOOM_CODEGEN_CUDA
  return true;
#else
  return false;
#endif
}

bool NvrtcAvailable() {
#ifdef LOOM_CODEGEN_CUDA
  return Nvrtc().error.empty();
#else
  return false;
#endif
}


uint64_t HashString(absl::string_view s) {
  uint64_t h = 14695981039346656037ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

absl::StatusOr<std::string> NvrtcCompileSource(const std::string& source, const std::string& name,
                                               const std::string& arch) {
#ifdef LOOM_CODEGEN_CUDA
  return NvrtcCompile(source, name, arch, "codegen");
#else
  (void)source, (void)name, (void)arch;
  return absl::UnavailableError("codegen: this build has no CUDA toolkit (NVRTC)");
#endif
}

namespace {

// CompileCached; *nvrtc_seconds gets the time spent inside NVRTC.
absl::StatusOr<CompiledCubin> CompileCachedTimed(const std::string& source, const std::string& name,
                                                 absl::string_view version, const CodegenOptions& o,
                                                 absl::string_view who, double* nvrtc_seconds) {
  *nvrtc_seconds = 0;
  if (o.arch.rfind("sm_", 0) != 0)
    return absl::InvalidArgumentError(
        absl::StrCat(who, ": arch: expected a real architecture like \"sm_90\", got \"", o.arch, "\""));
#ifndef LOOM_CODEGEN_CUDA
  (void)source, (void)version;
  return absl::UnavailableError(
      absl::StrCat(who, ": this build has no CUDA toolkit (NVRTC); generated ", name, " but cannot compile it"));
#else
  CompiledCubin out;
  const std::string dir = KernelCacheDir(o.cache_dir);
  // <hash of codegen version, arch, source>_nvrtc<version>.cubin
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx",
                static_cast<unsigned long long>(HashString(absl::StrCat(version, "\n", o.arch, "\n", source))));
  const std::string prefix = absl::StrCat(hex, "_nvrtc");
  auto try_load = [&](const std::string& path) {
    std::string file;
    if (!ReadFile(path, &file)) return false;
    std::string cubin = DecodeCacheEntry(file);
    if (cubin.empty()) return false;  // corrupt or short: recompile and overwrite
    out.cubin = std::move(cubin);
    out.from_cache = true;
    out.cache_path = path;
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
      if (try_load(absl::StrCat(dir, "/", n))) return out;
    return absl::UnavailableError(absl::StrCat(who, ": ", api.error.empty() ? "NVRTC disabled" : api.error,
                                               "; and no cached CUBIN for ", name, " in ", dir));
  }
  const std::string path = absl::StrCat(dir, "/", prefix, api.version, ".cubin");
  if (try_load(path)) return out;
  const auto t0 = std::chrono::steady_clock::now();
  absl::StatusOr<std::string> cubin = NvrtcCompile(source, name, o.arch, who);
  *nvrtc_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!cubin.ok()) return cubin.status();
  out.cubin = std::move(*cubin);
  // The cache is an optimisation: a folder we cannot write is not an error.
  if (MakeDirs(dir) && WriteFileAtomic(path, EncodeCacheEntry(out.cubin))) out.cache_path = path;
  return out;
#endif
}

}  // namespace

absl::StatusOr<CompiledCubin> CompileCached(const std::string& source, const std::string& name,
                                            absl::string_view version, const CodegenOptions& o,
                                            absl::string_view who) {
  double nvrtc_seconds = 0;
  return CompileCachedTimed(source, name, version, o, who, &nvrtc_seconds);
}

absl::StatusOr<std::vector<CompiledCubin>> CompileAll(const std::vector<CompileJob>& jobs, const CodegenOptions& o,
                                                      int threads, CompileAllStats* stats) {
  // The distinct sources, in order of first appearance, and each job's.
  std::map<std::pair<std::string, std::string>, size_t> index;  // (version, source) -> distinct
  std::vector<size_t> first_job, of_job(jobs.size());
  std::vector<int> sharing;
  for (size_t i = 0; i < jobs.size(); ++i) {
    auto [it, added] = index.emplace(std::make_pair(jobs[i].version, jobs[i].source), first_job.size());
    if (added) {
      first_job.push_back(i);
      sharing.push_back(0);
    }
    of_job[i] = it->second;
    ++sharing[it->second];
  }
  const size_t n = first_job.size();
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  threads = static_cast<int>(std::min<size_t>(static_cast<size_t>(threads), std::max<size_t>(n, 1)));
  std::vector<absl::StatusOr<CompiledCubin>> done(n, absl::UnknownError("not compiled"));
  std::vector<double> nvrtc_seconds(n, 0.0);
  std::atomic<size_t> next{0};
  auto work = [&]() {
    for (size_t d = next.fetch_add(1); d < n; d = next.fetch_add(1)) {
      const CompileJob& j = jobs[first_job[d]];
      done[d] = CompileCachedTimed(j.source, j.name, j.version, o, j.who, &nvrtc_seconds[d]);
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
  if (stats != nullptr) {
    *stats = CompileAllStats();
    stats->jobs = static_cast<int>(jobs.size());
    stats->distinct = static_cast<int>(n);
    stats->threads = threads;
    for (size_t d = 0; d < n; ++d) {
      stats->nvrtc_seconds += nvrtc_seconds[d];
      if (done[d].ok()) ++(done[d]->from_cache ? stats->cache_hits : stats->compiled);
    }
  }
  std::vector<CompiledCubin> out;
  out.reserve(jobs.size());
  for (size_t i = 0; i < jobs.size(); ++i) {
    const absl::StatusOr<CompiledCubin>& r = done[of_job[i]];
    if (!r.ok()) {
      const int others = sharing[of_job[i]] - 1;
      return absl::Status(r.status().code(),
                          absl::StrCat("kernel ", jobs[i].name,
                                       others > 0 ? absl::StrCat(" (and ", others, " other kernels of its source)") : "",
                                       ": ", r.status().message()));
    }
    out.push_back(*r);
  }
  return out;
}

absl::StatusOr<void*> LoadKernel(const std::string& cubin, const std::string& name) {
#ifndef LOOM_CODEGEN_CUDA
  (void)cubin;
  return absl::UnavailableError(absl::StrCat("codegen: this build has no CUDA (loading ", name, ")"));
#else
  static std::mutex mu;
  static auto* libraries = new std::map<uint64_t, void*>();              // CUBIN hash -> cudaLibrary_t
  static auto* kernels = new std::map<std::pair<uint64_t, std::string>, void*>();  // -> cudaKernel_t
  const uint64_t h = HashString(cubin);
  std::lock_guard<std::mutex> lock(mu);
  auto kit = kernels->find({h, name});
  if (kit != kernels->end()) return kit->second;
  auto lit = libraries->find(h);
  if (lit == libraries->end()) {
    cudaLibrary_t lib = nullptr;
    LOOM_RETURN_IF_ERROR(CudaStatus(cudaLibraryLoadData(&lib, cubin.data(), nullptr, nullptr, 0, nullptr, nullptr, 0),
                                    absl::StrCat("cudaLibraryLoadData(", name, ")")));
    lit = libraries->emplace(h, static_cast<void*>(lib)).first;
  }
  cudaKernel_t kern = nullptr;
  LOOM_RETURN_IF_ERROR(CudaStatus(cudaLibraryGetKernel(&kern, static_cast<cudaLibrary_t>(lit->second), name.c_str()),
                                  absl::StrCat("cudaLibraryGetKernel(", name, ")")));
  kernels->emplace(std::make_pair(h, name), reinterpret_cast<void*>(kern));
  return reinterpret_cast<void*>(kern);
#endif
}

int DeviceSmCount() {
#ifdef LOOM_CODEGEN_CUDA
  int dev = 0, sms = 0;
  if (cudaGetDevice(&dev) == cudaSuccess && cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) == cudaSuccess &&
      sms > 0)
    return sms;
#endif
  return 132;
}

absl::Status LaunchKernel(void* kernel, int64_t grid, int block, void** args, StreamHandle stream,
                          absl::string_view name, size_t shared_bytes) {
#ifndef LOOM_CODEGEN_CUDA
  (void)kernel, (void)grid, (void)block, (void)args, (void)stream, (void)shared_bytes;
  return absl::UnavailableError(absl::StrCat("codegen: this build has no CUDA (launching ", name, ")"));
#else
  if (grid <= 0) return absl::OkStatus();
  return CudaStatus(cudaLaunchKernel(reinterpret_cast<const void*>(kernel), dim3(static_cast<unsigned>(grid)),
                                     dim3(static_cast<unsigned>(block)), args, shared_bytes,
                                     static_cast<cudaStream_t>(stream)),
                    absl::StrCat("cudaLaunchKernel(", name, ")"));
#endif
}

}  // namespace loom::kernels::cuda::codegen
