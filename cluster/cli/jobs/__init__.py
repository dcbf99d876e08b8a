"""``pulse jobs ...``: the group and, in this one place, every command attached to it.

Each module owns a part: ``add`` (one job from options, with ``expectations``' options),
``apply`` (job files and registries, ``export``), ``plans`` (how ``apply --plan`` prints and
what it must find), ``control`` (pause, skip-next, resume, remove), ``views`` (list, show,
graph, with ``timelines``), ``history`` (revisions and rollback), ``triggers`` (run now)
and ``watching`` (watch jobs' ping URLs, adoption, and ``pulse ping``, which ``app``
attaches at the root)."""

from __future__ import annotations

import click

from cluster.cli.backfills import backfill_job
from cluster.cli.base import PulseGroup
from cluster.cli.jobs import add, apply, control, history, triggers, views, watching


@click.group(cls=PulseGroup)
def jobs() -> None:
    """Create, list and control jobs."""


for _command in (
    add.add_job,
    apply.apply_jobs,
    apply.export_jobs,
    views.list_jobs,
    views.show_job,
    views.graph_jobs,
    control.pause_job,
    control.skip_next,
    control.resume_job,
    control.remove_job,
    history.history,
    history.rollback,
    triggers.trigger_job,
    backfill_job,
    watching.ping_url_command,
    watching.adopt_command,
):
    jobs.add_command(_command)

__all__ = ["jobs"]
