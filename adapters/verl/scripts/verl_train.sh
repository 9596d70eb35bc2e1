#!/usr/bin/env bash
# Train a SearchQA agent with veRL, with the Search-R1 / study defaults of SPEC §5.
#
#   verl_train.sh [ALGO [PROFILE]] [extra hydra overrides ...]      (also: searchenv verl train ...)
#
#   ALGO     grpo (default) — group size 5, actor lr 5e-7, KL loss β = 0.001 (low-variance estimator), no critic
#            ppo            — GAE (λ = 1, γ = 1), critic lr 1e-5, actor lr 1e-6, KL β = 0.001 in the reward
#   PROFILE  smoke (default) — one GPU, a 0.5B instruct model, the generated world, 8 prompts, 5 steps: checks
#                     the wiring end to end
#            8xh100 (alias: paper) — the papers' setup: 8 GPUs, FSDP with parameter/optimizer offload, vLLM tp 1 at
#                     0.6 memory, 512 prompts per step, mini-batch 256, micro-batch 8 per GPU (64 in all), 500 steps,
#                     checkpoint every 100; trains on NQ + HotpotQA train and validates on the seven sets mixed
#                     (searchenv verl-data --paper), against the retriever you give it (RETRIEVER or CORPUS)
#
# Environment (defaults in brackets):
#   MODEL            [Qwen/Qwen2.5-3B for 8xh100, Qwen/Qwen2.5-0.5B-Instruct for smoke] (path or hub id)
#   DATASET          [paper for 8xh100, world for smoke] what verl_data writes when DATA_DIR has no train.parquet:
#                    `paper`, `world`, a dataset name or a jsonl/parquet path
#   QA_DATA_DIR      local <name>/<split>.jsonl files instead of the hub for named datasets (= SEARCHENV_DATA_DIR)
#   DATA_DIR         [$RUN_DIR/data] holds train.parquet and test.parquet
#   RETRIEVER        [http://127.0.0.1:$PORT] a running `searchenv serve`; or an engine name (bm25, …) with CORPUS
#                    to search in-process inside every rollout worker
#   START_RETRIEVER  [1] start `searchenv serve --retriever $ENGINE --corpus $CORPUS --port $PORT` first
#   ENGINE [bm25]  CORPUS [the world's corpus, generated into $RUN_DIR/world]  PORT [8000]
#   REWARD [em]  TOPK [3]  MAX_TURNS [4]  PROTOCOL [search-r1]
#   RUN_DIR          [runs/verl-$ALGO-$PROFILE]
#   WANDB=1          also log to Weights & Biases (on by default only when WANDB_API_KEY is set); else console only
#   ATTN             [flash_attention_2 when flash_attn imports, else sdpa] the models' attention implementation
#                    (veRL's default is flash_attention_2, which nothing here installs)
#   PRINT_ARGS=1     print the trainer's hydra overrides, one per line, and exit (nothing is started)
set -euo pipefail

ALGO=grpo
PROFILE=smoke
if [[ $# -gt 0 && "$1" != *=* ]]; then ALGO=$1; shift; fi
if [[ $# -gt 0 && "$1" != *=* ]]; then PROFILE=$1; shift; fi
[[ "$PROFILE" == paper ]] && PROFILE=8xh100

RUN_DIR=${RUN_DIR:-runs/verl-$ALGO-$PROFILE}
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
PYTHON=${PYTHON:-python}

if [[ -z "${ATTN:-}" ]]; then
  if "$PYTHON" -c "import flash_attn" 2>/dev/null; then ATTN=flash_attention_2; else ATTN=sdpa; fi
fi
if [[ -n "${WANDB_API_KEY:-}" || "${WANDB:-0}" == 1 ]]; then LOGGER="['console','wandb']"; else LOGGER="['console']"; fi

case "$PROFILE" in
  8xh100)
    MODEL=${MODEL:-Qwen/Qwen2.5-3B}
    DATASET=${DATASET:-paper}
    GPUS=8; BATCH=512; MINI=256; MICRO=8; STEPS=500; SAVE=100; TEST=50
    PROMPT_LEN=512; RESPONSE_LEN=3584; OFFLOAD=True; GPU_MEM=0.6
    ;;
  smoke)
    MODEL=${MODEL:-Qwen/Qwen2.5-0.5B-Instruct}
    DATASET=${DATASET:-world}
    GPUS=1; BATCH=8; MINI=4; MICRO=2; STEPS=5; SAVE=-1; TEST=5
    PROMPT_LEN=512; RESPONSE_LEN=1024; OFFLOAD=False; GPU_MEM=0.4
    ;;
  *) echo "unknown PROFILE '$PROFILE' (expected smoke, 8xh100 or paper)" >&2; exit 2 ;;
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
      +critic.model.override_config.attn_implementation=$ATTN
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
  +actor_rollout_ref.model.override_config.attn_implementation=$ATTN
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
  # The agent loop scores every episode itself (reward_score); compute_score is the text path for rows without it.
  reward.custom_reward_function.path=pkg://searchenv.adapters.verl.agent_loop
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
    if [[ "$RETRIEVER" != http* || "$START_RETRIEVER" == 1 ]]; then
      echo "DATASET=$DATASET needs its corpus: set CORPUS=path/to/passages.jsonl (e.g. wiki-18), or RETRIEVER=URL" \
        "of a running searchenv serve with START_RETRIEVER=0 (the world's corpus only fits its own questions)" >&2
      exit 2
    fi
  else
    [[ -f "$RUN_DIR/world/corpus.jsonl" ]] || "$PYTHON" -m searchenv.cli.main world --output "$RUN_DIR/world"
    CORPUS=$RUN_DIR/world/corpus.jsonl
  fi
fi
if [[ ! -f "$DATA_DIR/train.parquet" ]]; then
  DATA_ARGS=(--output "$DATA_DIR" --protocol "$PROTOCOL")
  [[ -n "${QA_DATA_DIR:-}" ]] && DATA_ARGS+=(--data-dir "$QA_DATA_DIR")
  if [[ "$DATASET" == paper ]]; then
    "$PYTHON" -m searchenv.adapters.rows --paper "${DATA_ARGS[@]}"
  else
    "$PYTHON" -m searchenv.adapters.rows --dataset "$DATASET" --split train --split test "${DATA_ARGS[@]}"
  fi
fi

if [[ "$RETRIEVER" == http* && "$START_RETRIEVER" == 1 ]]; then
  # = searchenv serve ...
  "$PYTHON" -m searchenv.retrievers.server --retriever "$ENGINE" --corpus "$CORPUS" --port "$PORT" --log-level warning &
  SERVER_PID=$!
  trap 'kill $SERVER_PID 2>/dev/null || true' EXIT
  "$PYTHON" - "$RETRIEVER" <<'EOF'
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

# The agent loop's environment options for this run (see adapters/verl/configs/agent_loop.yaml).
CORPUS_LINE=""
[[ -n "$CORPUS" ]] && CORPUS_LINE="corpus: \"$CORPUS\""
cat > "$AGENT_YAML" <<EOF
- name: searchenv_agent
  _target_: searchenv.adapters.verl.agent_loop.SearchEnvAgentLoop
  env:
    retriever: "$RETRIEVER"
    $CORPUS_LINE
    reward: "$REWARD"
    topk: $TOPK
    max_turns: $MAX_TURNS
    protocol: "$PROTOCOL"
  prompt: auto
  max_action_tokens: 500
  stop: true
EOF

"$PYTHON" -m verl.trainer.main_ppo "${ARGS[@]}" "$@"
