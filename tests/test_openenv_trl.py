"""TRL's GRPOTrainer training through OpenEnv: ``environment_factory`` sessions with ``searchenv openenv-serve``.

The server is OpenEnv's app on loopback (protocol ``tool-call-answer-tool``), the clients OpenEnv's own, the
trainer TRL's own (its tool loop, tool dispatch, reward from the environment's ``get_reward``). The first test
scripts the model's text (a tiny random Qwen2 with the Qwen2.5 template, as tests/test_trl_tools.py does) so the
episode is known; the second trains the packaged SmolLM2-135M for one step with its own sampling.
"""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
trl = pytest.importorskip("trl")
transformers = pytest.importorskip("transformers")
pytest.importorskip("openenv")

from tiny_models import tiny_qwen2
from trl.chat_template_utils import qwen2_5_chat_template  # noqa: E402

from searchenv.adapters.openenv.trl import OpenEnvSearchTools, OpenEnvToolFactory  # noqa: E402
from searchenv.data.world import default_world  # noqa: E402

REWARD = "rewards/OpenEnvSearchTools/mean"


@pytest.fixture(scope="module")
def server():
    """The OpenEnv app on a loopback thread (tests/test_openenv_adapter.py runs the command itself). Short
    information blocks: TRL stops a rollout whose completion (tool messages included) outgrows
    max_completion_length."""
    from servers import serve_in_thread

    from searchenv.adapters.openenv import create_app

    app = create_app(protocol="tool-call-answer-tool", max_turns=3, max_information_words=40)
    with serve_in_thread(app) as url:
        yield url


def _config(tmp_path, **overrides):
    settings = dict(
        output_dir=str(tmp_path),
        use_cpu=True,
        bf16=False,
        per_device_train_batch_size=2,
        num_generations=2,
        max_completion_length=512,
        max_steps=1,
        save_strategy="no",
        report_to="none",
        seed=0,
        logging_steps=1,
    )
    return trl.GRPOConfig(**{**settings, **overrides})


def _call(name, **arguments):
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


@pytest.mark.slow
def test_grpo_step_takes_the_servers_reward_for_gold_and_wrong_answers(server, tmp_path, monkeypatch):
    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
    from searchenv.assets import qwen_tokenizer_dir

    tokenizer = transformers.AutoTokenizer.from_pretrained(str(qwen_tokenizer_dir()))
    tokenizer.chat_template = qwen2_5_chat_template
    gold = default_world().dataset("train")[0].golden_answers[0]
    prompts_seen = []

    def generate(input_ids, attention_mask=None, **_):
        rows = []
        for row, (ids, mask) in enumerate(zip(input_ids, attention_mask)):
            prompt = tokenizer.decode(ids[mask.bool()])
            prompts_seen.append(prompt)
            if "<tool_response>" not in prompt:
                text = _call("search", query="Brosara founded")
            elif "Answer recorded." in prompt:
                text = "Done."  # no tool call: TRL's loop ends the rollout
            else:
                text = _call("answer", answer=gold if row == 0 else "Atlantis")
            rows.append(tokenizer(text + "<|im_end|>", add_special_tokens=False)["input_ids"])
        width = max(map(len, rows))
        pad = tokenizer.convert_tokens_to_ids("<|im_end|>")
        return torch.cat([input_ids, torch.tensor([r + [pad] * (width - len(r)) for r in rows])], dim=1)

    model = tiny_qwen2(tokenizer)
    model.generate = generate
    factory = OpenEnvToolFactory(server)
    trainer = trl.GRPOTrainer(
        model=model,
        args=_config(tmp_path),
        train_dataset=factory.dataset("train", limit=1),
        processing_class=tokenizer,
        environment_factory=factory,
    )
    trainer.train()
    [row] = [r for r in trainer.state.log_history if REWARD in r]
    assert trainer.state.global_step == 1
    assert row[REWARD] == 0.5  # one rollout answered the gold (1.0), the other a wrong name (0.0)
    assert row["tools/call_frequency"] == 2.0  # a search and an answer per rollout
    assert all(isinstance(env, OpenEnvSearchTools) and env._done for env in trainer.environments)
    # The server's prompt reached the model, and its search result came back as the tool message.
    first = default_world().dataset("train")[0].question
    assert any(first in p for p in prompts_seen)
    assert any("<tool_response>\nDoc 1(Title: Brosara)" in p for p in prompts_seen)


def test_factory_refuses_a_server_without_the_answer_tool():
    from servers import serve_in_thread

    from searchenv.adapters.openenv import create_app

    with serve_in_thread(create_app(protocol="tool-call")) as url:
        with pytest.raises(ValueError, match="--protocol tool-call-answer-tool"):
            OpenEnvToolFactory(url)
        with pytest.raises(ValueError, match="does not serve SearchQA"):
            OpenEnvToolFactory(url + "/nowhere")


def test_an_unfinished_rollout_is_truncated_and_scored_on_the_server(server):
    factory = OpenEnvToolFactory(server)
    rollout = factory()
    prompt = rollout.reset(split="train", index=0)
    assert default_world().dataset("train")[0].question in prompt
    assert rollout.search("Brosara founded").startswith("Doc 1(Title: Brosara)")
    assert rollout.get_reward() == 0.0  # no answer: the server truncated the episode and scored it
    assert rollout.search("again").startswith("The episode has ended")
    rollout._close()


@pytest.mark.slow
def test_smollm2_trains_one_grpo_step_through_the_openenv_server(server, tmp_path, monkeypatch, capsys):
    """The documented command: the packaged SmolLM2-135M samples its own turns on CPU, rewards from the server."""
    import ast

    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
    from searchenv.adapters.openenv.trl import main

    args = ["--url", server, "--limit", "2", "--steps", "1", "--max-completion-length", "24"]
    assert main([*args, "--output-dir", str(tmp_path)]) == 0
    logged = ast.literal_eval(capsys.readouterr().out.strip().splitlines()[-1])
    assert 0.0 <= logged[REWARD] <= 1.0 and "tools/call_frequency" in logged
