"""Finds the CUDA toolkit at fetch time and writes @local_cuda.

LOOM_NO_CUDA=1 in the environment builds as if no toolkit were installed.
When nvcc is on PATH (or CUDA_PATH points at a toolkit), @local_cuda exposes the
toolkit's headers and libraries (CUDA runtime, NCCL, cuBLAS/cuBLASLt, cuDNN, NVRTC)
and `defs.bzl` sets CUDA_AVAILABLE = True. Otherwise the repository holds empty
targets, CUDA_AVAILABLE = False, and the build prints why CUDA is left out.
"""

def _lib_dir(ctx, root):
    """The toolkit's library folder (the one holding libcudart_static.a), or None."""
    for sub in ["lib64", "lib", "targets/x86_64-linux/lib"]:
        if ctx.path(root + "/" + sub + "/libcudart_static.a").exists:
            return root + "/" + sub
    return None

def _is_toolkit(ctx, root):
    return (root != None and ctx.path(root + "/bin/nvcc").exists and
            ctx.path(root + "/include/cuda_runtime.h").exists and
            _lib_dir(ctx, root) != None)

def _nvcc_top(ctx, nvcc):
    """Asks nvcc where its toolkit is: `nvcc --dryrun` prints `#$ _HERE_=<root>/bin`.

    This sees through wrapper scripts (such as /usr/local/bin/nvcc that execs
    the real compiler), where the path of the script says nothing.
    """
    res = ctx.execute([str(nvcc), "--dryrun", "-E", "-x", "cu", "/dev/null"])
    for line in (res.stdout + "\n" + res.stderr).split("\n"):
        line = line.strip()
        if line.startswith("#$ _HERE_="):
            here = line[len("#$ _HERE_="):]
            real = ctx.execute(["readlink", "-f", here]).stdout.strip()
            if real.endswith("/bin"):
                return real[:-len("/bin")]
    return None

def _find_toolkit(ctx):
    """Returns (root, lib_dir) of a complete toolkit, or None."""
    if ctx.os.environ.get("LOOM_NO_CUDA", "") not in ["", "0"]:
        return None
    candidates = []
    env_path = ctx.os.environ.get("CUDA_PATH", "")
    if env_path:
        candidates.append(env_path)
    nvcc = ctx.which("nvcc")
    if nvcc != None:
        real = ctx.execute(["readlink", "-f", str(nvcc)]).stdout.strip()
        if real.endswith("/bin/nvcc"):
            candidates.append(real[:-len("/bin/nvcc")])
        top = _nvcc_top(ctx, nvcc)
        if top != None:
            candidates.append(top)
    candidates.append("/usr/local/cuda")
    for root in candidates:
        real = ctx.execute(["readlink", "-f", root]).stdout.strip() or root
        if _is_toolkit(ctx, real):
            return (real, _lib_dir(ctx, real))
    return None

def _cuda_configure_impl(ctx):
    found = _find_toolkit(ctx)
    if found == None:
        print("Loom: no complete CUDA toolkit (nvcc, include/cuda_runtime.h, libcudart_static.a) under CUDA_PATH, the nvcc on PATH or /usr/local/cuda, or LOOM_NO_CUDA is set; building without CUDA.")
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
    root, lib = found
    ctx.symlink(root + "/include", "include")
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
    linkopts = ["-L{lib}", "-lcudart_static", "-ldl", "-lrt", "-lpthread"],
)
cc_library(
    name = "nccl",
    deps = [":cuda_headers"],
    linkopts = ["-L{lib}", "-Wl,-rpath,{lib}", "-lnccl"],
)
cc_library(
    name = "cublas",
    deps = [":cuda_headers"],
    linkopts = ["-L{lib}", "-Wl,-rpath,{lib}", "-lcublasLt", "-lcublas"],
)
cc_library(
    name = "cudnn",
    deps = [":cuda_headers"],
    linkopts = ["-L{lib}", "-Wl,-rpath,{lib}", "-lcudnn"],
)
cc_library(
    name = "nvrtc",
    deps = [":cuda_headers"],
    linkopts = ["-L{lib}", "-Wl,-rpath,{lib}", "-lnvrtc"],
)
""".format(lib = lib))
    ctx.file("defs.bzl", "CUDA_AVAILABLE = True\nNVCC = \"{root}/bin/nvcc\"\nCUDA_ROOT = \"{root}\"\n".format(root = root))

cuda_configure = repository_rule(
    implementation = _cuda_configure_impl,
    environ = ["CUDA_PATH", "PATH", "LOOM_NO_CUDA"],
    local = True,
)
