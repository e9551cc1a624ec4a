#!/bin/sh
# Runs tests/parity/gpt_torch_residual_test.py with Debian's python3 (its torch).
exec /usr/bin/python3 tests/parity/gpt_torch_residual_test.py -v
