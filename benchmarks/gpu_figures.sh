#!/bin/bash
# The GPU figures of the README's "On a GPU" section, in one run on a machine with a CUDA GPU:
#
#     OUT=benchmarks/results/gpu bash benchmarks/gpu_figures.sh
#
# Needs mirage's dependencies, the reference (inseq), the embedded model (or its conversion cache under
# $MIRAGE_CACHE_DIR) and the data in mirage's data cache (`mirage data get eli5-alce xor-attriqa-match:val,fi,ru`, or
# `--from` a local copy). Each step has its own time limit
# and writes its JSON as soon as it ends, so a step that runs out of time loses only itself:
#   1. the attribution benchmark: mirage against the reference (inseq) on the same GPU, both in the model's default
#      GPU dtype (bfloat16), two ELI5 answers and the answer-length sweep (16/32/64 tokens and whole);
#   2. the precision benchmark on the GPU: float32 (the baseline), bfloat16, float16 and CCI-only bfloat16, with
#      every variant's per-answer scores kept (precision_gpu_details.json) for the CPU comparison, which runs
#      afterwards on a CPU: python benchmarks/bench_precision.py --answers-from precision_gpu_details.json --variants
#   3. the XOR-AttriQA scoring benchmark on the GPU (before/after, and the passes of 8 items batched: CTI's alone
#      for the learned setting, CTI's and CCI's for after_batch8), in the GPU default bfloat16;
#   4. the same in float32 (before, after, after_batch8), where batched and one-at-a-time passes differ only by float
#      rounding, so whether their tables agree is a test of the batched path rather than of bfloat16;
#   5. where one attribution's time goes (benchmarks/profile_attribution.py): new prompt shapes against warm repeats,
#      before and after the reference has run, with torch.profiler's busiest operators.
set -u
OUT=${OUT:-benchmarks/results/gpu}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
DATA=xor-attriqa-match:val,fi,ru  # a dataset of the data cache: fi.jsonl, ru.jsonl and val.jsonl
py=${PYTHON:-python3}
STEPS=${STEPS:-convert attribution precision xor_scoring xor_scoring_fp32 profile}  # a subset reruns only those steps
step() {  # step NAME SECONDS COMMAND...: run one step under its limit, its output appended to $OUT/log.txt too
    local name=$1 limit=$2
    shift 2
    [[ " $STEPS " == *" $name "* ]] || return 0
    echo "== $(date +%T) $name (limit ${limit}s): $*" | tee -a "$OUT/log.txt"
    local t0=$SECONDS
    timeout "$limit" "$@" 2>&1 | grep --line-buffered -v -e "Warning" -e "warnings.warn" | tee -a "$OUT/log.txt"
    echo "== $name: exit ${PIPESTATUS[0]} after $((SECONDS - t0)) s" | tee -a "$OUT/log.txt"
}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
$py -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"
step convert 90 $py -c "from mirage.attribution.models import embedded_checkpoint; print(embedded_checkpoint('smollm2-135m-instruct'))"
step attribution 200 $py benchmarks/bench_attribution.py --device cuda --eli5 2 --sweep answer \
    --out "$OUT/attribution_gpu.json"
step precision 100 $py benchmarks/bench_precision.py --device cuda --eli5 3 --variants bfloat16 float16 cci_bfloat16 \
    --details "$OUT/precision_gpu_details.json" --out "$OUT/precision_gpu.json"
step xor_scoring 150 $py benchmarks/bench_xor_scoring.py "$DATA" --limit 10 --device cuda \
    --batch-items 8 --out "$OUT/xor_scoring_gpu.json"
step xor_scoring_fp32 120 $py benchmarks/bench_xor_scoring.py "$DATA" --limit 10 --device cuda \
    --dtype float32 --batch-items 8 --runs before after after_batch8 --out "$OUT/xor_scoring_gpu_fp32.json"
step profile 120 $py benchmarks/profile_attribution.py --device cuda --out "$OUT/profile_gpu.json"
