#!/bin/bash
# The scaling benchmark on one CUDA GPU (issue #42), sized for about 8 minutes on an H100:
#
#     bash benchmarks/gpu_scale.sh                 # OUT=benchmarks/results/scale_gpu
#     STEPS="8b qwen" bash benchmarks/gpu_scale.sh # a subset
#
# Random-initialised models from the real configurations (benchmarks/bench_scale.py SHAPES), bfloat16, the prompts
# packed from the repository's XOR-AttriQA passages (or --docs from the data cache). Each point runs in its own
# process under a time limit and is appended to $OUT/points.jsonl as it ends, so a run cut short keeps every point it
# finished and a rerun resumes; $OUT/results.json and $OUT/README.md are rewritten from the points at the end of each
# step. Steps (each under its own limit):
#   8b:    Llama-3.1-8B, prompts 1k/4k/16k/32k, answers 16 and 128 tokens (the targets: a 1k prompt with a
#          128-token answer, attribution <= 0.5x generation and peak <= weights + 25 %; 32k attributed without OOM)
#   qwen:  Qwen2.5-7B and Mistral-7B, 1k and 16k prompts, 128-token answers
#   70b:   Llama-3.1-70B in 4-bit (bitsandbytes NF4), 1k and 4k prompts, 128 tokens: needs an H200 (or 2 H100s)
#          and `pip install bitsandbytes`; not in the default steps
# Never measured on a CPU: this file has not run yet (the session that wrote it had no GPU).
set -u
OUT=${OUT:-benchmarks/results/scale_gpu}
STEPS=${STEPS:-8b qwen}
py=${PYTHON:-python3}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
bench() {  # bench SECONDS ARGS...: one step under its limit, its output appended to $OUT/log.txt
    local limit=$1
    shift
    timeout "$limit" "$py" benchmarks/bench_scale.py --gpu --out "$OUT" "$@" 2>&1 | tee -a "$OUT/log.txt"
}
for step in $STEPS; do
    case $step in
        8b)   bench 330 --models llama-3.1-8b --prompts 1024 4096 16384 32768 --answers 16 128 --point-timeout 120 ;;
        qwen) bench 150 --models qwen2.5-7b mistral-7b --prompts 1024 16384 --answers 128 --point-timeout 70 ;;
        70b)  bench 420 --models llama-3.1-70b --prompts 1024 4096 --answers 128 --point-timeout 200 ;;
        *)    echo "unknown step $step" >&2 ;;
    esac
done
"$py" benchmarks/bench_scale.py --render "$OUT" 2>/dev/null || true
