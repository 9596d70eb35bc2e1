"""Files of Hugging Face dataset repositories, fetched through ``huggingface_hub`` and checked before use.

``huggingface_hub`` does the transfer: the ``HF_ENDPOINT`` mirror and the user's token, the redirect to the
storage host, Range requests that resume a connection dropped mid-file (within one run), a lock against a second
process fetching the same file, Xet storage when ``hf_xet`` is installed, and the shared cache. What its plain
HTTP path checks is only the byte count, not the checksum the hub publishes — and a wrong piece of the E5 index
would be joined silently into a 65 GB file. So :func:`fetch_checked` hashes every file it hands out against the
listing from :func:`list_files`, and deletes one that does not match (:class:`ChecksumError`).

Every failure to reach or read the hub becomes a :class:`DownloadError` that names the repository and the cause
instead of a transport traceback; callers add their own way round it (``--from``, ``SEARCHENV_DATA_DIR``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

try:
    import httpx2  # huggingface_hub's HTTP client: its transport errors reach the caller unwrapped
    from huggingface_hub import HfApi, constants, hf_hub_download
    from huggingface_hub.hf_api import RepoFile
    from huggingface_hub.utils.sha import git_hash, sha_fileobj
except ImportError:  # pragma: no cover - depends on the install
    raise ImportError(
        "fetching from the Hugging Face hub needs huggingface_hub>=2.4: pip install 'searchenv[hub]'"
    ) from None

__all__ = [
    "ChecksumError",
    "DownloadError",
    "RemoteFile",
    "download",
    "fetch_checked",
    "file_digest",
    "hub_address",
    "list_files",
]

_HASH_BLOCK = 8 << 20


class DownloadError(RuntimeError):
    """The hub could not be reached, or refused or broke off a transfer."""


class ChecksumError(ValueError):
    """A downloaded file does not have the size or checksum the hub lists for it; it has been deleted."""


@dataclass(frozen=True)
class RemoteFile:
    """One file of a repository as the hub lists it: ``sha256`` for LFS files, the git blob SHA-1 for the others."""

    path: str
    size: int
    sha256: str | None
    git_sha1: str


def list_files(repo: str, *, revision: str = "main", endpoint: str | None = None) -> list[RemoteFile]:
    """The files at the top of dataset ``repo`` (folders are skipped), with their sizes and checksums."""
    try:
        entries = list(HfApi(endpoint=endpoint).list_repo_tree(repo, revision=revision, repo_type="dataset"))
    except (OSError, httpx2.HTTPError) as exc:
        raise DownloadError(
            f"cannot list {repo}@{revision} on {hub_address(endpoint)} ({_reason(exc)}). "
            "Offline? HF_ENDPOINT names a mirror"
        ) from None
    return [
        RemoteFile(e.path, e.lfs.size if e.lfs else e.size, e.lfs.sha256 if e.lfs else None, e.blob_id)
        for e in entries
        if isinstance(e, RepoFile)
    ]


def download(
    repo: str,
    path: str,
    *,
    folder: str | os.PathLike[str] | None = None,
    revision: str = "main",
    endpoint: str | None = None,
    progress: bool = True,
) -> Path:
    """Fetch ``path`` of dataset ``repo`` into ``folder`` (``folder/path``), or into the shared hub cache.

    A file already there and unchanged on the hub is not fetched again.
    """
    from functools import partial

    from tqdm.auto import tqdm

    try:
        local = hf_hub_download(
            repo,
            path,
            repo_type="dataset",
            revision=revision,
            local_dir=folder,
            endpoint=endpoint,
            # plain tqdm: huggingface_hub's own bar hides itself when stderr is not a terminal (a log file)
            tqdm_class=partial(tqdm, disable=not progress, unit_divisor=1024),
        )
    except (OSError, httpx2.HTTPError) as exc:
        raise DownloadError(
            f"cannot fetch {path} of {repo}@{revision} from {hub_address(endpoint)} ({_reason(exc)}). Offline? "
            "HF_ENDPOINT names a mirror; files already fetched are kept, so running again goes on from them"
        ) from None
    return Path(local)


def fetch_checked(
    repo: str,
    remote: RemoteFile,
    folder: str | os.PathLike[str],
    *,
    revision: str = "main",
    endpoint: str | None = None,
    progress: bool = True,
) -> Path:
    """:func:`download` ``remote`` into ``folder``, then check its size and checksum against the listing.

    Raises:
        DownloadError: the hub could not be reached or broke off the transfer.
        ChecksumError: the bytes are not the ones listed (the file is deleted, so that a new run fetches it anew).
    """
    local = download(repo, remote.path, folder=folder, revision=revision, endpoint=endpoint, progress=progress)
    found = local.stat().st_size
    if found != remote.size:
        local.unlink()
        raise ChecksumError(f"{remote.path}: {found:,} bytes arrived but the hub lists {remote.size:,}; deleted, retry")
    if remote.sha256 is not None:
        algorithm, expected, digest = "sha256", remote.sha256, file_digest(local, progress=progress)
    else:  # a small file kept in git itself (the hub allows 10 MB at most)
        algorithm, expected, digest = "git-sha1", remote.git_sha1, git_hash(local.read_bytes())
    if digest != expected.lower():
        local.unlink()
        raise ChecksumError(
            f"{remote.path}: {algorithm} {digest} does not match the published {expected}; the file was corrupted "
            "in transit or changed at the source. It has been deleted: run the command again to fetch it anew"
        )
    return local


def file_digest(path: Path, *, progress: bool = True) -> str:
    """The sha256 of a file's bytes, with a progress bar (tens of gigabytes take minutes)."""
    from tqdm.auto import tqdm

    with (
        path.open("rb") as handle,
        tqdm.wrapattr(
            handle,
            "read",
            total=path.stat().st_size,
            desc=f"checking {path.name}",
            unit="B",
            unit_scale=True,
            unit_divisor=1024,
            disable=not progress,
        ) as reader,
    ):
        return sha_fileobj(reader, _HASH_BLOCK).hex()


def hub_address(endpoint: str | None = None) -> str:
    """The hub a call with ``endpoint`` talks to: ``endpoint``, else ``$HF_ENDPOINT``, else huggingface.co."""
    return (endpoint or constants.ENDPOINT).rstrip("/")


def _reason(exc: BaseException) -> str:
    """The exception's type and first line: what went wrong, without huggingface_hub's traceback."""
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__
