#!/bin/sh
# Runs bench/cuda/model_summary_test.py with Debian's python3.
exec /usr/bin/python3 bench/cuda/model_summary_test.py -v
