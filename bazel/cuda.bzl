"""loom_cuda_library: compiles .cu files with nvcc for sm_90 (SASS + PTX).

Without a toolkit (see cuda_configure.bzl) the library is empty and the C++ code
sees no LOOM_HAVE_CUDA define, so it reports CUDA as unavailable at run time.
"""

load("@local_cuda//:defs.bzl", "CUDA_AVAILABLE", "NVCC")

CUDA_ARCH_FLAGS = [
    "-gencode=arch=compute_90,code=sm_90",
    "-gencode=arch=compute_90,code=compute_90",
]

# sm_90a: Hopper's arch-specific instructions (wgmma, setmaxnreg); such code runs
# only on compute capability 9.0, so its callers check the device first.
CUDA_ARCH_FLAGS_SM90A = [
    "-gencode=arch=compute_90a,code=sm_90a",
]

# cu_hdrs: headers from other packages that the .cu files include (the nvcc
# genrule sees only this package's headers otherwise), e.g. "//base:rng.h".
# arch_flags: the -gencode list (CUDA_ARCH_FLAGS unless given).
def loom_cuda_library(name, srcs, hdrs = [], deps = [], nvcc_flags = [], cu_hdrs = [], arch_flags = None, **kwargs):
    if not CUDA_AVAILABLE:
        native.cc_library(name = name, hdrs = hdrs, **kwargs)
        return
    objs = []
    for src in srcs:
        obj = name + "_" + src.replace("/", "_").replace(".cu", ".o")
        native.genrule(
            name = obj.replace(".o", "_nvcc"),
            srcs = [src] + [h for h in native.glob(["**/*.cuh", "**/*.h"]) if h != src] + cu_hdrs,
            outs = [obj],
            cmd = " ".join([
                NVCC,
                "-c -std=c++17 -O3 -Xcompiler -fPIC --expt-relaxed-constexpr",
                " ".join(CUDA_ARCH_FLAGS if arch_flags == None else arch_flags),
                " ".join(nvcc_flags),
                "-I. -I$(GENDIR)",
                "$(location " + src + ") -o $@",
            ]),
        )
        objs.append(obj)
    native.cc_library(
        name = name,
        srcs = objs,
        hdrs = hdrs,
        deps = deps + ["@local_cuda//:cudart"],
        defines = ["LOOM_HAVE_CUDA=1"],
        **kwargs
    )
