#!/bin/sh
# Runs scripts/test_report_test.py with Debian's python3.
exec /usr/bin/python3 scripts/test_report_test.py -v
