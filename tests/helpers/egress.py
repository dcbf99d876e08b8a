"""What the egress attacks of tests/e2e/test_web_attacks.py share: a stand-in for the cloud
metadata service, jobs written and run through a real ``pulse web`` and node, the config
keys set for one test, and the webhook receiver of docs/alerts.md, run as written."""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import re
import socket
import subprocess
import threading
from collections.abc import Callable, Iterator
from http.server import ThreadingHTTPServer
from typing import Any

from cluster.config.keys import defaults
from cluster.store.jobstore.store import JobStore
from tests.helpers import REPO
from tests.helpers.waiting import until
from tests.helpers.web import Api

METADATA = "169.254.169.254"


def _bindable(host: str) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind((host, 0))
        except OSError:
            return False
    return True


@contextlib.contextmanager
def metadata_address() -> Iterator[str]:
    """169.254.169.254 on the loopback interface (added as root if missing, and removed
    after), or 127.0.0.1 where no link-local alias can be added."""
    if _bindable(METADATA):
        yield METADATA
        return
    added = (
        os.geteuid() == 0
        and subprocess.run(
            ["ip", "addr", "add", f"{METADATA}/32", "dev", "lo"], capture_output=True, check=False
        ).returncode
        == 0
    )
    try:
        yield METADATA if added and _bindable(METADATA) else "127.0.0.1"
    finally:
        if added:
            subprocess.run(["ip", "addr", "del", f"{METADATA}/32", "dev", "lo"], check=False)


def loopback_name() -> str:
    """A name other than ``localhost`` that this host's resolver maps to loopback (its own
    hostname in /etc/hosts, usually); ``localhost`` if none."""
    for name in (socket.gethostname(), "localhost.localdomain", "ip6-localhost"):
        with contextlib.suppress(OSError):
            infos = socket.getaddrinfo(name, 80, type=socket.SOCK_STREAM)
            if infos and all(str(i[4][0]) in ("127.0.0.1", "::1") or
                             str(i[4][0]).startswith("127.") for i in infos):  # fmt: skip
                return name
    return "localhost"


@contextlib.contextmanager
def config_as(api: Api, **values: str) -> Iterator[None]:
    """The config keys (``api_handlers`` for ``api.handlers``) set for a block, then put
    back as they were (the module's other sections share the cluster)."""
    keys = {key.replace("_", ".", 1): value for key, value in values.items()}

    async def read() -> dict[str, str]:
        async with JobStore.open(api.settings) as store:
            return await store.config_values()

    before = asyncio.run(read())
    try:
        for key, value in keys.items():
            api.set_config(key, value)
        yield
    finally:
        for key in keys:
            api.set_config(key, before.get(key, defaults()[key]))


def ended_run(api: Api, job: str, what: str) -> dict[str, Any]:
    """The ended run of ``job`` (waited for)."""

    def ended() -> dict[str, Any] | None:
        rows = api.sql(
            "SELECT status, last_error, output::text, job_id::text FROM runs "
            "WHERE job_name = %s AND status <> 'running'",
            (job,),
        )
        if not rows:
            return None
        status, error, output, job_id = rows[0]
        return {"status": status, "last_error": error, "output": output, "job_id": job_id}

    found: dict[str, Any] = until(ended, what, 60)
    return found


def stored_text(api: Api) -> str:
    """Every row a run or job could leave a secret in, as text."""
    rows = api.sql(
        "SELECT j::text FROM jobs j UNION ALL SELECT r::text FROM runs r "
        "UNION ALL SELECT a::text FROM api_audit a UNION ALL SELECT d::text FROM alert_deliveries d"
    )
    return "\n".join(row[0] for row in rows)


def docs_receiver(secret_env: str) -> dict[str, Any]:
    """The receiver of docs/alerts.md (the block after ``<!-- receiver -->``), executed as
    written but not served: its names (``Hook``, ``verified``, ``handle``, ``seen``)."""
    text = (REPO / "docs" / "alerts.md").read_text("utf-8")
    match = re.search(r"<!-- receiver -->\n```python\n(.*?)```", text, re.S)
    assert match, "docs/alerts.md lost its receiver"
    code = match.group(1)
    assert 'os.environ["OPS_HOOK_SECRET"]' in code
    namespace: dict[str, Any] = {"__name__": "docs_receiver"}
    previous = os.environ.get("OPS_HOOK_SECRET")
    os.environ["OPS_HOOK_SECRET"] = os.environ[secret_env]
    try:
        exec(compile(code, "docs/alerts.md", "exec"), namespace)
    finally:
        if previous is None:
            del os.environ["OPS_HOOK_SECRET"]
        else:
            os.environ["OPS_HOOK_SECRET"] = previous
    return namespace


@contextlib.contextmanager
def serve_docs_receiver(
    namespace: dict[str, Any], host: str, captured: list[tuple[dict[str, str], bytes]]
) -> Iterator[str]:
    """Serve the docs' ``Hook`` on ``host``, keeping a copy of each request (to replay);
    its URL."""
    hook: Callable[..., Any] = namespace["Hook"]

    class Recorded(hook):  # type: ignore[misc, valid-type]
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            captured.append((dict(self.headers.items()), body))
            self.rfile = io.BytesIO(body)
            super().do_POST()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer((host, 0), Recorded)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://{host}:{server.server_address[1]}/pulse"
    finally:
        server.shutdown()
        server.server_close()
