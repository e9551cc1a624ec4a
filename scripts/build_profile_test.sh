#!/bin/sh
# Runs scripts/build_profile_test.py with Debian's python3.
exec /usr/bin/python3 scripts/build_profile_test.py -v
