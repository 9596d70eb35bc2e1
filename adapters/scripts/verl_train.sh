#!/usr/bin/env bash
# Train a SearchQA agent with veRL, with the Search-R1 / study defaults of SPEC §5.
#
#   adapters/scripts/verl_train.sh ALGO PROFILE [extra hydra overrides ...]
#
#   ALGO     ppo  — GAE (λ = 1, γ = 1), critic lr 1e-5, actor lr 1e-6, KL β = 0.001 in the reward
#            grpo — group size 5, actor lr 5e-7, KL loss β = 0.001 (low-variance estimator), no critic
#   PROFILE  8xh100 — the papers' setup: 8 GPUs, FSDP with parameter/optimizer offload, vLLM tp 1 at 0.6
#                     memory, 512 prompts per step, mini-batch 256, micro-batch 8 per GPU (64 in all),
#                     500 steps, checkpoint every 100
#            smoke  — one GPU, a 0.5B instruct model, 8 prompts, 5 steps: checks the wiring end to end
#
# Environment (defaults in brackets):
#   MODEL            [Qwen/Qwen2.5-3B for 8xh100, Qwen/Qwen2.5-0.5B-Instruct for smoke] (path or hub id)
#   DATASET          [world] dataset for python -m searchenv.adapters.verl_data when DATA_DIR has no parquet
#   DATA_DIR         [$RUN_DIR/data] holds train.parquet and test.parquet
#   RETRIEVER        [http://127.0.0.1:$PORT] a running `searchenv serve`; or an engine name (bm25, …) with CORPUS
#                    to search in-process inside every rollout worker
#   START_RETRIEVER  [1] start `searchenv serve --retriever $ENGINE --corpus $CORPUS --port $PORT` first
#   ENGINE [bm25]  CORPUS [the world's corpus, generated into $RUN_DIR/world]  PORT [8000]
#   REWARD [em]  TOPK [3]  MAX_TURNS [4]  PROTOCOL [search-r1]
#   RUN_DIR          [runs/verl-$ALGO-$PROFILE]
#   PRINT_ARGS=1     print the trainer's hydra overrides, one per line, and exit (nothing is started)
set -euo pipefail

ALGO=${1:?usage: verl_train.sh ppo|grpo smoke|8xh100 [hydra overrides]}
PROFILE=${2:?usage: verl_train.sh ppo|grpo smoke|8xh100 [hydra overrides]}
shift 2

RUN_DIR=${RUN_DIR:-runs/verl-$ALGO-$PROFILE}
DATASET=${DATASET:-world}
DATA_DIR=${DATA_DIR:-$RUN_DIR/data}
PORT=${PORT:-8000}
RETRIEVER=${RETRIEVER:-http://127.0.0.1:$PORT}
START_RETRIEVER=${START_RETRIEVER:-1}
ENGINE=${ENGINE:-bm25}
CORPUS=${CORPUS:-}
REWARD=${REWARD:-em}
TOPK=${TOPK:-3}
MAX_TURNS=${MAX_TURNS:-4}
PROTOCOL=${PROTOCOL:-search-r1}

case "$PROFILE" in
  8xh100)
    MODEL=${MODEL:-Qwen/Qwen2.5-3B}
    GPUS=8; BATCH=512; MINI=256; MICRO=8; STEPS=500; SAVE=100; TEST=50
    PROMPT_LEN=512; RESPONSE_LEN=3584; OFFLOAD=True; GPU_MEM=0.6; LOGGER="['console','wandb']"
    ;;
  smoke)
    MODEL=${MODEL:-Qwen/Qwen2.5-0.5B-Instruct}
    GPUS=1; BATCH=8; MINI=4; MICRO=2; STEPS=5; SAVE=-1; TEST=5
    PROMPT_LEN=512; RESPONSE_LEN=1024; OFFLOAD=False; GPU_MEM=0.4; LOGGER="['console']"
    ;;
  *) echo "unknown PROFILE '$PROFILE' (expected smoke or 8xh100)" >&2; exit 2 ;;
esac

case "$ALGO" in
  ppo)
    ALGO_ARGS=(
      algorithm.adv_estimator=gae algorithm.gamma=1.0 algorithm.lam=1.0
      algorithm.use_kl_in_reward=True algorithm.kl_ctrl.kl_coef=0.001
      actor_rollout_ref.actor.optim.lr=1e-6 actor_rollout_ref.actor.use_kl_loss=False
      actor_rollout_ref.rollout.n=1
      critic.optim.lr=1e-5 critic.model.path="$MODEL" critic.ppo_micro_batch_size_per_gpu=$MICRO
      critic.model.enable_gradient_checkpointing=True
      critic.fsdp.param_offload=$OFFLOAD critic.fsdp.optimizer_offload=$OFFLOAD
    )
    ;;
  grpo)
    ALGO_ARGS=(
      algorithm.adv_estimator=grpo algorithm.use_kl_in_reward=False
      actor_rollout_ref.actor.optim.lr=5e-7 actor_rollout_ref.actor.use_kl_loss=True
      actor_rollout_ref.actor.kl_loss_coef=0.001 actor_rollout_ref.actor.kl_loss_type=low_var_kl
      actor_rollout_ref.rollout.n=5
    )
    ;;
  *) echo "unknown ALGO '$ALGO' (expected ppo or grpo)" >&2; exit 2 ;;
esac

AGENT_YAML=$RUN_DIR/agent_loop.yaml
ARGS=(
  data.train_files="$DATA_DIR/train.parquet" data.val_files="$DATA_DIR/test.parquet"
  data.train_batch_size=$BATCH data.max_prompt_length=$PROMPT_LEN data.max_response_length=$RESPONSE_LEN
  data.filter_overlong_prompts=True data.truncation=error data.return_raw_chat=True
  actor_rollout_ref.model.path="$MODEL" actor_rollout_ref.model.enable_gradient_checkpointing=True
  actor_rollout_ref.model.use_remove_padding=True
  actor_rollout_ref.actor.ppo_mini_batch_size=$MINI actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=$MICRO
  actor_rollout_ref.actor.clip_ratio=0.2
  actor_rollout_ref.actor.fsdp_config.param_offload=$OFFLOAD
  actor_rollout_ref.actor.fsdp_config.optimizer_offload=$OFFLOAD
  actor_rollout_ref.ref.fsdp_config.param_offload=$OFFLOAD
  actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=$MICRO
  actor_rollout_ref.rollout.name=vllm actor_rollout_ref.rollout.mode=async
  actor_rollout_ref.rollout.tensor_model_parallel_size=1 actor_rollout_ref.rollout.gpu_memory_utilization=$GPU_MEM
  actor_rollout_ref.rollout.temperature=1.0 actor_rollout_ref.rollout.top_p=1.0
  actor_rollout_ref.rollout.val_kwargs.temperature=0 actor_rollout_ref.rollout.val_kwargs.do_sample=False
  actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=$MICRO
  actor_rollout_ref.rollout.skip_tokenizer_init=False
  actor_rollout_ref.rollout.agent.agent_loop_config_path="$AGENT_YAML"
  actor_rollout_ref.rollout.agent.default_agent_loop=searchenv_agent
  reward.custom_reward_function.path=pkg://searchenv.adapters.verl
  reward.custom_reward_function.name=compute_score
  +reward.custom_reward_function.reward_kwargs.reward="$REWARD"
  +reward.custom_reward_function.reward_kwargs.protocol="$PROTOCOL"
  trainer.n_gpus_per_node=$GPUS trainer.nnodes=1 trainer.total_training_steps=$STEPS
  trainer.save_freq=$SAVE trainer.test_freq=$TEST trainer.logger="$LOGGER"
  trainer.project_name=searchenv trainer.experiment_name="$ALGO-$PROFILE-$REWARD"
  trainer.default_local_dir="$RUN_DIR/checkpoints"
  "${ALGO_ARGS[@]}"
)

if [[ "${PRINT_ARGS:-0}" == 1 ]]; then
  printf '%s\n' "${ARGS[@]}" "$@"
  exit 0
fi

mkdir -p "$RUN_DIR"
if [[ -z "$CORPUS" ]]; then
  if [[ "$DATASET" != world ]]; then
    echo "set CORPUS=path/to/passages.jsonl for DATASET=$DATASET (the world's corpus only fits its questions)" >&2
    exit 2
  fi
  [[ -f "$RUN_DIR/world/corpus.jsonl" ]] || searchenv world --output "$RUN_DIR/world"
  CORPUS=$RUN_DIR/world/corpus.jsonl
fi
if [[ ! -f "$DATA_DIR/train.parquet" ]]; then
  python -m searchenv.adapters.verl_data --dataset "$DATASET" --split train --split test --output "$DATA_DIR"
fi

if [[ "$RETRIEVER" == http* && "$START_RETRIEVER" == 1 ]]; then
  # = searchenv serve ...
  python -m searchenv.retrievers.server --retriever "$ENGINE" --corpus "$CORPUS" --port "$PORT" --log-level warning &
  SERVER_PID=$!
  trap 'kill $SERVER_PID 2>/dev/null || true' EXIT
  python - "$RETRIEVER" <<'EOF'
import json, sys, time, urllib.request
url = sys.argv[1].rstrip("/") + "/health"
for _ in range(600):
    try:
        if json.load(urllib.request.urlopen(url, timeout=2)).get("ready"):
            sys.exit(0)
    except OSError:
        pass
    time.sleep(1)
sys.exit(f"retrieval server at {url} not ready after 600 s")
EOF
fi

# The agent loop's environment options for this run (see adapters/verl_configs/agent_loop.yaml).
cat > "$AGENT_YAML" <<EOF
- name: searchenv_agent
  _target_: searchenv.adapters.verl.SearchEnvAgentLoop
  env:
    retriever: "$RETRIEVER"
    corpus: "$CORPUS"
    reward: "$REWARD"
    topk: $TOPK
    max_turns: $MAX_TURNS
    protocol: "$PROTOCOL"
  prompt: auto
  max_action_tokens: 500
  stop: true
EOF

python -m verl.trainer.main_ppo "${ARGS[@]}" "$@"
