// The Pulse console: one page that reads and changes Pulse through /api/ like any client.
// Data is only ever written with textContent (el() below), never parsed as markup.
"use strict";
// JOB_STATUS and RUN_STATUS come from /console/statuses.js, written from the API's enums.

const state = { session: null, timers: [], route: 0 };  // route: bumped by each page change
const main = () => document.getElementById("main");
const STRIP_SLOTS = 60;  // cells in a job's slot strip

function el(tag, attrs, ...children) {
  const node = tag === "svg" || attrs?.svg
    ? document.createElementNS("http://www.w3.org/2000/svg", tag)
    : document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (key === "svg" || value === null || value === undefined || value === false) continue;
    if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function say(text) { document.getElementById("message").textContent = text || ""; }

async function api(method, path, body) {
  const headers = { Accept: "application/json" };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  if (method !== "GET" && state.session) headers["X-CSRF-Token"] = state.session.csrf;
  const answer = await fetch(path, {
    method, headers, credentials: "same-origin",
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const data = answer.status === 204 ? null : await answer.json().catch(() => null);
  if (answer.status === 401 && path !== "/console/session") { signedOut(); throw new Error("signed out"); }
  if (!answer.ok) {
    const text = data && data.message ? (data.field ? `${data.field}: ${data.message}` : data.message) : answer.statusText;
    throw new Error(text);
  }
  return data;
}

// GET of an answer in JSON lines (/api/audit), each line parsed.
async function apiLines(path) {
  const answer = await fetch(path, { headers: { Accept: "application/x-ndjson" }, credentials: "same-origin" });
  if (answer.status === 401) { signedOut(); throw new Error("signed out"); }
  if (!answer.ok) {
    const data = await answer.json().catch(() => null);
    throw new Error(data && data.message ? data.message : answer.statusText);
  }
  return (await answer.text()).split("\n").filter(Boolean).map((line) => JSON.parse(line));
}

// A refresh starts only when the one before it ended: slow answers never pile up requests
// (pulse web refuses a token's requests past --token-requests in flight).
function every(ms, fn) {
  let busy = false;
  state.timers.push(setInterval(() => {
    if (busy) return;
    busy = true;
    fn().catch((e) => say(e.message)).finally(() => { busy = false; });
  }, ms));
}
function stopTimers() { state.timers.forEach(clearInterval); state.timers = []; }

function ago(seconds) { return seconds === null || seconds === undefined ? "-" : `${Number(seconds).toFixed(1)} s ago`; }
function ms(seconds) { return seconds === null || seconds === undefined ? "-" : `${(seconds * 1000).toFixed(0)} ms`; }
function when(iso) { return iso ? iso.replace("T", " ").replace(/\.\d+/, "") : "-"; }
function inZone(iso, tz) {
  if (!iso) return "-";
  const parts = new Intl.DateTimeFormat("sv-SE", {
    timeZone: tz, year: "numeric", month: "2-digit", day: "2-digit", hour: "2-digit",
    minute: "2-digit", second: "2-digit", timeZoneName: "short",
  }).format(new Date(iso));
  return parts;
}
function jobHref(tenant, name) { return `#/job/${encodeURIComponent(tenant)}/${encodeURIComponent(name)}`; }
function jobPath(tenant, name) { return `/api/jobs/${encodeURIComponent(tenant)}/${encodeURIComponent(name)}`; }
function query(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== "" && v !== null && v !== undefined) q.set(k, v);
  const text = q.toString();
  return text ? `?${text}` : "";
}
function table(caption, headers, rows, attrs) {
  return el("table", attrs || {},
    el("caption", {}, caption),
    el("thead", {}, el("tr", {}, headers.map((h) => el("th", { scope: "col" }, h)))),
    el("tbody", {}, rows));
}
function show(...nodes) { const m = main(); m.replaceChildren(...nodes.filter((n) => n !== null)); }

// -- session ---------------------------------------------------------------------------

function signedOut() {
  state.session = null;
  stopTimers();
  document.getElementById("nav").hidden = true;
  document.getElementById("sign-out").hidden = true;
  document.getElementById("who").textContent = "";
  const input = el("input", { type: "password", id: "token", name: "token", autocomplete: "off", required: true });
  const form = el("form", { class: "signin", "aria-labelledby": "signin-title" },
    el("h1", { id: "signin-title" }, "Sign in"),
    el("label", { for: "token" }, "API token (pulse tokens create)", input),
    el("p", {}, el("button", { type: "submit", id: "sign-in" }, "Sign in")));
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    try {
      signedIn(await api("POST", "/console/session", { token: input.value }));
      say("");
      route();
    } catch (e) { say(`Sign-in failed: ${e.message}`); input.focus(); }
  });
  show(form);
  input.focus();
}

function signedIn(session) {
  state.session = session;
  document.getElementById("nav").hidden = false;
  document.getElementById("sign-out").hidden = false;
  const scope = session.tenant ? `tenant ${session.tenant}` : "all tenants";
  document.getElementById("who").textContent = `${session.name} (${session.role}, ${scope})`;
}

// -- overview --------------------------------------------------------------------------

function lagChart(minutes) {
  const width = 600, height = 150, pad = 28;
  const values = minutes.flatMap((m) => [m.p50_s || 0, m.p99_s || 0]);
  const top = Math.max(0.001, ...values);
  const now = Date.now();
  const x = (iso) => pad + ((new Date(iso).getTime() - (now - 3600e3)) / 3600e3) * (width - pad - 4);
  const y = (v) => height - pad + 4 - (v / top) * (height - pad - 8);
  const line = (key) => minutes.map((m) => `${x(m.minute).toFixed(1)},${y(m[key] || 0).toFixed(1)}`).join(" ");
  const label = `Fire lag per minute over the last hour: p50 up to ${ms(Math.max(0, ...minutes.map((m) => m.p50_s || 0)))}, p99 up to ${ms(Math.max(0, ...minutes.map((m) => m.p99_s || 0)))}`;
  return el("svg", { class: "chart", viewBox: `0 0 ${width} ${height}`, role: "img", "aria-label": label },
    el("title", { svg: true }, label),
    el("line", { svg: true, x1: pad, y1: height - pad + 4, x2: width, y2: height - pad + 4, stroke: "#d0d7de" }),
    el("text", { svg: true, x: 2, y: 12 }, ms(top)),
    el("text", { svg: true, x: 2, y: height - pad + 4 }, "0"),
    el("text", { svg: true, x: pad, y: height - 6 }, "-60 min"),
    el("text", { svg: true, x: width - 30, y: height - 6 }, "now"),
    el("polyline", { svg: true, class: "p50", points: line("p50_s") }),
    el("polyline", { svg: true, class: "p99", points: line("p99_s") }),
    minutes.flatMap((m) => [
      el("circle", { svg: true, class: "p50", cx: x(m.minute).toFixed(1), cy: y(m.p50_s || 0).toFixed(1), r: 2.5 }),
      el("circle", { svg: true, class: "p99", cx: x(m.minute).toFixed(1), cy: y(m.p99_s || 0).toFixed(1), r: 2.5 }),
    ]));
}

function colour(index) { return `hsl(${(index * 67) % 360} 55% 38%)`; }

async function overview() {
  const shown = state.route;
  const [st, lag] = await Promise.all([api("GET", "/api/status"), api("GET", "/api/lag")]);
  // A refresh answered after the user went to another page must not draw over it.
  if (state.route !== shown) return;
  const zones = {};
  for (const m of st.members) (zones[m.zone] = zones[m.zone] || []).push(m);
  const nodes = st.members.map((m) => m.node_id);
  const holders = {};
  for (const m of st.members) holders[m.node_id] = m;
  const unheld = new Set(st.unheld);
  const shards = [];
  for (let s = 0; s < st.shard_count; s++) {
    const isUnheld = unheld.has(s);
    const node = st.holders[String(s)];
    const item = el("li", { class: isUnheld ? "shard unheld" : "shard held", title: isUnheld ? `shard ${s}: unheld` : `shard ${s}: ${node}` }, isUnheld ? `${s}!` : String(s));
    if (!isUnheld) item.style.background = colour(nodes.indexOf(node) + 1);
    shards.push(item);
  }
  const o = st.outcomes_1h;
  show(
    el("h1", {}, `Cluster ${st.cluster}`),
    el("p", { id: "health", class: st.healthy ? "ok" : "bad" },
      st.healthy ? "Healthy" : `Unhealthy: ${st.problems.join("; ")}`,
      ` · ${st.alive_nodes.length} nodes alive · ${st.shards_held}/${st.shard_count} shards held · as of ${when(st.db_now)}`),
    el("h2", {}, "Members by zone"),
    st.members.length ? el("div", { class: "zones" }, Object.keys(zones).sort().map((zone) =>
      el("section", { class: "zone", "data-zone": zone, "aria-label": `Zone ${zone}` },
        table(`Zone ${zone}`, ["Node", "Heartbeat", "Shards held", "In flight", "Version"],
          zones[zone].map((m) => el("tr", { class: "member", "data-node": m.node_id },
            el("td", {}, m.node_id, m.has_session ? "" : " (no Postgres session)"),
            el("td", {}, ago(m.heartbeat_age_s)), el("td", {}, m.shards_held),
            el("td", {}, `${m.runs_in_flight}/${m.concurrency}`), el("td", {}, m.version))))))) :
      el("p", { class: "bad" }, st.members_error || "No member has a live heartbeat."),
    el("h2", {}, "Shard map"),
    el("p", { class: "legend" }, unheld.size ? `${unheld.size} unheld shards, marked with !` : "Every shard is held.",
      nodes.length ? ` Holders: ${nodes.join(", ")}.` : ""),
    el("ul", { class: "shards", "aria-label": `Shard map: ${st.shards_held} of ${st.shard_count} held` }, shards),
    el("h2", {}, "Backlog"),
    el("p", { id: "backlog" }, `${st.backlog_due} due jobs`, st.backlog_due ? `, oldest ${ms(st.backlog_oldest_s)} late` : ""),
    el("h2", {}, "Fire lag, last hour"),
    el("p", { class: "legend" }, `Last minute: p50 ${ms(st.lag_p50_s)}, p99 ${ms(st.lag_p99_s)} (${st.lag_samples} runs). Blue, solid: p50; red, dashed: p99.`),
    lag.minutes.length ? lagChart(lag.minutes) : el("p", { id: "lag" }, "No run started in the last hour."),
    el("h2", {}, "Run outcomes, last hour"),
    el("dl", { class: "facts", id: "outcomes" }, Object.entries(o).map(([k, v]) => [el("dt", {}, k.replace("_", " ")), el("dd", { class: `status-${k}` }, v)])),
  );
}

// -- jobs ------------------------------------------------------------------------------

// A job's expectation state (docs/jobs.md#expectations): "-" for a job without expectations.
function healthCell(h, id) {
  const text = h.state ? (h.state_at ? `${h.state} since ${when(h.state_at)}` : h.state) : "-";
  return el("td", { class: `health health-${h.state || "none"}`, "data-state": h.state || "", id }, text);
}

function jobsRows(jobs) {
  return jobs.map((j) => el("tr", {},
    el("td", {}, j.tenant),
    el("td", {}, el("a", { href: jobHref(j.tenant, j.name), class: "job-link" }, j.name)),
    el("td", {}, j.schedule, j.tz !== "UTC" ? ` (${j.tz})` : ""),
    el("td", { class: `status-${j.status}` }, j.status),
    el("td", {}, when(j.next_run_at)),
    el("td", {}, when(j.health.last_success)),
    healthCell(j.health),
    el("td", {}, j.handler)));
}

async function jobsPage(params) {
  const q = el("input", { id: "f-q", type: "search", value: params.get("q") || "" });
  const tenant = el("input", { id: "f-tenant", value: params.get("tenant") || "" });
  const status = el("select", { id: "f-status" }, ["", ...Object.values(JOB_STATUS)].map((s) =>
    el("option", { value: s, selected: (params.get("status") || "") === s }, s || "any")));
  const form = el("form", { class: "filters", role: "search", "aria-label": "Filter jobs" },
    el("label", { for: "f-q" }, "Name or handler", q),
    el("label", { for: "f-tenant" }, "Tenant", tenant),
    el("label", { for: "f-status" }, "Status", status),
    el("button", { type: "submit" }, "Filter"));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    location.hash = `#/jobs${query({ q: q.value, tenant: tenant.value, status: status.value })}`;
  });
  const filters = { q: params.get("q"), tenant: params.get("tenant"), status: params.get("status") };
  const page = await api("GET", `/api/jobs${query(filters)}`);
  const body = table("Jobs", ["Tenant", "Name", "Schedule", "Status", "Next run", "Last success", "Expectations", "Handler"], jobsRows(page.jobs), { id: "jobs" });
  const more = el("button", { type: "button", hidden: !page.next_cursor }, "More jobs");
  let cursor = page.next_cursor;
  more.addEventListener("click", async () => {
    const next = await api("GET", `/api/jobs${query({ ...filters, cursor })}`);
    body.querySelector("tbody").append(...jobsRows(next.jobs));
    cursor = next.next_cursor;
    more.hidden = !cursor;
  });
  show(el("h1", {}, "Jobs"), form, body, page.jobs.length ? more : el("p", {}, "No jobs match."));
}

function runRows(runs, withJob, onOutput) {
  return runs.map((r) => el("tr", { class: "run", "data-status": r.status },
    el("td", {}, when(r.scheduled_for)),
    withJob ? el("td", {}, r.tenant) : null,
    withJob ? el("td", {}, el("a", { href: jobHref(r.tenant, r.job) }, r.job)) : null,
    el("td", { class: `status-${r.status}` }, r.status),
    el("td", {}, r.attempt),
    el("td", {}, r.node_id || "-", r.zone ? ` (${r.zone})` : ""),
    el("td", {}, r.duration_s === null ? "-" : `${r.duration_s.toFixed(3)} s`),
    el("td", {}, r.error ? r.error.split("\n")[0] : ""),
    onOutput ? el("td", {}, el("button", { type: "button", onclick: () => onOutput(r) }, "Output")) : null));
}

async function jobPage(tenant, name) {
  const path = jobPath(tenant, name);
  const job = await api("GET", path);
  const statusCell = el("span", { id: "job-status", class: `status-${job.status}` }, job.status);
  const output = el("section", { id: "output", "aria-live": "polite" });
  const showOutput = async (run) => {
    const found = await api("GET", `${path}/run${query({ slot: run.scheduled_for })}`);
    const parts = ["stdout", "stderr", "result", "log"].filter((k) => found.output[k] !== null);
    const metrics = Object.entries(found.metrics || {});
    output.replaceChildren(el("h2", {}, `Output of ${when(run.scheduled_for)}`),
      ...(metrics.length ? [el("h3", {}, "metrics"), el("pre", { id: "run-metrics" }, metrics.map(([k, v]) => `${k}=${v}`).join("\n"))] : []),
      ...(parts.length ? parts.flatMap((k) => [el("h3", {}, k), el("pre", {}, typeof found.output[k] === "string" ? found.output[k] : JSON.stringify(found.output[k], null, 2))]) : [el("p", {}, "No output.")]));
  };
  const runs = table("Recent runs", ["Slot", "Status", "Attempt", "Node", "Duration", "Error", "Output"], [], { id: "job-runs" });
  const facts = el("dl", { class: "facts", id: "definition" });
  // The slot ledger of its last six hours (docs/guarantees.md#the-slot-ledger): one cell per
  // slot, coloured by verdict, its time and reason as the title.
  const cells = el("ol", { class: "strip", id: "slot-strip", "aria-label": "Last slots, oldest first" });
  const loadStrip = async () => {
    const range = { from: new Date(Date.now() - 6 * 3600e3).toISOString(), to: new Date(Date.now() + 60e3).toISOString() };
    const lines = await apiLines(`/api/audit${query({ ...range, tenant, job: name, last: STRIP_SLOTS })}`);
    cells.replaceChildren(...lines.filter((l) => l.type === "slot").map((l) => el("li", {
      class: `slot slot-${l.verdict}`, "data-verdict": l.verdict, "data-slot": l.slot,
      title: `${when(l.slot)} ${l.verdict}${l.detail ? `: ${l.detail}` : ""}`,
    }, el("span", { class: "visually-hidden" }, `${when(l.slot)} ${l.verdict}`))));
  };
  const health = table("Health", ["Last success", "Next slot", "Expectations"], [], { id: "job-health" });
  const slots = table("Next slots", [`In ${job.tz}`, "UTC", "Starts", "Why"], [], { id: "next-slots" });
  // Its revisions (docs/jobs.md#revisions), read again when the job's revision moves on.
  const history = table("History", ["Rev", "At", "Who", "How", "Changes", ""], [], { id: "job-history" });
  let shownRevision = null;
  const changes = (r) => r.change !== "updated" ? r.change
    : Object.entries(r.diff).map(([k, [a, b]]) => `${k}: ${JSON.stringify(a)} → ${JSON.stringify(b)}`).join("; ");
  const loadHistory = async (j) => {
    if (j.revision === shownRevision) return;
    shownRevision = j.revision;
    const found = await api("GET", `${path}/revisions?limit=50`);
    const canWrite = state.session.role !== "read";
    history.querySelector("tbody").replaceChildren(...found.revisions.map((r, i) => el("tr", { class: "revision", "data-revision": r.revision },
      el("td", {}, r.revision), el("td", {}, when(r.at)), el("td", {}, r.who), el("td", {}, r.how), el("td", {}, changes(r)),
      el("td", {}, canWrite && i > 0 ? el("button", { type: "button", class: "rollback", onclick: async () => {
        try {
          const done = await api("POST", `${path}/rollback`, { to: r.revision });
          say("");
          document.getElementById("action-result").textContent = done.revision === null
            ? `Already at revision ${r.revision}'s definition` : `Rolled back to revision ${r.revision}: now revision ${done.revision}`;
          const now = await api("GET", path);
          render(now);
          await loadHistory(now);
        } catch (e) { say(e.message); }
      } }, "Roll back") : ""))));
  };
  const buttons = {};
  const act = async (verb) => {
    try {
      if (verb === "cancel") {  // every running slot; the job page refreshes as they stop
        const asked = await api("POST", `${path}/cancel`, { all: true });
        say("");
        document.getElementById("action-result").textContent = `Cancelling ${asked.length} running slot(s)`;
        render(await api("GET", path));
        return;
      }
      const changed = await api("POST", `${path}/${verb}`);
      say("");
      render(changed);
      document.getElementById("action-result").textContent = `${verb === "trigger" ? "Triggered" : verb === "pause" ? "Paused" : "Resumed"}: now ${changed.status}`;
    } catch (e) { say(e.message); }
  };
  for (const [verb, label] of [["pause", "Pause"], ["resume", "Resume"], ["trigger", "Run now"], ["cancel", "Cancel run"]]) {
    buttons[verb] = el("button", { type: "button", id: `do-${verb}`, onclick: () => act(verb) }, label);
  }
  const render = (j) => {
    statusCell.textContent = j.status;
    statusCell.className = `status-${j.status}`;
    const canWrite = state.session.role !== "read";
    buttons.pause.disabled = !canWrite || j.paused;
    buttons.resume.disabled = !canWrite || !j.paused;
    buttons.trigger.disabled = !canWrite || j.status === JOB_STATUS.RUNNING;
    buttons.cancel.disabled = !canWrite || !(j.recent_runs || []).some((r) => r.status === RUN_STATUS.RUNNING);
    // Upstreams and downstreams (--after) link to their jobs, of the same tenant.
    const linked = (names) => names.length ? names.flatMap((n, i) => [i ? ", " : "", el("a", { href: jobHref(j.tenant, n) }, n)]) : ["-"];
    facts.replaceChildren(...Object.entries(j).filter(([k]) => !["next_slots", "next_starts", "next_reasons", "next_entries", "calendar_skips", "recent_runs"].includes(k))
      .flatMap(([k, v]) => [el("dt", {}, k), ["upstreams", "downstreams"].includes(k) ? el("dd", {}, ...linked(v))
        // A slot passed over for a named limit with no room (docs/limits.md).
        : k === "key_wait" && v ? el("dd", { id: "key-wait" }, `waiting for key ${v.key} since ${v.since} (slot ${v.slot})`)
        : el("dd", {}, v === null ? "-" : typeof v === "object" ? JSON.stringify(v) : String(v))]));
    // Runs and the slots the calendar or a blackout window skips, in slot order, each with why.
    const entryOf = (i) => ((j.next_entries || [])[i] ? `schedule ${j.next_entries[i]}` : "");
    const planned = j.next_slots.map((s, i) => ({ slot: s, start: (j.next_starts || [])[i], why: [(j.next_reasons || [])[i], entryOf(i)].filter(Boolean).join("; ") }));
    const skipped = (j.calendar_skips || []).map((k) => ({ slot: k.slot, start: null, why: k.reason }));
    const rows = [...planned, ...skipped].sort((a, b) => new Date(a.slot) - new Date(b.slot));
    slots.querySelector("tbody").replaceChildren(...rows.map((r) => el("tr", {},
      el("td", {}, inZone(r.slot, j.tz)), el("td", {}, new Date(r.slot).toISOString()),
      el("td", {}, r.start ? new Date(r.start).toISOString() : "skipped"), el("td", {}, r.why || ""))));
    runs.querySelector("tbody").replaceChildren(...runRows(j.recent_runs, false, showOutput));
    health.querySelector("tbody").replaceChildren(el("tr", {},
      el("td", {}, when(j.health.last_success)), el("td", {}, when(j.health.next_slot)), healthCell(j.health, "job-expectation")));
  };
  // Backfill: run the slots of a range again (times in UTC, as ISO 8601 with Z).
  const from = el("input", { id: "bf-from", type: "text", placeholder: "2026-01-01T00:00:00Z" });
  const to = el("input", { id: "bf-to", type: "text", placeholder: "2026-01-02T00:00:00Z" });
  const missing = el("input", { id: "bf-missing", type: "checkbox" });
  const backfill = el("form", {
    id: "backfill", "aria-label": "Backfill",
    onsubmit: async (event) => {
      event.preventDefault();
      try {
        const made = await api("POST", `${path}/backfill`, { from: from.value, to: to.value, only_missing: missing.checked });
        say("");
        document.getElementById("action-result").textContent = `Backfill ${made.id}: ${made.slots_total} slots queued`;
      } catch (e) { say(e.message); }
    },
  },
  el("h2", {}, "Backfill"),
  el("label", { for: "bf-from" }, "From (UTC) "), from, " ",
  el("label", { for: "bf-to" }, "To (UTC, excluded) "), to, " ",
  el("label", { for: "bf-missing" }, missing, " only missing slots"), " ",
  el("button", { type: "submit", id: "do-backfill" }, "Backfill"));
  show(
    el("h1", {}, el("span", { id: "job-name" }, job.name), el("span", { class: "legend" }, ` (tenant ${job.tenant})`)),
    el("p", {}, "Status: ", statusCell),
    el("div", { class: "actions", role: "group", "aria-label": "Job actions" }, buttons.pause, buttons.resume, buttons.trigger, buttons.cancel),
    el("p", { id: "action-result", role: "status", "aria-live": "polite" }),
    health, el("h2", {}, "Last slots"), cells, runs, output, slots, state.session.role !== "read" ? backfill : null,
    state.session.role !== "read" ? triggerForm(path, job, (a) => {
      render(a);
      document.getElementById("action-result").textContent = `Queued ${a.queued.origin} of ${when(a.queued.slot)}`;
    }) : null,
    el("h2", {}, "Definition"), facts, history);
  render(job);
  await loadHistory(job);
  await loadStrip().catch((e) => say(e.message));
  every(2000, async () => { const now = await api("GET", path); render(now); await loadHistory(now); });
  every(10000, loadStrip);
}

// -- runs and audit --------------------------------------------------------------------

async function runsPage(params) {
  const tenant = el("input", { id: "r-tenant", value: params.get("tenant") || "" });
  const job = el("input", { id: "r-job", value: params.get("job") || "" });
  const status = el("select", { id: "r-status" }, ["", ...Object.values(RUN_STATUS)].map((s) =>
    el("option", { value: s, selected: (params.get("status") || "") === s }, s || "any")));
  const form = el("form", { class: "filters", role: "search", "aria-label": "Filter runs" },
    el("label", { for: "r-tenant" }, "Tenant", tenant),
    el("label", { for: "r-job" }, "Job", job),
    el("label", { for: "r-status" }, "Status", status),
    el("button", { type: "submit" }, "Filter"));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    location.hash = `#/runs${query({ tenant: tenant.value, job: job.value, status: status.value })}`;
  });
  const filters = { tenant: params.get("tenant"), job: params.get("job"), status: params.get("status"), limit: 100 };
  const runs = table("Runs, newest first (refreshed every 2 s)", ["Slot", "Tenant", "Job", "Status", "Attempt", "Node", "Duration", "Error"], [], { id: "runs" });
  const refresh = async () => {
    const page = await api("GET", `/api/runs${query(filters)}`);
    runs.querySelector("tbody").replaceChildren(...runRows(page.runs, true, null));
  };
  show(el("h1", {}, "Runs"), form, runs);
  await refresh();
  every(2000, refresh);
}

async function auditPage() {
  if (state.session.role !== "admin") { show(el("h1", {}, "Audit"), el("p", {}, "The audit trail needs an admin token.")); return; }
  const page = await api("GET", "/api/tokens/audit?limit=200");
  show(el("h1", {}, "Audit"), table("Changes made through the API, newest first", ["At", "Token", "Action", "Tenant", "Job", "Source", "Note"],
    page.entries.map((e) => el("tr", {}, el("td", {}, when(e.at)), el("td", {}, e.token), el("td", {}, e.action),
      el("td", {}, e.tenant || "-"), el("td", {}, e.job || "-"), el("td", {}, e.source || "-"), el("td", {}, e.detail || ""))), { id: "audit" }));
}

async function calendarsPage() {
  const [calendars, windows] = await Promise.all([api("GET", "/api/calendars"), api("GET", "/api/windows")]);
  show(el("h1", {}, "Calendars"),
    table("Business calendars (changed with pulse calendars)", ["Name", "Weekdays", "Excluded dates", "Jobs", "Version", "Updated"],
      calendars.map((c) => el("tr", {}, el("td", {}, c.name), el("td", {}, c.weekdays), el("td", {}, String(c.excluded_count)),
        el("td", {}, String(c.jobs)), el("td", {}, String(c.version)), el("td", {}, when(c.updated_at)))), { id: "calendars" }),
    table("Blackout windows (changed with pulse windows)", ["Id", "From", "To", "For", "Slots", "Note"],
      windows.map((w) => el("tr", {}, el("td", {}, String(w.id)), el("td", {}, when(w.from)), el("td", {}, when(w.to)),
        el("td", {}, w.scope === "cluster" ? "cluster" : w.scope === "tenant" ? `tenant ${w.tenant}` : `job ${w.tenant}/${w.job}`),
        el("td", {}, w.defer ? "deferred" : "skipped"), el("td", {}, w.note || ""))), { id: "windows" }));
}

// -- routing ---------------------------------------------------------------------------

async function route() {
  stopTimers();
  state.route += 1;
  if (!state.session) return signedOut();
  const [path, search] = (location.hash.slice(1) || "/overview").split("?");
  const params = new URLSearchParams(search || "");
  const parts = path.split("/").filter(Boolean);
  document.querySelectorAll("nav a").forEach((a) => {
    if (a.getAttribute("href") === `#/${parts[0] === "job" ? "jobs" : parts[0]}`) a.setAttribute("aria-current", "page");
    else a.removeAttribute("aria-current");
  });
  say("");
  try {
    if (parts[0] === "jobs") await jobsPage(params);
    else if (parts[0] === "job" && parts.length === 3) await jobPage(decodeURIComponent(parts[1]), decodeURIComponent(parts[2]));
    else if (parts[0] === "runs") await runsPage(params);
    else if (parts[0] === "audit") await auditPage();
    else if (parts[0] === "calendars") await calendarsPage();
    else if (state.session.tenant) show(el("h1", {}, "Overview"), el("p", {}, `The overview spans every tenant; this token reaches tenant ${state.session.tenant} only. See Jobs and Runs.`));
    else { await overview(); every(5000, overview); }
    document.title = `Pulse: ${main().querySelector("h1")?.textContent || ""}`;
    main().focus({ preventScroll: true });
  } catch (e) { if (state.session) say(e.message); }
}

async function start() {
  document.getElementById("sign-out").addEventListener("click", async () => {
    try { await api("DELETE", "/console/session"); } catch (e) { /* signed out either way */ }
    signedOut();
  });
  window.addEventListener("hashchange", route);
  try {
    signedIn(await api("GET", "/console/session"));
    route();
  } catch (e) { signedOut(); }
}

document.addEventListener("DOMContentLoaded", start);
