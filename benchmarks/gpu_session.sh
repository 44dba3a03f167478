#!/usr/bin/env bash
# The accelerator measurements of docs/train.md ("On a GPU"), as parts run in one call each.
#
#   benchmarks/gpu_session.sh PART [PART...]
#
#   env         the device, the software and a bf16 matrix product's TFLOP/s
#   scale       the DP step against the non-private step at BertBase S=512 (B=128) and GPT2Small S=1024 (B=64)
#   tests       the training tests on the accelerator (-v: each result is printed as it finishes)
#   throughput  records/s of BertTiny to BertBase at the paper's B=1024, S=512, beside its TPUv3 core
#   precision   float32 against bfloat16: two 2,000-step BertTiny runs at one σ̄ and seed
#   job         the paper config's BertTiny job through run_training, 150 steps
#   probe       one DP step's compilation and step time under XLA's compiler options
#   compile     one DP step's compilation, unrolled against scanned layers (BertTiny..BertLarge, GPT2Small,
#               GPT2Medium), then again through the persistent compilation cache
#
# DRY_RUN=1 rehearses every part on a CPU at tiny shapes (BertTiny, S 64, batch 4; the tests collected, not run),
# so that a lease is spent on measurements only. `scale` and `throughput` train scanned layers
# (training.scan_layers: a BertBase step compiles once per layer shape, not per layer).
#
# Compilation, not computation, took most of the earlier GPU runs: a BertMini DP step compiled in 37-46 s on an
# H200 and an unrolled BertBase step in over 100 s (docs/runs.md). The steps here scan their layers, which on
# the CPU compiles BertBase in a quarter of the time and BertLarge in about the same as BertBase. `scale` names
# the batches an earlier lease found (--batch auto costs one more compilation) and compiles only the steps of
# the ratio (non-private, ghost over the whole batch, ghost in microbatches in case the whole batch does not
# fit), at once. Two calls of a 15-minute lease, each within its 8 minutes:
#   DEADLINE=470 benchmarks/gpu_session.sh env scale compile throughput precision
#   DEADLINE=470 benchmarks/gpu_session.sh tests job probe
#
# Runs on a machine whose python3 has jax with a CUDA plugin. Wheels of the other dependencies in
# .whl/ are installed to /tmp/site first (pip download, docs/train.md); the packed paper data is
# results/paper/data/packed/seq=512 and the job spec .gpu/paper_berttiny.json (benchmarks/gpu_training.py
# spec). Every part has its own time box inside DEADLINE seconds; its log and JSON land in $WORK, packed
# into $OUT/gpu.tgz after every part (a lease returns only a few files).
set -u
[ $# -gt 0 ] || { echo "usage: [DRY_RUN=1] $0 PART [PART...] (env scale tests throughput precision job probe compile)" >&2; exit 2; }
for part in "$@"; do
    case $part in
    env | scale | tests | throughput | precision | job | probe | compile) ;;
    *) echo "unknown part $part (env scale tests throughput precision job probe compile)" >&2; exit 2 ;;
    esac
done
OUT=${OUT:-/tmp/gpu-out}
WORK=/tmp/gpu-work
mkdir -p "$OUT" "$WORK"
DEADLINE=${DEADLINE:-560}
start=$(date +%s)
export PYTHONUNBUFFERED=1
if [ -d .whl ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
fi
export PYTHONPATH="/tmp/site:$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
DATA=results/paper/data/packed/seq=512
SPEC=.gpu/paper_berttiny.json
# The shapes each part measures; DRY_RUN=1: tiny ones that a CPU runs in seconds
if [ "${DRY_RUN:-0}" = 1 ]; then
    BERT_SCALE="--model BertTiny --seq-len 64 --dtype float32 --batch 4 --microbatches 2"
    GPT_SCALE="--model GPT2Small --seq-len 64 --dtype float32 --batch 2 --microbatches 1"
    THROUGHPUT="--models BertTiny --batch 4 --seq-len 64 --dtype float32 --steps 1"
    COMPILE_MODELS="BertTiny"
    PRECISION_STEPS=4
    TESTS_MODE=--collect-only
else
    BERT_SCALE="--model BertBase --seq-len 512 --dtype bfloat16 --batch 128 --microbatches 32"
    GPT_SCALE="--model GPT2Small --seq-len 1024 --dtype bfloat16 --batch 64 --microbatches 16"
    THROUGHPUT="--models BertTiny,BertMini,BertSmall,BertMedium,BertBase,BertLarge --dtype bfloat16"
    COMPILE_MODELS="BertTiny,BertBase,BertLarge,GPT2Small,GPT2Medium"
    PRECISION_STEPS=2000
    TESTS_MODE=-v
fi

# box SECONDS NAME COMMAND...: run COMMAND for at most SECONDS (less if the deadline is nearer)
box() {
    local want=$1 name=$2 left
    shift 2
    left=$((DEADLINE - ($(date +%s) - start)))
    [ "$want" -lt "$left" ] || want=$left
    if [ "$want" -lt 15 ]; then
        echo "== $name: skipped (deadline)" | tee -a "$WORK/summary.txt"
        return
    fi
    local t0=$(date +%s)
    timeout "$want" "$@" >"$WORK/$name.log" 2>&1
    echo "== $name: rc=$? in $(($(date +%s) - t0)) s (box $want s)" | tee -a "$WORK/summary.txt"
    tar czf "$OUT/gpu.tgz" -C "$WORK" .
}

for part in "$@"; do
    case $part in
    env)
        {
            nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv
            python3 -c "import jax, jaxlib, flax, optax; print('jax', jax.__version__, 'flax', flax.__version__, 'optax', optax.__version__, jax.devices())"
        } >"$WORK/env.txt" 2>&1
        box 20 matmul python3 - <<'EOF'
import time, jax, jax.numpy as jnp
n = 8192
a, b = (jax.random.normal(jax.random.key(i), (n, n), jnp.bfloat16) for i in (1, 2))
f = jax.jit(lambda x, y: x @ y)
f(a, b).block_until_ready()
times = []
for _ in range(10):
    t = time.perf_counter(); f(a, b).block_until_ready(); times.append(time.perf_counter() - t)
times.sort()
print(f"bf16 {n}^3 matmul: {2 * n**3 / times[5] / 1e12:.0f} TFLOP/s (median of 10)")
EOF
        ;;
    scale)
        # shellcheck disable=SC2086 # the shapes are several words
        box 100 dp_step_bertbase python3 benchmarks/dp_step.py $BERT_SCALE --scan-layers --variants minimal \
            --steps 5 --rounds 2 --no-opacus --compile-threads 3 --json-out "$WORK/dp_step_bertbase.json"
        # shellcheck disable=SC2086
        box 100 dp_step_gpt2small python3 benchmarks/dp_step.py $GPT_SCALE --scan-layers --variants minimal \
            --steps 5 --rounds 2 --no-opacus --compile-threads 3 --json-out "$WORK/dp_step_gpt2small.json"
        ;;
    tests)
        # several pytest workers share the one device: no preallocation of its memory
        XLA_PYTHON_CLIENT_PREALLOCATE=false box 300 tests python3 -m pytest $TESTS_MODE -n 8 -p no:cacheprovider \
            -p no:benchmark --junitxml="$WORK/tests.xml" tests/test_dp.py tests/test_model.py tests/test_decoder.py \
            tests/test_train.py tests/test_private_training.py tests/test_finetune_init.py tests/test_faults.py \
            tests/test_samplers.py tests/test_truncation.py tests/test_scan_layers.py
        ;;
    throughput)
        # shellcheck disable=SC2086
        box 90 throughput_bf16 python3 benchmarks/throughput.py $THROUGHPUT --scan-layers --compile-threads 6 \
            --json-out "$WORK/throughput_bf16.json"
        ;;
    precision)
        box 60 precision python3 benchmarks/gpu_training.py precision --spec $SPEC --data $DATA --out /tmp/precision \
            --steps $PRECISION_STEPS --batch 32 --json-out "$WORK/precision.json"
        ;;
    job)
        box 60 paper_job python3 benchmarks/gpu_training.py job --spec $SPEC --data $DATA --out /tmp/job \
            --steps 150 --log-every 50 --fallback-microbatch 128 --json-out "$WORK/paper_job.json"
        ;;
    compile)
        # first in an empty persistent cache, then again through it (what every later job of a shape pays)
        rm -rf /tmp/jax-compile-cache
        for pass in first cached; do
            [ "$pass" = first ] && want=60 || want=30
            JAX_COMPILATION_CACHE_DIR=/tmp/jax-compile-cache JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS=0 \
                box "$want" "compile_$pass" python3 benchmarks/scan_layers.py compile --models "$COMPILE_MODELS"
        done
        ;;
    probe)
        box 110 compile_probe python3 benchmarks/compile_probe.py --model BertMini --batch 256 --seq-len 512 \
            --json-out "$WORK/compile_probe.json"
        ;;
    esac
done
echo "== total $(($(date +%s) - start)) s" | tee -a "$WORK/summary.txt"
tar czf "$OUT/gpu.tgz" -C "$WORK" .
for f in "$WORK"/*.log; do echo "--- $f"; grep -v -e cuda_timer -e PytestBenchmarkWarning -e warner "$f" | tail -n 14 | cut -c1-400; done
cat "$WORK/env.txt" 2>/dev/null
cat "$WORK/summary.txt"
