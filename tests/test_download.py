"""``searchenv prepare`` and the resumable download against a real HTTP server on loopback.

The server speaks the two hub endpoints ``prepare`` uses — ``/api/datasets/<repo>/tree/<rev>`` (file list with
sizes and LFS sha256) and ``/datasets/<repo>/resolve/<rev>/<file>`` (a redirect to the bytes, which honour
``Range``) — and serves small real stand-ins: the first 60 passages of FlashRAG's wiki-18 sample, gzipped, and a
faiss flat index of their real e5-base-v2 vectors cut into ``part_aa``/``part_ab``. It can cut a response short
or publish a wrong checksum. The Hugging Face hub itself is never contacted.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest

from searchenv.cli.main import main
from searchenv.cli.prepare import prepare
from searchenv.corpus import Corpus
from searchenv.data.hub import ChecksumError, DownloadError, download, file_digest

N_PASSAGES = 60


class StandInHub:
    """A loopback HTTP server with the hub's listing and resolve endpoints; records every request."""

    def __init__(self, repos: dict[str, dict[str, bytes]]):
        self.repos = repos
        self.cut_once: set[str] = set()  # files whose next transfer stops halfway
        self.wrong_sha: set[str] = set()  # files listed with a checksum that is not theirs
        self.ignore_range = False
        self.requests: list[tuple[str, str | None]] = []
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                hub.requests.append((self.path, self.headers.get("Range")))
                parts = self.path.strip("/").split("/")
                if parts[:2] == ["api", "datasets"] and parts[-2] == "tree":
                    return self._listing("/".join(parts[2:-2]))
                if parts[0] == "datasets" and "resolve" in parts:
                    at = parts.index("resolve")
                    repo, name = "/".join(parts[1:at]), "/".join(parts[at + 2 :])
                    self.send_response(302)
                    self.send_header("Location", f"/cdn/{repo}/{name}")
                    self.send_header("Content-Length", "0")
                    return self.end_headers()
                if parts[0] == "cdn":
                    return self._bytes("/".join(parts[1:-1]), parts[-1])
                self.send_error(404)

            def _listing(self, repo):
                if repo not in hub.repos:
                    return self.send_error(404)
                rows = []
                for name, data in hub.repos[repo].items():
                    sha = hashlib.sha256(data).hexdigest()
                    if name in hub.wrong_sha:
                        sha = hashlib.sha256(data + b"!").hexdigest()
                    rows.append(
                        {"type": "file", "path": name, "size": len(data), "lfs": {"oid": sha, "size": len(data)}}
                    )
                body = json.dumps(rows).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _bytes(self, repo, name):
                data = hub.repos.get(repo, {}).get(name)
                if data is None:
                    return self.send_error(404)
                start = 0
                wanted = self.headers.get("Range")
                if wanted and not hub.ignore_range:
                    start = int(wanted.split("=")[1].split("-")[0])
                    self.send_response(206)
                    self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
                else:
                    self.send_response(200)
                body = data[start:]
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if name in hub.cut_once:
                    hub.cut_once.discard(name)
                    self.wfile.write(body[: len(body) // 2])
                    self.wfile.flush()
                    self.close_connection = True
                    return
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


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
        asked = [path for path, _ in hub.requests]
        again = prepare("e5-flat", tmp_path, endpoint=hub.endpoint, progress=False)
        assert again == index_path and len(hub.requests) == len(asked)  # already prepared: no request at all
    assert "/api/datasets/PeterJinGo/wiki-18-e5-index/tree/main" in asked
    assert "/datasets/PeterJinGo/wiki-18-e5-index/resolve/main/part_ab" in asked
    assert not any("README" in path for path in asked)  # only the files that make the artefact
    record = json.loads((tmp_path / "e5_Flat.index.json").read_text())
    assert record["rows"] == N_PASSAGES and record["dim"] == 768 and record["index_kind"] == "exact"
    assert [s["path"] for s in record["sources"]] == ["part_aa", "part_ab"]
    assert not (tmp_path / "e5-flat.parts").exists() and (tmp_path / "e5-hnsw.parts" / "part_ac").exists()
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


def test_interrupted_transfer_resumes_with_a_range_request(stand_ins, tmp_path):
    data = stand_ins["PeterJinGo/wiki-18-e5-index"]["part_aa"]
    sha = hashlib.sha256(data).hexdigest()
    with StandInHub(stand_ins) as hub:
        url = f"{hub.endpoint}/datasets/PeterJinGo/wiki-18-e5-index/resolve/main/part_aa"
        hub.cut_once.add("part_aa")
        with pytest.raises(DownloadError, match="run the same command again to resume"):
            download(url, tmp_path / "part_aa", size=len(data), checksum=sha, retries=0, progress=False)
        kept = (tmp_path / "part_aa.incomplete").stat().st_size
        assert 0 < kept < len(data) and not (tmp_path / "part_aa").exists()
        download(url, tmp_path / "part_aa", size=len(data), checksum=sha, retries=0, progress=False)
        assert (tmp_path / "part_aa").read_bytes() == data and not (tmp_path / "part_aa.incomplete").exists()
        assert hub.requests[-1] == ("/cdn/PeterJinGo/wiki-18-e5-index/part_aa", f"bytes={kept}-")  # resumed

        hub.cut_once.add("part_ab")  # within one call: the retry resumes on its own
        part_ab = stand_ins["PeterJinGo/wiki-18-e5-index"]["part_ab"]
        download(
            url.replace("part_aa", "part_ab"),
            tmp_path / "part_ab",
            size=len(part_ab),
            checksum=hashlib.sha256(part_ab).hexdigest(),
            retries=1,
            backoff_s=0,
            progress=False,
        )
        assert (tmp_path / "part_ab").read_bytes() == part_ab and hub.requests[-1][1] is not None

        hub.ignore_range = True  # a server that answers a Range request with the whole file: start over
        (tmp_path / "again.incomplete").write_bytes(data[:100])
        download(url, tmp_path / "again", size=len(data), checksum=sha, progress=False)
        assert (tmp_path / "again").read_bytes() == data


def test_checksum_mismatch_is_rejected_and_the_bytes_deleted(stand_ins, tmp_path):
    with StandInHub(stand_ins) as hub:
        hub.wrong_sha.add("part_ab")
        with pytest.raises(ChecksumError, match="part_ab: sha256 .* does not match the published"):
            prepare("e5-flat", tmp_path, endpoint=hub.endpoint, progress=False, retries=0)
    pieces = tmp_path / "e5-flat.parts"
    assert (pieces / "part_aa").exists()  # verified, kept for the next run
    assert not (pieces / "part_ab").exists() and not (pieces / "part_ab.incomplete").exists()
    assert not (tmp_path / "e5_Flat.index").exists()


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
    unreachable = "http://127.0.0.1:9"  # discard port: nothing listens
    assert main(["prepare", "e5-hnsw", "--out", str(tmp_path), "--endpoint", unreachable]) == 2
    assert "cannot list PeterJinGo/wiki-18-e5-index-HNSW64" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["prepare", "wiki-19"])
    assert "invalid choice: 'wiki-19'" in capsys.readouterr().err


def test_prepare_refuses_unknown_names_and_missing_sources(tmp_path):
    with pytest.raises(ValueError, match="unknown artefact 'bm25'"):
        prepare("bm25", tmp_path)
    with pytest.raises(FileNotFoundError, match="no such file or folder"):
        prepare("wiki18", tmp_path, source=tmp_path / "nowhere", progress=False)


def test_wrong_size_is_rejected(stand_ins, tmp_path):
    data = stand_ins["PeterJinGo/wiki-18-corpus"]["README.md"]
    with StandInHub(stand_ins) as hub:
        url = f"{hub.endpoint}/datasets/PeterJinGo/wiki-18-corpus/resolve/main/README.md"
        with pytest.raises(ChecksumError, match="the source lists"):
            download(url, tmp_path / "README.md", size=len(data) + 5, retries=0, progress=False)
        assert not Path(tmp_path / "README.md.incomplete").exists()
