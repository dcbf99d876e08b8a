"""Job labels as users write them: ``key=value`` pairs (``--label``, repeatable), or a
mapping in job files, the API and ``Registry`` decorators; and the one ``key=value`` a
``jobs list --label`` filter or a blackout window by label names (docs/jobs.md#labels).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from cluster.errors import InvalidInput
from cluster.jobs.fields import check_text

__all__ = ["MAX_LABELS", "parse_label", "parse_labels"]

MAX_LABELS = 32
MAX_VALUE_LENGTH = 200
# Kubernetes-like keys: letters, digits, '.', '_', '-' and '/', starting with a letter or digit.
_KEY = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,62}$")


def parse_label(text: object, field_name: str = "label") -> tuple[str, str]:
    """One ``key=value``; ``InvalidInput`` naming ``field_name`` else."""
    if not isinstance(text, str) or "=" not in text:
        raise InvalidInput(field_name, f"{text!r} is not key=value")
    key, value = text.split("=", 1)
    return _pair(key.strip(), value.strip(), field_name)


def parse_labels(value: object) -> dict[str, str]:
    """Labels from a mapping, one ``key=value`` text, or a list of them; {} for None."""
    if value is None:
        return {}
    if isinstance(value, Mapping):
        pairs = [_pair(k, v, "labels") for k, v in value.items()]
    elif isinstance(value, str):
        pairs = [parse_label(value, "labels")]
    elif isinstance(value, Sequence):
        pairs = [parse_label(item, "labels") for item in value]
    else:
        raise InvalidInput("labels", "must be a mapping of key: value or a list of key=value")
    labels: dict[str, str] = {}
    for key, text in pairs:
        if key in labels and labels[key] != text:
            raise InvalidInput("labels", f"{key!r} is given twice")
        labels[key] = text
    if len(labels) > MAX_LABELS:
        raise InvalidInput("labels", f"at most {MAX_LABELS} labels per job")
    return dict(sorted(labels.items()))


def _pair(key: object, value: object, field_name: str) -> tuple[str, str]:
    if not isinstance(key, str) or not _KEY.match(key):
        raise InvalidInput(
            field_name, f"key {key!r} must be 1-63 letters, digits, '.', '_', '-' or '/'"
        )
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise InvalidInput(field_name, f"the value of {key!r} must be text")
    text = check_text(str(value), field_name)
    if len(text) > MAX_VALUE_LENGTH or any(ord(ch) < 32 for ch in text):
        raise InvalidInput(
            field_name,
            f"the value of {key!r} must be at most {MAX_VALUE_LENGTH} printable characters",
        )
    return key, text
