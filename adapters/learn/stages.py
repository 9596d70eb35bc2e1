"""Running the learning run's stages as child processes, so that an interrupted run resumes and a failed one says
why.

- A stage is a few ``searchenv`` commands run side by side (:class:`Stage`). Its output goes to
  ``OUTPUT/logs/<stage>-<i>.out``; a heartbeat line every minute names the step each training log reached.
- A stage is done when its **marker** ``OUTPUT/stages/<stage>.json`` exists, was written whole (by rename), and
  names the same commands: a torn or stale marker reruns the stage, never skips it.
- One run at a time per folder: :func:`folder_lock` holds ``OUTPUT/.lock`` and the children inherit it, so a rerun
  while an orphaned child still writes is refused. Children also get SIGTERM when ``learn`` dies (Linux).
- A failed stage quotes the child's last error line; stale ``*.partial-<pid>`` checkpoints of killed saves are
  removed before anything runs (:func:`searchenv.rollout.remove_partial_checkpoints`).
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Stage", "StageFailed", "folder_lock", "is_done", "last_error_line", "run_stage"]


@dataclass(frozen=True)
class Stage:
    """One step of the run: the commands it runs side by side, and the training logs its heartbeat reads."""

    name: str
    commands: tuple[tuple[str, ...], ...]
    logs: tuple[Path, ...] = ()


class StageFailed(RuntimeError):
    """A stage's command exited non-zero; the message quotes its last error line."""


def _marker(output: Path, stage: Stage) -> Path:
    return output / "stages" / f"{stage.name}.json"


def _portable(command: tuple[str, ...]) -> list[str]:
    """The command as the marker records it: the interpreter's path left out, so a moved venv does not rerun."""
    return list(command[1:]) if command and command[0] == sys.executable else list(command)


def is_done(output: Path, stage: Stage) -> bool:
    """Whether ``stage`` finished in an earlier run with the same commands (see the module docstring)."""
    try:
        marker = json.loads(_marker(output, stage).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(marker, dict) and marker.get("commands") == [_portable(c) for c in stage.commands]


def _mark_done(output: Path, stage: Stage, seconds: float) -> None:
    path = _marker(output, stage)
    path.parent.mkdir(parents=True, exist_ok=True)
    scratch = path.with_name(f"{path.name}.partial-{os.getpid()}")
    record = {"stage": stage.name, "seconds": round(seconds, 1), "commands": [_portable(c) for c in stage.commands]}
    scratch.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    os.replace(scratch, path)


@contextlib.contextmanager
def folder_lock(output: Path) -> Iterator[int]:
    """Hold ``OUTPUT/.lock`` for the run (its descriptor, which children inherit, is yielded); a second run on the
    same folder, or a rerun while a child of a killed run still works there, is refused with one line."""
    import fcntl

    output.mkdir(parents=True, exist_ok=True)
    fd = os.open(output / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "?"
            raise StageFailed(
                f"another `searchenv learn` (pid {holder}) or one of its stages is still working in {output}; "
                "wait for it or stop it, then rerun to resume"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        yield fd
    finally:
        os.close(fd)


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    """Ask Linux to send the child SIGTERM when its parent dies (no orphaned trainer writing the folder)."""
    try:
        import ctypes
        import signal

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def last_error_line(path: Path) -> str:
    """The last line of a child's output that reads like an error (a traceback's last line, ``error:``), else the
    last non-empty line; progress-bar redraws are skipped."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return "(no output)"
    lines = [line.split("\r")[-1].strip() for line in text.splitlines()]
    lines = [line for line in lines if line]
    for line in reversed(lines):
        head = line.split(":", 1)[0]
        if head.endswith(("Error", "Exception", "error", "Interrupt")) or line.startswith("searchenv"):
            return line
    return lines[-1] if lines else "(no output)"


def _progress(stage: Stage) -> str:
    parts = []
    for log in stage.logs:
        try:
            lines = [line for line in log.read_text().splitlines() if line.strip()]
            step = json.loads(lines[-1]).get("step") if lines else None
        except (OSError, ValueError):
            continue
        if step is not None:
            parts.append(f"{log.stem} step {step}")
    return "(" + ", ".join(parts) + ")" if parts else ""


def run_stage(stage: Stage, output: Path, lock_fd: int) -> None:
    """Run the stage's commands side by side and mark it done; raise :class:`StageFailed` naming the failed
    command, its exit status and its last error line."""
    logs = output / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    children = []
    for i, command in enumerate(stage.commands):
        out_path = logs / f"{stage.name}-{i}.out"
        out = out_path.open("w")
        preexec = _die_with_parent if sys.platform.startswith("linux") else None
        child = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, pass_fds=(lock_fd,), preexec_fn=preexec)
        children.append((child, out, command, out_path))
    print(f"[learn] {stage.name}: started {len(children)} process(es); output in {logs}", flush=True)
    heartbeat = started
    try:
        while any(child.poll() is None for child, *_ in children):
            time.sleep(1)
            if time.monotonic() - heartbeat >= 60:
                heartbeat = time.monotonic()
                print(f"[learn] {stage.name}: {heartbeat - started:.0f} s {_progress(stage)}", flush=True)
    finally:
        for child, out, *_ in children:
            if child.poll() is None:
                child.terminate()
                try:
                    child.wait(timeout=15)
                except subprocess.TimeoutExpired:  # a child busy in native code: it must not outlive the run
                    child.kill()
                    child.wait()
            out.close()
    for child, _, command, out_path in children:
        if child.returncode != 0:
            raise StageFailed(
                f"stage {stage.name!r} failed (exit {child.returncode}): {last_error_line(out_path)}\n"
                f"  command: {shlex.join(command)}\n  output: {out_path}\n"
                "  rerun `searchenv learn` with the same options to resume from this stage"
            )
    seconds = time.monotonic() - started
    _mark_done(output, stage, seconds)
    print(f"[learn] {stage.name}: done in {seconds:.0f} s", flush=True)
