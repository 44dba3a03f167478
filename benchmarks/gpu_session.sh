#!/usr/bin/env bash
# The accelerator measurements of docs/train.md ("Measured on an H100"), as one script per lease.
#
#   benchmarks/gpu_session.sh measure   # environment, compiler options, DP step at scale, throughput per BERT size
#   benchmarks/gpu_session.sh tests     # the training tests on the accelerator, bf16 against fp32, the paper job
#
# Compilation, not computation, takes most of a GPU run: `measure` first times one DP step's compilation
# under XLA's options (benchmarks/compile_probe.py) and applies the option it chooses (saved in
# $WORK/xla_flags, which a later part on the same machine reuses) to everything after it.
#
# Runs on a machine whose python3 has jax with a CUDA plugin. Wheels of the other dependencies in
# .whl/ are installed to /tmp/site first (pip download, docs/train.md); the packed paper data is
# results/paper/data/packed/seq=512 and the job spec .gpu/paper_berttiny.json (benchmarks/gpu_training.py
# spec). Every part has its own time box inside DEADLINE seconds; its log and JSON land in $WORK, packed
# into $OUT/<part>.tgz after every part (a lease returns only a few files).
set -u
part=${1:?measure or tests}
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
if [ -s "$WORK/xla_flags" ]; then
    export XLA_FLAGS="${XLA_FLAGS:+$XLA_FLAGS }$(cat "$WORK/xla_flags")"
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
    tar czf "$OUT/$part.tgz" -C "$WORK" .
}

if [ "$part" = measure ]; then
    {
        nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv
        python3 -c "import jax, jaxlib, flax, optax; print('jax', jax.__version__, 'flax', flax.__version__, 'optax', optax.__version__, jax.devices())"
    } >"$WORK/env.txt" 2>&1
    box 25 matmul python3 - <<'EOF'
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
    box 110 compile_probe python3 benchmarks/compile_probe.py --model BertMini --batch 256 --seq-len 512 \
        --flags-out "$WORK/xla_flags" --json-out "$WORK/compile_probe.json"
    if [ -s "$WORK/xla_flags" ]; then
        export XLA_FLAGS="${XLA_FLAGS:+$XLA_FLAGS }$(cat "$WORK/xla_flags")"
    fi
    echo "XLA_FLAGS=${XLA_FLAGS:-}" | tee -a "$WORK/summary.txt"
    box 110 dp_step_bertbase python3 benchmarks/dp_step.py --model BertBase --seq-len 512 --dtype bfloat16 \
        --batch auto --microbatches 16 --variants accelerator --steps 5 --rounds 2 --no-opacus --compile-threads 4 \
        --json-out "$WORK/dp_step_bertbase.json"
    box 100 dp_step_gpt2small python3 benchmarks/dp_step.py --model GPT2Small --seq-len 1024 --dtype bfloat16 \
        --batch auto --microbatches 8 --variants accelerator --steps 5 --rounds 2 --no-opacus --compile-threads 4 \
        --json-out "$WORK/dp_step_gpt2small.json"
    box 140 throughput_bf16 python3 benchmarks/throughput.py --dtype bfloat16 --compile-threads 6 \
        --json-out "$WORK/throughput_bf16.json"
elif [ "$part" = tests ]; then
    # several pytest workers share the one device: no preallocation of its memory
    XLA_PYTHON_CLIENT_PREALLOCATE=false box 150 tests python3 -m pytest -q -n 8 -p no:cacheprovider \
        --junitxml="$WORK/tests.xml" tests/test_dp.py tests/test_model.py tests/test_decoder.py tests/test_train.py \
        tests/test_private_training.py tests/test_finetune_init.py tests/test_faults.py tests/test_samplers.py \
        tests/test_truncation.py
    box 60 precision python3 benchmarks/gpu_training.py precision --spec $SPEC --data $DATA --out /tmp/precision \
        --steps 2000 --batch 32 --json-out "$WORK/precision.json"
    box 60 paper_job python3 benchmarks/gpu_training.py job --spec $SPEC --data $DATA --out /tmp/job \
        --steps 150 --log-every 50 --fallback-microbatch 128 --json-out "$WORK/paper_job.json"
fi
echo "== total $(($(date +%s) - start)) s" | tee -a "$WORK/summary.txt"
tar czf "$OUT/$part.tgz" -C "$WORK" .
for f in "$WORK"/*.log; do echo "--- $f"; tail -n 14 "$f" | cut -c1-400; done
cat "$WORK/env.txt" 2>/dev/null
cat "$WORK/summary.txt"
