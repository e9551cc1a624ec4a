"""Finds the CUDA toolkit at fetch time and writes @local_cuda.

LOOM_NO_CUDA=1 in the environment builds as if no toolkit were installed.
When nvcc is on PATH (or CUDA_PATH points at a toolkit), @local_cuda exposes the
toolkit's headers and libraries (CUDA runtime, NCCL, cuBLAS/cuBLASLt, cuDNN, NVRTC)
and `defs.bzl` sets CUDA_AVAILABLE = True. Otherwise the repository holds empty
targets, CUDA_AVAILABLE = False, and the build prints why CUDA is left out.
"""

def _find_toolkit(ctx):
    if ctx.os.environ.get("LOOM_NO_CUDA", "") not in ["", "0"]:
        return None
    env_path = ctx.os.environ.get("CUDA_PATH", "")
    if env_path and ctx.path(env_path + "/bin/nvcc").exists:
        return env_path
    nvcc = ctx.which("nvcc")
    if nvcc == None:
        for guess in ["/usr/local/cuda"]:
            if ctx.path(guess + "/bin/nvcc").exists:
                nvcc = ctx.path(guess + "/bin/nvcc")
                break
    if nvcc == None:
        return None
    res = ctx.execute(["readlink", "-f", str(nvcc)])
    real = res.stdout.strip()
    return real[:real.rfind("/bin/nvcc")]

def _cuda_configure_impl(ctx):
    root = _find_toolkit(ctx)
    if root == None:
        print("Loom: nvcc not found (PATH, CUDA_PATH, /usr/local/cuda) or LOOM_NO_CUDA set; building without CUDA.")
        ctx.file("BUILD.bazel", """
package(default_visibility = ["//visibility:public"])
cc_library(name = "cuda_headers")
cc_library(name = "cudart")
cc_library(name = "nccl")
cc_library(name = "cublas")
cc_library(name = "cudnn")
cc_library(name = "nvrtc")
""")
        ctx.file("defs.bzl", "CUDA_AVAILABLE = False\nNVCC = \"\"\nCUDA_ROOT = \"\"\n")
        return
    ctx.symlink(root + "/include", "include")
    ctx.symlink(root + "/lib64", "lib64")
    ctx.file("BUILD.bazel", """
package(default_visibility = ["//visibility:public"])
cc_library(
    name = "cuda_headers",
    hdrs = glob(["include/**"]),
    includes = ["include"],
)
cc_library(
    name = "cudart",
    deps = [":cuda_headers"],
    linkopts = ["-L{root}/lib64", "-lcudart_static", "-ldl", "-lrt", "-lpthread"],
)
cc_library(
    name = "nccl",
    deps = [":cuda_headers"],
    linkopts = ["-L{root}/lib64", "-Wl,-rpath,{root}/lib64", "-lnccl"],
)
cc_library(
    name = "cublas",
    deps = [":cuda_headers"],
    linkopts = ["-L{root}/lib64", "-Wl,-rpath,{root}/lib64", "-lcublasLt", "-lcublas"],
)
cc_library(
    name = "cudnn",
    deps = [":cuda_headers"],
    linkopts = ["-L{root}/lib64", "-Wl,-rpath,{root}/lib64", "-lcudnn"],
)
cc_library(
    name = "nvrtc",
    deps = [":cuda_headers"],
    linkopts = ["-L{root}/lib64", "-Wl,-rpath,{root}/lib64", "-lnvrtc"],
)
""".format(root = root))
    ctx.file("defs.bzl", "CUDA_AVAILABLE = True\nNVCC = \"{root}/bin/nvcc\"\nCUDA_ROOT = \"{root}\"\n".format(root = root))

cuda_configure = repository_rule(
    implementation = _cuda_configure_impl,
    environ = ["CUDA_PATH", "PATH", "LOOM_NO_CUDA"],
    local = True,
)
