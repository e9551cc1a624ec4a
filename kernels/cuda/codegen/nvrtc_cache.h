// The machinery every code generator here shares: NVRTC (dlopen'ed at run
// time), the on-disk CUBIN cache keyed by a hash of (generator version, arch,
// source), CompileAll (many kernels at once: each distinct source once, on
// several threads), and loading / launching a kernel of a CUBIN.
//
//   LOOM_ASSIGN_OR_RETURN(CompiledCubin c,
//                         CompileCached(source, "loom_ln_ab12", "loom-row-1", opts, "rowwise codegen"));
//   LOOM_ASSIGN_OR_RETURN(void* k, LoadKernel(c.cubin, "loom_ln_ab12"));   // needs a GPU
//   void* args[] = {&params};
//   LOOM_RETURN_IF_ERROR(LaunchKernel(k, grid, block, args, stream, "loom_ln_ab12"));
//
// NVRTC search order: $LOOM_NVRTC_LIB, libnvrtc.so.13, .so.12, .so, the build's
// toolkit. Options: -arch=<arch> -std=c++17 -default-device (no fast math).
// Cache file: <dir>/<fnv64 hex of version+arch+source>_nvrtc<nvrtc version>.cubin,
// "LOOMCBN1" + u64 size + u64 FNV-1a + CUBIN, written atomically (tmp+rename);
// a corrupt entry is recompiled. Without NVRTC, any valid entry for the same
// hash is used (a cache filled elsewhere and shipped). Builds without the
// toolkit (no LOOM_CODEGEN_CUDA) return Unavailable from every compile/load.
// Environment: LOOM_KERNEL_CACHE (dir), LOOM_NVRTC_LIB.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace loom::kernels::cuda::codegen {

// A cudaStream_t (same type as loom::kernels::cuda::StreamHandle).
using StreamHandle = void*;

struct CodegenOptions {
  std::string cache_dir;  // "" = $LOOM_KERNEL_CACHE or ~/.cache/loom/kernels
  std::string arch = "sm_90";
};

// The cache folder `cache_dir` stands for: itself, or when "" the default
// ($LOOM_KERNEL_CACHE, else ~/.cache/loom/kernels, else /tmp/loom_kernels).
std::string KernelCacheDir(const std::string& cache_dir);
// mkdir -p `dir`; true when the folder exists afterwards.
bool MakeCacheDir(const std::string& dir);

struct CompiledCubin {
  std::string cubin;
  std::string cache_path;  // "" when not cached (unwritable folder)
  bool from_cache = false;
};

// Compiles `source` (kernel symbol `name`, used in errors) for o.arch, or loads
// the cached CUBIN. `version` goes into the hash (bump it when the generator's
// meaning changes); `who` prefixes error messages ("pointwise codegen").
absl::StatusOr<CompiledCubin> CompileCached(const std::string& source, const std::string& name,
                                            absl::string_view version, const CodegenOptions& o,
                                            absl::string_view who);

// One generated kernel waiting for its CUBIN (CompileAll).
struct CompileJob {
  std::string source;
  std::string name;     // the kernel symbol, named in errors
  std::string version;  // the generator's version (hashed with the source)
  std::string who;      // prefixes error messages ("pointwise codegen")
};
struct CompileAllStats {
  int jobs = 0;
  int distinct = 0;    // distinct (version, source) among the jobs
  int cache_hits = 0;  // distinct sources loaded from the disk cache
  int compiled = 0;    // distinct sources NVRTC compiled
  int threads = 0;     // threads that worked on them
  double nvrtc_seconds = 0;  // inside NVRTC, summed over the threads
};
// CompileCached for every job, each distinct (version, source) once: the
// distinct sources on up to `threads` threads (0: the hardware concurrency;
// 1: the calling thread alone), and every job of a source gets its result.
// The i-th result is job i's, the same CUBIN (and cache file) a one-by-one
// CompileCached in job order gives. When sources fail, the call fails with the
// first failing job's error (in job order), naming that kernel and how many
// other jobs share its source.
absl::StatusOr<std::vector<CompiledCubin>> CompileAll(const std::vector<CompileJob>& jobs, const CodegenOptions& o,
                                                      int threads, CompileAllStats* stats = nullptr);

// The kernel `name` of `cubin` (a cudaKernel_t). Modules are loaded once per
// process per (CUBIN hash) and never unloaded, so handles stay valid for
// captured CUDA graphs. Call outside stream capture the first time.
absl::StatusOr<void*> LoadKernel(const std::string& cubin, const std::string& name);
// Multiprocessors of the current device (132 when it cannot be queried).
int DeviceSmCount();
// cudaLaunchKernel of a LoadKernel handle (1-D grid and block).
absl::Status LaunchKernel(void* kernel, int64_t grid, int block, void** args, StreamHandle stream,
                          absl::string_view name, size_t shared_bytes = 0);

// True when the build found the CUDA toolkit (LOOM_CODEGEN_CUDA).
bool BuiltWithCuda();
// True when this build can run NVRTC (the toolkit was found at build time and
// the library opens).
bool NvrtcAvailable();
// "NVRTC 13.0 (libnvrtc.so.13)", or why NVRTC is unavailable.
std::string NvrtcInfo();

// 64-bit FNV-1a.
uint64_t HashString(absl::string_view s);

// Cache file format (see above). Decode returns the payload, or "" when `file`
// is not a valid entry.
std::string DecodeCacheEntry(const std::string& file);
std::string EncodeCacheEntry(const std::string& cubin);

// Compiles any source with the generators' NVRTC options (tests compile many
// kernels as one program). `name` only labels errors.
absl::StatusOr<std::string> NvrtcCompileSource(const std::string& source, const std::string& name,
                                               const std::string& arch);

// Tests: behave as if NVRTC could not be opened (cache lookups only).
void SetNvrtcDisabledForTesting(bool disabled);

}  // namespace loom::kernels::cuda::codegen
