-- Dependencies between jobs (migration 021, docs/design/gates.md): edges written at apply,
-- the verdicts a claim asks for gated jobs, and the gate pass.

-- name: gate_upstreams
-- The upstreams named by a job, in its tenant only: another tenant's jobs are never named.
SELECT j.id, j.name, j.schedule, j.tz, j.dst_repeated, j.dst_skipped, j.overlap, j.each_zone
FROM jobs j
WHERE j.tenant_id = %(tenant_id)s AND j.name = ANY(%(names)s::text[]);

-- name: gate_edges_of
SELECT e.upstream_id, e.match FROM job_edges e WHERE e.downstream_id = %(id)s;

-- name: gate_definition
-- A job's definition as its revisions record it, upstreams included (migration `0.2.0_pre_gates_bounded_waits`).
SELECT job_definition(j) AS definition FROM jobs j WHERE j.id = %(id)s;

-- name: gate_revision
-- After its edges changed: the revision of the change, folded into the one this transaction
-- wrote if any (job_revision_edges, migration `0.2.0_pre_gates_bounded_waits`).
SELECT job_revision_edges(%(id)s, %(before)s::jsonb) AS revision;

-- name: gate_clear_edges
DELETE FROM job_edges e WHERE e.downstream_id = %(id)s RETURNING e.upstream_id;

-- name: gate_add_edges
INSERT INTO job_edges (downstream_id, upstream_id, match)
SELECT %(id)s, u, %(match)s FROM unnest(%(upstreams)s::uuid[]) AS u
RETURNING upstream_id;

-- name: gate_set_job
-- A job that loses its last upstream is due at its slot again, unheld; one the same apply
-- made an each-zone parent (a chained job made one) stays never due (park_each_zone).
UPDATE jobs j SET
    gated = %(gated)s,
    after_timeout_s = %(after_timeout_s)s,
    after_failure = %(after_failure)s,
    gate_wait = j.gate_wait AND %(gated)s,
    next_run_at = CASE WHEN j.gate_wait AND NOT %(gated)s AND NOT j.each_zone THEN j.slot_at
                       ELSE j.next_run_at END
WHERE j.id = %(id)s
  AND (j.gated, j.after_timeout_s, j.after_failure)
      IS DISTINCT FROM (%(gated)s, %(after_timeout_s)s::float8, %(after_failure)s)
RETURNING j.id;

-- name: gate_cycle
-- A cycle through one of the given downstreams, as the names along it (first = last).
WITH RECURSIVE walk (start, node, path) AS (
    SELECT e.downstream_id, e.upstream_id, ARRAY[e.downstream_id, e.upstream_id]
    FROM job_edges e WHERE e.downstream_id = ANY(%(ids)s::uuid[])
    UNION ALL
    SELECT w.start, e.upstream_id, w.path || e.upstream_id
    FROM walk w JOIN job_edges e ON e.downstream_id = w.node
    WHERE w.node <> w.start AND e.upstream_id <> ALL(w.path[2:])
)
SELECT (SELECT array_agg(j.name ORDER BY p.ord)
        FROM unnest(w.path) WITH ORDINALITY AS p (id, ord) JOIN jobs j ON j.id = p.id) AS names
FROM walk w WHERE w.node = w.start
LIMIT 1;

-- name: gate_refresh
-- Marks the jobs that feed a downstream (their completions call gate_release), and asks
-- the gates of the given downstreams again: a slot held or released by the new edges. A job
-- both upstream and downstream (b in a -> b -> c) is marked by the second update: one
-- statement updates a row once, so the first leaves it out.
WITH feeds AS (
    UPDATE jobs j SET feeds = EXISTS (SELECT 1 FROM job_edges e WHERE e.upstream_id = j.id)
    WHERE j.id = ANY(%(upstreams)s::uuid[]) AND j.id <> ALL(%(downstreams)s::uuid[])
      AND j.feeds IS DISTINCT FROM EXISTS (SELECT 1 FROM job_edges e WHERE e.upstream_id = j.id)
)
UPDATE jobs j SET
    next_run_at = CASE WHEN j.gated AND j.status = 'idle' AND j.gate_wait THEN j.slot_at
                       ELSE j.next_run_at END,
    feeds = CASE WHEN j.id = ANY(%(upstreams)s::uuid[])
                 THEN EXISTS (SELECT 1 FROM job_edges e WHERE e.upstream_id = j.id)
                 ELSE j.feeds END
WHERE j.id = ANY(%(downstreams)s::uuid[])
  AND (j.gated AND j.status = 'idle' OR j.id = ANY(%(upstreams)s::uuid[]))
RETURNING j.id, j.shard_id;

-- name: gate_verdicts
-- Asked by the claim loop for the first attempts of gated jobs it claimed (and of backfill
-- and rerun flights of them): NULL runs the slot, 'skip: ...' or 'wait: ...' (its bound
-- reached) records it skipped.
SELECT v.id, v.slot, gate_verdict(v.id, v.slot) AS verdict
FROM unnest(%(ids)s::uuid[], %(slots)s::timestamptz[]) AS v (id, slot);

-- name: gate_pass
-- Releases the held jobs of the given shards whose gate opened: a release its upstream's
-- completion left (the row was locked then, or the upstream's node runs an older release).
-- `held`: whether any slot of these shards still waits (one probe of jobs_gate_wait).
SELECT gate_release(NULL, %(shards)s::int[]) + chain_pull(%(shards)s::int[]) AS released,
       EXISTS (SELECT 1 FROM jobs j
               WHERE j.gate_wait AND j.shard_id = ANY(%(shards)s::int[])) AS held;

-- name: gate_neighbours
-- Upstreams (`up`) and downstreams (`down`) of a job, and whether its slot is held.
SELECT 'up' AS side, u.name, e.match, u.slot_at, u.status
FROM job_edges e JOIN jobs u ON u.id = e.upstream_id WHERE e.downstream_id = %(id)s
UNION ALL
SELECT 'down', d.name, e.match, d.slot_at, d.status
FROM job_edges e JOIN jobs d ON d.id = e.downstream_id WHERE e.upstream_id = %(id)s
ORDER BY 1 DESC, 2;

-- name: gate_downstreams
-- Every job that waits for the given one, directly or through others, the deepest first:
-- the order `remove --cascade` takes them in, so each one's `removed` revision still names
-- its upstreams. Cycles are refused at apply; the depth bound is a guard.
WITH RECURSIVE down (id, depth) AS (
    SELECT e.downstream_id, 1 FROM job_edges e WHERE e.upstream_id = %(id)s
    UNION
    SELECT e.downstream_id, d.depth + 1
    FROM down d JOIN job_edges e ON e.upstream_id = d.id
    WHERE d.depth < 64
)
SELECT j.name, max(d.depth) AS depth, bool_or(d.depth = 1) AS direct
FROM down d JOIN jobs j ON j.id = d.id
GROUP BY j.name
ORDER BY depth DESC, j.name;

-- name: gate_orphans
-- The jobs an apply keeps (the given tenants and names) that wait for a job its --prune
-- removes: refused, since nothing would be left for them to wait for.
SELECT d.tenant_id, d.name AS downstream, u.name AS upstream
FROM job_edges e
JOIN jobs d ON d.id = e.downstream_id
JOIN jobs u ON u.id = e.upstream_id
WHERE (d.tenant_id, d.name) IN (SELECT * FROM unnest(%(tenant_ids)s::text[], %(names)s::text[]))
  AND (u.tenant_id, u.name) NOT IN (
      SELECT * FROM unnest(%(tenant_ids)s::text[], %(names)s::text[]))
  AND u.parent_id IS NULL
ORDER BY 1, 2, 3;

-- name: gate_waiting_on_each_zone
-- The jobs that wait for an each-zone job of (%(tenant_ids)s[i], %(names)s[i]) (none may:
-- it has no slot of its own), the first of them.
SELECT d.tenant_id, d.name AS downstream, u.name AS upstream
FROM jobs u
JOIN job_edges e ON e.upstream_id = u.id
JOIN jobs d ON d.id = e.downstream_id
WHERE (u.tenant_id, u.name) IN (SELECT * FROM unnest(%(tenant_ids)s::text[], %(names)s::text[]))
  AND u.each_zone
  AND (%(scope)s::text IS NULL OR u.tenant_id = %(scope)s)
ORDER BY 1, 2, 3
LIMIT 1;

-- name: gate_graph
-- Every edge of a tenant, downstream after upstream.
SELECT u.name AS upstream, d.name AS downstream, e.match
FROM job_edges e
JOIN jobs d ON d.id = e.downstream_id
JOIN jobs u ON u.id = e.upstream_id
WHERE d.tenant_id = %(tenant_id)s
ORDER BY u.name, d.name;

-- name: gate_waits_for
-- Why a held slot waits: the first upstream its gate is still waiting for, and until when
-- at the latest (its after-timeout, a day without one: migration `0.2.0_pre_gates_bounded_waits`).
SELECT gate_verdict(j.id, j.slot_at) AS verdict, j.after_timeout_s, j.after_failure,
       CASE WHEN j.gate_wait THEN j.next_run_at END AS waits_until
FROM jobs j WHERE j.id = %(id)s;
