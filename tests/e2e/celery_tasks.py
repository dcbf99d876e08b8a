"""Celery tasks for the celery: handler tests, run by a real ``celery worker`` process.

The broker comes from ``PULSE_TEST_CELERY_BROKER``; ``record`` appends what it was given
(its task id and keyword arguments) to the file ``PULSE_TEST_CELERY_OUT`` names.
"""

from __future__ import annotations

import json
import os
from typing import Any

from celery import Celery

BROKER = os.environ.get("PULSE_TEST_CELERY_BROKER", "redis://127.0.0.1:6379/14")
app = Celery("pulse-tests", broker=BROKER, backend=BROKER)


@app.task(name="tests.record", bind=True)  # type: ignore[untyped-decorator]
def record(self: Any, **kwargs: Any) -> dict[str, Any]:
    with open(os.environ["PULSE_TEST_CELERY_OUT"], "a", encoding="utf-8") as out:
        out.write(json.dumps({"task_id": self.request.id, "kwargs": kwargs}) + "\n")
    return {"keys": sorted(kwargs)}


@app.task(name="tests.explode")  # type: ignore[untyped-decorator]
def explode(**kwargs: Any) -> None:
    raise ValueError("exploded on purpose")
