// Lockgate's pages inside Airflow: the jobs list, a job (plans, window timeline with a graph
// operator's supersteps, checkpoints, transitions, actions) and the windows of one task instance's tries.
// Everything comes from the plugin's API (same origin, Airflow's session cookie).
"use strict";

const app = document.getElementById("app");
const D = app.dataset;
const API = `${D.base}/api`;
const PAGE = 100;
const PHASES = ["read", "plan", "snapshot", "stage", "commit", "checkpoint"];

// -- small helpers ------------------------------------------------------------------------
function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else if (k === "class") e.className = v;
    else e.setAttribute(k, v === true ? "" : v);
  }
  for (const kid of kids.flat()) {
    if (kid === null || kid === undefined || kid === false) continue;
    e.append(kid instanceof Node ? kid : document.createTextNode(String(kid)));
  }
  return e;
}
const svgEl = (tag, attrs, ...kids) => {
  const e = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  for (const kid of kids) e.append(kid instanceof Node ? kid : document.createTextNode(String(kid)));
  return e;
};
async function api(path, options) {
  const r = await fetch(`${API}${path}`, { credentials: "same-origin", ...options,
    headers: { "Content-Type": "application/json", ...((options || {}).headers || {}) } });
  const body = await r.json().catch(() => ({}));
  if (!r.ok) {
    const detail = typeof body.detail === "string" ? body.detail : JSON.stringify(body.detail || body);
    throw new Error(`${r.status}: ${detail || r.statusText}`);
  }
  return body;
}
const slug = (s) => String(s || "").toLowerCase().replace(/\s+/g, "-");
const badge = (state) => el("span", { class: `badge s-${slug(state)}` }, String(state || "—").toLowerCase());
const time = (iso) => (iso ? new Date(iso).toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z") : "—");
const num = (n) => (n === null || n === undefined ? "—" : Number(n).toLocaleString("en-US"));
function dur(s) {
  if (s === null || s === undefined) return "—";
  if (Math.abs(s) < 1) return `${Math.round(s * 1000)} ms`;
  if (Math.abs(s) < 120) return `${s.toFixed(1)} s`;
  if (Math.abs(s) < 7200) return `${(s / 60).toFixed(1)} min`;
  if (Math.abs(s) < 172800) return `${(s / 3600).toFixed(1)} h`;
  return `${(s / 86400).toFixed(1)} d`;
}
function bytes(n) {
  if (!n) return "0 B";
  const u = ["B", "KiB", "MiB", "GiB", "TiB"];
  const i = Math.min(u.length - 1, Math.floor(Math.log(n) / Math.log(1024)));
  return `${(n / 1024 ** i).toFixed(i ? 1 : 0)} ${u[i]}`;
}
const jobHref = (job) => `${D.base}/ui/jobs/${encodeURIComponent(job)}`;
const put = (where, ...kids) => where.replaceChildren(...kids.flat().filter((k) => k !== null && k !== undefined && k !== false));
function fail(where, err) {
  where.replaceChildren(el("div", { class: "banner" }, String(err.message || err)));
}

// -- jobs ---------------------------------------------------------------------------------
async function jobsPage() {
  const { jobs } = await api("/jobs");
  put(app, 
    el("h1", {}, "Lockgate jobs"),
    el("p", { class: "muted" }, `${jobs.length} job${jobs.length === 1 ? "" : "s"}; lag is now minus the end of the last committed window.`),
    el("table", { id: "jobs" },
      el("thead", {}, el("tr", {}, ["Job", "State", "Last committed window", "Window end", "Lag", "Rows/s",
        "Rounds", "Error"].map((h, i) => el("th", { class: i >= 4 && i <= 6 ? "num" : null }, h)))),
      el("tbody", {}, jobs.map((j) => el("tr", { "data-job": j.name },
        el("td", {}, el("a", { href: jobHref(j.name) }, j.name)),
        el("td", {}, badge(j.state)),
        el("td", { class: "mono" }, j.last_window ?? "—"),
        el("td", {}, time(j.last_window_end)),
        el("td", { class: "num" }, dur(j.lag_s)),
        el("td", { class: "num" }, num(j.rows_per_s)),
        el("td", { class: "num" }, num(j.cycles)),
        el("td", { class: "error small" }, j.last_error || (j.last_failed_window !== null
          ? `window ${j.last_failed_window} failed: ${j.last_failed_error || ""}` : ""))))),
    ));
}

// -- plan graph -----------------------------------------------------------------------------
function logicalGraph(logical) {
  const vs = logical.vertices, es = logical.edges;
  const layer = {};
  const order = vs.map((v) => v.id);
  for (const id of order) layer[id] = 0;
  for (let pass = 0; pass < order.length; pass++) {
    for (const e of es) layer[e.target] = Math.max(layer[e.target], layer[e.source] + 1);
  }
  const cols = {};
  for (const v of vs) (cols[layer[v.id]] = cols[layer[v.id]] || []).push(v);
  const W = 230, H = 54, GX = 100, GY = 22;
  const pos = {};
  let rows = 0;
  for (const [l, list] of Object.entries(cols)) {
    list.forEach((v, i) => { pos[v.id] = { x: 10 + Number(l) * (W + GX), y: 10 + i * (H + GY) }; });
    rows = Math.max(rows, list.length);
  }
  const width = 20 + Object.keys(cols).length * (W + GX) - GX, height = 20 + rows * (H + GY) - GY;
  const svg = svgEl("svg", { class: "plan", id: "logical-plan", viewBox: `0 0 ${width} ${height}`,
    style: `max-width:${width}px`, role: "img", "aria-label": "logical plan" });
  svg.append(svgEl("defs", {}, svgEl("marker", { id: "arrow", viewBox: "0 0 10 10", refX: 10, refY: 5,
    markerWidth: 7, markerHeight: 7, orient: "auto-start-reverse" }, svgEl("path", { d: "M0,0 L10,5 L0,10 z", style: "fill:#a1a1aa" }))));
  for (const e of es) {
    const a = pos[e.source], b = pos[e.target];
    const x1 = a.x + W, y1 = a.y + H / 2, x2 = b.x, y2 = b.y + H / 2, mx = (x1 + x2) / 2;
    svg.append(svgEl("path", { class: "edge", d: `M${x1},${y1} C${mx},${y1} ${mx},${y2} ${x2},${y2}`, "marker-end": "url(#arrow)" }));
    const label = e.partitioning === "KEY" ? `KEY(${e.keys.join(", ")})` : e.partitioning;
    svg.append(svgEl("text", { class: "edge-label", x: x1 + 6, y: y1 + (y2 > y1 ? 14 : y2 < y1 ? -6 : -5) }, label));
  }
  for (const v of vs) {
    const p = pos[v.id], stateful = v.state && Object.keys(v.state).length > 0;
    const g = svgEl("g", { class: `node ${v.kind}${stateful ? " stateful" : ""}`, "data-operator": v.id,
      transform: `translate(${p.x},${p.y})` });
    g.append(svgEl("rect", { width: W, height: H, rx: 6 }));
    g.append(svgEl("text", { x: 10, y: 20 }, v.id.length > 30 ? `${v.id.slice(0, 29)}…` : v.id));
    g.append(svgEl("text", { class: "sub", x: 10, y: 38 }, `${v.op} · p=${v.parallelism}${stateful ? " · keyed state" : ""}`));
    g.append(svgEl("title", {}, `${v.id}\n${(v.schema || []).map((c) => `${c.name}: ${c.type}`).join("\n")}`));
    svg.append(g);
  }
  return svg;
}

function physicalPlan(physical) {
  const chains = Object.fromEntries(physical.chains.map((c) => [c.id, c]));
  const groups = Object.fromEntries(physical.groups.map((g) => [g.id, g]));
  return el("div", { id: "physical-plan" }, physical.cycles.map((cy) => el("div", { class: "card" },
    el("div", {}, el("b", {}, cy.id), el("span", { class: "muted" }, cy.mode === "iteration"
      ? ` · ${cy.mode} · supersteps of ${cy.operator} in every round of ${cy.parent}${(cy.settings || {}).halt_when ? ` until ${human(cy.settings.halt_when)}` : ""}`
      : ` · ${cy.mode} · one round per window · heads: ${cy.heads.join(", ")} · tails: ${cy.tails.join(", ")}`)),
    el("div", { class: "physical" }, cy.groups.map((gid) => el("div", { class: "group" },
      el("h4", {}, `${gid} · ends at ${groups[gid].boundary}`),
      groups[gid].chains.map((cid) => el("div", { class: "chain" },
        el("span", { class: "muted" }, `${cid} p=${chains[cid].parallelism}: `), chains[cid].operators.join(" → ")))))))));
}

// -- timeline -----------------------------------------------------------------------------
function phaseBar(row, scale) {
  const total = row.phases.reduce((s, [, ms]) => s + ms, 0);
  const bar = el("div", { class: "bar", style: `width:${Math.max(2, Math.round(160 * total / scale))}px`,
    title: row.phases.map(([p, ms]) => `${p}: ${ms} ms`).join("\n") });
  for (const [p, ms] of row.phases) bar.append(el("i", { class: `p-${p}`, style: `width:${total ? (100 * ms / total) : 0}%` }));
  return bar;
}
const legend = () => el("div", { class: "legend" }, PHASES.map((p) => el("span", {}, el("i", { class: `p-${p}` }), p)));

// A failed round's error: the first sentence of its summary in the table; the rest of the summary and
// the whole error (Python and JVM traceback) behind the expand control.
const FIRST_SENTENCE_MAX = 220;
function firstSentence(text) {
  const m = /^([\s\S]*?[.!?])\s+(?=[A-Z(`'"])/.exec(text);
  let head = m ? m[1] : text;
  if (head.length > FIRST_SENTENCE_MAX) {
    const cut = head.lastIndexOf(" ", FIRST_SENTENCE_MAX);
    head = head.slice(0, cut > 40 ? cut : FIRST_SENTENCE_MAX);
  }
  return head;
}
function errorCell(r) {
  const summary = r.error_summary || "error";
  const head = firstSentence(summary);
  const rest = summary.slice(head.length).trim();
  const shown = head.length < summary.length && !/[.!?]$/.test(head) ? `${head} …` : head;
  return el("details", { class: "error-cell" },
    el("summary", { title: "show the whole error" }, shown),
    rest ? el("p", { class: "error-rest" }, rest) : null,
    r.error && r.error !== summary ? el("pre", { class: "trace" }, r.error) : null);
}

// -- supersteps of a round (graph operators' iteration cycles) ------------------------------
const human = (s) => String(s || "").replace(/_/g, " ");
const plural = (n, word) => `${num(n)} ${word}${n === 1 ? "" : "s"}`;

function superstepNotes(notes) {
  return notes.map((n) => el("span", { class: `note n-${slug(n.split(":")[0])}` }, human(n)));
}

function superstepsTable(steps, id) {
  const msMax = Math.max(1, ...steps.map((s) => s.elapsed_ms)), msgMax = Math.max(1, ...steps.map((s) => s.messages_sent));
  const bar = (cls, v, max, what) => el("i", { class: cls, style: `width:${Math.max(1, Math.round(120 * v / max))}px`, title: what });
  return el("table", { class: "supersteps", id },
    el("thead", {}, el("tr", {}, [["Operator"], ["Superstep", "num"], ["Messages", "num"], ["Changed", "num"], ["Active", "num"],
      ["ms", "num"], [el("span", {}, el("i", { class: "key ss-ms" }), "time ", el("i", { class: "key ss-msg" }), "messages")], ["Notes"]]
      .map(([h, cls]) => el("th", { class: cls || null }, h)))),
    el("tbody", {}, steps.map((s) => el("tr", { "data-superstep": s.superstep, "data-operator": s.operator, class: s.resumed ? "resumed" : null },
      el("td", { class: "mono" }, s.operator), el("td", { class: "num" }, s.superstep),
      el("td", { class: "num" }, num(s.messages_sent)), el("td", { class: "num" }, num(s.vertices_changed)),
      el("td", { class: "num" }, num(s.active_vertices)), el("td", { class: "num" }, num(Math.round(s.elapsed_ms))),
      el("td", {}, el("div", { class: "ss-bars" }, bar("ss-ms", s.elapsed_ms, msMax, `${Math.round(s.elapsed_ms)} ms`),
        bar("ss-msg", s.messages_sent, msgMax, `${num(s.messages_sent)} messages`))),
      el("td", {}, superstepNotes(s.notes))))));
}

// the round's supersteps in a line ("4 supersteps, halted: no messages"); a click shows them all
function superstepsCell(r, job, columns) {
  const ss = r.supersteps;
  if (!ss) return el("td", { class: "muted" }, "");
  const extra = [`${plural(ss.messages, "message")}`];
  if (ss.resumed) extra.push(`${ss.resumed} resumed`);
  if (ss.not_checkpointed) extra.push(`${ss.not_checkpointed} not checkpointed`);
  const toggle = el("button", { class: "ss-toggle", "aria-expanded": "false", title: "show the supersteps of this round" },
    el("span", { class: "caret" }, "▸"), ` ${plural(ss.count, "superstep")}`);
  toggle.addEventListener("click", async () => {
    const row = toggle.closest("tr");
    const open = toggle.getAttribute("aria-expanded") === "true";
    toggle.setAttribute("aria-expanded", String(!open));
    let detail = row.nextElementSibling;
    if (detail && detail.classList.contains("ss-detail")) { detail.hidden = open; return; }
    const cell = el("td", { colspan: columns }, el("p", { class: "muted small" }, "Loading…"));
    detail = el("tr", { class: "ss-detail", "data-for-window": r.window, "data-for-attempt": r.attempt }, cell);
    row.after(detail);
    try {
      const q = new URLSearchParams({ window: r.window, attempt: r.attempt });
      const { supersteps } = await api(`/jobs/${encodeURIComponent(job)}/supersteps?${q}`);
      put(cell, el("div", { class: "small muted ss-caption" }, `Supersteps of window ${r.window}, try ${r.attempt}: `,
        `${ss.operators.join(", ")} · ${plural(ss.ran, "superstep")} run by this try`, ss.resumed ? `, ${ss.resumed} resumed from an earlier try` : "",
        ` · ${num(Math.round(ss.elapsed_ms))} ms`), superstepsTable(supersteps, `supersteps-${r.window}-${r.attempt}`));
    } catch (err) {
      fail(cell, err);
    }
  });
  return el("td", { class: "ss-cell" }, toggle,
    el("div", { class: "small muted" }, ss.halted_by ? `halted: ${human(ss.halted_by)}` : "did not halt", ` · ${extra.join(" · ")}`));
}

function roundsTable(rows, id, job) {
  const scale = Math.max(1, ...rows.map((r) => r.phases.reduce((s, [, ms]) => s + ms, 0)));
  const graph = rows.some((r) => r.supersteps);  // a graph operator's rounds: their supersteps too
  const heads = [["Window"], ["Window start"], ["Try"], ["Status"], ["Phases (ms)"], graph ? ["Supersteps"] : null,
    ["Rows in", "num"], ["Rows out", "num"], ["Late", "num"], ["Invalid", "num"], ["Started"], ["Duration", "num"], ["Error"]].filter(Boolean);
  return el("div", { class: "scroll" }, el("table", { id },
    el("thead", {}, el("tr", {}, heads.map(([h, cls]) => el("th", { class: cls || null }, h)))),
    el("tbody", {}, rows.map((r) => el("tr", { "data-window": r.window, "data-status": r.status, "data-attempt": r.attempt },
      el("td", { class: "mono" }, r.window), el("td", { class: "when" }, time(r.window_start)), el("td", { class: "num" }, r.attempt),
      el("td", {}, badge(r.status)), el("td", {}, phaseBar(r, scale)),
      graph ? superstepsCell(r, job, heads.length) : null,
      el("td", { class: "num" }, num(r.rows_in)), el("td", { class: "num" }, num(r.rows_out)),
      el("td", { class: "num" }, num(r.late_rows)),
      el("td", { class: r.invalid_rows ? "num warn" : "num", title: r.invalid_rows ? "records dropped as invalid (invalid='skip')" : null },
        num(r.invalid_rows || 0)),
      el("td", { class: "when" }, time(r.started)),
      el("td", { class: "num" }, r.finished ? dur(r.duration_ms / 1000) : "—"),
      el("td", { class: "error small" }, r.error ? errorCell(r) : ""))))));
}

async function timeline(where, job) {
  const stack = [];
  let before = null;
  async function load() {
    where.replaceChildren(el("p", { class: "muted" }, "Loading…"));
    const q = new URLSearchParams({ limit: PAGE });
    if (before !== null) q.set("before", before);
    const page = await api(`/jobs/${encodeURIComponent(job)}/cycles?${q}`);
    const first = stack.length * PAGE + 1;
    const last = first + page.cycles.length - 1;
    const older = el("button", { disabled: page.next_before === null, onclick: () => { stack.push(before); before = page.next_before; load().catch((e) => fail(where, e)); } }, "Older →");
    const newer = el("button", { disabled: stack.length === 0, onclick: () => { before = stack.pop(); load().catch((e) => fail(where, e)); } }, "← Newer");
    put(where,
      el("div", { class: "pager" }, newer, older,
        el("span", { class: "muted", id: "timeline-range" }, page.total ? `rounds ${first}–${last} of ${page.total}, newest first` : "no rounds yet")),
      el("div", { class: "strip", title: "this page's rounds, oldest left" },
        [...page.cycles].reverse().map((r) => el("span", { class: `s-${slug(r.status)}`, title: `window ${r.window} try ${r.attempt}: ${r.status}` }))),
      legend(), roundsTable(page.cycles, "timeline", job));
  }
  await load();
}

// -- actions ------------------------------------------------------------------------------
function confirmDialog(title, text, job, button, run) {
  const input = el("input", { id: "confirm-input", placeholder: job, autocomplete: "off" });
  const go = el("button", { class: "danger", id: "confirm-go", disabled: true }, button);
  const msg = el("div", { class: "error small" });
  const dlg = el("dialog", { id: "confirm" }, el("h3", {}, title), el("p", {}, text),
    el("p", { class: "small muted" }, "Type the job's name to confirm: ", el("b", {}, job)), input, msg,
    el("div", { class: "row" }, el("button", { onclick: () => dlg.close() }, "Cancel"), go));
  input.addEventListener("input", () => { go.disabled = input.value !== job; });
  go.addEventListener("click", async () => {
    go.disabled = true;
    try {
      await run(input.value);
      dlg.close();
    } catch (err) {
      msg.textContent = String(err.message || err);
      go.disabled = false;
    }
  });
  dlg.addEventListener("close", () => dlg.remove());
  document.body.append(dlg);
  dlg.showModal();
  input.focus();
}

function actionsBar(job, checkpoints, done) {
  const act = (what, body) => api(`/jobs/${encodeURIComponent(job.name)}/${what}`, { method: "POST", body: JSON.stringify(body) });
  const pick = el("select", { id: "restore-window" }, checkpoints.map((c) => el("option", { value: c.window }, `window ${c.window} (ends ${time(c.window_end)})`)));
  return el("div", { class: "actions", id: "actions" },
    el("button", { id: "action-stop", onclick: () => confirmDialog("Stop (drain)", "The running window finishes and is checkpointed, then the job stops.", job.name, "Stop",
      (c) => act("stop", { confirm: c, drain: true }).then(done)) }, "Stop (drain)"),
    el("button", { id: "action-cancel", onclick: () => confirmDialog("Stop (cancel)", "The running window is abandoned (it will run again); the job stops.", job.name, "Cancel job",
      (c) => act("stop", { confirm: c, drain: false }).then(done)) }, "Stop (cancel)"),
    el("span", { class: "muted" }, " | "), pick,
    el("button", { id: "action-restore", disabled: checkpoints.length === 0, onclick: () => confirmDialog(`Restore to window ${pick.value}`,
      `Checkpoints after window ${pick.value} are rolled back and the sink output of later windows is retracted; the next run resumes at window ${Number(pick.value) + 1}.`,
      job.name, "Restore", (c) => act("restore", { confirm: c, window: Number(pick.value) }).then(done)) }, "Restore to window"),
    el("button", { id: "action-restart", disabled: job.last_window === null, onclick: () => confirmDialog("Restart without state",
      `What is committed stays; the keyed state is dropped. The next run resumes at window ${job.last_window + 1} with empty state.`,
      job.name, "Restart without state", (c) => act("restart", { confirm: c }).then(done)) }, "Restart without state"));
}

// -- one job ------------------------------------------------------------------------------
async function jobPage() {
  const name = D.job;
  const enc = encodeURIComponent(name);
  const timelinePane = el("div", { id: "pane-timeline" });
  const firstPage = timeline(timelinePane, name).catch((e) => fail(timelinePane, e));  // loads beside the rest
  const [job, plan, { checkpoints, total: checkpointCount }, { transitions }] = await Promise.all([
    api(`/jobs/${enc}`), api(`/jobs/${enc}/plan`).catch((e) => ({ error: e })),
    api(`/jobs/${enc}/checkpoints`), api(`/jobs/${enc}/transitions`)]);
  const notice = el("div", { id: "notice" });
  const reload = (info) => { sessionStorage.setItem("lockgate-notice", `${info.action} by ${info.by}: job is ${info.job.state}`); location.reload(); };
  const saved = sessionStorage.getItem("lockgate-notice");
  if (saved) { sessionStorage.removeItem("lockgate-notice"); notice.append(el("div", { class: "banner ok" }, saved)); }
  const panes = {
    Timeline: timelinePane,
    Plan: el("div", { id: "pane-plan" }),
    Checkpoints: el("div", { id: "pane-checkpoints" }),
    Transitions: el("div", { id: "pane-transitions" }),
  };
  const tabs = el("div", { class: "tabs" });
  for (const [label, pane] of Object.entries(panes)) {
    tabs.append(el("button", { "data-tab": label, class: label === "Timeline" ? "on" : null, onclick: (ev) => {
      for (const b of tabs.children) b.classList.toggle("on", b === ev.currentTarget);
      for (const p of Object.values(panes)) p.hidden = p !== pane;
    } }, label));
    pane.hidden = label !== "Timeline";
  }
  if (plan.error) fail(panes.Plan, plan.error);
  else panes.Plan.append(el("h2", {}, `Logical plan (PipelineGraph) · version ${plan.plan_version}`), logicalGraph(plan.logical),
    el("h2", {}, "Physical plan (ExecutionGraph): what runs, in this order"), physicalPlan(plan.physical));
  panes.Checkpoints.append(el("table", { id: "checkpoints" },
    el("thead", {}, el("tr", {}, ["Window", "Window end", "Status", "Plan version", "Size", "Rows in", "Rows out", "Created"].map((h, i) => el("th", { class: i >= 4 && i <= 6 ? "num" : null }, h)))),
    el("tbody", {}, checkpoints.map((c) => el("tr", { "data-window": c.window },
      el("td", { class: "mono" }, c.window), el("td", {}, time(c.window_end)), el("td", {}, badge(c.status)),
      el("td", { class: "mono" }, c.plan_version || "—"), el("td", { class: "num" }, bytes(c.snapshot_bytes)),
      el("td", { class: "num" }, num(c.rows_in)), el("td", { class: "num" }, num(c.rows_out)), el("td", {}, time(c.created)))))));
  panes.Transitions.append(el("table", { id: "transitions" },
    el("thead", {}, el("tr", {}, ["At", "From", "To", "Reason"].map((h) => el("th", {}, h)))),
    el("tbody", {}, [...transitions].reverse().map((t) => el("tr", {},
      el("td", {}, time(t.at)), el("td", {}, t.from_state ? badge(t.from_state) : "—"), el("td", {}, badge(t.to_state)), el("td", {}, t.reason))))));
  put(app, 
    el("div", { class: "crumbs" }, el("a", { href: `${D.base}/ui/` }, "Lockgate jobs"), " / ", name),
    el("h1", {}, name, badge(job.state)),
    el("div", { class: "muted small" }, "pipeline ", el("span", { title: job.pipeline_ref }, job.pipeline_ref.split("/").pop()),
      ` · plan ${job.plan_version || "—"} · generation ${job.generation}`),
    notice,
    job.last_error ? el("div", { class: "banner" }, job.last_error) : null,
    el("div", { class: "stats" },
      [["last committed window", job.last_window ?? "—"], ["its end", time(job.last_window_end)], ["lag", dur(job.lag_s)],
        ["rows/s (recent rounds)", num(job.rows_per_s)], ["rounds", num(job.cycles)], ["checkpoints", num(checkpointCount)]]
        .map(([k, v]) => el("div", { class: "stat" }, el("b", {}, v), el("span", {}, k)))),
    job.can_edit ? actionsBar(job, checkpoints.filter((c) => c.status === "COMPLETE"), reload)
      : el("p", { class: "muted small" }, "Actions need edit permission on DAGs."),
    tabs, ...Object.values(panes));
  await firstPage;
}

// -- one task instance --------------------------------------------------------------------
async function taskPage() {
  const mi = D.mapIndex === undefined ? "-1" : D.mapIndex;
  const t = await api(`/task-instances/${encodeURIComponent(D.dagId)}/${encodeURIComponent(D.runId)}/${encodeURIComponent(D.taskId)}?map_index=${encodeURIComponent(mi)}`);
  const tries = t.tries.map((tr, i) => {
    const prev = t.tries[i - 1];
    const story = [];
    if (tr.first_window !== null) {
      story.push(prev && prev.failed_window !== null ? `resumed at window ${tr.first_window}` : `started at window ${tr.first_window}`);
    }
    if (tr.last_committed !== null) story.push(`committed up to window ${tr.last_committed}`);
    if (tr.failed_window !== null) story.push(`stopped at window ${tr.failed_window}: it failed`);
    if (!tr.rounds.length) story.push("ran no window");
    return el("div", { class: `card try t-${slug(tr.state)}`, "data-try": tr.try_number },
      el("div", {}, el("b", {}, `Try ${tr.try_number} `), badge(tr.state),
        el("span", { class: "muted small" }, ` ${time(tr.start_date)} → ${time(tr.end_date)}`)),
      el("p", { class: "story" }, story.join("; ")),
      tr.failed_error ? el("div", { class: "error small" }, tr.failed_error) : null,
      tr.rounds.length ? roundsTable(tr.rounds, `rounds-${tr.try_number}`, t.job) : null);
  });
  put(app, 
    el("h1", {}, `Lockgate windows of ${t.task_id}`),
    el("div", { class: "muted small" }, `${t.dag_id} · ${t.run_id}`, t.job ? " · job " : "", t.job ? el("a", { href: `${D.nav}${jobHref(t.job)}`, target: "_top" }, t.job) : null),
    t.message ? el("p", { class: "muted" }, t.message) : null,
    tries.length ? legend() : null, ...tries);
}

const pages = { jobs: jobsPage, job: jobPage, task: taskPage };
(pages[D.kind] || jobsPage)().catch((err) => fail(app, err));
