#!/bin/bash
# One device-tool call: GPU tests of the Triton path, then the acceptance benchmarks.
#   bash benchmarks/gpu/run_all.sh [tests] [kernels] [tiny] [gpt2]     (default: all)
# Needs pydynamo._C for the gpt2 part: carried prebuilt in .gpucarry/ (see the report) or
# built with `pip install --no-build-isolation -e .`. Results land in $OUT (or /tmp/out).
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
parts=${*:-tests kernels tiny gpt2}
if [ -d .gpucarry ] && ! python3 -c "import pydynamo._C" 2>/dev/null; then
    cp .gpucarry/_C*.so pydynamo/ 2>/dev/null
fi
python3 -c "import torch, triton, sys; print(sys.version, torch.__version__, triton.__version__, torch.cuda.get_device_name())"
for p in $parts; do
  case $p in
    tests) timeout 300 python3 -m pytest -q -p no:cacheprovider tests/codegen_triton/test_gpu.py tests/codegen_triton/test_triton.py \
             2>&1 | tee "$OUT/gpu_tests.log" | tail -40 ;;
    *) timeout 420 python3 benchmarks/bench_gpu.py --part $p --out "$OUT/gpu.jsonl" 2>&1 \
             | grep -v Warning | tail -30 ;;
  esac
done
cp "$OUT/gpu.jsonl" benchmarks/results/ 2>/dev/null; true
