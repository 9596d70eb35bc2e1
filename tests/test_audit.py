"""The reward-hacking audit plays real episodes (embedded world, native BM25) and judges hacks against honest play."""

from __future__ import annotations

import argparse

import pytest

from searchenv.cli.audit import add_parser
from searchenv.evaluation.reward_audit import POLICIES, audit_reward


def rewards(table) -> dict[str, float]:
    return {row.policy.name: row.mean_reward for row in table.rows}


def test_em_pays_only_the_oracle():
    table = audit_reward("em", limit=10)
    got = rewards(table)
    assert got["oracle"] == 1.0
    assert all(reward == 0.0 for name, reward in got.items() if name != "oracle")
    assert table.exploits == []


def test_cover_em_pays_stuffed_and_over_long_answers():
    table = audit_reward("cem", limit=10)
    got = rewards(table)
    assert got["stuffing"] == got["over-long"] == got["oracle"] == 1.0
    assert {"stuffing", "over-long"} <= set(table.exploits)
    assert "answer-in-think" not in table.exploits  # the prediction is read from the answer block only


def test_retrieval_bonus_is_farmed_by_searching_the_question():
    got = rewards(audit_reward("format-retrieval", limit=10))
    assert got["honest-wrong"] == pytest.approx(0.2)  # lambda_f for a well-formed wrong answer
    assert got["search-then-wrong"] > got["honest-wrong"] + 0.01
    assert got["repeat-search"] == got["search-then-wrong"]  # identical searches add no further bonus


def test_policies_write_each_spec_protocol():
    table = audit_reward("r1-searcher-stage1", limit=3)
    assert table.protocol == "r1-searcher"
    got = rewards(table)
    assert got["oracle"] == 1.0  # well-formed in R1-Searcher's tags and searched
    assert got["honest-wrong"] == pytest.approx(0.5)


def test_markdown_lists_every_policy_with_its_verdict():
    text = audit_reward("cem", limit=2).markdown()
    for policy in POLICIES:
        assert f"| {policy.name} |" in text
    assert "EXPLOITABLE" in text


def test_cli_prints_the_table(capsys):
    parser = argparse.ArgumentParser(prog="searchenv")
    add_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["audit-reward", "f1", "--limit", "2"])
    assert args.handler(args) == 0
    out = capsys.readouterr().out
    assert "reward `f1`" in out and "| oracle |" in out


def test_tool_call_protocols_are_refused():
    with pytest.raises(ValueError, match="tag protocols"):
        audit_reward("em", limit=1, protocol="tool-call")
