"""``searchenv prepare`` and hub loading through huggingface_hub, against a real HTTP stand-in of the hub on loopback.

The stand-in speaks what huggingface_hub asks of the hub: ``/api/datasets/<repo>/tree/<rev>`` (the file list with
git and LFS checksums) and ``HEAD``/``GET /datasets/<repo>/resolve/<rev>/<file>`` (a redirect carrying
``X-Repo-Commit``, ``ETag``, ``X-Linked-Etag`` and ``X-Linked-Size``, as the hub answers for LFS files). The
redirect goes to a second server, the storage host, whose bytes honour ``Range``; it can break a transfer off
halfway, ignore ``Range`` or send damaged bytes. The files are small real stand-ins: the first 60 passages of
FlashRAG's wiki-18 sample, gzipped, and faiss indexes of their real e5-base-v2 vectors cut into ``part_aa``...
huggingface_hub's cache and state point into ``tmp_path``; the Hugging Face hub itself is never contacted.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

import numpy as np
import pytest

from searchenv.cli.main import main
from searchenv.cli.prepare import prepare
from searchenv.corpus import Corpus
from searchenv.data.hub import ChecksumError, RemoteFile, fetch_checked, file_digest

N_PASSAGES = 60
COMMIT = "0123456789abcdef0123456789abcdef01234567"


def git_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


class StandInHub:
    """Two loopback servers: the hub (listing, resolve) and the storage host it redirects to; logs every request."""

    def __init__(self, repos: dict[str, dict[str, bytes]]):
        self.repos = repos
        self.cut_once: set[str] = set()  # files whose next transfer stops halfway
        self.corrupt: set[str] = set()  # files served with one byte flipped
        self.ignore_range = False
        self.requests: list[tuple[str, str, str | None]] = []  # (method, path, Range)
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_HEAD(self):
                self.do_GET()

            def do_GET(self):
                path = urlsplit(self.path).path
                hub.requests.append((self.command, path, self.headers.get("Range")))
                parts = path.strip("/").split("/")
                if parts[:2] == ["api", "datasets"] and "tree" in parts:
                    return self._listing("/".join(parts[2 : parts.index("tree")]))
                if parts[0] == "datasets" and "resolve" in parts:
                    at = parts.index("resolve")
                    return self._resolve("/".join(parts[1:at]), "/".join(parts[at + 2 :]))
                if parts[0] == "storage":
                    return self._bytes(path.removeprefix("/storage/"))
                self.send_error(404)

            def _listing(self, repo):
                if repo not in hub.repos:
                    return self._not_found()
                rows = []
                for name, data in hub.repos[repo].items():
                    row = {"type": "file", "path": name, "size": len(data), "oid": git_sha1(data)}
                    if not name.endswith(".md"):  # what the hub keeps in LFS
                        sha = hashlib.sha256(data).hexdigest()
                        row["lfs"] = {"oid": sha, "size": len(data), "pointerSize": 134}
                    rows.append(row)
                self._send(200, json.dumps(rows).encode(), {"Content-Type": "application/json"})

            def _resolve(self, repo, name):
                data = hub.repos.get(repo, {}).get(name)
                if data is None:
                    return self._not_found()
                self._send(
                    302,
                    b"",
                    {
                        "Location": f"{hub.storage}/storage/{repo}/{name}",
                        "X-Repo-Commit": COMMIT,
                        "ETag": f'"{git_sha1(data)}"',
                        "X-Linked-Etag": f'"{hashlib.sha256(data).hexdigest()}"',
                        "X-Linked-Size": str(len(data)),
                    },
                )

            def _bytes(self, key):
                repo = next((r for r in hub.repos if key.startswith(f"{r}/")), "")
                name = key.removeprefix(f"{repo}/")
                data = hub.repos.get(repo, {}).get(name)
                if data is None:
                    return self.send_error(404)
                if name in hub.corrupt:
                    data = data[:-1] + bytes([data[-1] ^ 0xFF])
                start, status, headers = 0, 200, {}
                wanted = self.headers.get("Range")
                if wanted and not hub.ignore_range:
                    start, status = int(wanted.split("=")[1].split("-")[0]), 206
                    headers["Content-Range"] = f"bytes {start}-{len(data) - 1}/{len(data)}"
                body = data[start:]
                if name in hub.cut_once:  # promise the whole body, send half, hang up
                    hub.cut_once.discard(name)
                    self._send(status, body[: len(body) // 2], {**headers, "Content-Length": str(len(body))})
                    self.close_connection = True
                    return
                self._send(status, body, headers)

            def _not_found(self):
                self._send(404, b'{"error": "Repository not found"}', {"X-Error-Code": "RepoNotFound"})

            def _send(self, status, body, headers):
                self.send_response(status)
                headers = {"Content-Length": str(len(body)), **headers}
                for key, value in headers.items():
                    self.send_header(key, value)
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)
                    self.wfile.flush()

        self.servers = [ThreadingHTTPServer(("127.0.0.1", 0), Handler) for _ in range(2)]
        self.endpoint, self.storage = (f"http://127.0.0.1:{s.server_address[1]}" for s in self.servers)
        self.threads = [threading.Thread(target=s.serve_forever, daemon=True) for s in self.servers]

    def fetched(self, name: str) -> list[str | None]:
        """The ``Range`` header of every transfer of ``name`` from the storage host."""
        return [rng for method, path, rng in self.requests if path.startswith("/storage/") and path.endswith(name)]

    def __enter__(self):
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc):
        for server in self.servers:
            server.shutdown()
            server.server_close()


@pytest.fixture(autouse=True)
def hub_state_in_tmp(tmp_path, monkeypatch):
    """huggingface_hub online (conftest switches it off for the rest of the suite), its cache in ``tmp_path``."""
    from huggingface_hub import constants

    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hf" / "hub"))
    monkeypatch.setattr(constants, "HF_XET_CACHE", str(tmp_path / "hf" / "xet"))
    monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(tmp_path / "hf" / "token"))
    monkeypatch.delenv("HF_TOKEN", raising=False)


@pytest.fixture(scope="module")
def stand_ins(shared_data) -> dict[str, dict[str, bytes]]:
    """Small real files in the layout of the three hub repositories."""
    import faiss

    lines = (shared_data / "corpus" / "flashrag_sample.jsonl").read_bytes().splitlines(keepends=True)[:N_PASSAGES]
    full = faiss.read_index(str(shared_data / "corpus" / "flashrag_sample_e5_flat.index"))
    flat = faiss.IndexFlatIP(full.d)
    flat.add(full.reconstruct_n(0, N_PASSAGES))
    index_bytes = faiss.serialize_index(flat).tobytes()
    hnsw = faiss.IndexHNSWFlat(full.d, 16, faiss.METRIC_INNER_PRODUCT)
    hnsw.add(full.reconstruct_n(0, N_PASSAGES))
    hnsw_bytes = faiss.serialize_index(hnsw).tobytes()
    half, third = len(index_bytes) // 2, len(hnsw_bytes) // 3
    return {
        "PeterJinGo/wiki-18-corpus": {"wiki-18.jsonl.gz": gzip.compress(b"".join(lines)), "README.md": b"# corpus\n"},
        "PeterJinGo/wiki-18-e5-index": {"part_aa": index_bytes[:half], "part_ab": index_bytes[half:]},
        "PeterJinGo/wiki-18-e5-index-HNSW64": {
            "part_aa": hnsw_bytes[:third],
            "part_ab": hnsw_bytes[third : 2 * third],
            "part_ac": hnsw_bytes[2 * third :],
        },
    }


def test_prepare_fetches_assembles_and_the_result_is_searchable(stand_ins, tmp_path):
    with StandInHub(stand_ins) as hub:
        corpus_path = prepare("wiki18", tmp_path, endpoint=hub.endpoint, progress=False)
        index_path = prepare("e5-flat", tmp_path, endpoint=hub.endpoint, progress=False)
        hnsw_path = prepare("e5-hnsw", tmp_path, endpoint=hub.endpoint, progress=False, keep_parts=True)
        asked = [path for _, path, _ in hub.requests]
        again = prepare("e5-flat", tmp_path, endpoint=hub.endpoint, progress=False)
        assert again == index_path and len(hub.requests) == len(asked)  # already prepared: no request at all
    assert "/api/datasets/PeterJinGo/wiki-18-e5-index/tree/main" in asked
    assert "/datasets/PeterJinGo/wiki-18-e5-index/resolve/main/part_ab" in asked
    assert "/storage/PeterJinGo/wiki-18-e5-index/part_ab" in asked  # followed the redirect to the storage host
    assert not any("README" in path for path in asked)  # only the files that make the artefact
    record = json.loads((tmp_path / "e5_Flat.index.json").read_text())
    assert record["rows"] == N_PASSAGES and record["dim"] == 768 and record["index_kind"] == "exact"
    assert [s["path"] for s in record["sources"]] == ["part_aa", "part_ab"]
    assert (
        record["sources"][0]["sha256"]
        == hashlib.sha256(stand_ins["PeterJinGo/wiki-18-e5-index"]["part_aa"]).hexdigest()
    )
    assert record["origin"] == f"{hub.endpoint}/datasets/PeterJinGo/wiki-18-e5-index@main"
    assert not (tmp_path / "e5-flat.parts").exists() and (tmp_path / "e5-hnsw.parts" / "part_ac").exists()
    assert not (tmp_path / "hf" / "hub").exists()  # the pieces live beside --out, not in the shared cache
    assert json.loads((tmp_path / "wiki-18.jsonl.json").read_text())["rows"] == N_PASSAGES
    assert (
        index_path.read_bytes()
        == stand_ins["PeterJinGo/wiki-18-e5-index"]["part_aa"] + (stand_ins["PeterJinGo/wiki-18-e5-index"]["part_ab"])
    )
    sums = (tmp_path / "SHA256SUMS").read_text()
    assert f"{file_digest(index_path, progress=False)}  e5_Flat.index" in sums

    from searchenv.retrievers import make_retriever

    corpus = Corpus.from_jsonl(corpus_path)
    exact = make_retriever("e5-exact", corpus, encoder=None, index_path=index_path)
    hnsw = make_retriever("e5-hnsw", corpus, encoder=None, index_path=hnsw_path, ef_search=64)
    vectors = exact.index.reconstruct_n(0, N_PASSAGES)
    assert (exact.search_vectors(vectors, 1)[1][:, 0] == np.arange(N_PASSAGES)).all()
    assert (hnsw.search_vectors(vectors, 1)[1][:, 0] == np.arange(N_PASSAGES)).mean() >= 0.95


def test_interrupted_transfer_resumes_with_a_range_request(stand_ins, tmp_path, monkeypatch):
    from huggingface_hub import constants

    # huggingface_hub writes what it receives in blocks of 10 MB; the stand-in pieces are ~100 kB, so that the bytes
    # before the cut reach the disk (and the resume asks for the rest only), the blocks here are 4 kB.
    monkeypatch.setattr(constants, "DOWNLOAD_CHUNK_SIZE", 4096)
    flat = stand_ins["PeterJinGo/wiki-18-e5-index"]
    with StandInHub(stand_ins) as hub:
        hub.cut_once.add("part_aa")  # the connection drops halfway through the first transfer
        index_path = prepare("e5-flat", tmp_path, endpoint=hub.endpoint, progress=False)
        first, second = hub.fetched("part_aa")
        assert first is None and second is not None
        kept = int(second.removeprefix("bytes=").rstrip("-"))
        assert 0 < kept < len(flat["part_aa"])  # asked only for the bytes after those already received
        assert index_path.read_bytes() == flat["part_aa"] + flat["part_ab"]

        hub.ignore_range = True  # a storage host that answers a Range request with the whole file: start over
        hub.cut_once.add("part_ab")
        hnsw = stand_ins["PeterJinGo/wiki-18-e5-index-HNSW64"]
        hnsw_path = prepare("e5-hnsw", tmp_path, endpoint=hub.endpoint, progress=False)
        assert hnsw_path.read_bytes() == hnsw["part_aa"] + hnsw["part_ab"] + hnsw["part_ac"]


def test_damaged_piece_is_refused_deleted_and_fetched_anew(stand_ins, tmp_path):
    flat = stand_ins["PeterJinGo/wiki-18-e5-index"]
    pieces = tmp_path / "e5-flat.parts"
    with StandInHub(stand_ins) as hub:
        hub.corrupt.add("part_ab")  # right size, one byte wrong: only the sha256 can tell
        with pytest.raises(ChecksumError, match="part_ab: sha256 .* does not match the published"):
            prepare("e5-flat", tmp_path, endpoint=hub.endpoint, progress=False)
        assert (pieces / "part_aa").read_bytes() == flat["part_aa"]  # verified, kept for the next run
        assert not (pieces / "part_ab").exists() and not list(pieces.rglob("*.incomplete"))
        assert not (tmp_path / "e5_Flat.index").exists()

        hub.corrupt.clear()
        before = len(hub.requests)
        assert prepare("e5-flat", tmp_path, endpoint=hub.endpoint, progress=False).is_file()
        fetched = {path for _, path, _ in hub.requests[before:] if path.startswith("/storage/")}
        assert fetched == {"/storage/PeterJinGo/wiki-18-e5-index/part_ab"}  # part_aa was not fetched again


def test_size_other_than_listed_is_refused(stand_ins, tmp_path):
    data = stand_ins["PeterJinGo/wiki-18-e5-index"]["part_aa"]
    listed = RemoteFile("part_aa", len(data) + 5, hashlib.sha256(data).hexdigest(), git_sha1(data))
    with StandInHub(stand_ins) as hub:
        with pytest.raises(ChecksumError, match="the hub lists"):
            fetch_checked("PeterJinGo/wiki-18-e5-index", listed, tmp_path, endpoint=hub.endpoint, progress=False)
    assert not (tmp_path / "part_aa").exists()


def test_offline_from_a_local_folder_checks_sums_and_structure(stand_ins, tmp_path):
    pieces = tmp_path / "usb"
    pieces.mkdir()
    for name, data in {**stand_ins["PeterJinGo/wiki-18-e5-index"], **stand_ins["PeterJinGo/wiki-18-corpus"]}.items():
        (pieces / name).write_bytes(data)
    out = tmp_path / "out"
    assert prepare("wiki18", out, source=pieces, progress=False).is_file()
    assert prepare("e5-flat", out, source=pieces, progress=False).is_file()
    assert (pieces / "part_aa").exists()  # a --from folder is never modified

    moved = tmp_path / "moved"  # the finished results, copied with their SHA256SUMS to another machine
    moved.mkdir()
    for name in ("e5_Flat.index", "wiki-18.jsonl", "SHA256SUMS"):
        (moved / name).write_bytes((out / name).read_bytes())
    assert prepare("e5-flat", tmp_path / "third", source=moved, progress=False).read_bytes() == (
        (out / "e5_Flat.index").read_bytes()
    )
    damaged = bytearray((moved / "e5_Flat.index").read_bytes())
    damaged[-1] ^= 0xFF
    (moved / "e5_Flat.index").write_bytes(bytes(damaged))
    with pytest.raises(ValueError, match="does not match SHA256SUMS"):
        prepare("e5-flat", tmp_path / "fourth", source=moved, progress=False)
    (moved / "SHA256SUMS").unlink()
    (moved / "e5_Flat.index").write_bytes(b"not an index at all")
    with pytest.raises(ValueError, match="not a readable faiss index"):
        prepare("e5-flat", tmp_path / "fifth", source=moved, progress=False)
    with pytest.raises(FileNotFoundError, match="holds neither wiki-18.jsonl nor files matching"):
        prepare("wiki18", tmp_path / "sixth", source=tmp_path / "fifth", progress=False)


def test_cli_prepare_and_its_errors(stand_ins, tmp_path, capsys):
    with StandInHub(stand_ins) as hub:
        code = main(["prepare", "wiki18", "e5-flat", "--out", str(tmp_path), "--endpoint", hub.endpoint])
        captured = capsys.readouterr()
        assert code == 0 and captured.out.split() == [str(tmp_path / "wiki-18.jsonl"), str(tmp_path / "e5_Flat.index")]
        assert "e5_Flat.index" in captured.err and "B/s" in captured.err  # byte progress bars
    without_hnsw = {repo: files for repo, files in stand_ins.items() if not repo.endswith("HNSW64")}
    with StandInHub(without_hnsw) as hub:
        assert main(["prepare", "e5-hnsw", "--out", str(tmp_path), "--endpoint", hub.endpoint]) == 2
    err = capsys.readouterr().err
    assert "cannot list PeterJinGo/wiki-18-e5-index-HNSW64@main" in err and "RepositoryNotFoundError" in err
    assert "--from" in err
    with pytest.raises(SystemExit):
        main(["prepare", "wiki-19"])
    assert "invalid choice: 'wiki-19'" in capsys.readouterr().err


def test_prepare_refuses_unknown_names_and_missing_sources(tmp_path):
    with pytest.raises(ValueError, match="unknown artefact 'bm25'"):
        prepare("bm25", tmp_path)
    with pytest.raises(FileNotFoundError, match="no such file or folder"):
        prepare("wiki18", tmp_path, source=tmp_path / "nowhere", progress=False)


@pytest.mark.slow  # two fresh Python processes
def test_qa_set_by_name_comes_through_hf_endpoint_into_the_shared_cache(shared_data, tmp_path):
    """``load_dataset("nq")`` in a fresh process whose only pointer to the stand-in is ``$HF_ENDPOINT``."""
    rows = (shared_data / "qa" / "nq_test_17.jsonl").read_bytes()
    script = "from searchenv.data.datasets import load_dataset; print(load_dataset('nq', split='test')[0].question)"
    with StandInHub({"RUC-NLPIR/FlashRAG_datasets": {"nq/test.jsonl": rows}}) as hub:
        env = {**os.environ, "HF_ENDPOINT": hub.endpoint, "HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "0"}
        env.pop("SEARCHENV_DATA_DIR", None)
        env.pop("HF_HUB_CACHE", None)
        done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == json.loads(rows.splitlines()[0])["question"].strip()
        assert ("GET", "/storage/RUC-NLPIR/FlashRAG_datasets/nq/test.jsonl", None) in hub.requests
        offline = {**env, "HF_HUB_OFFLINE": "1", "HF_ENDPOINT": "http://127.0.0.1:9"}  # cached: no hub needed
        again = subprocess.run([sys.executable, "-c", script], env=offline, capture_output=True, text=True, timeout=120)
        assert again.stdout == done.stdout, again.stderr
    assert list((tmp_path / "hf" / "hub").glob("datasets--RUC-NLPIR--FlashRAG_datasets/snapshots/*/nq/test.jsonl"))
