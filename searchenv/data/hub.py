"""Large-file download that survives interruptions and refuses corrupt bytes.

wiki-18 and its E5 index are tens of gigabytes; a dropped connection must not cost the bytes already on disk,
and a truncated or altered file must never be used. :func:`download` therefore

* writes to ``<name>.incomplete`` and resumes it with an HTTP ``Range`` request (restarting from zero only when
  the server ignores ``Range``), retrying a dropped connection ``retries`` times with back-off;
* checks the size and the checksum the server published (for the Hugging Face hub: the LFS ``sha256`` of the
  file, or the git blob SHA-1 of a small file) before renaming the file into place, atomically — a mismatch
  deletes the partial file and raises :class:`ChecksumError`;
* shows a tqdm bar in bytes (rate, ETA), starting at the bytes already there.

:func:`hub_listing` reads a Hugging Face repository's file list (names, sizes, checksums) from the hub's
``/api/{kind}s/{repo}/tree/{revision}`` endpoint; :func:`hub_file_url` gives a file's ``resolve`` URL. The
endpoint defaults to ``$HF_ENDPOINT`` or ``https://huggingface.co`` (a mirror works the same way).
Only the standard library is used.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import re
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "ChecksumError",
    "DownloadError",
    "RemoteFile",
    "default_endpoint",
    "download",
    "file_digest",
    "hub_file_url",
    "hub_listing",
]

_CHUNK = 1 << 20
_USER_AGENT = "searchenv-download/1"


class DownloadError(RuntimeError):
    """The server could not be reached or kept failing; bytes already fetched stay on disk for a resume."""


class ChecksumError(ValueError):
    """A finished file does not have the size or checksum its source published; it has been deleted."""


@dataclass(frozen=True)
class RemoteFile:
    """One file of a repository: its path, size and published checksum (``algorithm`` is ``sha256`` or ``git-sha1``)."""

    path: str
    size: int | None
    checksum: str | None
    algorithm: str = "sha256"


def default_endpoint() -> str:
    return os.environ.get("HF_ENDPOINT", "https://huggingface.co").rstrip("/")


def hub_file_url(endpoint: str, repo: str, path: str, revision: str = "main", kind: str = "dataset") -> str:
    prefix = "" if kind == "model" else f"{kind}s/"
    return f"{endpoint.rstrip('/')}/{prefix}{repo}/resolve/{revision}/{path}"


def hub_listing(
    endpoint: str, repo: str, revision: str = "main", kind: str = "dataset", timeout: float = 60
) -> list[RemoteFile]:
    """Files at the top of a hub repository, with the sha256 of LFS files and the git SHA-1 of the others."""
    url = f"{endpoint.rstrip('/')}/api/{kind}s/{repo}/tree/{revision}"
    try:
        with urllib.request.urlopen(_request(url), timeout=timeout) as response:
            rows = json.loads(response.read())
    except (urllib.error.URLError, OSError, http.client.HTTPException, json.JSONDecodeError) as exc:
        raise DownloadError(
            f"cannot list {repo} at {url} ({_reason(exc)}). Offline or blocked? Fetch the files on a machine that "
            "can reach the hub and pass their folder with --from (or set HF_ENDPOINT to a mirror)"
        ) from None
    files = []
    for row in rows:
        if row.get("type") != "file":
            continue
        lfs = row.get("lfs") or {}
        if lfs.get("oid"):
            files.append(RemoteFile(row["path"], int(lfs.get("size", row.get("size"))), lfs["oid"], "sha256"))
        else:
            files.append(RemoteFile(row["path"], int(row["size"]), row.get("oid"), "git-sha1"))
    return files


def file_digest(path: Path, algorithm: str = "sha256", *, progress: bool = True) -> str:
    """``sha256`` of a file's bytes, or ``git-sha1``: the SHA-1 git gives the file as a blob."""
    from tqdm.auto import tqdm

    size = path.stat().st_size
    if algorithm == "sha256":
        digest = hashlib.sha256()
    elif algorithm == "git-sha1":
        digest = hashlib.sha1()
        digest.update(f"blob {size}\0".encode())
    else:
        raise ValueError(f"unknown checksum algorithm {algorithm!r}; expected 'sha256' or 'git-sha1'")
    with (
        path.open("rb") as handle,
        tqdm(
            total=size, desc=f"checking {path.name}", unit="B", unit_scale=True, unit_divisor=1024, disable=not progress
        ) as bar,
    ):
        while block := handle.read(8 * _CHUNK):
            digest.update(block)
            bar.update(len(block))
    return digest.hexdigest()


def download(
    url: str,
    dest: str | os.PathLike[str],
    *,
    size: int | None = None,
    checksum: str | None = None,
    algorithm: str = "sha256",
    retries: int = 3,
    backoff_s: float = 2.0,
    timeout: float = 60,
    progress: bool = True,
) -> Path:
    """Fetch ``url`` into ``dest``, resuming ``dest.incomplete`` if present; verify; rename into place.

    Raises:
        DownloadError: the transfer kept failing (the partial file is kept: call again to resume).
        ChecksumError: the complete file has the wrong size or checksum (the partial file is deleted).
    """
    from tqdm.auto import tqdm

    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    partial = dest.with_name(dest.name + ".incomplete")
    if size is not None and partial.exists() and partial.stat().st_size > size:
        partial.unlink()  # longer than the file can be: not a prefix of it
    failures = 0
    with tqdm(
        total=size,
        initial=partial.stat().st_size if partial.exists() else 0,
        desc=dest.name,
        unit="B",
        unit_scale=True,
        unit_divisor=1024,
        disable=not progress,
    ) as bar:
        while True:
            try:
                _fetch_rest(url, partial, size, timeout, bar)
                break
            except (urllib.error.URLError, OSError, http.client.HTTPException, _ShortRead) as exc:
                if isinstance(exc, urllib.error.HTTPError) and exc.code in (401, 403, 404):
                    raise DownloadError(
                        f"{url}: HTTP {exc.code} {exc.reason} — check the repository, revision and file name"
                    ) from None
                failures += 1
                kept = partial.stat().st_size if partial.exists() else 0
                if failures > retries:
                    raise DownloadError(
                        f"downloading {url} failed {failures} times ({_reason(exc)}); {kept:,} bytes are kept in "
                        f"{partial}: run the same command again to resume"
                    ) from None
                time.sleep(backoff_s * 2 ** (failures - 1))
    _verify(partial, dest.name, size, checksum, algorithm, progress)
    os.replace(partial, dest)
    return dest


class _ShortRead(Exception):
    """The server closed the connection before sending the whole file."""


def _fetch_rest(url: str, partial: Path, size: int | None, timeout: float, bar) -> None:
    """Append the bytes after ``partial``'s current length (or start over if the server ignores ``Range``)."""
    have = partial.stat().st_size if partial.exists() else 0
    if size is not None and have == size:
        return
    request = _request(url)
    if have:
        request.add_header("Range", f"bytes={have}-")
    try:
        response = urllib.request.urlopen(request, timeout=timeout)
    except urllib.error.HTTPError as exc:
        if exc.code == 416 and have and size is None:  # nothing after what we have: the file is complete
            return
        raise
    with response:
        if have and response.status == 206:
            start = _content_range_start(response.headers.get("Content-Range", ""))
            if start != have:
                raise _ShortRead(f"asked for bytes from {have}, the server sent from {start}")
            mode = "ab"
        else:  # 200: the whole file again
            mode = "wb"
            bar.reset(total=size)
        expected = response.headers.get("Content-Length")
        received = 0
        with partial.open(mode) as handle:
            while True:
                try:
                    block = response.read(_CHUNK)
                except http.client.IncompleteRead as exc:
                    handle.write(exc.partial)
                    bar.update(len(exc.partial))
                    raise _ShortRead("connection closed mid-file") from None
                if not block:
                    break
                handle.write(block)
                received += len(block)
                bar.update(len(block))
        if expected is not None and received < int(expected):
            raise _ShortRead(f"connection closed after {received:,} of {int(expected):,} bytes")


def _verify(path: Path, name: str, size: int | None, checksum: str | None, algorithm: str, progress: bool) -> None:
    found = path.stat().st_size
    if size is not None and found != size:
        path.unlink()
        raise ChecksumError(f"{name}: {found:,} bytes downloaded but the source lists {size:,}; deleted, retry")
    if checksum is None:
        return
    digest = file_digest(path, algorithm, progress=progress)
    if digest != checksum.lower():
        path.unlink()
        raise ChecksumError(
            f"{name}: {algorithm} {digest} does not match the published {checksum}; the file was corrupted "
            "in transit or changed at the source. It has been deleted: run the command again to fetch it anew"
        )


def _request(url: str) -> urllib.request.Request:
    return urllib.request.Request(url, headers={"User-Agent": _USER_AGENT})


def _content_range_start(header: str) -> int | None:
    match = re.match(r"bytes (\d+)-", header)
    return int(match.group(1)) if match else None


def _reason(exc: BaseException) -> str:
    return str(getattr(exc, "reason", None) or exc) or type(exc).__name__
