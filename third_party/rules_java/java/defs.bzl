"""Offline shim of rules_java: forwards to the Java rules built into Bazel 4."""

def java_binary(**attrs):
    native.java_binary(**attrs)

def java_import(**attrs):
    native.java_import(**attrs)

def java_library(**attrs):
    native.java_library(**attrs)

def java_runtime(**attrs):
    native.java_runtime(**attrs)

def java_toolchain(**attrs):
    native.java_toolchain(**attrs)

def java_test(**attrs):
    native.java_test(**attrs)

def java_plugin(**attrs):
    native.java_plugin(**attrs)
