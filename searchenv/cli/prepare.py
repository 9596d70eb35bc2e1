"""``searchenv prepare``: the papers' retrieval corpus and prebuilt E5 indexes, from their public hub locations.

Search-R1 and the search-engine study search **wiki-18** (the DPR 2018 Wikipedia dump, 21,015,324 passages of
100 words) with e5-base-v2 vectors in a faiss index. Their authors publish, as Hugging Face *datasets*:

========== ====================================== ==================== ==============================
artefact   repository                             files                result
========== ====================================== ==================== ==============================
wiki18     PeterJinGo/wiki-18-corpus              wiki-18.jsonl.gz     wiki-18.jsonl (gunzipped)
e5-flat    PeterJinGo/wiki-18-e5-index            part_aa, part_ab     e5_Flat.index (concatenated)
e5-hnsw    PeterJinGo/wiki-18-e5-index-HNSW64     part_*               e5_HNSW64.index (concatenated)
========== ====================================== ==================== ==============================

:func:`prepare` lists the repository and fetches the matching files through ``huggingface_hub``
(:mod:`searchenv.data.hub`: mirrors, resumed connections, a lock per file, each file checked against the hub's
published sha256) into ``<artefact>.parts/`` beside the result, assembles the result into ``out`` through a
temporary file renamed into place, checks its structure (a corpus row parses; an index opens with the expected
row count and dimension) and writes ``<result>.json`` (sources, sizes, checksums, rows) and a ``SHA256SUMS`` line
for it. The pieces stay on the disk of ``out`` rather than in the shared hub cache: an assembled index needs its
own size again in free disk while its pieces exist, so they are deleted once assembled (``keep_parts`` keeps
them). ``source=`` (``--from``) takes the files from a local folder instead — the hub's files or already
assembled results, e.g. a folder copied from a machine that ran ``prepare`` — and checks them against a
``SHA256SUMS`` beside them when present.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import shutil
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from searchenv.cache import cache_root

__all__ = ["ARTEFACTS", "Artefact", "add_prepare_parser", "prepare"]

_CHUNK = 8 << 20


@dataclass(frozen=True)
class Artefact:
    """One thing ``prepare`` can produce: which repository files make it, and how they are put together."""

    name: str
    repo: str
    files: str  # regular expression over the repository's top-level file names
    output: str
    assemble: str  # "gunzip" | "concat"
    about: str


ARTEFACTS: dict[str, Artefact] = {
    a.name: a
    for a in (
        Artefact(
            "wiki18",
            "PeterJinGo/wiki-18-corpus",
            r"wiki-18\.jsonl\.gz",
            "wiki-18.jsonl",
            "gunzip",
            "wiki-18 passages, {'id','contents'} jsonl (21,015,324 rows, ~14 GB unpacked)",
        ),
        Artefact(
            "e5-flat",
            "PeterJinGo/wiki-18-e5-index",
            r"part_[a-z]+",
            "e5_Flat.index",
            "concat",
            "faiss IndexFlatIP of e5-base-v2 passage vectors, 21,015,324 x 768 fp32 (~65 GB; the study's E5-exact)",
        ),
        Artefact(
            "e5-hnsw",
            "PeterJinGo/wiki-18-e5-index-HNSW64",
            r"part_[a-z]+",
            "e5_HNSW64.index",
            "concat",
            "faiss HNSW64 graph over the same vectors (~76 GB; the study's E5-HNSW)",
        ),
    )
}


def prepare(
    name: str,
    out: str | os.PathLike[str] | None = None,
    *,
    source: str | os.PathLike[str] | None = None,
    endpoint: str | None = None,
    revision: str = "main",
    keep_parts: bool = False,
    progress: bool = True,
) -> Path:
    """Produce artefact ``name`` (see :data:`ARTEFACTS`) in ``out`` and return its path; idempotent.

    Args:
        out: destination folder (default ``$SEARCHENV_CACHE_DIR/wiki18``).
        source: a local folder (or file) holding the hub files or the finished result; nothing is downloaded.
        endpoint: hub address (default ``$HF_ENDPOINT`` or https://huggingface.co).
        revision: repository revision (branch, tag or commit).
        keep_parts: keep the downloaded pieces after assembling (by default they are deleted to free the disk).

    Raises:
        searchenv.data.hub.DownloadError: the hub could not be reached (pieces already fetched are kept).
        searchenv.data.hub.ChecksumError: a piece arrived damaged (it is deleted; run again).
    """
    try:
        artefact = ARTEFACTS[name]
    except KeyError:
        raise ValueError(f"unknown artefact {name!r}; choose from {sorted(ARTEFACTS)}") from None
    out_dir = Path(out) if out is not None else cache_root() / "wiki18"
    out_dir.mkdir(parents=True, exist_ok=True)
    target, record_file = out_dir / artefact.output, out_dir / f"{artefact.output}.json"
    if target.exists() and record_file.exists():
        _say(progress, f"{target} is already prepared ({record_file.name})")
        return target
    if source is not None:
        return _from_local(artefact, Path(source), out_dir, progress)

    from searchenv.data import hub

    listed = hub.list_files(artefact.repo, revision=revision, endpoint=endpoint)
    listing = sorted((f for f in listed if re.fullmatch(artefact.files, f.path)), key=lambda f: f.path)
    if not listing:
        raise ValueError(f"{artefact.repo}@{revision} has no file matching {artefact.files!r}: has it been renamed?")
    pieces_dir = out_dir / f"{artefact.name}.parts"  # one folder per artefact: both indexes have a part_aa
    pieces_dir.mkdir(exist_ok=True)
    _check_space(pieces_dir, {f.path: f.size for f in listing}, artefact)
    parts = [
        hub.fetch_checked(artefact.repo, remote, pieces_dir, revision=revision, endpoint=endpoint, progress=progress)
        for remote in listing
    ]
    sources = [
        {"path": r.path, "size": r.size, **({"sha256": r.sha256} if r.sha256 else {"git-sha1": r.git_sha1})}
        for r in listing
    ]
    origin = f"{hub.hub_address(endpoint)}/datasets/{artefact.repo}@{revision}"
    _assemble(artefact, parts, target, record_file, origin, sources, progress)
    if not keep_parts:
        shutil.rmtree(pieces_dir)  # the pieces and huggingface_hub's bookkeeping (.cache/) beside them
    return target


def _from_local(artefact: Artefact, source: Path, out_dir: Path, progress: bool) -> Path:
    """Use files already on this machine: a finished result (linked or copied), or the hub's pieces (assembled)."""
    if not source.exists():
        raise FileNotFoundError(f"--from {source}: no such file or folder")
    folder = source if source.is_dir() else source.parent
    sums = _read_sums(folder / "SHA256SUMS")
    finished = source if source.is_file() and source.name == artefact.output else folder / artefact.output
    target, record_file = out_dir / artefact.output, out_dir / f"{artefact.output}.json"
    if finished.is_file():
        _check_local_sum(finished, sums, progress)
        if finished.resolve() != target.resolve():
            _link_or_copy(finished, target, progress)
        info = _inspect(artefact, target)
        _write_record(record_file, {"artefact": artefact.name, "origin": str(finished), "sources": [], **info})
        _add_sum(out_dir, target, sums.get(finished.name))
        return target
    if source.is_file():
        pieces = [source] if re.fullmatch(artefact.files, source.name) else []
    else:
        pieces = sorted(p for p in folder.iterdir() if p.is_file() and re.fullmatch(artefact.files, p.name))
    if not pieces:
        raise FileNotFoundError(
            f"--from {source} holds neither {artefact.output} nor files matching {artefact.files!r} "
            f"(the pieces of {artefact.repo})"
        )
    sources = []
    for piece in pieces:
        digest = _check_local_sum(piece, sums, progress)
        sources.append({"path": piece.name, "size": piece.stat().st_size, "sha256": digest})
    _assemble(artefact, pieces, target, record_file, str(folder), sources, progress)
    return target


def _assemble(
    artefact: Artefact,
    pieces: Sequence[Path],
    target: Path,
    record_file: Path,
    origin: str,
    sources: list[dict[str, Any]],
    progress: bool,
) -> None:
    """Gunzip or concatenate ``pieces`` into ``target`` (via a temporary file), hashing the result as it is written."""
    import hashlib

    from tqdm.auto import tqdm

    tmp = target.with_name(target.name + ".tmp")
    digest = hashlib.sha256()
    total = sum(p.stat().st_size for p in pieces)
    verb = "unpacking" if artefact.assemble == "gunzip" else "joining"
    with (
        tmp.open("wb") as sink,
        tqdm(
            total=total,
            desc=f"{verb} {target.name}",
            unit="B",
            unit_scale=True,
            unit_divisor=1024,
            disable=not progress,
        ) as bar,
    ):
        for piece in pieces:
            with piece.open("rb") as raw:
                stream = gzip.GzipFile(fileobj=raw) if artefact.assemble == "gunzip" else raw
                position = 0
                while block := stream.read(_CHUNK):
                    sink.write(block)
                    digest.update(block)
                    bar.update(raw.tell() - position)
                    position = raw.tell()
    os.replace(tmp, target)
    info = _inspect(artefact, target)
    record = {"artefact": artefact.name, "origin": origin, "sources": sources, "sha256": digest.hexdigest(), **info}
    _write_record(record_file, record)
    _add_sum(target.parent, target, digest.hexdigest())
    _say(progress, f"{target}: {_describe(info)}")


def _inspect(artefact: Artefact, path: Path) -> dict[str, Any]:
    """Check that the result is what it claims (a corpus jsonl, a faiss index) and describe it."""
    if artefact.assemble == "gunzip":
        with path.open("rb") as handle:
            first = handle.readline()
            try:
                row = json.loads(first)
                if not isinstance(row, dict) or "id" not in row or not ({"contents"} <= set(row) or "text" in row):
                    raise ValueError("no 'id' and 'contents'")
            except ValueError as exc:
                path.unlink()
                raise ValueError(f"{path} is not a passage jsonl ({exc}): first line {first[:80]!r}; deleted") from None
            newlines, last = first.count(b"\n"), first[-1:]
            while block := handle.read(_CHUNK):
                newlines, last = newlines + block.count(b"\n"), block[-1:]
        return {"rows": newlines + (last not in (b"\n", b""))}
    from searchenv.retrievers.dense.faiss_index import index_kind, read_index

    try:
        index = read_index(path, mmap=True)
    except ValueError as exc:
        path.unlink()
        raise ValueError(f"{exc}; deleted") from None
    info = {"rows": int(index.ntotal), "dim": int(index.d), "index_kind": index_kind(index)}
    corpus_record = path.parent / f"{ARTEFACTS['wiki18'].output}.json"
    if corpus_record.exists():
        rows = json.loads(corpus_record.read_text()).get("rows")
        if rows is not None and rows != info["rows"]:
            raise ValueError(
                f"{path} holds {info['rows']:,} vectors but {corpus_record.parent / ARTEFACTS['wiki18'].output} has "
                f"{rows:,} passages: they are not the same corpus (row i of the index is passage i)"
            )
    return info


def _describe(info: dict[str, Any]) -> str:
    if "dim" in info:
        return f"{info['index_kind']} index, {info['rows']:,} vectors x {info['dim']}"
    return f"{info['rows']:,} passages"


def _check_space(pieces_dir: Path, sizes: dict[str, int], artefact: Artefact) -> None:
    """Refuse to start a download the disk cannot hold (pieces plus the result; gunzip ~3.2x the archive)."""
    missing = sum(size for name, size in sizes.items() if not (pieces_dir / name).exists())
    result = sum(sizes.values()) * (3.2 if artefact.assemble == "gunzip" else 1.0)
    free = shutil.disk_usage(pieces_dir).free
    if free < missing + result:
        raise OSError(
            f"{pieces_dir.parent} has {free / 1e9:.1f} GB free; {artefact.name} needs about "
            f"{(missing + result) / 1e9:.1f} GB more (downloads, then {artefact.output}). Free space, or pass "
            "--out on a larger disk"
        )


def _read_sums(path: Path) -> dict[str, str]:
    """``sha256sum`` output: ``<hex>  <name>`` per line."""
    if not path.is_file():
        return {}
    sums = {}
    for line in path.read_text().splitlines():
        parts = line.strip().split(maxsplit=1)
        if len(parts) == 2:
            sums[parts[1].lstrip("*")] = parts[0].lower()
    return sums


def _check_local_sum(path: Path, sums: dict[str, str], progress: bool) -> str | None:
    if path.name not in sums:
        _say(progress, f"{path.name}: no SHA256SUMS entry beside it; checking its structure only")
        return None
    from searchenv.data.hub import file_digest

    digest = file_digest(path, progress=progress)
    if digest != sums[path.name]:
        raise ValueError(f"{path}: sha256 {digest} does not match SHA256SUMS ({sums[path.name]}); the copy is damaged")
    return digest


def _add_sum(folder: Path, path: Path, digest: str | None) -> None:
    if digest is None:
        return
    sums = _read_sums(folder / "SHA256SUMS")
    sums[path.name] = digest
    _write_text_atomic(folder / "SHA256SUMS", "".join(f"{d}  {n}\n" for n, d in sorted(sums.items())))


def _link_or_copy(src: Path, dest: Path, progress: bool) -> None:
    """A hard link when both are on one filesystem (no space, instant), else a copy through a temporary file."""
    tmp = dest.with_name(dest.name + ".tmp")
    tmp.unlink(missing_ok=True)
    try:
        os.link(src, tmp)
    except OSError:
        _say(progress, f"copying {src} to {dest}")
        shutil.copyfile(src, tmp)
    os.replace(tmp, dest)


def _write_record(path: Path, record: dict[str, Any]) -> None:
    _write_text_atomic(path, json.dumps(record, indent=1, sort_keys=True) + "\n")


def _write_text_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _say(progress: bool, message: str) -> None:
    if progress:
        print(message, file=sys.stderr)


def add_prepare_parser(commands: Any) -> None:
    """The ``prepare`` subcommand."""
    lines = "\n".join(f"  {a.name:<8} {a.about}\n           from {a.repo}" for a in ARTEFACTS.values())
    parser = commands.add_parser(
        "prepare",
        help="download wiki-18 and the prebuilt E5 indexes the papers search (resumable, checksummed)",
        description=f"Fetch the papers' retrieval files from their public Hugging Face datasets.\n\n{lines}\n\n"
        "See docs/paper_setup.md for the disk and memory each needs and how to search them.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "artefacts", nargs="+", choices=sorted(ARTEFACTS), metavar="ARTEFACT", help=" | ".join(ARTEFACTS)
    )
    parser.add_argument("--out", default=None, help="destination folder (default: $SEARCHENV_CACHE_DIR/wiki18)")
    parser.add_argument(
        "--from",
        dest="source",
        default=None,
        help="take the files from this local folder or file instead of the hub (offline machines)",
    )
    parser.add_argument("--endpoint", default=None, help="hub address (default: $HF_ENDPOINT or huggingface.co)")
    parser.add_argument("--revision", default="main", help="repository revision (default: main)")
    parser.add_argument("--keep-parts", action="store_true", help="keep the downloaded pieces after assembling")
    parser.set_defaults(handler=_run_prepare)


def _run_prepare(args: argparse.Namespace) -> int:
    from searchenv.data.hub import DownloadError

    paths = []
    for name in args.artefacts:
        try:
            paths.append(
                prepare(
                    name,
                    args.out,
                    source=args.source,
                    endpoint=args.endpoint,
                    revision=args.revision,
                    keep_parts=args.keep_parts,
                )
            )
        except DownloadError as exc:
            raise RuntimeError(f"{exc}; or pass a folder holding the files with --from") from None
        except OSError as exc:
            raise RuntimeError(str(exc)) from None
    for path in paths:
        print(path)
    return 0
