"""The jobs of ``billing`` as a later release defines them: ``beat`` every 2 seconds."""

from __future__ import annotations

from pulsecron import Registry, RunContext

ops = Registry()


@ops.every("2s", name="beat", retries=2)
def beat(ctx: RunContext) -> None:
    return None
