"""Job files: the YAML or JSON lists of jobs that ``pulse jobs apply`` reconciles.

A file is a list of job mappings (or a mapping with a ``jobs`` list), each with the keys of
``JobSpec.from_mapping``. Every bad entry is reported at once, so one run fixes a file.
"""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from cluster.errors import InvalidInput
from cluster.jobs.spec import JobSpec

# PyYAML's safe loader on libyaml where its wheel has it: the same documents, parsed
# several times faster (a file of 10,000 jobs: bench/README.md, "Bulk apply").
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_specs(path: str) -> list[JobSpec]:
    """Every entry of a YAML or JSON job file, or one error listing every bad entry."""
    try:
        text = Path(path).read_text("utf-8")
    except OSError as exc:
        raise InvalidInput("file", f"cannot read {path}: {exc.strerror}") from exc
    try:
        data = json.loads(text) if path.endswith(".json") else yaml.load(text, Loader=_LOADER)
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        first = str(exc).splitlines()[0]
        raise InvalidInput("file", f"{path} is not valid YAML/JSON ({first})") from exc
    return specs_of(data, "file")


def specs_of(data: object, field: str = "jobs") -> list[JobSpec]:
    """The specs of a parsed job file (a list, or a mapping with a ``jobs`` list), or one
    ``InvalidInput`` naming ``field`` that lists every bad entry."""
    if isinstance(data, dict) and isinstance(data.get("jobs"), list):
        data = data["jobs"]
    if data is None:
        data = []
    if not isinstance(data, list):
        raise InvalidInput(field, "must hold a list of jobs (or a mapping with a 'jobs' list)")
    specs, problems = [], []
    for position, entry in enumerate(data, 1):
        try:
            specs.append(JobSpec.from_mapping(entry))
        except InvalidInput as exc:
            label = entry.get("name") if isinstance(entry, dict) else None
            shown = label if isinstance(label, str) and label.isprintable() else repr(label)
            where = f"entry {position}" + (f" ({shown})" if isinstance(label, str) else "")
            problems.append(f"{where}: {exc}")
    if problems:
        raise InvalidInput(field, "; ".join(problems))
    return specs
