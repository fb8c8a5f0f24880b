// Pegasus dashboard: plain JavaScript over the daemon's HTTP API (docs/api.md).
// Every view is rebuilt from the API; the live event stream only says when
// to fetch again. No framework, no build step, no third-party request.
"use strict";

const STATES = ["idle", "reasoning", "acting", "suspended", "completed", "failed"];
const TOKEN_KEY = "pegasus.token";
const ADMIN_KEY = "pegasus.admin-token"; // the broker's, when it differs
const main = document.getElementById("main");
const liveEl = document.getElementById("live");

// ---- DOM helpers: text is always set as text, never parsed as HTML.

function h(tag, attrs, ...kids) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (k === "class") el.className = v;
    else el.setAttribute(k, v === true ? "" : v);
  }
  for (const k of kids.flat()) {
    if (k === undefined || k === null || k === false) continue;
    el.append(k instanceof Node ? k : String(k));
  }
  return el;
}
// set replaces el's children, skipping null, undefined and false (the
// DOM's replaceChildren would write them out as text).
function set(el, ...kids) {
  el.replaceChildren(...kids.flat(Infinity).filter(k => k !== undefined && k !== null && k !== false));
}
const svgNS = "http://www.w3.org/2000/svg";
function s(tag, attrs, ...kids) {
  const el = document.createElementNS(svgNS, tag);
  for (const [k, v] of Object.entries(attrs || {})) el.setAttribute(k, v);
  for (const k of kids) el.append(k instanceof Node ? k : String(k));
  return el;
}
function stateBadge(st) { return h("span", { class: "state " + st, "data-state": st }, st || "none"); }
function fmtTime(t) {
  if (!t || t.startsWith("0001")) return "—";
  const d = new Date(t);
  return d.toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z");
}
function fmtMs(ms) {
  if (ms === undefined || ms === null) return "—";
  if (ms < 1000) return ms + " ms";
  if (ms < 120000) return (ms / 1000).toFixed(1) + " s";
  return (ms / 60000).toFixed(1) + " min";
}
function ago(t) {
  const s = Math.max(0, (Date.now() - new Date(t).getTime()) / 1000);
  if (s < 60) return Math.floor(s) + "s ago";
  if (s < 3600) return Math.floor(s / 60) + "m ago";
  if (s < 86400) return Math.floor(s / 3600) + "h ago";
  return Math.floor(s / 86400) + "d ago";
}

// ---- the API, with the token kept in this tab's sessionStorage.

class APIError extends Error {
  constructor(status, code, message) { super(message); this.status = status; this.code = code; }
}

function authHeaders(extra) {
  const hd = Object.assign({}, extra || {});
  const tok = sessionStorage.getItem(TOKEN_KEY);
  if (tok) hd["Authorization"] = "Bearer " + tok;
  return hd;
}

let tokenWaiters = null;
// askToken shows the token dialog once, however many calls were refused.
// With key ADMIN_KEY it asks for the broker's admin token instead.
function askToken(message, key) {
  if (tokenWaiters) return tokenWaiters.promise;
  key = key || TOKEN_KEY;
  let resolve;
  const promise = new Promise(r => { resolve = r; });
  tokenWaiters = { promise };
  const dlg = document.getElementById("token-dialog");
  const input = document.getElementById("token-input");
  const admin = key === ADMIN_KEY;
  document.getElementById("token-title").textContent = admin ? "The broker needs its admin token" : "This daemon needs a token";
  document.getElementById("token-what").textContent = admin ? "the broker's admin token (--admin-token or PEGASUS_ADMIN_TOKEN)" : "the daemon's bearer token (--token or PEGASUS_TOKEN)";
  document.getElementById("token-error").textContent = message || "";
  input.value = "";
  const form = document.getElementById("token-form");
  const done = (ev) => {
    ev.preventDefault();
    const v = input.value.trim();
    if (!v) return;
    sessionStorage.setItem(key, v);
    form.removeEventListener("submit", done);
    dlg.close();
    document.getElementById("token-btn").hidden = false;
    tokenWaiters = null;
    resolve();
  };
  form.addEventListener("submit", done);
  if (!dlg.open) dlg.showModal();
  input.focus();
  return promise;
}

// refused handles a 401 for a call made with token sent (null: none): it
// asks for a token, unless another call stored a new one meanwhile.
async function refused(sent) {
  if (sessionStorage.getItem(TOKEN_KEY) !== sent) return;
  sessionStorage.removeItem(TOKEN_KEY);
  await askToken(sent ? "That token was refused. Try again." : "");
}

async function api(method, path, body) {
  for (;;) {
    const opts = { method, headers: authHeaders(body !== undefined ? { "Content-Type": "application/json" } : {}) };
    if (body !== undefined) opts.body = JSON.stringify(body);
    const sent = sessionStorage.getItem(TOKEN_KEY);
    const res = await fetch(path, opts);
    if (res.status === 401) {
      await refused(sent);
      continue;
    }
    return answer(res);
  }
}

// answer returns a response's JSON, or throws the API's error.
async function answer(res) {
  const data = await res.json().catch(() => null);
  if (!res.ok) {
    const e = (data && data.error) || {};
    throw new APIError(res.status, e.code || "http_" + res.status, e.message || res.statusText);
  }
  return data;
}

// brokerAPI calls the broker's /api/v1 as the agent "dashboard", with the
// admin token if one was given, else the daemon's. A 401 from an admin
// route asks for the admin token once; from the daemon, for its token.
async function brokerAPI(method, path, body) {
  for (;;) {
    const hd = { "X-Agent-ID": "dashboard" };
    if (body !== undefined) hd["Content-Type"] = "application/json";
    const sentAdmin = sessionStorage.getItem(ADMIN_KEY), sentToken = sessionStorage.getItem(TOKEN_KEY);
    const sent = sentAdmin || sentToken;
    if (sent) hd["Authorization"] = "Bearer " + sent;
    const res = await fetch(path, { method, headers: hd, body: body !== undefined ? JSON.stringify(body) : undefined });
    if (res.status !== 401) return answer(res);
    const data = await res.json().catch(() => null);
    const msg = (data && data.error && data.error.message) || "";
    if (!msg.startsWith("an admin route")) {
      // The daemon's own check: an admin token it refuses cannot be the
      // daemon's token, and one header cannot carry both.
      if (sentAdmin) {
        if (sessionStorage.getItem(ADMIN_KEY) === sentAdmin) sessionStorage.removeItem(ADMIN_KEY);
        throw new APIError(401, "unauthorized", "the daemon refused the admin token: with --token set, --admin-token must be the same value");
      }
      await refused(sentToken);
      continue;
    }
    if ((sessionStorage.getItem(ADMIN_KEY) || sessionStorage.getItem(TOKEN_KEY)) !== sent) continue;
    const had = sessionStorage.getItem(ADMIN_KEY);
    sessionStorage.removeItem(ADMIN_KEY);
    await askToken(had ? "That admin token was refused. Try again." : "", ADMIN_KEY);
  }
}

// stream reads the daemon's Server-Sent Events with fetch (EventSource
// cannot send the Authorization header) and calls onEvent for each event
// with its data and its name (a task's stream also sends "delta" and
// "attempt_restarted" frames, without an id), reconnecting after the
// last event seen until signal aborts.
async function stream(path, after, onEvent, signal) {
  let last = after;
  while (!signal.aborted) {
    try {
      const sep = path.includes("?") ? "&" : "?";
      const sent = sessionStorage.getItem(TOKEN_KEY);
      const res = await fetch(path + sep + "after_seq=" + last, { headers: authHeaders(), signal });
      if (res.status === 401) {
        setLive(false);
        await refused(sent);
        continue;
      }
      if (!res.ok || !res.body) throw new Error("stream: " + res.status);
      setLive(true);
      const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
      let buf = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += value;
        let i;
        while ((i = buf.indexOf("\n\n")) >= 0) {
          const block = buf.slice(0, i);
          buf = buf.slice(i + 2);
          let data = "", id = null, name = "message";
          for (const line of block.split("\n")) {
            if (line.startsWith("data: ")) data += line.slice(6);
            else if (line.startsWith("id: ")) id = line.slice(4);
            else if (line.startsWith("event: ")) name = line.slice(7);
          }
          if (id !== null) last = Number(id);
          if (data) onEvent(JSON.parse(data), name);
        }
      }
    } catch (e) {
      if (signal.aborted) return;
    }
    setLive(false);
    await new Promise(r => setTimeout(r, 2000));
  }
}

function setLive(on) {
  liveEl.textContent = on ? "live" : "reconnecting…";
  liveEl.className = "live " + (on ? "on" : "off");
}

// debounce coalesces bursts of events into one refresh.
function debounce(fn, ms) {
  let t = null;
  return () => { clearTimeout(t); t = setTimeout(fn, ms); };
}

function showError(where, err) {
  set(where, h("p", { class: "error", role: "alert" }, err.code ? err.code + ": " + err.message : String(err.message || err)));
}

// ---- views. Each returns a cleanup function; the router calls it when
// the view changes.

const views = {};

views.overview = async function (signal) {
  document.title = "Overview · Pegasus";
  const counts = h("div", { class: "counts", id: "counts", "aria-label": "Tasks by state" });
  const recent = h("tbody");
  const charts = h("div", { class: "grid" });
  const submitErr = h("p", { class: "error", role: "alert", id: "submit-error" });
  const input = h("textarea", { id: "submit-input", name: "input", required: true, placeholder: "what time is it?", "aria-label": "Task input" });
  const typeSel = h("select", { id: "submit-type", "aria-label": "Task type" }, ["general", "explore", "plan"].map(t => h("option", { value: t }, t)));
  const prio = h("input", { id: "submit-priority", type: "number", value: "0", "aria-label": "Priority", min: -1000000, max: 1000000 });
  const form = h("form", { class: "card wide", id: "submit-form" },
    h("h2", {}, "Submit a task"),
    h("div", { class: "row" },
      h("div", { class: "field grow" }, h("label", { for: "submit-input" }, "Input"), input),
    ),
    h("div", { class: "row" },
      h("div", { class: "field" }, h("label", { for: "submit-type" }, "Type"), typeSel),
      h("div", { class: "field" }, h("label", { for: "submit-priority" }, "Priority (lower first)"), prio),
      h("button", { type: "submit", id: "submit-btn" }, "Submit")),
    submitErr);
  // The types to choose from are the daemon's (a configuration file adds
  // its own); the built-in three until it answers.
  api("GET", "/v1/task-types").then(r => {
    if (signal.aborted || !r.task_types.length) return;
    const was = typeSel.value;
    set(typeSel, r.task_types.map(y => h("option", { value: y.name, selected: y.name === was }, y.name)));
  }).catch(() => {});
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    submitErr.textContent = "";
    try {
      const r = await api("POST", "/v1/tasks", { input: input.value, type: typeSel.value, priority: Number(prio.value || 0), source: "dashboard" });
      input.value = "";
      location.hash = "#/tasks/" + r.task_id;
    } catch (e) { submitErr.textContent = e.code + ": " + e.message; }
  });
  set(main, 
    h("h1", {}, "Overview"),
    counts,
    charts,
    h("section", { class: "card wide", "aria-labelledby": "recent-h" },
      h("h2", { id: "recent-h" }, "Most recent tasks ", h("a", { href: "#/tasks", class: "muted" }, "(all tasks)")),
      h("div", { class: "tablewrap" }, h("table", { id: "recent" },
        h("thead", {}, h("tr", {}, h("th", {}, "Task"), h("th", {}, "State"), h("th", { class: "hide-narrow" }, "Type"),
          h("th", { class: "hide-narrow", title: "pegasus.task: lower is more urgent; dispatch.task: higher is more urgent" }, "Priority"),
          h("th", { class: "hide-narrow" }, "Created"), h("th", {}, "Input"))), recent))),
    h("div", { class: "grid" }, form));

  const seen = new Set();
  let first = true;
  async function refresh() {
    const [st, list, waiting] = await Promise.all([api("GET", "/v1/stats"), api("GET", "/v1/tasks?limit=15"),
      api("GET", "/v1/tasks?state=idle,reasoning,acting&order=asc&limit=200")]);
    if (signal.aborted) return st;
    // The oldest task waiting for an admission slot (among the 200 oldest
    // unfinished ones).
    const oldest = waiting.tasks.find(t => t.queued);
    renderCounts(counts, st);
    renderCharts(charts, st, oldest);
    set(recent, ...list.tasks.map(t => {
      const tr = taskRow(t);
      if (!first && !seen.has(t.task_id)) tr.classList.add("new");
      seen.add(t.task_id);
      return tr;
    }));
    if (list.tasks.length === 0) recent.append(h("tr", {}, h("td", { colspan: 6, class: "muted" }, "No tasks yet: submit one below.")));
    first = false;
    return st;
  }
  try {
    const st = await refresh();
    const again = debounce(() => refresh().catch(() => {}), 250);
    stream("/v1/events/stream", st.log.head, () => again(), signal);
  } catch (e) { showError(main, e); }
};

function renderCounts(el, st) {
  const t = st.tasks;
  const cell = (label, n, state, href) => h("a", { class: "count", "data-state": state || "", href: href || "#/tasks" + (state ? "?state=" + state : "") },
    h("span", { class: "n", "data-count": state || label }, n), h("span", { class: "l" }, label));
  set(el, 
    cell("all tasks", t.tasks, ""),
    ...STATES.map(s => cell(s, (t.by_state && t.by_state[s]) || 0, s)));
}

function renderCharts(el, st, oldest) {
  const t = st.tasks, rt = st.runtime, lg = st.log;
  // Throughput: tasks created, completed and failed per minute.
  const mins = t.per_minute || [];
  const W = 600, H = 150, pad = 22;
  const max = Math.max(1, ...mins.map(m => Math.max(m.created, m.completed + m.failed)));
  const svg = s("svg", { viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": "Tasks per minute" });
  svg.append(s("line", { class: "axis", x1: pad, y1: H - pad, x2: W, y2: H - pad }));
  const n = Math.max(mins.length, 10), bw = (W - pad) / n;
  mins.forEach((m, i) => {
    const x = pad + i * bw, y0 = H - pad, sc = (H - 2 * pad) / max;
    svg.append(s("rect", { class: "created", x: x + 1, width: Math.max(1, bw / 2 - 2), y: y0 - m.created * sc, height: m.created * sc },
      s("title", {}, `${fmtTime(m.time)}: ${m.created} created`)));
    svg.append(s("rect", { class: "completed", x: x + bw / 2, width: Math.max(1, bw / 2 - 2), y: y0 - m.completed * sc, height: m.completed * sc },
      s("title", {}, `${m.completed} completed`)));
    svg.append(s("rect", { class: "failed", x: x + bw / 2, width: Math.max(1, bw / 2 - 2), y: y0 - (m.completed + m.failed) * sc, height: m.failed * sc },
      s("title", {}, `${m.failed} failed`)));
  });
  svg.append(s("text", { x: 0, y: pad }, max), s("text", { x: 0, y: H - pad }, "0"));
  if (mins.length) svg.append(s("text", { x: pad, y: H - 6 }, fmtTime(mins[0].time).slice(11, 16)),
    s("text", { x: W - 40, y: H - 6 }, fmtTime(mins[mins.length - 1].time).slice(11, 16)));
  const thr = h("section", { class: "card", "aria-labelledby": "thr-h" },
    h("h2", { id: "thr-h" }, "Throughput (per minute, UTC)"), h("div", { class: "chart" }, svg),
    h("div", { class: "legend" }, h("span", { class: "created" }, "created"), h("span", { class: "completed" }, "completed"), h("span", { class: "failed" }, "failed")));

  const d = t.duration_ms || {}, cd = t.completed_duration_ms || {}, fd = t.failed_duration_ms || {};
  const lat = h("section", { class: "card", "aria-labelledby": "lat-h" }, h("h2", { id: "lat-h" }, "Task duration (input to end)"),
    h("div", { class: "tablewrap" }, h("table", {}, h("thead", {}, h("tr", {}, h("th", {}, "outcome"), h("th", {}, "tasks"), h("th", {}, "p50"), h("th", {}, "p90"), h("th", {}, "p99"), h("th", {}, "max"))),
      h("tbody", {}, [["all", d], ["completed", cd], ["failed", fd]].map(([k, r]) =>
        h("tr", {}, h("th", {}, k), h("td", { class: "num" }, r.count || 0), ...[r.p50, r.p90, r.p99, r.max].map(v => h("td", { class: "num" }, r.count ? fmtMs(v) : "—"))))))));

  const reasons = t.top_failure_reasons || [];
  const fail = h("section", { class: "card", "aria-labelledby": "fail-h" }, h("h2", { id: "fail-h" }, "Failure reasons"),
    reasons.length ? h("table", {}, h("tbody", {}, reasons.map(r => h("tr", {}, h("td", { class: "mono" }, r.reason), h("td", {}, r.count)))))
      : h("p", { class: "muted" }, "No task has failed."));

  const slot = (label, used, total) => h("div", { class: "field" },
    h("span", {}, `${label}: ${used} of ${total}`),
    h("div", { class: "bar", role: "meter", "aria-valuenow": used, "aria-valuemin": 0, "aria-valuemax": total, "aria-label": label },
      (() => { const b = h("span"); b.style.width = (total ? Math.min(100, 100 * used / total) : 0) + "%"; return b; })()));
  const runtime = h("section", { class: "card", "aria-labelledby": "rt-h" }, h("h2", { id: "rt-h" }, "Runtime"),
    slot("active tasks", rt.active_slots, rt.max_active_tasks),
    rt.max_llm !== undefined ? slot("model calls", rt.llm_in_use, rt.max_llm) : h("p", {}, `model calls running: ${rt.llm_in_use}`),
    rt.max_tools !== undefined ? slot("tool calls", rt.tools_in_use, rt.max_tools) : h("p", {}, `tool calls running: ${rt.tools_in_use}`),
    h("dl", { class: "kv" },
      h("dt", {}, "queue depth"), h("dd", { id: "queue-depth" }, rt.queued),
      h("dt", {}, "oldest waiting"), h("dd", {}, oldest ? h("a", { href: "#/tasks/" + oldest.task_id }, ago(oldest.created_at).replace(" ago", "")) : "—"),
      h("dt", {}, "log head"), h("dd", {}, lg.head),
      h("dt", {}, "fold lag"), h("dd", {}, `${lg.head - lg.folded} events`),
      h("dt", {}, "refused events"), h("dd", {}, lg.refused),
      h("dt", {}, "model"), h("dd", { class: "mono" }, st.model)));
  // Tasks created by machine (NAME@VERSION), type and source, each a link
  // to the task list filtered by it ("(other)" counts the keys beyond the
  // stats' bound and has no filter; "(none)" the tasks without one, a
  // Dispatch task's type, which no filter selects either).
  const table = (title, m, filter) => h("section", { class: "card", id: "by-" + filter }, h("h2", {}, title),
    Object.keys(m || {}).length ? h("table", {}, h("tbody", {}, Object.entries(m).sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : 1)).slice(0, 10)
      .map(([k, n]) => h("tr", {}, h("td", { class: "mono" }, k === "(other)" ? k : k === "" ? h("span", { class: "muted" }, "(none)") : h("a", { href: `#/tasks?${filter}=${encodeURIComponent(k)}` }, k)),
        h("td", { class: "num", "data-key": k }, n))))) : h("p", { class: "muted" }, "none yet"));
  set(el, thr, lat, fail, runtime, rateLimitsCard(st.rate_limits), spendCard(st.spend), table("Tasks by machine", t.by_machine, "machine"),
    table("Tasks by type", t.by_type, "type"), table("Tasks by source", t.by_source, "source"));
}

// rateLimitsCard shows each rate-limited model's calls waiting and the
// requests and tokens of its current minute (docs/limits.md); nothing
// when no model has a limit.
function rateLimitsCard(rates) {
  if (!rates || !rates.length) return null;
  const of = (n, lim) => lim ? `${n} of ${lim}` : `${n}`;
  return h("section", { class: "card", id: "rate-limits", "aria-labelledby": "rl-h" }, h("h2", { id: "rl-h" }, "Model rate limits (last minute)"),
    h("div", { class: "tablewrap" }, h("table", {},
      h("thead", {}, h("tr", {}, h("th", {}, "model"), h("th", {}, "waiting calls"), h("th", {}, "requests"), h("th", {}, "tokens"))),
      h("tbody", {}, rates.map(r => h("tr", { "data-model": r.model }, h("th", { class: "mono" }, r.model),
        h("td", { class: "num" }, r.waiting), h("td", { class: "num" }, of(r.requests, r.requests_per_minute)),
        h("td", { class: "num" }, of(r.tokens, r.tokens_per_minute))))))));
}

// spendCard shows what model calls used and cost (the spend projection;
// docs/limits.md): by model, and by concurrency key on the last day with
// spend. Nothing before the first model call.
function spendCard(sp) {
  if (!sp || !sp.total || !sp.total.calls) return null;
  const money = c => "$" + (c || 0).toFixed(4);
  const rows = m => Object.entries(m || {}).sort((a, b) => b[1].cost - a[1].cost || b[1].tokens - a[1].tokens).slice(0, 10)
    .map(([k, v]) => h("tr", { "data-key": k }, h("th", { class: "mono" }, k === "" ? h("span", { class: "muted" }, "(none)") : k),
      h("td", { class: "num" }, v.tokens), h("td", { class: "num" }, money(v.cost))));
  const part = (title, m) => h("div", { class: "tablewrap" }, h("table", {}, h("caption", {}, title),
    h("thead", {}, h("tr", {}, h("th", {}, "name"), h("th", {}, "tokens"), h("th", {}, "cost"))), h("tbody", {}, rows(m))));
  return h("section", { class: "card", id: "spend", "aria-labelledby": "sp-h" }, h("h2", { id: "sp-h" }, "Spend"),
    h("p", {}, `${sp.total.tokens} tokens, ${money(sp.total.cost)}, in ${sp.total.calls} model calls`),
    part("by model", sp.by_model), part("by key, last day", sp.by_key_last_day));
}

function taskRow(t) {
  return h("tr", { "data-id": t.task_id, "data-state": t.state },
    h("td", { class: "mono" }, h("a", { href: "#/tasks/" + t.task_id }, t.task_id)),
    h("td", {}, stateBadge(t.state), t.queued ? h("span", { class: "queued" }, " queued") : null),
    h("td", { class: "hide-narrow" }, t.type),
    h("td", { class: "hide-narrow num", title: t.machine }, String(t.priority)),
    h("td", { class: "hide-narrow", title: fmtTime(t.created_at) }, ago(t.created_at)),
    h("td", { class: "input", title: t.input }, t.input));
}

views.tasks = async function (signal, params) {
  document.title = "Tasks · Pegasus";
  const q = new URLSearchParams(params || "");
  const state = h("select", { id: "f-state", "aria-label": "State" }, h("option", { value: "" }, "any state"),
    STATES.map(s => h("option", { value: s, selected: q.get("state") === s }, s)));
  // The machines to choose from are those /v1/stats counts (filled in
  // below), and the one in the URL.
  const machine = h("select", { id: "f-machine", "aria-label": "Machine" }, h("option", { value: "" }, "any machine"),
    q.get("machine") ? h("option", { value: q.get("machine"), selected: true }, q.get("machine")) : null);
  const type = h("input", { id: "f-type", type: "text", placeholder: "general, plan…", value: q.get("type") || "" });
  const source = h("input", { id: "f-source", type: "text", placeholder: "api, cli, webhook:…", value: q.get("source") || "" });
  const text = h("input", { id: "f-text", type: "search", placeholder: "text in the input", value: q.get("q") || "" });
  const order = h("select", { id: "f-order", "aria-label": "Order" },
    [["desc", "newest first"], ["asc", "oldest first"], ["queue", "queue order (most urgent, then oldest)"]].map(([v, l]) =>
      h("option", { value: v, selected: (q.get("order") || "desc") === v }, l)));
  const body = h("tbody");
  const status = h("p", { class: "muted", id: "list-status" });
  const pager = h("div", { class: "pager" });
  const filters = h("form", { class: "filters card wide", role: "search" },
    h("div", { class: "field" }, h("label", { for: "f-state" }, "State"), state),
    h("div", { class: "field" }, h("label", { for: "f-machine" }, "Machine"), machine),
    h("div", { class: "field" }, h("label", { for: "f-type" }, "Type"), type),
    h("div", { class: "field" }, h("label", { for: "f-source" }, "Source"), source),
    h("div", { class: "field grow" }, h("label", { for: "f-text" }, "Search (press / to focus)"), text),
    h("div", { class: "field" }, h("label", { for: "f-order" }, "Order"), order),
    h("button", { type: "submit" }, "Apply"));
  filters.addEventListener("submit", (ev) => {
    ev.preventDefault();
    const p = new URLSearchParams();
    if (state.value) p.set("state", state.value);
    if (machine.value) p.set("machine", machine.value);
    if (type.value.trim()) p.set("type", type.value.trim());
    if (source.value.trim()) p.set("source", source.value.trim());
    if (text.value.trim()) p.set("q", text.value.trim());
    if (order.value !== "desc") p.set("order", order.value);
    if (q.get("limit")) p.set("limit", q.get("limit"));
    location.hash = "#/tasks" + (p.toString() ? "?" + p : "");
  });
  [state, machine, order].forEach(el => el.addEventListener("change", () => filters.requestSubmit()));
  set(main, h("h1", {}, "Tasks"), filters,
    h("section", { class: "card wide" }, h("div", { class: "tablewrap" }, h("table", { id: "tasks" },
      h("thead", {}, h("tr", {}, h("th", {}, "Task"), h("th", {}, "State"), h("th", { class: "hide-narrow" }, "Type"),
        h("th", { class: "hide-narrow", title: "pegasus.task: lower is more urgent; dispatch.task: higher is more urgent" }, "Priority"),
        h("th", { class: "hide-narrow" }, "Created"), h("th", {}, "Input"))), body)), status, pager));

  const cursors = [""];
  let page = 0;
  async function load() {
    const p = new URLSearchParams();
    for (const k of ["state", "machine", "type", "source", "q"]) if (q.get(k)) p.set(k, q.get(k));
    // The server pages in every order, queue order included (most urgent
    // first across machines, then oldest: docs/projections.md), so a page
    // is the next slice of the whole list, never a page sorted here.
    p.set("limit", /^[1-9][0-9]{0,2}$/.test(q.get("limit") || "") ? q.get("limit") : "50");
    p.set("order", q.get("order") === "asc" || q.get("order") === "queue" ? q.get("order") : "desc");
    if (cursors[page]) p.set("cursor", cursors[page]);
    const r = await api("GET", "/v1/tasks?" + p);
    if (signal.aborted) return;
    const ts = r.tasks;
    set(body, ...ts.map(taskRow));
    if (!ts.length) body.append(h("tr", {}, h("td", { colspan: 6, class: "muted" }, "No task matches.")));
    status.textContent = `${ts.length} task${ts.length === 1 ? "" : "s"} on this page`;
    cursors[page + 1] = r.next_cursor || "";
    set(pager, 
      h("button", { type: "button", class: "quiet", disabled: page === 0, onclick: () => { page--; load(); } }, "← Previous"),
      h("span", { class: "muted", id: "page-no" }, "page " + (page + 1)),
      h("button", { type: "button", class: "quiet", id: "next-page", disabled: !r.next_cursor, onclick: () => { page++; load(); } }, "Next →"));
  }
  try {
    await load();
    const st = await api("GET", "/v1/stats");
    for (const m of Object.keys(st.tasks.by_machine || {}).sort())
      if (m !== q.get("machine") && m !== "(other)") machine.append(h("option", { value: m }, m));
    const again = debounce(() => load().catch(() => {}), 400);
    stream("/v1/events/stream", st.log.head, () => again(), signal);
  } catch (e) { showError(main, e); }
};

views.task = async function (signal, params, id) {
  document.title = id.slice(-8) + " · Pegasus";
  const head = h("section", { class: "card wide", id: "task-head" });
  const actions = h("div", { class: "actions", id: "actions" });
  const actionErr = h("p", { class: "error", role: "alert", id: "action-error" });
  const plan = h("section", { class: "card", id: "plan", "aria-labelledby": "plan-h" });
  const hist = h("section", { class: "card", id: "history", "aria-labelledby": "hist-h" });
  const timeline = h("section", { class: "card wide", id: "timeline-card", "aria-labelledby": "tl-h" });
  const tree = h("section", { class: "card wide", id: "tree-card", "aria-labelledby": "tree-h" });
  const at = h("section", { class: "card wide", id: "at-card", "aria-labelledby": "at-h" });
  const fall = h("section", { class: "card wide", id: "waterfall-card", "aria-labelledby": "wf-h" });
  const live = liveCard();
  set(main, h("h1", {}, "Task ", h("span", { class: "mono" }, id)), head, live.el,
    h("div", { class: "grid" }, plan, hist), fall, at, timeline, tree);

  let events = [];
  let atIndex = null; // the slider's position; null: follow the head
  async function refresh() {
    const [t, ev, prog, why, trace] = await Promise.all([
      api("GET", "/v1/tasks/" + id), api("GET", "/v1/tasks/" + id + "/events?limit=10000"),
      api("GET", "/v1/tasks/" + id + "/progress").catch(() => null), api("GET", "/v1/tasks/" + id + "/why?max_nodes=500"),
      api("GET", "/v1/tasks/" + id + "/trace").catch(() => null)]);
    if (signal.aborted) return null;
    events = ev.events;
    renderHead(head, actions, actionErr, t, events);
    renderPlan(plan, t, prog);
    renderHistory(hist, t);
    renderTimeline(timeline, events);
    renderTree(tree, why, id);
    renderWaterfall(fall, trace);
    renderAt(at, events);
    return t;
  }

  function renderAt(el, evs) {
    if (!evs.length) return;
    const max = evs.length;
    const pos = atIndex === null ? max : Math.min(atIndex, max);
    let out = el.querySelector("#at-state");
    let slider = el.querySelector("#at-slider");
    if (!slider) {
      slider = h("input", { id: "at-slider", class: "slider", type: "range", min: 1, max, value: pos, step: 1,
        "aria-label": "Fold the task up to this event" });
      out = h("div", { id: "at-state", class: "at", "aria-live": "polite" });
      const label = h("p", { id: "at-label" });
      set(el, h("h2", { id: "at-h" }, "State at…"),
        h("p", { class: "muted" }, "Drag (or use the arrow keys) to fold the task's events up to any one of them, as ",
          h("code", {}, "pegasus-replay state --at"), " does."), slider, label, out);
      const show = debounce(async () => {
        const i = Number(slider.value);
        atIndex = i === events.length ? null : i;
        const e = events[i - 1];
        label.textContent = `event ${i} of ${events.length}: ${e.type} (seq ${e.seq}, ${fmtTime(e.time)})`;
        try {
          const r = await api("GET", `/v1/tasks/${id}/state?at=${e.seq}`);
          renderAtState(out, r);
        } catch (err) { showError(out, err); }
      }, 120);
      slider.addEventListener("input", show);
      show();
    } else {
      slider.max = max;
      if (atIndex === null) { slider.value = max; slider.dispatchEvent(new Event("input")); }
    }
  }

  function renderAtState(el, r) {
    const t = r.task;
    const steps = (t.plan && t.plan.steps) || [];
    set(el, h("dl", { class: "kv" },
      h("dt", {}, "at"), h("dd", {}, r.at),
      h("dt", {}, "state"), h("dd", { id: "at-state-value" }, stateBadge(t.state)),
      h("dt", {}, "iteration"), h("dd", {}, t.iteration),
      h("dt", {}, "version"), h("dd", {}, t.version),
      h("dt", {}, "plan"), h("dd", {}, steps.length ? steps.map(s => (s.completed ? "✓ " : "· ") + s.description).join("; ") : "—"),
      t.result ? [h("dt", {}, "result"), h("dd", {}, t.result)] : null,
      t.error ? [h("dt", {}, "error"), h("dd", {}, t.error)] : null));
  }

  async function act(path, body) {
    actionErr.textContent = "";
    try { await api("POST", `/v1/tasks/${id}/${path}`, body); await refresh(); }
    catch (e) { actionErr.textContent = e.code + ": " + e.message; }
  }

  function renderHead(el, actionsEl, errEl, t, evs) {
    const created = evs.find(e => e.type === "TASK_CREATED");
    const m = created && created.data && created.data.machine;
    // NAME@VERSION, the one spelling of the API, the logs and the CLIs.
    const machine = t.machine || (m && m.name ? `${m.name}@${m.version}` : (created ? "pegasus.task (current)" : "— (not started)"));
    const running = t.state === "reasoning" || t.state === "acting";
    const finished = t.state === "completed" || t.state === "failed";
    const answer = h("form", { class: "inline", id: "answer-form" },
      h("div", { class: "field grow" }, h("label", { for: "answer-text" }, "Answer"),
        h("input", { id: "answer-text", type: "text", required: true, placeholder: "your answer to the task's question" })),
      h("button", { type: "submit" }, "Send answer"));
    answer.addEventListener("submit", (ev) => { ev.preventDefault(); act("messages", { text: answer.querySelector("input").value, source: "dashboard" }); });
    set(actionsEl, 
      running ? h("button", { type: "button", class: "quiet", id: "suspend-btn", onclick: () => act("suspend", { reason: "from the dashboard" }) }, "Suspend") : null,
      t.state === "suspended" ? h("button", { type: "button", class: "quiet", id: "resume-btn", onclick: () => act("resume", { reason: "from the dashboard" }) }, "Resume") : null,
      !finished ? h("button", { type: "button", class: "danger", id: "cancel-btn", onclick: (ev) => {
        // Two steps instead of confirm(): the second press cancels.
        const b = ev.currentTarget;
        if (b.dataset.armed) act("cancel", { reason: "cancelled from the dashboard" });
        else { b.dataset.armed = "1"; b.textContent = "Press again to cancel the task"; }
      } }, "Cancel") : null);
    set(el, 
      h("div", { class: "row" }, h("span", { id: "task-state" }, stateBadge(t.state)), t.queued ? h("span", { class: "queued" }, "waiting for a slot") : null),
      h("dl", { class: "kv" },
        h("dt", {}, "input"), h("dd", {}, t.input || "(empty)"),
        h("dt", {}, "machine"), h("dd", { class: "mono", id: "task-machine" }, machine),
        h("dt", {}, "type"), h("dd", {}, t.type),
        h("dt", {}, "priority"), h("dd", {}, t.priority),
        h("dt", {}, "source"), h("dd", {}, t.source),
        h("dt", {}, "created"), h("dd", {}, fmtTime(t.created_at)),
        h("dt", {}, "updated"), h("dd", {}, fmtTime(t.updated_at)),
        h("dt", {}, "iteration"), h("dd", {}, t.iteration),
        h("dt", {}, "events"), h("dd", {}, t.version)),
      t.question ? h("div", {}, h("h2", {}, "Question"), h("p", { class: "result", id: "task-question" }, t.question)) : null,
      t.result ? h("div", {}, h("h2", {}, "Result"), h("p", { class: "result", id: "task-result" }, t.result)) : null,
      t.error ? h("div", {}, h("h2", {}, "Error"), h("p", { class: "result error", id: "task-error" }, t.error)) : null,
      actionsEl, t.state === "suspended" ? answer : null, errEl);
  }

  try {
    const t = await refresh();
    if (!t) return;
    const st = await api("GET", "/v1/stats");
    const again = debounce(() => refresh().catch(() => {}), 150);
    stream(`/v1/tasks/${encodeURIComponent(id)}/stream`, st.log.head, (d, name) => {
      if (live.frame(d, name)) return;
      again();
    }, signal);
  } catch (e) {
    showError(main, e);
  }
};

// liveCard shows the text of the task's model call in progress as the
// model streams it (the task stream's "delta" frames), and says so when
// an attempt failed and the model starts over ("attempt_restarted").
// Once the call's outcome is in the log, the card hides: its text is in
// the timeline (MODEL_CALLED) and, for an answer, in the result.
function liveCard() {
  const text = h("p", { class: "result", id: "live-text" });
  const note = h("p", { class: "muted", id: "live-note" });
  const el = h("section", { class: "card wide", id: "live-card", "aria-labelledby": "live-h", hidden: true },
    h("h2", { id: "live-h" }, "Model output (live)"), note, text);
  let call = null;
  return {
    el,
    // frame takes a frame of the stream; false: a committed event.
    frame(d, name) {
      if (name === "delta" || name === "attempt_restarted") {
        if (d.call !== call) { call = d.call; text.textContent = ""; note.textContent = ""; }
        if (name === "attempt_restarted") {
          text.textContent = "";
          note.textContent = `Attempt ${d.attempt - 1} failed${d.error ? " (" + d.error + ")" : ""}; attempt ${d.attempt} starts over.`;
        } else {
          text.textContent += d.text;
        }
        el.hidden = false;
        return true;
      }
      if (d.type === "MODEL_CALLED" && d.causation === call && !(d.data && d.data.error)) {
        el.hidden = true;
        call = null;
      }
      return false;
    },
  };
}

function renderPlan(el, t, prog) {
  const steps = (t.plan && t.plan.steps) || [];
  let next = steps.findIndex(s => !s.completed);
  set(el, h("h2", { id: "plan-h" }, "Plan"),
    t.plan && t.plan.goal ? h("p", {}, h("span", { class: "muted" }, "goal: "), t.plan.goal) : null,
    steps.length ? h("ol", { class: "steps" }, steps.map((s, i) => h("li", { class: s.completed ? "done" : i === next ? "next" : "todo" },
      s.description, s.action_type ? h("span", { class: "muted" }, ` (${s.action_type})`) : null)))
      : h("p", { class: "muted" }, "No plan yet."),
    prog && prog.awaiting_tool ? h("p", { id: "awaiting" }, "Waiting for tool ", h("code", {}, prog.awaiting_tool.tool || JSON.stringify(prog.awaiting_tool))) : null,
    prog ? h("dl", { class: "kv" },
      h("dt", {}, "steps done"), h("dd", {}, `${prog.step_count} (${prog.failed_steps} failed)`),
      h("dt", {}, "tools used"), h("dd", {}, (prog.tools_used || []).join(", ") || "none")) : null);
}

function renderHistory(el, t) {
  const hs = t.history || [];
  set(el, h("h2", { id: "hist-h" }, "Transitions"),
    hs.length ? h("div", { class: "tablewrap" }, h("table", {}, h("thead", {}, h("tr", {}, h("th", {}, "time"), h("th", {}, "from → to"), h("th", {}, "event"))),
      h("tbody", {}, hs.map(x => h("tr", {}, h("td", { class: "mono" }, fmtTime(x.timestamp).slice(11)),
        h("td", {}, stateBadge(x.from), " → ", stateBadge(x.to)), h("td", { class: "etype" }, x.event))))))
      : h("p", { class: "muted" }, "No transition yet: the task waits in idle."));
}

// eventSummary is an event's one-line summary (the API's, as the CLIs
// print it) and, for a tool call, where the tool ran when not built in,
// the broker task of a worker tool's call, an MCP task's handle and the
// types of a result's parts, as pegasus-replay show writes them.
function eventSummary(e) {
  let out = e.summary || "";
  const d = e.data;
  if (!/^TOOL_CALL_(STARTED|COMPLETED|FAILED)$/.test(e.type) || !d || typeof d !== "object") return out;
  const add = (k, v) => { if (v && !(e.summary || "").includes(k + "=")) out += (out ? " " : "") + k + "=" + v; };
  if (d.source !== "builtin") add("source", d.source);
  add("task", d.task);
  add("handle", d.handle);
  if (Array.isArray(d.parts) && d.parts.length) add("parts", d.parts.map(p => p.type).join(",") + (d.parts.some(p => p.truncated) ? "(truncated)" : ""));
  return out;
}

function renderTimeline(el, evs) {
  const open = new Set([...el.querySelectorAll("details[open]")].map(d => d.dataset.seq));
  set(el, h("h2", { id: "tl-h" }, `Event timeline (${evs.length})`),
    h("ol", { class: "timeline", id: "timeline" }, evs.map(e => h("li", { "data-type": e.type },
      h("details", { "data-seq": String(e.seq), open: open.has(String(e.seq)) },
        h("summary", {}, h("span", { class: "etype" }, e.type), " ",
          h("span", { class: "muted" }, `v${e.version} · seq ${e.seq} · ${fmtTime(e.time)}`),
          eventSummary(e) ? h("span", { class: "esum mono" }, eventSummary(e)) : null),
        h("dl", { class: "kv" }, h("dt", {}, "id"), h("dd", { class: "mono" }, e.id),
          h("dt", {}, "caused by"), h("dd", { class: "mono" }, e.causation || "— (external input)")),
        h("pre", {}, e.decode_error ? "body not decodable: " + e.decode_error : JSON.stringify(e.data, null, 2)))))));
}

function renderTree(el, why, taskID) {
  // As in pegasus-replay why: a single consequence continues at the same
  // indentation; several branch, one level deeper.
  const items = (n, cont) => {
    const li = h("li", { "data-type": n.type, class: cont ? "cont" : "" },
      h("span", { class: n.stream === taskID ? "" : "other" },
        h("span", { class: "etype" + (n.id === taskID ? " mark" : "") }, n.type),
        h("span", { class: "muted" }, ` seq ${n.seq}` + (n.stream !== taskID ? ` · on ${n.stream}` : ""))));
    const kids = n.children || [];
    if (kids.length === 1) return [li, ...items(kids[0], true)];
    if (kids.length > 1) li.append(h("ul", {}, kids.map(k => h("li", { class: "branch" }, h("ul", { class: "chain" }, items(k, false))))));
    return [li];
  };
  const chain = why.chain || [];
  set(el, h("h2", { id: "tree-h" }, "Why: causation"),
    h("p", {}, "Started by ", chain.length ? h("span", { class: "etype" }, chain[chain.length - 1].type) : "?",
      chain.length && chain[chain.length - 1].data && chain[chain.length - 1].data.source ? h("span", { class: "muted" }, ` from ${chain[chain.length - 1].data.source}`) : null,
      why.missing ? h("span", { class: "error" }, ` (cause ${why.missing} missing from the log)`) : null),
    h("p", { class: "muted" }, "Everything that followed from it; events on other streams (memory, …) are greyed."),
    why.tree ? h("ul", { class: "tree", id: "tree" }, items(why.tree, false)) : null,
    why.truncated ? h("p", { class: "muted" }, "… cut at 500 events.") : null);
}

// KIND_LABEL words a span's kind for the waterfall (colour only repeats it).
const KIND_LABEL = { task: "task", admission: "admission", model: "model call", attempt: "attempt", tool: "tool call",
  suspend: "waiting", worker: "broker task" };

// renderWaterfall draws the task's spans (GET /v1/tasks/{id}/trace, the
// same mapping the OTLP export sends) as a waterfall: one row a span,
// indented under its parent, its bar placed on the task's time line.
function renderWaterfall(el, trace) {
  const spans = (trace && trace.spans) || [];
  if (!spans.length) {
    set(el, h("h2", { id: "wf-h" }, "Where the time went"), h("p", { class: "muted" }, "No spans."));
    return;
  }
  // Milliseconds with the fraction the times carry (Date keeps whole ones).
  const ms = t => {
    const m = /\.(\d+)Z$/.exec(t);
    return Date.parse(t.replace(/\.\d+Z$/, "Z")) + (m ? Number("0." + m[1]) * 1000 : 0);
  };
  const t0 = Math.min(...spans.map(x => ms(x.start)));
  const t1 = Math.max(...spans.map(x => ms(x.end)));
  const total = Math.max(0.001, t1 - t0);
  const depth = {};
  const rows = spans.map(x => {
    const d = x.parent_span_id && depth[x.parent_span_id] !== undefined ? depth[x.parent_span_id] + 1 : 0;
    depth[x.span_id] = d;
    const bar = h("span", { class: "wf-bar" });
    bar.style.left = (100 * (ms(x.start) - t0) / total) + "%";
    bar.style.width = Math.max(0.3, 100 * (ms(x.end) - ms(x.start)) / total) + "%";
    const status = x.status === "error" ? "✗ " : x.open ? "▸ " : "";
    const what = `${status}${x.name} (${KIND_LABEL[x.kind] || x.kind}), ${fmtMs(Math.round(x.duration_ms))}` +
      ` from +${fmtMs(Math.round(ms(x.start) - t0))}` + (x.open ? ", still running" : "") +
      (x.status_message ? `: ${x.status_message}` : "");
    const label = h("span", { class: "wf-label", "aria-hidden": "true" }, h("span", { class: "wf-name" }, status + x.name),
      h("span", { class: "muted" }, " " + fmtMs(Math.round(x.duration_ms))));
    label.style.paddingLeft = (d * 14) + "px";
    return h("li", { class: "wf-row", "data-kind": x.kind, "data-status": x.status, "data-span": x.span_id, title: what },
      label, h("span", { class: "wf-track", "aria-hidden": "true" }, bar), h("span", { class: "sr-only" }, what));
  });
  set(el, h("h2", { id: "wf-h" }, "Where the time went"),
    h("p", { class: "muted" }, `${spans.length} spans over ${fmtMs(Math.round(total))}: admission, model calls and their attempts, ` +
      "tool calls, waits for a worker or a human, and the tasks this one caused. The same spans as the trace export."),
    h("div", { class: "legend wf-legend" }, Object.entries(KIND_LABEL).map(([k, v]) => h("span", { "data-kind": k }, v))),
    h("ol", { class: "waterfall", id: "waterfall" }, rows));
}

// views.broker: the Dispatch broker (docs/broker.md) through /api/v1:
// its stats, its workers, and the dead-letter queue with requeue of one
// task or of every task a filter selects.
views.broker = async function (signal, params) {
  document.title = "Broker · Pegasus";
  const q = new URLSearchParams(params || "");
  const counts = h("div", { class: "counts", id: "broker-counts", "aria-label": "Dispatch tasks by status" });
  const figures = h("dl", { class: "figures", id: "broker-figures" });
  const workers = h("tbody");
  const dlq = h("tbody");
  const dlqStatus = h("p", { class: "muted", id: "dlq-status" });
  const dlqErr = h("p", { class: "error", role: "alert", id: "dlq-error" });
  const ftext = h("input", { id: "dlq-error-text", type: "search", placeholder: "text in the error", value: q.get("error") || "" });
  const fcap = h("input", { id: "dlq-capability", type: "text", placeholder: "a capability", value: q.get("capability") || "" });
  const filter = () => {
    const f = {};
    if (ftext.value.trim()) f.error = ftext.value.trim();
    if (fcap.value.trim()) f.capability = fcap.value.trim();
    return f;
  };
  const requeueAll = h("button", { type: "button", id: "dlq-requeue-all" }, "Requeue all matching");
  const form = h("form", { class: "filters row", role: "search", id: "dlq-filter" },
    h("div", { class: "field" }, h("label", { for: "dlq-error-text" }, "Error contains"), ftext),
    h("div", { class: "field" }, h("label", { for: "dlq-capability" }, "Capability"), fcap),
    h("button", { type: "submit", class: "quiet", id: "dlq-filter-btn" }, "Filter"), requeueAll);
  set(main,
    h("h1", {}, "Broker"),
    counts,
    h("section", { class: "card wide", "aria-labelledby": "bstats-h" }, h("h2", { id: "bstats-h" }, "Queue"), figures),
    h("section", { class: "card wide", "aria-labelledby": "workers-h" },
      h("h2", { id: "workers-h" }, "Workers"),
      h("div", { class: "tablewrap" }, h("table", { id: "workers" },
        h("thead", {}, h("tr", {}, h("th", {}, "Worker"), h("th", {}, "Capabilities"), h("th", {}, "Load"),
          h("th", {}, "Last seen"), h("th", {}, "State"))), workers))),
    h("section", { class: "card wide", "aria-labelledby": "dlq-h" },
      h("h2", { id: "dlq-h" }, "Dead letters"), form, dlqErr, dlqStatus,
      h("div", { class: "tablewrap" }, h("table", { id: "dlq" },
        h("thead", {}, h("tr", {}, h("th", {}, "Task"), h("th", {}, "Title"), h("th", { class: "hide-narrow" }, "Capabilities"),
          h("th", {}, "Error"), h("th", { class: "hide-narrow" }, "Retries"), h("th", { class: "hide-narrow" }, "Dead since"), h("th", {}, h("span", { class: "sr-only" }, "Action")))), dlq))));

  const requeue = async (what, path, body) => {
    dlqErr.textContent = "";
    dlqStatus.textContent = "";
    try {
      const r = await brokerAPI("POST", path, body);
      dlqStatus.textContent = what(r);
      await refresh();
    } catch (e) { dlqErr.textContent = e.code + ": " + e.message; }
  };
  requeueAll.addEventListener("click", () => {
    const f = filter();
    requeue(r => "Requeued " + r.requeued + " task" + (r.requeued === 1 ? "" : "s") + ".", "/api/v1/dlq/requeue",
      Object.assign({ reason: "requeued from the dashboard" }, f));
  });
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    const f = new URLSearchParams(filter()).toString();
    location.hash = "#/broker" + (f ? "?" + f : "");
  });

  async function refresh() {
    const [st, ag, dl] = await Promise.all([brokerAPI("GET", "/api/v1/stats"), brokerAPI("GET", "/api/v1/agents"), brokerAPI("GET", "/api/v1/dlq")]);
    if (signal.aborted) return;
    const cell = (label, n, key) => h("div", { class: "count", "data-state": key },
      h("span", { class: "n", "data-count": key }, n), h("span", { class: "l" }, label));
    set(counts, cell("dispatch tasks", st.tasks, "all"),
      ...Object.entries(st.by_status).map(([k, n]) => cell(k.replace("_", " "), n, k)));
    const fig = (label, v, key) => [h("dt", {}, label), h("dd", { "data-figure": key }, v)];
    set(figures,
      fig("Queue depth (pending)", st.queue_depth, "queue_depth"),
      fig("Oldest queued", st.queue_depth ? fmtMs(Math.round(st.oldest_queued_seconds * 1000)) : "—", "oldest_queued"),
      fig("Retries", st.retries, "retries"),
      fig("Dead letters", st.dead_letters, "dead_letters"),
      fig("Requeues", st.requeues, "requeues"),
      fig("Time to assign p50 / p99", st.time_to_assign.n ? fmtMs(Math.round(st.time_to_assign.p50_ms)) + " / " + fmtMs(Math.round(st.time_to_assign.p99_ms)) : "—", "time_to_assign"),
      fig("Time to complete p50 / p99", st.time_to_complete.n ? fmtMs(Math.round(st.time_to_complete.p50_ms)) + " / " + fmtMs(Math.round(st.time_to_complete.p99_ms)) : "—", "time_to_complete"));
    set(workers, ...ag.agents.map(w => h("tr", { "data-id": w.id },
      h("td", {}, h("code", {}, w.id)),
      h("td", {}, w.capabilities.length ? w.capabilities.join(", ") : h("span", { class: "muted" }, "any task without requirements")),
      h("td", { "data-load": w.active_tasks.length + "/" + (w.max_tasks || 1) }, w.active_tasks.length + " / " + (w.max_tasks || 1)),
      h("td", {}, w.last_seen ? h("time", { datetime: w.last_seen, title: fmtTime(w.last_seen) }, ago(w.last_seen)) : "—"),
      h("td", {}, w.draining ? h("span", { class: "state suspended" }, "draining") : w.alive ? h("span", { class: "state completed" }, "alive") : h("span", { class: "state failed" }, "gone")))));
    if (!ag.agents.length) workers.append(h("tr", {}, h("td", { colspan: 5, class: "muted" }, "No worker has registered.")));
    const f = filter();
    const shown = dl.tasks.filter(t => (!f.error || (t.error || "").includes(f.error)) &&
      (!f.capability || t.required_capabilities.some(c => c.toLowerCase() === f.capability.toLowerCase())));
    set(dlq, ...shown.map(t => h("tr", { "data-id": t.task_id },
      h("td", {}, h("code", { title: t.task_id }, t.task_id.slice(-8))),
      h("td", {}, t.title),
      h("td", { class: "hide-narrow" }, t.required_capabilities.join(", ")),
      h("td", { class: "wrap" }, t.error || t.dead_letter_reason || ""),
      h("td", { class: "hide-narrow" }, t.retry_count + " / " + t.max_retries),
      h("td", { class: "hide-narrow" }, fmtTime(t.completed_at)),
      h("td", {}, h("button", { type: "button", class: "quiet", "data-requeue": t.task_id, onclick: (ev) => {
        const id = ev.currentTarget.dataset.requeue;
        requeue(() => "Requeued " + id + ".", "/api/v1/dlq/" + encodeURIComponent(id) + "/requeue", { reason: "requeued from the dashboard" });
      } }, "Requeue")))));
    if (!shown.length) dlq.append(h("tr", {}, h("td", { colspan: 7, class: "muted" }, dl.tasks.length ? "No dead letter matches." : "The dead-letter queue is empty.")));
    requeueAll.disabled = shown.length === 0;
  }
  try {
    const [head] = await Promise.all([api("GET", "/v1/stats").then(st => st.log.head), refresh()]);
    const again = debounce(() => refresh().catch(e => { dlqErr.textContent = e.code + ": " + e.message; }), 250);
    stream("/v1/events/stream", head, () => again(), signal);
  } catch (e) { showError(main, e); }
};

// views.tools: what the agent runs with (docs/dashboard.md): every tool
// and where it runs (built in, a Go tool of the program, an MCP server, a
// broker worker), with its argument schema and its MCP server's health;
// the MCP servers; the models with their probe at start and their calls;
// the task types with their version. It reads /v1/tools, /v1/models and
// /v1/task-types again after the log's events (a model call moves the
// counts) and every 10 seconds (a server's health is no event of the
// log).
const SOURCES = { builtin: "built-in", go: "Go", mcp: "MCP server", worker: "worker" };
const HEALTH = { ok: "completed", starting: "suspended", down: "failed" }; // the state badge's colour

function sourceText(t) {
  if (t.source === "mcp") return ["MCP server ", h("code", {}, t.server)];
  if (t.source === "worker") return ["worker capability ", h("code", {}, t.capability)];
  return SOURCES[t.source] || t.source;
}
function healthBadge(health, error) {
  if (!health) return h("span", { class: "muted" }, "—");
  return [h("span", { class: "state " + (HEALTH[health] || "idle"), "data-health": health }, health),
    error ? h("span", { class: "error health-error" }, " " + error) : null];
}
function list(xs, empty) {
  return xs && xs.length ? xs.flatMap((x, i) => i ? [", ", h("code", {}, x)] : [h("code", {}, x)]) : h("span", { class: "muted" }, empty);
}

views.tools = async function (signal) {
  document.title = "Tools · Pegasus";
  const tools = h("tbody"), servers = h("tbody"), models = h("tbody"), types = h("tbody");
  const status = h("p", { class: "muted", id: "tools-status" });
  const source = h("select", { id: "tools-source", "aria-label": "Source" }, h("option", { value: "" }, "any source"),
    Object.entries(SOURCES).map(([v, l]) => h("option", { value: v }, l)));
  const th = (text, cls) => h("th", { scope: "col", class: cls }, text);
  const section = (id, title, heads, body, extra) => h("section", { class: "card wide", "aria-labelledby": id + "-h" },
    h("h2", { id: id + "-h" }, title), extra,
    h("div", { class: "tablewrap" }, h("table", { id }, h("thead", {}, h("tr", {}, heads)), body)));
  set(main, h("h1", {}, "Tools"), status,
    section("tools", "Tools", [th("Tool"), th("Source"), th("Health"), th("Task types", "hide-narrow"), th("Arguments")], tools,
      h("div", { class: "filters row" }, h("div", { class: "field" }, h("label", { for: "tools-source" }, "Source"), source))),
    section("mcp-servers", "MCP servers", [th("Server"), th("Transport", "hide-narrow"), th("Health"), th("Tools"), th("Restarts", "hide-narrow")], servers),
    section("models", "Models", [th("Model"), th("API", "hide-narrow"), th("Probe at start"), th("Calls"), th("Errors")], models),
    section("task-types", "Task types", [th("Type"), th("Model"), th("Tools"), th("Max iterations", "hide-narrow"),
      th("Reflection", "hide-narrow"), th("Version")], types));

  let last = null;
  function render() {
    const [tl, ml, yl] = last;
    const shown = tl.tools.filter(t => !source.value || t.source === source.value);
    set(tools, ...shown.map(t => h("tr", { "data-tool": t.name, "data-source": t.source },
      h("td", {}, h("code", {}, t.name), t.description ? h("div", { class: "muted desc" }, t.description) : null),
      h("td", {}, sourceText(t)),
      h("td", {}, healthBadge(t.health, t.error)),
      h("td", { class: "hide-narrow" }, list(t.task_types, "none")),
      h("td", {}, h("details", {}, h("summary", {}, "schema"), h("pre", { class: "schema" }, JSON.stringify(t.parameters, null, 2)))))));
    if (!shown.length) tools.append(h("tr", {}, h("td", { colspan: 5, class: "muted" }, tl.tools.length ? "No tool of this source." : "The daemon reports no tool.")));

    // The MCP servers as the daemon lists them (a server that is down may
    // offer no tool), or else from their tools: each carries its server's
    // health.
    let svs = tl.servers || [];
    if (!svs.length) {
      const byServer = new Map();
      for (const t of tl.tools.filter(t => t.source === "mcp")) {
        const sv = byServer.get(t.server) || { name: t.server, health: t.health, error: t.error, tools: 0 };
        sv.tools++;
        byServer.set(t.server, sv);
      }
      svs = [...byServer.values()].sort((a, b) => a.name < b.name ? -1 : 1);
    }
    set(servers, ...svs.map(sv => h("tr", { "data-server": sv.name },
      h("td", {}, h("code", {}, sv.name)), h("td", { class: "hide-narrow" }, sv.transport || "—"),
      h("td", {}, healthBadge(sv.health, sv.error), sv.since ? h("div", { class: "muted" }, "since " + fmtTime(sv.since)) : null),
      h("td", { class: "num", "data-tools": sv.tools }, sv.tools),
      h("td", { class: "num hide-narrow" }, sv.restarts === undefined ? "—" : sv.restarts))));
    if (!svs.length) servers.append(h("tr", {}, h("td", { colspan: 5, class: "muted" }, "No MCP server (mcpServers in the configuration file).")));

    set(models, ...ml.models.map(m => h("tr", { "data-model": m.name },
      h("td", {}, h("code", {}, m.name), m.default ? h("span", { class: "muted" }, " (default)") : null, h("div", { class: "muted" }, m.model)),
      h("td", { class: "hide-narrow mono wrap" }, m.base_url),
      h("td", { "data-probe": m.probe.ok ? "ok" : "failed" }, m.probe.ok ? h("span", { class: "state completed" }, "ok") : h("span", { class: "state failed" }, "failed"),
        m.probe.status ? h("span", { class: "muted" }, " HTTP " + m.probe.status) : null,
        m.probe.error ? h("div", { class: "error" }, m.probe.error) : null,
        m.probe.at ? h("div", { class: "muted" }, fmtTime(m.probe.at)) : null),
      h("td", { class: "num", "data-calls": m.calls }, m.calls),
      h("td", { class: "num", "data-errors": m.errors }, m.errors))));
    if (!ml.models.length) models.append(h("tr", {}, h("td", { colspan: 5, class: "muted" }, "The daemon reports no model.")));

    set(types, ...yl.task_types.map(y => h("tr", { "data-type": y.name },
      h("td", {}, h("code", {}, y.name), y.built_in ? h("span", { class: "muted" }, " (built in)") : null,
        y.description ? h("div", { class: "muted desc" }, y.description) : null),
      h("td", {}, h("code", {}, y.model), y.fallback.length ? h("div", { class: "muted" }, "then ", list(y.fallback)) : null),
      h("td", { class: "wrap" }, list(y.tools, "none")),
      h("td", { class: "num hide-narrow" }, y.max_iterations),
      h("td", { class: "hide-narrow" }, y.reflection ? "on" : "off"),
      h("td", { class: "mono", "data-version": y.version }, y.version))));
    if (!yl.task_types.length) types.append(h("tr", {}, h("td", { colspan: 6, class: "muted" }, "The daemon reports no task type.")));
    status.textContent = `${tl.tools.length} tool${tl.tools.length === 1 ? "" : "s"}, ${ml.models.length} model${ml.models.length === 1 ? "" : "s"}, ` +
      `${yl.task_types.length} task type${yl.task_types.length === 1 ? "" : "s"}; read ${fmtTime(new Date().toISOString())}`;
  }
  source.addEventListener("change", () => { if (last) render(); });
  async function refresh() {
    const got = await Promise.all([api("GET", "/v1/tools"), api("GET", "/v1/models"), api("GET", "/v1/task-types")]);
    if (signal.aborted) return;
    // The open schemas stay open across a refresh.
    const open = new Set([...tools.querySelectorAll("details[open]")].map(d => d.closest("tr").dataset.tool));
    last = got;
    render();
    for (const tr of tools.querySelectorAll("tr[data-tool]")) if (open.has(tr.dataset.tool)) tr.querySelector("details").open = true;
  }
  try {
    const [st] = await Promise.all([api("GET", "/v1/stats"), refresh()]);
    // The log's events (model calls) move the models' counts.
    const again = debounce(() => refresh().catch(e => { status.textContent = (e.code ? e.code + ": " : "") + e.message; }), 1000);
    stream("/v1/events/stream", st.log.head, () => again(), signal);
    while (!signal.aborted) {
      await new Promise(r => { const t = setTimeout(r, 10000); signal.addEventListener("abort", () => { clearTimeout(t); r(); }, { once: true }); });
      if (!signal.aborted) again();
    }
  } catch (e) { showError(main, e); }
};

// ---- router

let cleanup = null;
async function route() {
  if (cleanup) cleanup.abort();
  cleanup = new AbortController();
  const raw = location.hash.replace(/^#/, "") || "/";
  const [path, params] = raw.split("?");
  const parts = path.split("/").filter(Boolean);
  let name = "overview";
  if (parts[0] === "tasks" && parts[1]) { name = "task"; views.task(cleanup.signal, params, parts[1]); }
  else if (parts[0] === "tasks") { name = "tasks"; views.tasks(cleanup.signal, params); }
  else if (parts[0] === "broker") { name = "broker"; views.broker(cleanup.signal, params); }
  else if (parts[0] === "tools") { name = "tools"; views.tools(cleanup.signal); }
  else views.overview(cleanup.signal);
  for (const a of document.querySelectorAll("[data-nav]")) {
    if (a.dataset.nav === (name === "task" ? "tasks" : name)) a.setAttribute("aria-current", "page");
    else a.removeAttribute("aria-current");
  }
  main.focus({ preventScroll: true });
}

window.addEventListener("hashchange", route);
document.addEventListener("keydown", (ev) => {
  if (ev.key === "/" && !["INPUT", "TEXTAREA", "SELECT"].includes(document.activeElement.tagName)) {
    const f = document.getElementById("f-text");
    if (f) { ev.preventDefault(); f.focus(); }
  }
});
document.getElementById("token-btn").addEventListener("click", () => {
  sessionStorage.removeItem(TOKEN_KEY);
  sessionStorage.removeItem(ADMIN_KEY); // asked for again by the next admin call
  askToken("Enter a new token.").then(route);
});
if (sessionStorage.getItem(TOKEN_KEY)) document.getElementById("token-btn").hidden = false;
// Escape would close the token dialog and leave every view waiting for a
// token that never comes: the dialog stays until a token is given.
document.getElementById("token-dialog").addEventListener("cancel", (ev) => ev.preventDefault());
route();
