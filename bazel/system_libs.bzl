"""system_library: binds one Debian-packaged library as a local repository.

The headers are on the compiler's default include path (/usr/include), so the
repository's single target carries only the link flags (and, where the
library's headers need them, `defines`). Nothing is downloaded.
`lib_glob` links every shared library in the system library folder whose name
starts with the given prefix (Abseil ships ~80 small libraries whose set varies
between releases).
"""

LIBDIR = "/usr/lib/x86_64-linux-gnu"

def _system_library_impl(ctx):
    linkopts = list(ctx.attr.linkopts)
    if ctx.attr.lib_glob:
        res = ctx.execute(["ls", LIBDIR])
        for f in res.stdout.splitlines():
            if f.startswith(ctx.attr.lib_glob) and f.endswith(".so"):
                linkopts.append("-l" + f[3:-3])
    ctx.file("WORKSPACE", 'workspace(name = "%s")\n' % ctx.name)
    ctx.file("BUILD.bazel", """
package(default_visibility = ["//visibility:public"])
cc_library(
    name = "lib",
    linkopts = {linkopts},
    defines = {defines},
)
""".format(linkopts = repr(linkopts), defines = repr(list(ctx.attr.defines))))

system_library = repository_rule(
    implementation = _system_library_impl,
    attrs = {
        "linkopts": attr.string_list(),
        "lib_glob": attr.string(),
        "defines": attr.string_list(),
    },
    local = True,
)
