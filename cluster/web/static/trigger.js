// The console's trigger form (docs/web.md): built from a job's payload_schema, one field per
// property (a list for an enum, a checkbox for a boolean, a number, text, or JSON for the
// rest), or one JSON field when the job has no schema. It posts {payload, slot} to
// .../trigger; the server checks the payload against the schema (422 names the field).
// Uses el() and api() of console.js; data is only ever written with textContent.
"use strict";

function schemaFields(schema, payload) {
  const props = (schema && schema.type === "object" && schema.properties) || null;
  if (!props) return null;  // not a flat object schema: one JSON field
  const required = new Set(schema.required || []);
  return Object.entries(props).map(([key, prop]) => {
    const id = `tf-${key.replace(/[^A-Za-z0-9_-]/g, "_")}`;
    const start = key in payload ? payload[key] : prop.default;
    let input, read;
    if (Array.isArray(prop.enum)) {
      input = el("select", { id, name: key },
        required.has(key) ? null : el("option", { value: "" }, "-"),
        prop.enum.map((v, i) => el("option", { value: String(i), selected: JSON.stringify(v) === JSON.stringify(start) }, JSON.stringify(v))));
      read = () => input.value === "" ? undefined : prop.enum[Number(input.value)];
    } else if (prop.type === "boolean") {
      input = el("input", { id, name: key, type: "checkbox", checked: start === true });
      read = () => input.checked;
    } else if (prop.type === "integer" || prop.type === "number") {
      input = el("input", { id, name: key, type: "number", step: prop.type === "integer" ? "1" : "any",
        min: prop.minimum, max: prop.maximum, value: start === undefined ? "" : start });
      read = () => input.value === "" ? undefined : Number(input.value);
    } else if (prop.type === "string") {
      input = el("input", { id, name: key, type: "text", value: start === undefined ? "" : start });
      read = () => input.value === "" && !required.has(key) ? undefined : input.value;
    } else {
      input = el("textarea", { id, name: key, rows: 2 });
      input.value = start === undefined ? "" : JSON.stringify(start);
      read = () => input.value.trim() === "" ? undefined : JSON.parse(input.value);
    }
    const label = el("label", { for: id }, key, required.has(key) ? " *" : "", prop.description ? ` (${prop.description})` : "");
    return { key, read, node: el("div", { class: "field" }, label, " ", input) };
  });
}

function triggerForm(path, job, done) {
  const fields = schemaFields(job.payload_schema, job.payload || {});
  const raw = el("textarea", { id: "tf-payload", rows: 4 });
  raw.value = JSON.stringify(job.payload || {}, null, 2);
  const slot = el("input", { id: "tf-slot", type: "text", placeholder: "2026-01-01T00:00:00Z" });
  const form = el("form", {
    id: "trigger-form", "aria-label": "Run with input", novalidate: true,  // the server checks
    onsubmit: async (event) => {
      event.preventDefault();
      let payload;
      try {
        payload = fields ? Object.fromEntries(fields.map((f) => [f.key, f.read()]).filter(([, v]) => v !== undefined))
          : JSON.parse(raw.value || "{}");
      } catch (e) { say(`payload: not valid JSON (${e.message})`); return; }
      const body = { payload };
      if (slot.value.trim()) body.slot = slot.value.trim();
      try {
        const answer = await api("POST", `${path}/trigger`, body);
        say("");
        done(answer);
      } catch (e) { say(e.message); }
    },
  },
  el("h2", {}, "Run with input"),
  fields ? fields.map((f) => f.node) : el("div", { class: "field" }, el("label", { for: "tf-payload" }, "Payload (JSON) "), raw),
  el("div", { class: "field" }, el("label", { for: "tf-slot" }, "Past slot to run again (UTC, optional) "), slot),
  el("button", { type: "submit", id: "do-trigger-input" }, "Run"));
  return form;
}
