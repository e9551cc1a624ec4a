#!/bin/sh
# tools/loom_export.py's tests, with Debian's python (torch 1.13 and onnx).
exec /usr/bin/python3 tools/loom_export_test.py
