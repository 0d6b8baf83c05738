#!/bin/sh
# python-torch2.sh - tests/python.sh again, under torch 2.x from PyPI: the build's virtual environment, made by
# `make venv` (tests/venv.sh, tests/python/torch2-requirements.txt), or $TORCH2_PYTHON. python.sh knows where
# the two torches' DDPs differ (static_graph, bf16_compress_hook) and expects each its own. Skips (77) without
# that environment.
py=${TORCH2_PYTHON:-}
if [ -z "$py" ] || ! [ -x "$py" ]; then
    echo "SKIP: no torch 2.x environment (${py:-TORCH2_PYTHON unset}): run 'make venv' first"
    exit 77
fi
if ! "$py" -c 'import sys, torch; sys.exit(int(torch.__version__.split(".")[0]) < 2)'; then
    echo "SKIP: $py has no torch 2.x"
    exit 77
fi
PYTHON_TORCH=$py
export PYTHON_TORCH
exec sh "$(dirname "$0")/python.sh"
