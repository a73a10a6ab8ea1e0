#!/usr/bin/env bash
# The GPU check: on a machine with a CUDA GPU and CuPy (no network needed), build
# fastad in place, run the device tests on the GPU (tests/gpu with the real
# backend, and the kernel compile checks), then the GPU benchmark beside
# PyTorch CUDA, and print a summary. About 3 minutes on an H200.
# Usage: bash bench/gpu_check.sh [OUT_DIR]   (logs and gpu_bench.json go to OUT_DIR)
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:-${OUT:-/tmp/fastad-gpu-check}}
mkdir -p "$out"
py=${PYTHON:-python3}
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}

echo "== build"
if ! $py setup.py build_ext --inplace -j "$(nproc)" > "$out/build.log" 2>&1; then
    tail -40 "$out/build.log"; exit 1
fi
$py - <<'PY' || exit 1
import cupy, fastad as fa
assert fa.cuda.is_available(), "CuPy sees no GPU"
props = cupy.cuda.runtime.getDeviceProperties(0)
print("GPU:", props["name"].decode(), "| CuPy", cupy.__version__, "| devices:", fa.cuda.device_count())
PY

echo "== GPU tests"
FASTAD_DEVICE_TESTS=gpu timeout 240 $py -m pytest tests/gpu tests/test_cuda_compile.py -q \
    -p no:cacheprovider -rfE 2>&1 | tee "$out/gpu_tests.log"
tests=${PIPESTATUS[0]}

echo "== GPU benchmark"
timeout 240 $py bench/gpu.py --json "$out/gpu_bench.json" 2>&1 | tee "$out/gpu_bench.log"
bench=${PIPESTATUS[0]}

echo "== summary"
echo "tests: $(tail -1 "$out/gpu_tests.log") (exit $tests)"
grep -E "ns/(step|sample|token)" "$out/gpu_bench.log" || echo "benchmark: no figures (exit $bench)"
[ "$tests" = 0 ] && [ "$bench" = 0 ]
