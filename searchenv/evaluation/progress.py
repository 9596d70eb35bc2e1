"""The progress display of ``searchenv eval``: finished episodes, and the model's turns and tokens as they come.

An episode is finished only after its last turn, and a batch of episodes only after its slowest one; on a CPU one
turn of a small model can take minutes. A bar of finished episodes alone sits at ``0/N`` all that time and looks
hung, so a second line counts the model's turns and generated tokens: it moves with every token a local model
writes (the engine's ``on_tokens`` hook, once per decoding step) and is set to the policy's exact count after each turn
(every policy reports one, endpoints included).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any, TextIO

__all__ = ["REFRESH_SECONDS", "EvalProgress"]

#: Least time between two redraws of a line (tqdm's ``mininterval``); tests set 0 to see every update.
REFRESH_SECONDS = 0.5


class EvalProgress:
    """Two tqdm lines on ``file`` (default stderr): ``episodes n/N`` and ``model: Ttok, K turns``."""

    def __init__(self, total_episodes: int, file: TextIO | None = None):
        from tqdm.auto import tqdm

        out = file or sys.stderr
        common: dict[str, Any] = {"file": out, "dynamic_ncols": True, "mininterval": REFRESH_SECONDS}
        self._episodes = tqdm(total=total_episodes, unit="episode", desc="episodes", position=0, **common)
        self._tokens = tqdm(unit="tok", desc="model", position=1, **common)
        self._exact = 0  # tokens of finished turns, as the policy counted them
        self._turns = 0

    def episodes_done(self, count: int) -> None:
        """``count`` more episodes are finished (or were already, in a resumed run)."""
        self._episodes.update(count)

    def tokens_streamed(self, count: int) -> None:
        """``count`` tokens were just generated inside a turn that is still running (a live estimate)."""
        self._tokens.update(count)

    def turn_done(self, token_counts: Sequence[int]) -> None:
        """One model call finished: one turn of each of ``len(token_counts)`` episodes, with their exact counts."""
        self._exact += sum(token_counts)
        self._turns += len(token_counts)
        self._tokens.n = self._exact  # the streamed estimate may count padding past a row's cap; the policy is exact
        self._tokens.set_postfix_str(f"{self._turns} turn{'' if self._turns == 1 else 's'}", refresh=False)
        self._tokens.refresh()

    def close(self) -> None:
        self._tokens.close()
        self._episodes.close()
