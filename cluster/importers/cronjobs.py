"""``pulse import k8s-cronjob``: Kubernetes ``batch/v1`` CronJob manifests as Pulse jobs.

A file may hold several YAML documents (and ``List`` kinds); each CronJob becomes a
``shell:`` job in argv form (``command`` + ``args`` of its one container, run without a
shell, as the kubelet runs them). Mapped: ``schedule`` (and a ``CRON_TZ=``/``TZ=`` prefix),
``timeZone`` to ``tz``, ``concurrencyPolicy`` to ``overlap``, ``suspend`` to ``paused``,
``startingDeadlineSeconds`` to ``catch_up: skip`` with that ``grace`` (a slot later than
that is skipped, as the controller skips it), the Job's ``backoffLimit`` to ``retries`` and
``activeDeadlineSeconds`` to ``timeout``. A container ``env`` value is passed with
``env NAME=value`` in front of the argv; one read from a Secret or ConfigMap, or whose name
says it is a secret, is named in the handler's ``env`` instead, for the node to pass its
own. The image is not mapped (the command runs on a node's host): every job says so, as it
says of every other field it leaves out.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import yaml

from cluster.errors import InvalidInput
from cluster.importers.imported import Imported, Options, is_secret

OVERLAP = {"Allow": "allow", "Forbid": "forbid", "Replace": "replace"}
_SPEC_KEYS = {
    "schedule", "timeZone", "concurrencyPolicy", "suspend", "startingDeadlineSeconds",
    "jobTemplate", "successfulJobsHistoryLimit", "failedJobsHistoryLimit",
}  # fmt: skip
_JOB_KEYS = {"template", "backoffLimit", "activeDeadlineSeconds"}
_POD_KEYS = {"containers", "restartPolicy"}
_CONTAINER_KEYS = {"name", "image", "imagePullPolicy", "command", "args", "env"}


def _documents(text: str, source: str) -> Iterator[tuple[str, Any]]:
    try:
        documents = list(yaml.safe_load_all(text))
    except yaml.YAMLError as exc:
        first = str(exc).splitlines()[0]
        raise InvalidInput("file", f"{source} is not valid YAML ({first})") from exc
    for number, document in enumerate(documents, 1):
        if isinstance(document, Mapping) and document.get("kind") == "List":
            for index, item in enumerate(document.get("items") or [], 1):
                yield f"document {number} item {index}", item
        elif document is not None:
            yield f"document {number}", document


def _listed(result: Imported, where: str, found: Mapping[str, Any], known: set[str]) -> None:
    for key in sorted(set(found) - known):
        result.problem(where, f"{key} is not mapped")


def _container(result: Imported, where: str, pod: Mapping[str, Any]) -> dict[str, Any] | None:
    """The ``shell:`` argv handler of the pod's one container; None (reported) if none."""
    containers = pod.get("containers") or []
    if len(containers) != 1 or not isinstance(containers[0], Mapping):
        result.problem(where, f"not imported: {len(containers)} containers; Pulse runs one command")
        return None
    container = containers[0]
    argv = [*(container.get("command") or []), *(container.get("args") or [])]
    if not container.get("command"):
        result.problem(where, "not imported: no command (the image's entrypoint is not known here)")
        return None
    if not all(isinstance(a, str | int | float) for a in argv):
        result.problem(where, "not imported: command and args must be strings")
        return None
    if container.get("image"):
        result.problem(
            where, f"image {container['image']} is not mapped: the command runs on a node's host"
        )
    _listed(result, f"{where} container", container, _CONTAINER_KEYS)
    assigned, passed = [], []
    for variable in container.get("env") or []:
        name = variable.get("name") if isinstance(variable, Mapping) else None
        if not isinstance(name, str):
            continue
        if "value" in variable and not is_secret(name, str(variable["value"])):
            assigned.append(f"{name}={variable['value']}")
        else:
            passed.append(name)
            result.problem(
                where,
                f"env {name}: not copied; the node's ${name} is passed (set it on every node)",
            )
    shell: dict[str, Any] = {"argv": [*(["env", *assigned] if assigned else []), *map(str, argv)]}
    if passed:
        shell["env"] = sorted(set(passed))
    return {"shell": shell}


def _cronjob(result: Imported, where: str, document: Any) -> None:
    if not isinstance(document, Mapping) or document.get("kind") != "CronJob":
        kind = document.get("kind") if isinstance(document, Mapping) else type(document).__name__
        result.problem(where, f"kind {kind} is not a CronJob")
        return
    metadata = document.get("metadata") or {}
    name = metadata.get("name") or "cronjob"
    where = f"{where} ({name})"
    if metadata.get("namespace"):
        result.problem(
            where, f"namespace {metadata['namespace']} is not mapped: give the tenant (--tenant)"
        )
    if document.get("apiVersion") != "batch/v1":
        result.problem(
            where, f"not imported: apiVersion {document.get('apiVersion')}, not batch/v1"
        )
        return
    spec = document.get("spec") or {}
    job_spec = (spec.get("jobTemplate") or {}).get("spec") or {}
    pod = (job_spec.get("template") or {}).get("spec") or {}
    _listed(result, where, spec, _SPEC_KEYS)
    _listed(result, where, job_spec, _JOB_KEYS)
    _listed(result, where, pod, _POD_KEYS)
    handler = _container(result, where, pod)
    if handler is None:
        return
    if pod.get("restartPolicy"):
        result.problem(
            where,
            f"restartPolicy {pod['restartPolicy']} is not mapped: a failed run is retried "
            "as a new attempt, up to retries (backoffLimit)",
        )
    schedule, tz = str(spec.get("schedule", "")).strip(), spec.get("timeZone")
    for prefix in ("CRON_TZ=", "TZ="):
        if schedule.startswith(prefix):
            tz, _, schedule = schedule[len(prefix) :].partition(" ")
            schedule = schedule.strip()
    entry: dict[str, Any] = {
        "name": result.name(str(name)),
        "schedule": schedule,
        "handler": handler,
    }
    if tz:
        entry["tz"] = tz
    policy = spec.get("concurrencyPolicy", "Allow")
    if policy not in OVERLAP:
        result.problem(
            where, f"not imported: concurrencyPolicy {policy!r} is not Allow, Forbid or Replace"
        )
        return
    entry["overlap"] = OVERLAP[policy]
    if spec.get("suspend"):
        entry["paused"] = True
    if spec.get("startingDeadlineSeconds") is not None:
        entry["catch_up"] = "skip"
        entry["grace"] = f"{spec['startingDeadlineSeconds']}s"
    if job_spec.get("backoffLimit") is not None:
        entry["retries"] = job_spec["backoffLimit"]
    if job_spec.get("activeDeadlineSeconds") is not None:
        entry["timeout"] = f"{job_spec['activeDeadlineSeconds']}s"
    for limit in ("successfulJobsHistoryLimit", "failedJobsHistoryLimit"):
        if limit in spec:
            result.problem(
                where, f"{limit} is not mapped: Pulse keeps runs by retention (keep_runs)"
            )
    result.add(where, entry)


def import_cronjobs(text: str, source: str, options: Options) -> Imported:
    """The jobs of every CronJob in ``text``; what is not mapped is listed."""
    result = Imported(source, options.checked())
    for where, document in _documents(text, source):
        _cronjob(result, where, document)
    return result
