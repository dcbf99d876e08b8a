"""Delivers the alert outbox: every live node leases due deliveries, POSTs them, and
records what the receiver said.

A pass that finds nothing due is followed by the next one ``IDLE_S`` later, unless a
queued delivery wakes the node first (``raise_alert`` NOTIFYs ``alerts``, migration 028):
an idle cluster pays one statement per node every ``IDLE_S``, and a new event goes out at
once. What falls due by itself (a retry's time, a dead node's lease running out) waits at
most one idle pass.

Delivery is at least once. A delivery is leased for ``LEASE_S`` (more than a request may
take) and its attempt counted when leased, so one held by a node that dies is taken over
by another when the lease runs out. Only the oldest pending delivery of each (rule, job) is
leased, so one job's events reach a receiver in order, and one waiting for a retry holds
back the later ones. A failed attempt is retried with exponential backoff (capped at
``MAX_BACKOFF_S``) until ``MAX_AGE_S`` after the event, then the delivery is ``failed``.

Webhooks are posted through the egress guard (``cluster.outbound``) with the cluster's
``egress.allow`` (``config``, the node's cached view of the ``config`` table): a rule's
address that the guard refuses fails its attempt like a refused connection.

Each rule's format decides what is sent (``cluster.alerts.channels``: a webhook, a
PagerDuty event, an email through the ``smtp.*`` server, which the egress policy checks
too). A rule's secret (a signing secret, a routing key) and the SMTP password are read
from this node's environment by name; they are never stored, logged or put in an error.
A node without one leaves the delivery to a node that has it: due again after
``BACKOFF_BASE_S``, not backed off, since the receiver has not failed (a cluster where only
some nodes have it delivers within a few passes; tests/integration/test_alert_delivery.py).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Awaitable, Callable, Mapping
from datetime import datetime

import httpx

from cluster.alerts.channels import MissingVariable, send
from cluster.alerts.rules import AlertRule, redact_url
from cluster.alerts.webhook import DEFAULT_TIMEOUT_S
from cluster.config.egress import EgressPolicy
from cluster.outbound.transport import guarded_client
from cluster.store.housekeeping.alerts import AlertStore, Delivery, DeliveryStatus
from node.service import until_beat
from node.stats import Stats

logger = logging.getLogger(__name__)

INTERVAL_S = 1.0
IDLE_S = 5.0  # between passes while nothing is due (a queued delivery wakes it sooner)
BATCH = 20
TIMEOUT_S = DEFAULT_TIMEOUT_S
# Longer than a request may take (they run side by side), short enough that a killed
# node's deliveries go out soon after from another node.
LEASE_S = 2 * TIMEOUT_S
BACKOFF_BASE_S = 5.0
MAX_BACKOFF_S = 600.0
MAX_AGE_S = 24 * 3600.0
MISSING_SECRET_WARNING_S = 60.0


async def _no_config() -> Mapping[str, str]:
    return {}


def retry_delay_s(attempts: int) -> float:
    """The wait after a failed ``attempts``-th attempt: 5 s, 10 s, 20 s, ... up to 10 min."""
    return min(MAX_BACKOFF_S, BACKOFF_BASE_S * 2.0 ** min(max(attempts, 1) - 1, 30))


class AlertDelivery:
    def __init__(
        self,
        store: AlertStore,
        node_id: str,
        stats: Stats,
        *,
        environ: Mapping[str, str] = os.environ,
        batch: int = BATCH,
        lease_s: float = LEASE_S,
        timeout_s: float = TIMEOUT_S,
        config: Callable[[], Awaitable[Mapping[str, str]]] = _no_config,
    ) -> None:
        self._store = store
        self._node_id = node_id
        self._stats = stats
        self._environ = environ
        self._batch = batch
        self._lease_s = lease_s
        self._timeout_s = timeout_s
        self._config = config
        self._client: httpx.AsyncClient | None = None
        self._warned: dict[str, float] = {}  # secret_env -> monotonic time of the warning

    async def run_once(self, now: datetime | None = None) -> float | None:
        """Deliver what is due (by the database clock, or ``now`` in tests). Asks to run
        again at once after a delivery: a later event of that job may wait behind it."""
        leased = await self._store.claim(self._node_id, self._batch, self._lease_s, now)
        if not leased:
            return None
        if self._client is None:
            self._client = guarded_client(self._egress)
        results = await asyncio.gather(
            *(self._deliver(self._client, d, now) for d in leased), return_exceptions=True
        )
        for result in results:
            if isinstance(result, BaseException):
                raise result
        return 0.0 if any(results) else None

    async def poll(self) -> float:
        """The service's pass (``node.runtime``): ``run_once``, then the delay until the
        next: at once after a delivery, else ``IDLE_S`` (the ``alerts`` wake-up cuts it)."""
        wanted = await self.run_once()
        return until_beat(IDLE_S) if wanted is None else wanted

    async def _egress(self) -> EgressPolicy:
        return EgressPolicy.from_config(dict(await self._config()))

    async def _deliver(self, client: httpx.AsyncClient, d: Delivery, now: datetime | None) -> bool:
        """True if the receiver took it."""
        rule = AlertRule(
            d.rule,
            d.url,
            format=d.format,
            secret_env=d.secret_env,
            legacy_signature=d.legacy_signature,
        )
        try:
            answer = await send(
                client,
                rule,
                d.event,
                environ=self._environ,
                config=await self._config() if d.format == "email" else {},
                timeout_s=self._timeout_s,
            )
        except MissingVariable as missing:
            self._missing_secret(d, missing.name)
            error = f"${missing.name} is not set on node {self._node_id}"
            await self._retry(d, error, now, for_secret=True)
            return False
        if answer.ok:
            if await self._store.delivered(d, self._node_id, now):
                self._stats.alerts["delivered"] += 1
                logger.info(
                    "alert %s delivered to rule %s (attempt %d)",
                    d.event.event,
                    d.rule,
                    d.attempts,
                    extra=self._extra(d, "alert_delivered"),
                )
            return True
        await self._retry(d, answer.describe(), now)
        return False

    async def _retry(
        self, d: Delivery, error: str, now: datetime | None, *, for_secret: bool = False
    ) -> None:
        """Due again after the backoff of the attempts so far, or failed for good past
        ``MAX_AGE_S`` (always logged). One left ``for_secret`` (this node lacks it) is due
        again after ``BACKOFF_BASE_S`` and logs no retry line: its warning is its own."""
        delay_s = BACKOFF_BASE_S if for_secret else retry_delay_s(d.attempts)
        status = await self._store.retry(
            d, self._node_id, delay_s=delay_s, max_age_s=MAX_AGE_S, error=error, now=now
        )
        if status is None:
            return  # the lease ran out and another node has it now
        self._stats.alerts[status if status == DeliveryStatus.FAILED else "retried"] += 1
        if status == DeliveryStatus.FAILED:
            logger.error(
                "alert %s to rule %s (%s) given up after %d attempts: %s",
                d.event.event,
                d.rule,
                redact_url(d.url),
                d.attempts,
                error,
                extra=self._extra(d, "alert_failed"),
            )
            return
        if for_secret:
            return
        logger.warning(
            "alert %s to rule %s (%s) not delivered (attempt %d): %s; next try in %.0fs",
            d.event.event,
            d.rule,
            redact_url(d.url),
            d.attempts,
            error,
            delay_s,
            extra=self._extra(d, "alert_retry"),
        )

    def _missing_secret(self, d: Delivery, name: str) -> None:
        now = time.monotonic()
        last = self._warned.get(name)
        if last is not None and now - last < MISSING_SECRET_WARNING_S:
            return
        self._warned[name] = now
        logger.warning(
            "alert rule %s needs $%s, which is not set on this node; its deliveries "
            "wait for a node that has it",
            d.rule,
            name,
            extra=self._extra(d, "alert_secret_missing"),
        )

    @staticmethod
    def _extra(d: Delivery, event: str) -> dict[str, object]:
        return {
            "event": event,
            "job": d.event.job,
            "tenant": d.event.tenant,
            "alert": d.event.event,
            "rule": d.rule,
            "delivery": d.id,
        }

    async def close(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            await client.aclose()
        await self._store.close()
