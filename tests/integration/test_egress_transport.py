"""The egress guard's transport (cluster/outbound/transport.py) against real sockets: every
spelling of loopback refused in one line, a name resolved once and the connection pinned to
the address checked (a DNS answer that changes cannot move it), TLS verified against the
hostname while connecting by address, and redirects never followed."""

from __future__ import annotations

import http.server
import socket
import ssl
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from cluster.config.egress import EgressPolicy, parse_networks
from cluster.outbound.transport import EgressRefused, fixed, guarded_client
from tests.helpers.receiver import Route, receiver

pytestmark = pytest.mark.timeout(60)
STRICT = EgressPolicy()
LOOPBACK = EgressPolicy(parse_networks("127.0.0.0/8"))


@pytest.fixture
def names(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[str]]:
    """Names ending in .test resolve to the addresses listed here, one answer per lookup
    (the last repeats), as a DNS server that rebinds would answer."""
    answers: dict[str, list[str]] = {}
    real = socket.getaddrinfo

    def lookup(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(host, str) and host.endswith(".test"):
            queue = answers[host]
            address = queue.pop(0) if len(queue) > 1 else queue[0]
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, port))]
        return real(host, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", lookup)
    return answers


async def get(policy: EgressPolicy, url: str) -> httpx.Response:
    async with guarded_client(fixed(policy)) as client:
        return await client.get(url)


@pytest.mark.parametrize(
    "host", ["127.0.0.1", "localhost", "2130706433", "0x7f.1", "0x7f000001", "[::ffff:127.0.0.1]"]
)
async def test_loopback_in_every_spelling_is_refused_naming_host_and_rule(host: str) -> None:
    with receiver() as r:
        with pytest.raises(EgressRefused) as caught:
            await get(STRICT, f"http://{host}:{r.port}/x")
        message = str(caught.value)
        assert message.startswith(f"egress to {host.strip('[]')}")
        assert "refused: loopback address" in message and "\n" not in message
        assert r.received() == []
        assert (await get(LOOPBACK, f"http://{host}:{r.port}/x")).status_code == 200


async def test_a_name_that_resolves_to_loopback_is_refused(names: dict[str, list[str]]) -> None:
    names["evil.test"] = ["127.0.0.1"]
    with receiver() as r:
        with pytest.raises(EgressRefused, match=r"evil.test \(127.0.0.1\) refused: loopback"):
            await get(STRICT, f"http://evil.test:{r.port}/x")
        assert r.received() == []


async def test_the_connection_goes_to_the_address_checked_not_a_second_answer(
    names: dict[str, list[str]],
) -> None:
    allowed = EgressPolicy(parse_networks("127.0.0.2/32"))
    with receiver(host="127.0.0.2") as remote, receiver(port=0) as local:
        names["rebind.test"] = ["127.0.0.2", "127.0.0.1"]  # then loopback for ever
        with receiver(host="127.0.0.1", port=remote.port) as same_port:
            answer = await get(allowed, f"http://rebind.test:{remote.port}/x")
            assert answer.status_code == 200
            (seen,) = remote.received()
            assert seen.headers["Host"] == f"rebind.test:{remote.port}"
            assert same_port.received() == [] and local.received() == []
            # the next connection resolves again, and the loopback answer is refused
            with pytest.raises(EgressRefused):
                await get(allowed, f"http://rebind.test:{remote.port}/y")
            assert same_port.received() == []


async def test_redirects_are_not_followed() -> None:
    with receiver() as target:
        hop = Route(302, headers=(("Location", f"http://127.0.0.1:{target.port}/in"),))
        with receiver(host="127.0.0.2", routes={"/go": hop}) as remote:
            policy = EgressPolicy(parse_networks("127.0.0.2/32"))
            answer = await get(policy, f"http://127.0.0.2:{remote.port}/go")
            assert answer.status_code == 302
            assert target.received() == []


@pytest.fixture
def tls_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[int, list[str]]]:
    """An HTTPS server on 127.0.0.1 with a certificate for pinned.test only (trusted through
    SSL_CERT_FILE); the SNI names it was asked for."""
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-keyout", str(key), "-out", str(cert), "-subj", "/CN=pinned.test",
         "-addext", "subjectAltName=DNS:pinned.test", "-addext", "basicConstraints=CA:TRUE"],
        check=True, capture_output=True,
    )  # fmt: skip
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))
    sni: list[str] = []
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    context.sni_callback = lambda _sock, name, _ctx: sni.append(str(name)) and None

    class Ok(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(204)
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Ok)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server.server_address[1], sni
    finally:
        server.shutdown()
        server.server_close()


async def test_tls_is_verified_against_the_hostname_while_connecting_by_address(
    names: dict[str, list[str]], tls_server: tuple[int, list[str]]
) -> None:
    port, sni = tls_server
    names["pinned.test"] = ["127.0.0.1"]
    assert (await get(LOOPBACK, f"https://pinned.test:{port}/")).status_code == 204
    assert sni == ["pinned.test"]
    names["other.test"] = ["127.0.0.1"]  # the same address, a name the certificate lacks
    with pytest.raises(httpx.ConnectError, match="certificate verify failed"):
        await get(LOOPBACK, f"https://other.test:{port}/")
