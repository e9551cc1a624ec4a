"""loom_proto_library: runs protoc and the gRPC C++ plugin on .proto files.

Bazel 4's native proto rules would download protobuf's sources; this macro uses
Debian's protoc and grpc_cpp_plugin instead and links the system libraries.
"""

def loom_proto_library(name, srcs, deps = [], grpc = False, visibility = None):
    outs = []
    for src in srcs:
        base = src[:-len(".proto")]
        outs += [base + ".pb.h", base + ".pb.cc"]
        if grpc:
            outs += [base + ".grpc.pb.h", base + ".grpc.pb.cc"]
    pkg = native.package_name()
    grpc_flags = "--grpc_out=$(GENDIR) --plugin=protoc-gen-grpc=/usr/bin/grpc_cpp_plugin" if grpc else ""
    native.genrule(
        name = name + "_protoc",
        srcs = srcs + [d + "_srcs" for d in deps],
        outs = outs,
        cmd = "protoc -I. --cpp_out=$(GENDIR) " + grpc_flags + " " +
              " ".join(["$(location %s)" % s for s in srcs]),
    )
    native.filegroup(name = name + "_srcs", srcs = srcs, visibility = visibility)
    native.cc_library(
        name = name,
        srcs = [o for o in outs if o.endswith(".cc")],
        hdrs = [o for o in outs if o.endswith(".h")],
        deps = deps + ["//third_party:protobuf"] + (["//third_party:grpc"] if grpc else []),
        visibility = visibility,
    )

def loom_py_proto(name, srcs, deps = [], grpc = False, visibility = None):
    """Python modules (<base>_pb2.py, and <base>_pb2_grpc.py with grpc = True)
    from Debian's protoc and grpc_python_plugin. Import them as
    `from proto.loom.v1 import service_pb2` with the runfiles root on sys.path.
    """
    outs = []
    for src in srcs:
        base = src[:-len(".proto")]
        outs.append(base + "_pb2.py")
        if grpc:
            outs.append(base + "_pb2_grpc.py")
    grpc_flags = "--grpc_python_out=$(GENDIR) --plugin=protoc-gen-grpc_python=/usr/bin/grpc_python_plugin" if grpc else ""
    native.genrule(
        name = name,
        srcs = srcs + [d + "_srcs" for d in deps],
        outs = outs,
        cmd = "protoc -I. --python_out=$(GENDIR) " + grpc_flags + " " +
              " ".join(["$(location %s)" % s for s in srcs]),
        visibility = visibility,
    )
