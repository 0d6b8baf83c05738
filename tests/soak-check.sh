#!/bin/sh
# soak-check.sh - the short soak that make check runs (tests/soak.sh 12).
exec "$(dirname "$0")/soak.sh" 12
