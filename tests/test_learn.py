"""The learning recipe's parts: demonstrations the environment plays, the warm start, GRPO without all-equal
groups, validation during RL, the evidence table and its paired intervals, and the one-command run."""

from __future__ import annotations

import pytest

from searchenv.adapters.learn.evidence import per_question_rows, read_rows, summary_markdown, write_rows
from searchenv.adapters.sft.demonstrations import (
    demonstrator_actions,
    world_demonstrations,
)
from searchenv.data.world.generator import default_world
from searchenv.evaluation.paired import paired_bootstrap

ENV = {"dataset": "world", "retriever": "bm25", "reward": "em", "topk": 2, "max_information_words": 70}
ENV |= {"max_turns": 6, "protocol": "search-r1"}


def test_the_demonstrator_searches_a_key_phrase_per_hop_and_answers():
    question = next(q for q in default_world().dataset("train") if q.metadata["hops"] == 2)
    actions = demonstrator_actions(question)
    entities, answers = question.metadata["entities"], question.metadata["hop_answers"]
    assert len(actions) == 3 and actions[-1].endswith(f"<answer> {question.golden_answers[0]} </answer>")
    assert f"<search> {entities[0]} " in actions[0] and f"<search> {entities[1]} " in actions[1]
    assert answers[0] in actions[1].split("</think>")[0]  # the think block says what the first passage gave


def test_world_demonstrations_are_played_by_the_environment_and_filtered():
    demonstrations, counts = world_demonstrations(ENV, max_hops=2, limit=12, held_out=64)
    assert counts["kept"] == len(demonstrations) == 12
    world = default_world().dataset("train")
    held_out = {q.id for q in world[-64:]}
    for demonstration in demonstrations:
        assert demonstration.hops <= 2 and demonstration.id not in held_out
        authors = [author for author, _ in demonstration.segments]
        assert authors == ["model", "env"] * demonstration.hops + ["model"]  # real information blocks between
        question = next(q for q in world if q.id == demonstration.id)
        for hop, answer in enumerate(question.metadata["hop_answers"]):  # every hop's answer was shown
            assert answer in demonstration.segments[2 * hop + 1][1]
    # a passage cap that hides the facts leaves those questions out rather than teaching a guess
    _, tight = world_demonstrations({**ENV, "max_information_words": 10}, max_hops=1, limit=20)
    assert tight["hop_not_shown"] > 0
    with pytest.raises(ValueError, match="train split only"):
        world_demonstrations({**ENV, "split": "test"})


def test_paired_bootstrap_resolves_a_consistent_gain_and_not_noise():
    ids = [f"q{i}" for i in range(200)]
    better = {q: 1.0 if i % 2 == 0 else 0.0 for i, q in enumerate(ids)}
    worse = {q: 1.0 if i % 4 == 0 else 0.0 for i, q in enumerate(ids)}  # right only where `better` is
    gain = paired_bootstrap(better, worse)
    assert gain.difference == pytest.approx(0.25) and gain.excludes_zero and gain.low > 0.15
    assert not paired_bootstrap(better, dict(better)).excludes_zero
    shuffled = {q: better[ids[(i + 1) % 200]] for i, q in enumerate(ids)}  # the same EM, other questions right
    assert not paired_bootstrap(better, shuffled).excludes_zero
    with pytest.raises(ValueError, match="share no evaluated question"):
        paired_bootstrap({"a": 1.0}, {"b": 1.0})


def test_the_evidence_table_has_one_row_per_policy_mode_and_question(tmp_path):
    records = [
        {"policy": p, "method": m, "id": f"test-{i}", "em": float(p == "rl" and i < 3), "num_searches": i % 3}
        for p in ("rl", "sft")
        for m in ("agent", "rag")
        for i in range(6)
    ]
    rows = per_question_rows(records, {f"test-{i}": 1 + i % 4 for i in range(6)}, "world")
    assert len(rows) == 24 and rows[0]["id"].startswith("world/")
    write_rows(rows, tmp_path / "per_question.csv")
    assert (tmp_path / "per_question.csv").read_text().splitlines()[0] == "policy,mode,id,hops,em,searches"
    assert read_rows(tmp_path / "per_question.csv") == rows
    summary = summary_markdown(rows)
    assert "| rl | agent | 6 | 0.500 |" in summary and "| sft agent | 6 | 0.000 | +0.500" in summary
    assert "## EM by hop count" in summary


def test_the_warm_start_lowers_the_loss_of_its_demonstrations_and_trains_only_the_top_layers(smollm2_dir, tmp_path):
    import torch

    from searchenv.adapters.ppo.batch import collate, token_logprobs
    from searchenv.adapters.sft.trainer import SFTConfig, SFTTrainer
    from searchenv.protocol import get_protocol
    from searchenv.rollout import load_policy, read_run_settings

    torch.set_num_threads(1)
    demonstrations, _ = world_demonstrations(ENV, max_hops=1, limit=2)
    model, tokenizer = load_policy(str(smollm2_dir))
    bottom = model.get_decoder().layers[0].mlp.down_proj.weight.detach().clone()
    config = SFTConfig(lr=3e-4, steps=3, batch_size=2, micro_batch_size=1, warmup_steps=0, trainable_layers=2)
    settings = {"model": "smollm2-135m", "protocol": "search-r1", "chat_template": False, "max_turns": 6}
    settings |= {"budget": "actions", "topk": 2, "reward": "em", "dataset": "world", "split": "train"}
    settings |= {"retriever": "bm25", "retriever_options": {}}
    trainer = SFTTrainer(
        model, tokenizer, demonstrations, get_protocol("search-r1"), config, output_dir=tmp_path, run_settings=settings
    )

    def loss() -> float:
        batch = collate(trainer.episodes, [0.0] * len(trainer.episodes), tokenizer.pad_token_id)
        with torch.no_grad():
            return float(-(token_logprobs(model, batch) * batch.loss_mask).sum() / batch.loss_mask.sum())

    before = loss()
    history = trainer.train()
    assert len(history) == 3 and loss() < before
    assert torch.equal(model.get_decoder().layers[0].mlp.down_proj.weight, bottom)  # below the top 2: frozen
    saved = read_run_settings(tmp_path / "final")
    assert saved["algorithm"] == "sft" and saved["protocol"] == "search-r1" and saved["demonstrations"] == 2


def test_train_sft_refuses_bad_options_before_any_model_loads(capsys):
    from searchenv.cli.main import main

    assert main(["train-sft", "--batch-size", "3", "--micro-batch-size", "2", "--output-dir", ""]) == 2
    assert "multiple of micro_batch_size" in capsys.readouterr().err
    assert main(["train-sft", "--split", "test", "--output-dir", ""]) == 2
    assert "train split only" in capsys.readouterr().err


def test_the_learning_run_is_one_command_of_named_stages(tmp_path, capsys):
    from searchenv.cli.main import main

    assert main(["learn", "--dry-run", "--output", str(tmp_path / "run")]) == 0
    out = capsys.readouterr().out
    stages = [line[2:].split(":")[0] for line in out.splitlines() if line.startswith("# ")]
    assert stages == ["sft", "worlds", "worlds", "rl", "rl", "rl2", *["eval"] * 3, *["pass4"] * 3, "evidence"]
    assert "# rl: placebo\n" in out and "# rl2: rl_seed1\n" in out and "# eval: eval-world-seed2\n" in out
    assert "--retriever random" not in out and "--no-demonstration" in out and "--split test" not in out
    assert out.count("train-ppo --model") == 3 and out.count("--placebo") == 1 and "--validation 64" in out
    assert out.count("--keep-best") == 3 and "placebo=" in out and "rag,rag_trained" in out
    assert out.count("--samples 4") == 3 and "--device cpu" in out


def test_the_learning_run_refuses_a_file_as_its_folder_and_no_threads(tmp_path, capsys):
    from searchenv.cli.main import main

    file = tmp_path / "notes.txt"
    file.write_text("keep me")
    assert main(["learn", "--output", str(file)]) == 2
    assert "is a file; name a folder" in capsys.readouterr().err and file.read_text() == "keep me"
    with pytest.raises(SystemExit):
        main(["learn", "--threads", "0", "--dry-run"])
    assert "expected a positive integer" in capsys.readouterr().err
    assert main(["learn", "--device", "tpu", "--dry-run"]) == 2
    assert "choose 'cpu' or 'cuda'" in capsys.readouterr().err
    assert main(["learn", "--model", str(tmp_path / "missing"), "--dry-run"]) == 2
    assert "no such folder" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["learn", "--rl-minutes", "-1", "--dry-run"])
    assert "expected a number >= 0" in capsys.readouterr().err


@pytest.mark.slow
def test_the_learning_run_goes_end_to_end_and_resumes(tmp_path, capsys):
    """Every stage at its smallest (``--tiny``), then a rerun that skips what is done."""
    from searchenv.adapters.learn.evidence import COLUMNS
    from searchenv.cli.main import main

    output = tmp_path / "run"
    assert main(["learn", "--tiny", "--output", str(output)]) == 0
    rows = read_rows(output / "per_question.csv")
    assert {(r["policy"], r["mode"]) for r in rows} == {
        (p, m) for p in ("base", "sft", "rl", "placebo") for m in ("agent", "rag", "rag_trained")
    }
    assert {r["id"].split("/")[0] for r in rows} == {"world", "world-seed1", "world-seed2"}
    assert set(rows[0]) == set(COLUMNS)
    seed1 = read_rows(output / "per_question_rl_seed1.csv")
    assert {(r["policy"], r["mode"]) for r in seed1} == {("rl_seed1", "agent")}
    assert (output / "summary.md").exists() and (output / "training.png").exists() and (output / "hops.png").exists()
    assert "pass@4" in (output / "summary.md").read_text()
    capsys.readouterr()
    assert main(["learn", "--tiny", "--output", str(output)]) == 0
    assert capsys.readouterr().out.count("already done") == 6


# -- the stages' runner: markers, the folder lock, a child's error --------------------------------------------
def test_a_torn_or_stale_marker_reruns_its_stage(tmp_path):
    import sys

    from searchenv.adapters.learn.stages import Stage, folder_lock, is_done, run_stage

    stage = Stage("make", ((sys.executable, "-c", "print('made')"),))
    assert not is_done(tmp_path, stage)
    with folder_lock(tmp_path) as fd:
        run_stage(stage, tmp_path, fd)
    assert is_done(tmp_path, stage) and "made" in (tmp_path / "logs" / "make-0.out").read_text()
    marker = tmp_path / "stages" / "make.json"
    marker.write_text(marker.read_text()[:20])  # torn: a kill mid-write (before, its mere presence skipped the stage)
    assert not is_done(tmp_path, stage)
    with folder_lock(tmp_path) as fd:
        run_stage(stage, tmp_path, fd)
    changed = Stage("make", ((sys.executable, "-c", "print('made otherwise')"),))
    assert is_done(tmp_path, stage) and not is_done(tmp_path, changed)  # other commands: not the same stage


def test_a_failed_stage_quotes_its_childs_last_error_and_a_second_run_is_refused(tmp_path):
    import sys

    from searchenv.adapters.learn.stages import Stage, StageFailed, folder_lock, is_done, run_stage

    script = "import sys; print('step 1'); print('Traceback ...'); print('ValueError: the model folder is empty')"
    stage = Stage("train", ((sys.executable, "-c", script + "; sys.exit(3)"),))
    with folder_lock(tmp_path) as fd:
        with pytest.raises(StageFailed, match=r"exit 3\): ValueError: the model folder is empty"):
            run_stage(stage, tmp_path, fd)
        with pytest.raises(StageFailed, match="still working in"):
            with folder_lock(tmp_path):
                pass
    assert not is_done(tmp_path, stage)


def test_stale_half_saved_checkpoints_are_removed_and_complete_ones_kept(tmp_path):
    from searchenv.rollout import remove_partial_checkpoints

    (tmp_path / "sft" / "final.partial-4242").mkdir(parents=True)
    (tmp_path / "sft" / "final.partial-4242" / "model.safetensors").write_bytes(b"x" * 1000)
    (tmp_path / "rl" / "best").mkdir(parents=True)
    removed = remove_partial_checkpoints(tmp_path)
    assert [p.name for p in removed] == ["final.partial-4242"] and (tmp_path / "rl" / "best").exists()
