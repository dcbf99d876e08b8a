"""The per-token gate of ``pulse web``: API requests past the limit are refused at once, the
console's static files never (a browser fetches them side by side with its cookie)."""

from __future__ import annotations

import asyncio

from starlette.types import Message, Receive, Scope, Send

from cluster.web.inflight import TokenGate


def _scope(path: str) -> Scope:
    return {
        "type": "http",
        "path": path,
        "method": "GET",
        "headers": [(b"authorization", b"Bearer pulse_same")],
    }


async def _statuses(paths: list[str], per_token: int) -> list[int]:
    release, settled = asyncio.Event(), asyncio.Event()
    statuses: list[int] = []
    entered = 0

    def one_settled() -> None:
        if entered + len(statuses) == len(paths):
            settled.set()

    async def slow_app(scope: Scope, receive: Receive, send: Send) -> None:
        nonlocal entered
        entered += 1
        one_settled()
        await release.wait()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    gate = TokenGate(slow_app, per_token=per_token)

    async def one(path: str) -> None:
        async def receive() -> Message:
            return {"type": "http.request", "body": b""}

        async def send(message: Message) -> None:
            if message["type"] == "http.response.start":
                statuses.append(message["status"])
                one_settled()

        await gate(_scope(path), receive, send)

    tasks = [asyncio.create_task(one(path)) for path in paths]
    await settled.wait()  # each request let in or refused, none answered yet
    release.set()
    await asyncio.gather(*tasks)
    return sorted(statuses)


def test_api_requests_past_the_limit_are_refused_at_once() -> None:
    assert asyncio.run(_statuses(["/api/jobs"] * 3, per_token=2)) == [200, 200, 429]


def test_the_consoles_static_files_are_never_gated() -> None:
    paths = ["/api/jobs", "/api/status", "/console/console.js", "/console/statuses.js"]
    assert asyncio.run(_statuses(paths, per_token=2)) == [200, 200, 200, 200]
