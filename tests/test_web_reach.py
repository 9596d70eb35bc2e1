"""Where the page reader may go: robots.txt behind redirects, the hosts a user allows, and DNS rebinding.

Every server is real and on loopback. Name resolution is the one thing stood in: a test cannot point the system
resolver at a name whose answer changes, so ``socket.getaddrinfo`` answers for the test's own ``*.test`` names (a
public address first, then loopback, as a rebinding DNS server would) and passes every other name through.
"""

# ruff: noqa: F811 - the fixtures imported from test_web_pages are redefined as test parameters, as pytest uses them
from __future__ import annotations

import datetime
import http.server
import socket
import ssl
import threading
from pathlib import Path
from typing import Any

import pytest

from searchenv.retrievers import make_retriever
from searchenv.retrievers.web.pages import PageError, PageReader
from searchenv.retrievers.web.standin import LocalWeb
from searchenv.types import Document
from tests.test_web_pages import web, world  # noqa: F401 (the same world and loopback web fixtures)


def netloc(web: LocalWeb) -> str:
    return web.base_url.split("//")[1]


@pytest.mark.parametrize("hops", [1, 2])
def test_robots_txt_behind_redirects_is_followed_across_hosts(web: LocalWeb, world: Any, hops: int) -> None:
    """RFC 9309 2.3.1.2: a robots.txt that redirects (here to another site's, which disallows /private/) is the
    file at the end of the redirects, not "no rules"."""
    target = f"{web.base_url}/robots.txt"
    with LocalWeb(world.corpus, robots_redirect=target) as middle:
        with LocalWeb(world.corpus, robots_redirect=f"{middle.base_url}/robots.txt" if hops == 2 else target) as site:
            hosts = [netloc(web), netloc(middle), netloc(site)]
            pages = PageReader(allowed_hosts=hosts, host_interval=0.0)
            private, public = pages.open_documents(
                [f"{site.base_url}/private/x.html", site.page_url(world.corpus[2].title)]
            )
    assert isinstance(private, PageError) and private.kind == "robots", private
    assert isinstance(public, Document)


def test_robots_txt_redirecting_more_than_five_times_counts_as_unavailable(world: Any) -> None:
    with LocalWeb(world.corpus, robots_redirect="/robots.txt") as site:  # redirects to itself, forever
        pages = PageReader(allowed_hosts=[netloc(site)], host_interval=0.0)
        (document,) = pages.open_documents([f"{site.base_url}/private/x.html"])
        assert isinstance(document, Document)  # RFC 9309: unavailable, so no rules
        assert site.counts["robots"] == 6  # the first request and five redirects


def test_robots_txt_redirecting_into_a_private_network_is_not_followed(world: Any) -> None:
    with LocalWeb(world.corpus, robots_redirect="http://169.254.169.254/robots.txt") as site:
        pages = PageReader(allowed_hosts=[netloc(site)], host_interval=0.0)
        (error,) = pages.open_documents([site.page_url(world.corpus[2].title)])
        assert isinstance(error, PageError) and error.kind == "blocked", error
        assert "robots.txt" in error.detail and "169.254.169.254" in error.detail
        assert site.counts["page"] == 0


def test_a_users_allowed_hosts_add_to_the_search_host(web: LocalWeb, world: Any) -> None:
    pages = {"host_interval": 0, "allowed_hosts": ["intranet.example:8080"]}
    engine = make_retriever("searxng", None, url=web.searxng_url, pages=pages)
    assert {netloc(web), "intranet.example:8080"} <= set(engine.pages.allowed_hosts)
    (document,) = engine.open_documents([web.page_url(world.corpus[4].title)])
    assert isinstance(document, Document)  # the search host's own pages still open
    with pytest.raises(ValueError, match="takes a list of hosts"):
        make_retriever("searxng", None, url=web.searxng_url, pages={"allowed_hosts": "intranet.example"})


def test_the_reach_settings_a_fetch_ran_under_are_exposed(web: LocalWeb) -> None:
    pages = PageReader(allowed_hosts=["B.example:81", netloc(web)], allow_private=False)
    assert pages.reach_settings == {"allow_private": False, "allowed_hosts": sorted([netloc(web), "b.example:81"])}
    assert PageReader(allow_private=True).reach_settings == {"allow_private": True, "allowed_hosts": []}


class RebindingResolver:
    """``getaddrinfo`` for ``*.test`` names: a public address on the first lookup, loopback after (a DNS server
    rebinding the name between the reader's check and its connection); other names resolve as usual."""

    def __init__(self) -> None:
        self.real = socket.getaddrinfo
        self.lookups: list[str] = []

    def __call__(self, host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        name = host.decode() if isinstance(host, bytes) else str(host)
        if not name.endswith(".test"):
            return self.real(host, port, *args, **kwargs)
        self.lookups.append(name)
        address = "93.184.215.14" if len(self.lookups) == 1 else "127.0.0.1"
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, int(port or 80)))]


def test_a_name_that_rebinds_to_loopback_after_the_check_is_refused(
    web: LocalWeb, world: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    resolver = RebindingResolver()
    monkeypatch.setattr(socket, "getaddrinfo", resolver)
    port = web.base_url.rsplit(":", 1)[1]
    before = dict(web.counts)
    (error,) = PageReader(host_interval=0.0).open_documents([f"http://rebind.test:{port}/wiki/{world.corpus[2].title}"])
    assert isinstance(error, PageError) and error.kind == "blocked", error
    assert "127.0.0.1" in error.detail
    assert web.counts == before  # nothing reached the loopback server: not robots.txt, not the page


def test_an_allowed_name_connects_to_its_checked_address_with_tls_verified_for_the_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The connection goes to the address the check saw, and TLS is still verified against the URL's host name:
    a certificate for the name opens, a certificate for another name does not."""
    monkeypatch.setattr(socket, "getaddrinfo", StaticResolver())
    for name, opens in (("pinned.test", True), ("other.test", False)):
        cert, key, authority = self_signed(tmp_path / name, name)
        monkeypatch.setenv("SSL_CERT_FILE", str(authority))
        with https_server(cert, key) as port:
            pages = PageReader(allowed_hosts=[f"pinned.test:{port}"], host_interval=0.0, respect_robots=False)
            (result,) = pages.open_documents([f"https://pinned.test:{port}/page.html"])
        if opens:
            assert isinstance(result, Document) and "served over TLS" in result.text, result
        else:
            assert isinstance(result, PageError) and result.kind == "unreachable", result
            assert "SSL" in result.detail or "certificate" in result.detail


class StaticResolver:
    """``getaddrinfo`` answering 127.0.0.1 for ``*.test`` names."""

    def __init__(self) -> None:
        self.real = socket.getaddrinfo

    def __call__(self, host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        name = host.decode() if isinstance(host, bytes) else str(host)
        if not name.endswith(".test"):
            return self.real(host, port, *args, **kwargs)
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", int(port or 443)))]


def self_signed(folder: Path, name: str) -> tuple[Path, Path, Path]:
    """A certificate for ``name`` (self-signed, so it is its own authority): cert, key and authority files."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    folder.mkdir(parents=True)
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.timezone.utc)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = folder / "cert.pem", folder / "key.pem"
    cert_file.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return cert_file, key_file, cert_file


class _PageHandler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        body = b"<html><head><title>TLS</title></head><body><article><p>" + b"This page was served over TLS. " * 20
        body += b"</p></article></body></html>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class https_server:  # noqa: N801 - used as a context manager, like a function
    """An HTTPS server on 127.0.0.1 with the given certificate; yields its port."""

    def __init__(self, cert: Path, key: Path):
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _PageHandler)
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)

    def __enter__(self) -> int:
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        return int(self.server.server_address[1])

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
