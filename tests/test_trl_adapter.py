"""TRL glue: GRPOTrainer with our multi-turn rollout_func, on the generated world, with real SmolLM2 weights."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
trl = pytest.importorskip("trl")

from searchenv.adapters.trl.grpo import TRL_REQUIREMENT, check_trl_version, env_reward, make_dataset, make_grpo_trainer
from searchenv.rollout import load_policy, read_run_settings

ROOT = Path(__file__).resolve().parents[1]
ENV_KWARGS = {"dataset": "world", "retriever": "bm25", "reward": "format", "max_turns": 2, "max_information_words": 30}


def brevity(completions, **_):
    """A reward with variance even for an untrained model, so the policy update is not zero."""
    return [1.0 / (1.0 + len(c.split())) for c in completions]


def _trainer(smollm2_dir, tmp_path, max_steps: int):
    torch.set_num_threads(1)
    model, tok = load_policy(str(smollm2_dir))
    args = trl.GRPOConfig(
        output_dir=str(tmp_path),
        use_cpu=True,
        bf16=False,  # TRL defaults to bf16 autocast, which is ~30x slower than fp32 on this CPU
        per_device_train_batch_size=2,
        num_generations=2,
        max_completion_length=160,  # room for two 16-token turns and the information block between them
        max_steps=max_steps,
        learning_rate=1e-4,
        beta=0.001,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        seed=0,
    )
    return make_grpo_trainer(
        model, tok, args, ENV_KWARGS, max_new_tokens=16, train_limit=8, reward_funcs=[env_reward, brevity]
    )


def test_installed_trl_meets_the_pin_and_releases_with_other_semantics_are_refused():
    check_trl_version()
    check_trl_version("1.0.0")
    # 0.24: no rollout_func; 0.25: another signature; 0.27: ignores env_mask; 0.28-0.29: rollout_func only via vLLM
    for version in ("0.24.0", "0.25.1", "0.27.0", "0.29.1", "2.0.0"):
        with pytest.raises(ImportError, match="trl>=1.0"):
            check_trl_version(version)
    assert f'"trl{TRL_REQUIREMENT}"' in (ROOT / "pyproject.toml").read_text()


@pytest.mark.slow  # ~60 s on 2 cores; the edit loop keeps the environment-token loss test through TRL
def test_two_grpo_steps_on_the_world_complete_and_log_env_metrics(smollm2_dir, tmp_path):
    trainer = _trainer(smollm2_dir, tmp_path, max_steps=2)
    assert {p.dtype for p in trainer.model.parameters()} == {torch.float32}  # fp32 master weights
    before = [p.detach().clone() for p in trainer.model.parameters()]
    trainer.train()
    assert trainer.state.global_step == 2
    logs = [row for row in trainer.state.log_history if "loss" in row]
    assert len(logs) == 2
    for key in (
        "rewards/env_reward/mean",
        "reward/format_ok",
        "reward/em",
        "num_searches",
        "num_invalid",
        "end_reason/answer",
        "rollout/model_tokens",
    ):
        assert key in logs[0], f"{key} missing from {sorted(logs[0])}"
    # episodes the environment ended close with EOS: TRL counts only token-budget cuts as truncated
    assert all(row["completions/clipped_ratio"] < 1.0 for row in logs)
    assert any(not torch.equal(a, b) for a, b in zip(before, trainer.model.parameters()))


def test_an_environment_token_cannot_move_trl_loss(smollm2_dir, tmp_path):
    """Through TRL's own rollout handling and compute_loss: values at env_mask == 0 positions never reach the
    gradient, and closing EOS tokens (not sampled) are env tokens too."""
    trainer = _trainer(smollm2_dir, tmp_path, max_steps=1)
    rows = [trainer.train_dataset[0]] * 2  # one group of num_generations, the per-device batch compute_loss sees
    batch = trainer._generate_and_score_completions(rows)
    completion_mask, env_mask = batch["completion_mask"], batch["tool_mask"]
    env = (completion_mask * (1 - env_mask)).bool()
    assert env.any(), "two-turn episodes contain an information block, a hint or a closing EOS"
    # every episode fits the 160-token cap, so each ended in the environment and closes with an EOS
    eos = trainer.processing_class.eos_token_id
    ends = [int(ids[int(real.sum()) - 1]) for ids, real in zip(batch["completion_ids"], completion_mask)]
    assert ends == [eos] * len(ends)

    batch["advantages"] = torch.tensor([1.0, -0.5])  # a gradient whatever the rewards were

    def loss_and_grads(inputs):
        trainer.model.zero_grad(set_to_none=True)
        loss = trainer.compute_loss(trainer.model, inputs)
        loss.backward()
        return loss.detach(), [p.grad.clone() for p in trainer.model.parameters() if p.grad is not None]

    base_loss, base = loss_and_grads(batch)
    generator = torch.Generator().manual_seed(0)
    perturbed = dict(batch)
    changed = []
    for key in ("ref_per_token_logps", "old_per_token_logps", "sampling_per_token_logps"):
        if batch.get(key) is not None:
            noise = torch.randn(batch[key].shape, generator=generator) * 3
            perturbed[key] = torch.where(env, batch[key] + noise, batch[key])
            changed.append(key)
    assert "ref_per_token_logps" in changed
    moved_loss, moved = loss_and_grads(perturbed)
    assert torch.allclose(base_loss, moved_loss, atol=1e-6)
    assert all(torch.allclose(a, b, atol=1e-6, rtol=1e-5) for a, b in zip(base, moved))

    # control: count the env positions as model tokens and the same perturbation moves the gradient
    unmasked = dict(perturbed, tool_mask=torch.ones_like(env_mask))
    _, control = loss_and_grads(unmasked)
    assert not all(torch.allclose(a, b, atol=1e-6, rtol=1e-5) for a, b in zip(base, control))


def test_dataset_rows_map_to_questions_and_the_curriculum_puts_one_hop_first():
    from searchenv.rollout import make_envs

    env = make_envs(1, retriever="random")[0]
    dataset = make_dataset(env, limit=3)
    assert dataset.column_names == ["prompt", "question", "golden_answers", "example_index"]
    ordered = make_dataset(env, curriculum=True, seed=1)
    hops = [env.unwrapped.examples[i].metadata["hops"] for i in ordered["example_index"]]
    assert hops == sorted(hops) and hops[0] == 1 and len(set(ordered["example_index"])) == len(hops)
    with pytest.raises(ValueError, match="rollout_func"):
        env_reward(["text"])


def test_accelerate_multi_gpu_config_loads_with_accelerates_own_reader():
    from accelerate.commands.config.config_args import load_config_from_file

    config = load_config_from_file(str(ROOT / "adapters" / "trl" / "accelerate" / "multi_gpu.yaml"))
    assert config.distributed_type.value == "MULTI_GPU" and config.num_processes == 8
    assert str(getattr(config.mixed_precision, "value", config.mixed_precision)) == "bf16"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_accelerate_launch_runs_a_step_in_two_processes(smollm2_dir, tmp_path):
    """`accelerate launch --num_processes 2 --cpu` (gloo): both ranks play their episodes in lockstep and train."""
    out = tmp_path / "run"
    command = [
        *(sys.executable, "-m", "accelerate.commands.launch", "--num_processes", "2", "--cpu", "--num_machines", "1"),
        *("--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", str(_free_port())),
        *("-m", "searchenv.adapters.trl.train", "--model", str(smollm2_dir), "--max-steps", "1"),
        *("--num-generations", "2", "--per-device-train-batch-size", "2", "--max-new-tokens", "8"),
        *("--max-completion-length", "96", "--train-limit", "4", "--no-curriculum", "--output-dir", str(out)),
    ]
    env = dict(os.environ, OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false", HF_HUB_OFFLINE="1")
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stderr[-3000:]
    settings = read_run_settings(out / "final")
    assert settings["algorithm"] == "grpo" and settings["config"]["max_steps"] == 1
    assert settings["max_new_tokens"] == 8  # the per-turn budget `searchenv eval` replays
    assert (out / "final" / "model.safetensors").exists()


def test_vllm_generator_matches_trls_wrapper_contract():
    """vLLM cannot run here; what VLLMGenerator relies on in TRL's wrapper is checked against TRL's own class."""
    import inspect

    from trl.generation.vllm_generation import VLLMGeneration

    assert list(inspect.signature(VLLMGeneration.generate).parameters)[:4] == [
        "self",
        "prompts",
        "images",
        "num_generations",
    ]
    source = inspect.getsource(VLLMGeneration)
    for attribute in ("self.generation_kwargs", "self.max_completion_length", "logprob_token_ids"):
        assert attribute in source
