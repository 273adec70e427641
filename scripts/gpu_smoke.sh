#!/usr/bin/env bash
# GPU smoke test: the whole pipeline on the shipped demo corpus with the vLLM backend.
#
#   scripts/gpu_smoke.sh [MODEL] [TP]
#
# MODEL defaults to a small instruct model that fits one GPU (any Hugging Face id or
# local folder vLLM can load); TP is the tensor-parallel size. Needs `pip install vllm`
# in .venv (`make setup` first) and the model weights (online, or HF_HOME pre-filled).
# It runs OpenIE -> MiniLM embeddings -> graph -> HippoRAG 2 with the
# LLM filter -> QA, then the dense baseline, and prints both rows of metrics.
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=${1:-Qwen/Qwen2.5-1.5B-Instruct}
TP=${2:-1}
OUT=${OUT_DIR:-runs/gpu_smoke}
COMMON=(dataset=demo embedding=minilm llm=llama33_70b_vllm "llm.model=$MODEL" "llm.tensor_parallel_size=$TP"
        llm.max_model_len=4096 llm.constrained_decoding=true qa=reader cache_dir=.hipporag2_cache_gpu progress=false)
.venv/bin/python -c "import vllm, torch; assert torch.cuda.is_available(), 'no CUDA device'; print('vllm', vllm.__version__)"
.venv/bin/hipporag2 "${COMMON[@]}" retrieval=hipporag2 retrieval.filter=llm "run_dir=$OUT/hipporag2"
.venv/bin/hipporag2 "${COMMON[@]}" retrieval=dense "run_dir=$OUT/dense"
.venv/bin/hipporag2-report "$OUT" --allow-mixed-data
