#!/bin/bash
# One device-tool call: GPU tests of the Triton path, the acceptance benchmarks, the OpInfo sweep.
#   bash benchmarks/gpu/run_all.sh [tests] [gpt2] [opinfo] [kernels] [tiny] [launch] [budget] [hostprof] [calldepth] [training]
#   (default: the first five; GPT2_DTYPES="float32 bfloat16" picks the gpt2 part's dtypes and
#   LM_MODELS="gpt2 gpt2-lmhead llama" its models (each under its own T_gpt2 limit),
#   TRAIN_DTYPES="fp32 bf16-autocast" the training part's: GPT-2 small training steps)
# Needs pydynamo._C for the gpt2 part: carried prebuilt in .gpucarry/ or built with
# `pip install --no-build-isolation -e .`. Results land in $OUT (or /tmp/out); the current figures
# are kept, with their commands, in benchmarks/results/GPU.md. Each part runs under its own time
# limit (seconds; env T_<part>) so one call stays inside the device limit.
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
parts=${*:-tests gpt2 opinfo kernels tiny}
if [ -d .gpucarry ] && ! python3 -c "import pydynamo._C" 2>/dev/null; then
    cp .gpucarry/_C*.so pydynamo/ 2>/dev/null
fi
python3 -c "import torch, triton, sys; print(sys.version, torch.__version__, triton.__version__, torch.cuda.get_device_name())"
for p in $parts; do
  t=$(eval echo \${T_$p:-420})
  echo "== $p (limit ${t}s)"
  case $p in
    tests) timeout "$t" python3 -m pytest -q -p no:cacheprovider tests/codegen_triton/test_gpu.py \
             tests/codegen_triton/test_triton.py tests/codegen_triton/test_transformer_kernels.py \
             tests/codegen_triton/test_host_scalars.py \
             tests/operating/test_cudagraph_outputs.py tests/operating/test_cudagraphs.py \
             2>&1 | tee "$OUT/gpu_tests.log" | grep -v "^\.*$" | tail -15 ;;
    launch) timeout "$t" python3 benchmarks/gpu/launch_cost.py 2>&1 | tee "$OUT/launch_cost.log" \
             | grep -v Warning ;;
    budget) timeout "$t" python3 benchmarks/gpu/host_budget.py 2>&1 | tee "$OUT/host_budget.log" \
             | grep -v Warning ;;
    calldepth) timeout "$t" python3 benchmarks/bench_call_depth.py --depths 0-20 --iters 50 2>&1 \
             | tee "$OUT/call_depth.log" | tail -6 ;;
    hostprof) timeout "$t" python3 benchmarks/gpu/host_profile.py --n 20 --top 30 \
             > "$OUT/host_profile.log" 2>&1; grep "^==" "$OUT/host_profile.log" ;;
    gpt2) for m in ${LM_MODELS:-gpt2}; do for dt in ${GPT2_DTYPES:-float32}; do
             timeout "$t" python3 benchmarks/bench_gpu.py --part gpt2 --model $m --dtype $dt \
               --out "$OUT/gpu.jsonl" 2>&1 | grep -v Warning | tail -30; done; done ;;
    training) for dt in ${TRAIN_DTYPES:-fp32 bf16-autocast}; do
             timeout "$t" python3 benchmarks/bench_training.py --model gpt2-small --dtype $dt \
               --json "$OUT/training.jsonl" 2>&1 | grep -v Warning | tail -14; done ;;
    opinfo) timeout "$t" python3 benchmarks/gpu/opinfo_gpu.py --budget "${OPINFO_BUDGET:-400}" \
             --samples 3 --out "$OUT/gpu_opinfo.json" 2>&1 | grep -v Warning | tail -20 ;;
    *) timeout "$t" python3 benchmarks/bench_gpu.py --part $p --out "$OUT/gpu.jsonl" 2>&1 \
             | grep -v Warning | tail -30 ;;
  esac
done
true
