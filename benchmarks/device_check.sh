#!/usr/bin/env bash
# The GPU check for a machine with one NVIDIA GPU, in about 5 minutes: every precision mode, every strategy that fits
# one GPU, NVML utilisation and the ResNet18 recipe's training throughput, one PASS / FAIL / CANNOT line each
# (benchmarks/device_check.py). Installs the project and the GPU extras first; an extra that does not install here
# (no wheel for this CUDA or torch) leaves its modes as CANNOT rows that name the missing package.
#   benchmarks/device_check.sh [--out device_check.md] [device_check.py options]
set -uo pipefail
cd "$(dirname "$0")/.."
make install >/dev/null || { echo "device check: make install failed" >&2; exit 1; }
PIP=".venv/bin/python -m pip install --quiet --disable-pip-version-check"
for extra in deepspeed quant fp8; do  # each on its own, with a time limit: one that must build from source is skipped
    timeout 240 $PIP -e ".[$extra]" >/dev/null 2>&1 || echo "device check: the $extra extra did not install (its rows say CANNOT)" >&2
done
exec .venv/bin/python benchmarks/device_check.py "$@"
