// Bubu web UI: plain JavaScript, no build step, no external resources.
// Views: the sessions list (#/) and a session (#/s/ID) with transcript, raw log and context tabs.
"use strict";

// ---- helpers -------------------------------------------------------------------------------

function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") el.className = v;
    else if (k === "text") el.textContent = v;
    else if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (k === "dataset") Object.assign(el.dataset, v);
    else el.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

const $ = (sel, root = document) => root.querySelector(sel);
// replaceChildren turns null into the text "null"; skip empty slots the way h() does.
const fill = (el, ...kids) => el.replaceChildren(...kids.flat().filter((k) => k !== null && k !== undefined && k !== false));
const fmt = (n) => (n ?? 0).toLocaleString("en-US");
// A cost in USD; null is a price the table does not know, never $0.00.
const usd = (c) => (c === null || c === undefined ? "price unknown" : c < 1 ? "$" + c.toFixed(4) : "$" + c.toFixed(2));
const costOf = (u) => (u.model_calls === 0 ? "$0" : usd(u.cost_usd) + (u.cost_usd !== null && u.unpriced_calls ? ` (+${u.unpriced_calls} unpriced)` : ""));
const short = (n) => (n >= 1e6 ? (n / 1e6).toFixed(1) + "M" : n >= 1e4 ? Math.round(n / 1e3) + "k"
  : n >= 1e3 ? (n / 1e3).toFixed(1) + "k" : String(n ?? 0));

function ago(ms) {
  if (!ms) return "—";
  const s = Math.max(0, (Date.now() - ms) / 1000);
  if (s < 45) return "just now";
  if (s < 3600) return Math.round(s / 60) + " min ago";
  if (s < 86400) return Math.round(s / 3600) + " h ago";
  return Math.round(s / 86400) + " d ago";
}

const plural = (n, word) => `${fmt(n)} ${word}${n === 1 ? "" : "s"}`;
// Long paths and scripted model specs: keep the informative end, the whole value goes in a tooltip.
const tail = (text, max = 36) => (text && text.length > max ? "…" + text.slice(-(max - 1)) : text || "");
function shortModel(spec) {
  if (!spec) return "";
  const i = spec.indexOf(":");
  const rest = spec.slice(i + 1);
  return rest.includes("/") ? spec.slice(0, i + 1) + rest.split("/").pop() : spec;
}

const STATE_LABEL = { "open turn": "needs recovery" };
const stateClass = (s) => "state-" + s.replace(/\s+/g, "-");

function badge(state) {
  return h("span", { class: "badge " + stateClass(state), dataset: { state } },
    h("span", { class: "dot" }), STATE_LABEL[state] || state);
}

// ---- the access token ----------------------------------------------------------------------
// `bubu ui` prints a URL ending in #token=…. The token lives in this tab's memory and in
// sessionStorage (per origin, port included, so no other local server can read it) and goes out
// only as the Authorization header, which a browser never adds by itself. No cookie carries it:
// browsers send cookies to every port of 127.0.0.1.

const TOKEN_KEY = "bubu-token";

function takeToken() {
  const query = new URLSearchParams(location.search);
  const m = location.hash.match(/^#token=([^&]*)/);
  let given = query.get("token");
  try { if (m) given = decodeURIComponent(m[1]); } catch { given = null; } // a mangled fragment
  if (query.has("token") || m) {
    query.delete("token");
    const rest = query.toString();
    history.replaceState(null, "", location.pathname + (rest ? "?" + rest : "") + (m ? "#/" : location.hash || "#/"));
  }
  try {
    if (given) sessionStorage.setItem(TOKEN_KEY, given);
    return given || sessionStorage.getItem(TOKEN_KEY) || "";
  } catch {
    return given || ""; // storage disabled: the token lasts as long as this page
  }
}

const TOKEN = takeToken();

function authHeaders(extra = {}) {
  return TOKEN ? { ...extra, authorization: "Bearer " + TOKEN } : { ...extra };
}

async function api(path, opts = {}) {
  const init = { credentials: "omit", ...opts, headers: authHeaders({ accept: "application/json" }) };
  if (opts.json !== undefined) {
    init.method = init.method || "POST";
    init.headers["content-type"] = "application/json";
    init.body = JSON.stringify(opts.json);
  }
  const resp = await fetch(path, init);
  const text = await resp.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch { data = null; }
  if (!resp.ok) throw new Error((data && data.error) || text.trim() || resp.statusText);
  return data;
}

function toast(message, kind = "error") {
  const el = h("div", { class: "toast " + kind, role: "alert", text: message });
  document.body.append(el);
  setTimeout(() => el.remove(), 6000);
}

const app = { config: null, view: null, timer: null, stream: null, session: null };

// ---- routing -------------------------------------------------------------------------------

function route() {
  leave();
  const m = location.hash.match(/^#\/s\/([^/]+)(?:\/(\w+))?/);
  if (m) showSession(decodeURIComponent(m[1]), m[2] || "transcript");
  else showSessions();
}

function leave() {
  clearTimeout(app.timer);
  if (app.stream) app.stream.abort();
  app.stream = null;
  app.session = null;
}

// ---- sessions list -------------------------------------------------------------------------

const filters = { q: "", status: "" };

function showSessions() {
  app.view = "sessions";
  document.title = "Sessions · Bubu";
  const search = h("input", { type: "search", id: "search", placeholder: "Search title, workspace, request…",
    value: filters.q, "aria-label": "Search sessions" });
  const select = h("select", { id: "status-filter", "aria-label": "Filter by status" },
    h("option", { value: "", text: "All statuses" }),
    ...(app.config ? app.config.states : []).map((s) =>
      h("option", { value: s, text: STATE_LABEL[s] || s, selected: s === filters.status })));
  let debounce = 0;
  search.addEventListener("input", () => {
    clearTimeout(debounce);
    debounce = setTimeout(() => { filters.q = search.value; loadSessions(); }, 200);
  });
  select.addEventListener("change", () => { filters.status = select.value; loadSessions(); });
  const body = h("tbody", { id: "sessions-body" });
  fill($("#main"), h("section", { class: "sessions" },
    h("div", { class: "toolbar" }, h("h1", { text: "Sessions" }), h("span", { class: "spacer" }),
      search, select, h("span", { id: "sessions-count", class: "muted" })),
    h("table", { class: "list", id: "sessions" },
      h("thead", {}, h("tr", {}, ["Status", "Task", "Workspace", "Last activity", "Tokens", "Events"]
        .map((t) => h("th", { text: t })))),
      body),
    h("p", { id: "sessions-empty", class: "empty", hidden: true })));
  loadSessions();
}

async function loadSessions() {
  clearTimeout(app.timer);
  if (app.view !== "sessions") return;
  try {
    const params = new URLSearchParams();
    if (filters.q) params.set("q", filters.q);
    if (filters.status) params.set("status", filters.status);
    const data = await api("/api/sessions?" + params);
    if (app.view === "sessions") renderSessions(data.sessions);
  } catch (e) {
    toast("Could not load the sessions: " + e.message);
  }
  if (app.view === "sessions") app.timer = setTimeout(loadSessions, 2000);
}

function renderSessions(rows) {
  const body = $("#sessions-body");
  if (!body) return;
  fill(body, ...rows.map((s) => {
    const flags = [];
    if (s.notice) flags.push(h("span", { class: "flag notice", title: "A recovery notice waits to be dismissed", text: "recovered" }));
    if (s.pending_permissions) flags.push(h("span", { class: "flag perm", text: "needs approval" }));
    const link = h("a", { href: "#/s/" + encodeURIComponent(s.id), class: "title", text: (s.parent ? "↳ " : "") + s.title,
      title: s.parent ? "sub-agent of " + s.parent : "" });
    const snippet = s.snippet ? h("div", { class: "snippet muted small", text: s.snippet }) : null;
    return h("tr", { dataset: { id: s.id }, onclick: (ev) => { if (ev.target.tagName !== "A") location.hash = "#/s/" + s.id; } },
      h("td", {}, badge(s.status), ...flags),
      h("td", { class: "task" }, link, snippet, h("div", { class: "mono muted small", title: s.model || "", text: s.id + (s.model ? " · " + shortModel(s.model) : "") })),
      h("td", { class: "mono ws", title: s.workspace, text: tail(s.workspace, 28) }),
      h("td", { title: s.last_ms ? new Date(s.last_ms).toLocaleString() : "", text: ago(s.last_ms || s.created_ms) }),
      h("td", { class: "num", title: `${fmt(s.usage.model_calls)} model calls` },
        `${short(s.usage.input_tokens)} in · ${short(s.usage.output_tokens)} out · ${costOf(s.usage)}`),
      h("td", { class: "num", text: fmt(s.events) }));
  }));
  $("#sessions-count").textContent = rows.length === 1 ? "1 session" : `${rows.length} sessions`;
  const empty = $("#sessions-empty");
  empty.hidden = rows.length > 0;
  empty.textContent = filters.q || filters.status ? "No session matches."
    : "No sessions yet. Start one with New task, or run `bubu demo` in a terminal.";
}

// ---- new task ------------------------------------------------------------------------------

function openNewTask() {
  const dlg = $("#new-task");
  $("#nt-error").hidden = true;
  if (app.config) {
    if (!$("#nt-workspace").value) $("#nt-workspace").value = app.config.default_workspace;
    if (!$("#nt-model").value && app.config.default_model) $("#nt-model").value = app.config.default_model;
  }
  dlg.showModal();
  $("#nt-task").focus();
}

async function submitNewTask(ev) {
  ev.preventDefault();
  const btn = $("#new-task-start");
  btn.disabled = true;
  try {
    const allow = $("#nt-allow").value.split(/[,\n]/).map((p) => p.trim()).filter(Boolean);
    const data = await api("/api/sessions", { json: {
      task: $("#nt-task").value, workspace: $("#nt-workspace").value.trim(), model: $("#nt-model").value.trim(),
      allow_commands: allow, sandbox: $("#nt-sandbox").value, network: $("#nt-network").checked } });
    $("#new-task").close();
    $("#nt-task").value = "";
    location.hash = "#/s/" + data.session;
  } catch (e) {
    $("#nt-error").textContent = e.message;
    $("#nt-error").hidden = false;
  } finally {
    btn.disabled = false;
  }
}

// ---- session -------------------------------------------------------------------------------

function showSession(sid, tab) {
  app.view = "session";
  const s = { sid, tab, detail: null, nodes: new Map(), logRows: null, logLoaded: false, refreshTimer: 0, contextTimer: 0 };
  app.session = s;
  const tabs = ["transcript", "log", "context"].map((t) =>
    h("a", { href: `#/s/${encodeURIComponent(sid)}/${t}`, class: "tab" + (t === tab ? " active" : ""), dataset: { tab: t },
      text: { transcript: "Transcript", log: "Raw log", context: "Context" }[t] }));
  fill($("#main"), h("section", { class: "session", dataset: { sid } },
    h("div", { class: "session-head", id: "session-head" }, h("h1", { text: sid })),
    h("div", { id: "ui-error", class: "alert", hidden: true }),
    h("div", { id: "banner" }),
    h("div", { id: "permissions" }),
    h("div", { id: "plan-memory", class: "plan-memory" }),
    h("nav", { class: "tabs" }, tabs),
    h("div", { id: "tab-transcript", class: "tab-body", hidden: tab !== "transcript" },
      h("div", { id: "earlier" }), h("div", { id: "items" }), h("div", { id: "live", class: "live", hidden: true })),
    h("div", { id: "tab-log", class: "tab-body", hidden: tab !== "log" }),
    h("div", { id: "tab-context", class: "tab-body", hidden: tab !== "context" }),
    followUpForm(sid)));
  refresh().then(() => {
    if (app.session !== s || !s.detail) return;
    connect(s);
    if (tab === "log") loadLog(s);
    if (tab === "context") loadContext(s);
  });
}

// The transcript is paged: the first load brings the last ITEMS_PAGE items, older pages come on
// scroll (loadEarlier), new items arrive as deltas on the stream (mergeItems). Later refreshes
// fetch the page's head only (?tail=0) and keep the items the page holds.
const ITEMS_PAGE = 100;

async function refresh() {
  const s = app.session;
  if (!s) return;
  try {
    const first = !s.detail;
    const d = await api("/api/sessions/" + encodeURIComponent(s.sid) + (first ? `?tail=${ITEMS_PAGE}` : "?tail=0"));
    if (app.session !== s) return;
    if (!first) Object.assign(d, { items: s.detail.items, usage: s.detail.usage, first_seq: s.detail.first_seq });
    s.detail = d;
    renderSession(s);
    if (first && d.first_seq) window.scrollTo(0, document.body.scrollHeight);  // the latest page first
    renderEarlier(s);
  } catch (e) {
    if (app.session === s && !s.detail) {
      fill($("#main"), h("section", { class: "session" }, h("h1", { text: "Session not found" }),
        h("p", { class: "muted", text: e.message }), h("a", { href: "#/", text: "Back to the sessions" })));
      app.session = null;
    } else toast(e.message);
  }
}

function mergeItems(s, items, usage) {
  const d = s.detail;
  const at = new Map(d.items.map((it, i) => [it.type + ":" + it.seq, i]));
  for (const it of items) {
    const i = at.get(it.type + ":" + it.seq);
    if (i === undefined) { at.set(it.type + ":" + it.seq, d.items.length); d.items.push(it); } else d.items[i] = it;
  }
  const have = new Set(d.usage.map((u) => u.seq));
  for (const u of usage) if (!have.has(u.seq)) { have.add(u.seq); d.usage.push(u); }
}

function renderEarlier(s) {
  const el = $("#earlier");
  if (!el || !s.detail) return;
  if (!s.detail.first_seq) { fill(el); s.earlierSeen?.disconnect(); return; }
  const more = h("button", { class: "earlier", onclick: () => loadEarlier(s) }, "Earlier messages");
  fill(el, more);
  s.earlierSeen?.disconnect();
  s.earlierSeen = new IntersectionObserver((seen) => { if (seen.some((e) => e.isIntersecting)) loadEarlier(s); });
  s.earlierSeen.observe(more);
}

async function loadEarlier(s) {
  const d = s.detail;
  if (s.loadingEarlier || !d || !d.first_seq) return;
  s.loadingEarlier = true;
  try {
    const before = d.items.length ? Math.min(...d.items.map((it) => it.seq)) : d.first_seq + 1;
    const p = await api(`/api/sessions/${encodeURIComponent(s.sid)}/items?before=${before}&limit=${ITEMS_PAGE}`);
    if (app.session !== s) return;
    const height = document.body.scrollHeight, y = window.scrollY;
    mergeItems(s, p.items, p.usage);
    d.first_seq = p.items.length ? p.first_seq : 0;
    renderItems(s);
    window.scrollTo(0, y + document.body.scrollHeight - height);  // keep what was in view in view
  } catch (e) {
    toast(e.message);
  } finally {
    s.loadingEarlier = false;
  }
  renderEarlier(s);
}

function scheduleRefresh(delay = 120) {
  const s = app.session;
  if (!s || s.refreshTimer) return;
  s.refreshTimer = setTimeout(() => { s.refreshTimer = 0; refresh(); }, delay);
}

// The live stream is read with fetch rather than EventSource, because EventSource cannot send
// the Authorization header. It reconnects after the last seq it saw, as EventSource would.
function connect(s) {
  const handlers = {
    records: (data) => {
      appendLogRows(s, data.rows);
      scheduleRefresh();  // the head only: the items come as deltas
      if (s.detail) s.detail.high_water = Math.max(s.detail.high_water, data.high_water);
      if (s.tab === "context") { clearTimeout(s.contextTimer); s.contextTimer = setTimeout(() => loadContext(s), 400); }
    },
    items: (data) => {
      if (!s.detail) return;
      mergeItems(s, data.items, data.usage);
      renderItems(s);
    },
    permission_request: () => scheduleRefresh(0),
    live: (live) => {
      if (!s.detail) return;
      const changed = live.running_here !== s.detail.live.running_here;
      s.detail.live = live;
      renderLive(s);
      if (changed) scheduleRefresh(0);
    },
  };
  const ctl = new AbortController();
  app.stream = ctl;
  streamEvents(`/api/sessions/${encodeURIComponent(s.sid)}/stream`, s.detail.high_water, handlers, ctl.signal);
}

async function streamEvents(path, after, handlers, signal) {
  let last = after, retry = 1000;
  while (!signal.aborted) {
    try {
      const resp = await fetch(`${path}?after=${last}`, { headers: authHeaders({ accept: "text/event-stream" }), credentials: "omit", signal });
      if (resp.status === 401 || resp.status === 403 || resp.status === 404) return;
      const reader = resp.body.pipeThrough(new TextDecoderStream()).getReader();
      let buf = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += value;
        let cut;
        while ((cut = buf.indexOf("\n\n")) >= 0) {
          const msg = { event: "message", data: [], id: null };
          for (const line of buf.slice(0, cut).split("\n")) {
            const i = line.indexOf(":");
            const key = i < 0 ? line : line.slice(0, i);
            const value = i < 0 ? "" : line.slice(i + 1).replace(/^ /, "");
            if (key === "event") msg.event = value;
            else if (key === "data") msg.data.push(value);
            else if (key === "id") msg.id = value;
            else if (key === "retry" && /^\d+$/.test(value)) retry = Number(value);
          }
          buf = buf.slice(cut + 2);
          if (msg.id !== null && /^\d+$/.test(msg.id)) last = Number(msg.id);
          const handle = handlers[msg.event];
          if (handle && msg.data.length) handle(JSON.parse(msg.data.join("\n")));
        }
      }
    } catch (e) {
      if (signal.aborted) return;
    }
    await new Promise((done) => setTimeout(done, retry));
  }
}

function renderSession(s) {
  const d = s.detail;
  const info = d.session;
  document.title = info.title + " · Bubu";
  renderHead(s);
  const err = $("#ui-error");
  err.hidden = !d.error;
  err.textContent = d.error ? "The last run from this page failed: " + d.error : "";
  renderBanner(s);
  renderPermissions(s);
  renderPlanMemory(s);
  renderItems(s);
  renderLive(s);
  const canFollow = !["running", "open turn", "blocked"].includes(info.status) && !d.live.running_here;
  $("#follow-up").hidden = !canFollow;
}

function renderHead(s) {
  const d = s.detail, info = d.session, u = info.usage;
  const actions = [];
  if (info.status === "running") {
    // A turn run elsewhere (a terminal, a worker) is asked to stop through its lease.
    actions.push(h("button", { id: "stop", class: "danger", onclick: () => act(s, "stop") }, "Stop"));
  }
  const gaveUp = info.status === "failed" && d.cause === "provider_unavailable";
  if (!d.live.running_here && (info.status === "stopped" || info.status === "suspended" || gaveUp)) {
    actions.push(h("button", { id: "resume", class: "primary", onclick: () => act(s, "resume") }, "Resume"));
  }
  if (!d.live.running_here && info.status !== "running" && info.status !== "open turn") {
    actions.push(h("button", { id: "compact", title: "Summarize the older events into a checkpoint now", onclick: () => act(s, "compact") }, "Compact"));
  }
  if (!d.live.running_here && info.status === "open turn") {
    actions.push(h("button", { id: "resume", class: "primary", onclick: () => act(s, "resume") }, "Recover and continue"));
  }
  fill($("#session-head"),
    h("div", { class: "title-row" }, h("h1", { text: info.title }), badge(info.status),
      h("span", { class: "spacer" }), ...actions),
    h("div", { class: "meta" },
      h("span", { class: "mono", text: info.id }),
      h("span", { class: "mono", title: "Workspace " + info.workspace, text: tail(info.workspace, 48) }),
      info.model ? h("span", { class: "mono", title: info.model, text: shortModel(info.model) }) : null,
      h("span", { text: plural(info.turns, "turn") }),
      h("span", { text: `${plural(u.model_calls, "model call")} · ${fmt(u.input_tokens)} in / ${fmt(u.output_tokens)} out tokens · ${costOf(u)}` }),
      h("span", { text: plural(info.events, "event") })),
    info.reason && ["failed", "blocked", "stopped"].includes(info.status) ? h("div", { class: "reason", text: info.reason }) : null,
    d.waiting ? h("div", { class: "reason waiting", id: "waiting", role: "status", text: waitingText(d.waiting) }) : null);
}

// "waiting for the provider: attempt N, next in Xs, since T", from the log's attempt events;
// the countdown ticks here between refreshes.
function waitingText(w) {
  const since = new Date(w.since_ms).toLocaleTimeString();
  const left = Math.max(0, (w.next_at_ms - Date.now()) / 1000);
  const when = w.in_flight ? "in progress" : `next in ${left < 10 ? left.toFixed(1) : Math.round(left)}s`;
  const what = w.status != null ? w.status : w.error_class;
  return `waiting for the provider: attempt ${w.attempt}, ${when}, since ${since} (${what}) · ${w.error}`;
}

setInterval(() => {
  const s = app.session, el = document.getElementById("waiting");
  if (s && s.detail && s.detail.waiting && el) el.textContent = waitingText(s.detail.waiting);
}, 500);

async function act(s, action, body) {
  try {
    await api(`/api/sessions/${encodeURIComponent(s.sid)}/${action}`, { method: "POST", json: body || {} });
  } catch (e) {
    toast(e.message);
  }
  scheduleRefresh(0);
}

// ---- recovery notice -----------------------------------------------------------------------

const DECISION_LABEL = { rerun: "re-run silently", rerun_not_applied: "not applied, re-run", applied: "recorded as applied", interrupted: "awaits your review", resume: "sub-agent resumed" };
const MATCH_LABEL = { after: "the file now has the intended content (after-hash)", before: "the file now is as before the write (before-hash)",
  neither: "the file now matches neither recorded hash", absent: "the file does not exist now" };

function renderBanner(s) {
  const n = s.detail.notice;
  const el = $("#banner");
  if (!n || n.dismissed) { fill(el); return; }
  const blocked = n.status === "blocked";
  const lists = [];
  const item = (label, values, cls) => values.length ? h("li", { class: cls }, h("strong", { text: label + ": " }), values.join(", ")) : null;
  lists.push(item("Re-run silently", n.silent_retries, "ok"));
  lists.push(item("Recorded as applied", n.verified_applied, "ok"));
  lists.push(item("Awaits your review — may or may not have happened", n.pending_review, "needs-review"));
  lists.push(item("Left running by the crashed run, and killed", n.leftovers || [], "ok"));
  if (n.dropped_model_calls) lists.push(h("li", { text: `In-flight model call issued again: ${n.dropped_model_calls}` }));
  fill(el, h("div", { class: "banner" + (blocked ? " blocked" : ""), id: "recovery-notice", role: "status" },
    h("div", { class: "banner-head" },
      h("strong", { text: blocked ? "Recovery blocked" : "Recovered after a crash" }),
      h("span", { class: "muted", text: blocked ? n.reason : "unfinished task detected, auto-recovered" }),
      h("span", { class: "spacer" }),
      h("button", { id: "dismiss", onclick: async (ev) => { ev.target.disabled = true; await act(s, "dismiss"); } }, "Dismiss")),
    h("ul", {}, lists),
    n.calls.length ? h("div", { class: "reviews" }, n.calls.map(reviewCard)) : null));
}

function reviewCard(c) {
  const open = c.decision === "interrupted";
  const rows = [h("pre", { class: "json", text: JSON.stringify(c.arguments, null, 2) })];
  if (c.path) {
    const sha = (x) => (x ? x.slice(0, 12) : "none");
    rows.push(h("div", { class: "hashes mono small" },
      h("span", { text: `before ${sha(c.before_sha256)}` }), h("span", { text: `after ${sha(c.after_sha256)}` }),
      h("span", { text: `now ${sha(c.current_sha256)}` })));
    if (c.matches) rows.push(h("div", { class: "match match-" + c.matches, text: MATCH_LABEL[c.matches] }));
    if (c.diff) rows.push(diffView(c.diff));
    if (c.diff_note) rows.push(h("div", { class: "muted small", text: c.diff_note }));
  }
  return h("details", { class: "review decision-" + c.decision, open },
    h("summary", {}, h("span", { class: "decision", text: DECISION_LABEL[c.decision] || c.decision }),
      h("code", { text: c.label }), h("span", { class: "muted small", text: c.reason })),
    ...rows);
}

function diffView(text) {
  return h("pre", { class: "diff" }, text.split("\n").map((line) => {
    const cls = line.startsWith("+++") || line.startsWith("---") ? "file" : line.startsWith("@@") ? "hunk"
      : line.startsWith("+") ? "add" : line.startsWith("-") ? "del" : "";
    return h("span", { class: cls, text: line + "\n" });
  }));
}

// ---- permissions ---------------------------------------------------------------------------

function renderPermissions(s) {
  const el = $("#permissions");
  fill(el, ...s.detail.permissions.map((p) => h("div", { class: "perm" + (p.protected ? " protected" : ""), dataset: { request: p.request_id } },
    h("div", { class: "perm-head" }, h("strong", { text: p.protected ? "Protected path: your approval needed" : "Permission needed" }), h("span", { class: "muted", text: p.tool })),
    p.command ? permCommand(p.command) : h("div", { class: "perm-summary mono", text: p.summary }),
    p.reason && p.reason !== p.summary.replace(/^run `|`$/g, "")
      ? h("div", { class: p.protected ? "perm-reason small" : "muted small", text: p.reason }) : null,
    p.answerable
      ? h("div", { class: "buttons" },
        h("button", { class: "primary approve", onclick: (ev) => answer(s, p, "allow", ev) }, "Approve"),
        h("button", { class: "danger deny", onclick: (ev) => answer(s, p, "deny", ev) }, "Deny"))
      : h("div", { class: "muted small", text: "Waiting for an answer where this turn runs." }))));
}

// The command exactly as it will run: one row per line, each newline marked ⏎ (the server has
// already made invisible characters visible), so a chained second line cannot go unseen.
function permCommand(lines) {
  return h("div", { class: "perm-command mono" },
    lines.length > 1 ? h("div", { class: "muted small", text: `${lines.length} lines` }) : null,
    h("ol", {}, ...lines.map((line) => h("li", { text: line }))));
}

async function answer(s, p, decision, ev) {
  for (const b of ev.target.parentElement.querySelectorAll("button")) b.disabled = true;
  try {
    await api(`/api/sessions/${encodeURIComponent(s.sid)}/permissions/${encodeURIComponent(p.request_id)}`, { json: { decision } });
  } catch (e) {
    toast(e.message);
  }
  scheduleRefresh(0);
}

// ---- plan and workspace memory -------------------------------------------------------------

const PLAN_MARK = { completed: "✓", in_progress: "▸", pending: "○" };

function renderPlanMemory(s) {
  const d = s.detail, plan = d.plan, notes = d.memory || [];
  const parts = [];
  if (plan && plan.length) {
    const done = plan.filter((i) => i.status === "completed").length;
    parts.push(h("div", { class: "plan", id: "plan" },
      h("div", { class: "panel-head" }, h("strong", { text: "Plan" }), h("span", { class: "muted", text: `${done}/${plan.length}` })),
      h("ol", {}, ...plan.map((i) => h("li", { class: "plan-item " + i.status, dataset: { status: i.status } },
        h("span", { class: "mark", "aria-label": i.status.replace("_", " "), text: PLAN_MARK[i.status] || "○" }),
        h("span", { text: i.text }))))));
  }
  if (notes.length) {
    parts.push(h("details", { class: "memory", id: "memory" },
      h("summary", {}, h("strong", { text: "Workspace memory" }), h("span", { class: "muted", text: " " + plural(notes.length, "note") })),
      h("dl", {}, ...notes.flatMap((n) => [
        h("dt", { class: "mono", title: "Remembered by " + n.session, text: n.key }),
        h("dd", { text: n.text })]))));
  }
  const kids = d.children || [];
  if (kids.length || d.session.parent) {
    const running = kids.filter((c) => c.state === "running").length;
    const tree = (cs) => h("ul", {}, ...cs.map((c) => h("li", { class: "child " + c.state, dataset: { child: c.session } },
      h("a", { href: "#/s/" + encodeURIComponent(c.session), class: "mono", text: c.session }),
      h("span", { text: (c.agent ? ` (${c.agent}) ` : " ") }), badge(c.state),
      h("span", { class: "muted small", text: ` ${short(c.tokens)} tokens` + (c.branch ? ` · branch ${c.branch}` : "") }),
      c.children.length ? tree(c.children) : null)));
    parts.push(h("div", { class: "children", id: "children" },
      h("div", { class: "panel-head" }, h("strong", { text: "Sub-agents" }),
        h("span", { class: "muted", text: d.session.parent ? "sub-agent of " : `${running} running of ${kids.length}` }),
        d.session.parent ? h("a", { href: "#/s/" + encodeURIComponent(d.session.parent), class: "mono", text: d.session.parent }) : null),
      kids.length ? tree(kids) : null));
  }
  const procs = processPanel(d.processes || []);
  if (procs) parts.push(procs);
  fill($("#plan-memory"), ...parts);
}

function processPanel(procs) {
  if (!procs.length) return null;
  return h("div", { class: "processes", id: "processes" },
    h("div", { class: "panel-head" }, h("strong", { text: "Background processes" }), h("span", { class: "muted", text: `${procs.length} running` })),
    h("ul", {}, ...procs.map((p) => h("li", { class: "process", dataset: { handle: p.handle } },
      h("span", { class: "mono", text: p.handle + " " }),
      h("span", { class: "mono", text: p.command }),
      h("span", { class: "muted", text: ` pid ${p.pid ?? "?"} · ${p.keep === "session" ? "kept for the session" : "this turn"}` })))));
}

// ---- transcript ----------------------------------------------------------------------------

function renderItems(s) {
  const d = s.detail;
  const list = [...d.items.map((it) => ({ key: it.type + ":" + it.seq, order: it.seq, it })),
    ...d.usage.map((u) => ({ key: "usage:" + u.seq, order: u.seq + 0.5, it: { type: "usage", ...u } }))];
  list.sort((a, b) => a.order - b.order);
  const box = $("#items");
  const nearBottom = window.innerHeight + window.scrollY >= document.body.scrollHeight - 80;
  const seen = new Set();
  let prev = null;
  for (const { key, it } of list) {
    seen.add(key);
    const sig = JSON.stringify(it);
    let node = s.nodes.get(key);
    if (!node || node.sig !== sig) {
      const el = renderItem(s, it);
      if (node) {
        if (node.el.tagName === "DETAILS") el.open = node.el.open;
        for (const [i, det] of node.el.querySelectorAll("details").entries()) {
          const now = el.querySelectorAll("details")[i];
          if (now) now.open = det.open;
        }
        node.el.replaceWith(el);
      }
      node = { sig, el };
      s.nodes.set(key, node);
    }
    if (node.el.previousSibling !== prev || node.el.parentNode !== box) {
      if (prev) prev.after(node.el); else box.prepend(node.el);
    }
    prev = node.el;
  }
  for (const [key, node] of s.nodes) if (!seen.has(key)) { node.el.remove(); s.nodes.delete(key); }
  if (nearBottom && s.tab === "transcript" && s.detail.live.running_here) window.scrollTo(0, document.body.scrollHeight);
}

function renderItem(s, it) {
  switch (it.type) {
    case "tool": return toolCard(s, it);
    case "usage": return h("div", { class: "usage", title: it.model },
      `model call · ${fmt(it.input_tokens)} in · ${fmt(it.output_tokens)} out`
      + (it.cache_read_tokens ? ` · ${fmt(it.cache_read_tokens)} cached` : "")
      + (it.cache_write_tokens ? ` · ${fmt(it.cache_write_tokens)} written to cache` : "")
      + ` · ${usd(it.cost_usd)}`
      + (it.stop_reason ? ` · ${it.stop_reason}` : ""));
    default: return messageItem(it);
  }
}

function messageItem(m) {
  switch (m.kind) {
    case "user": return h("div", { class: "msg user", dataset: { seq: m.seq } }, h("div", { class: "who", text: "You" },
      h("button", { class: "rewind small", title: "Undo this turn and what followed: the files (what commands did too) go back as they were before it, in a fork",
        onclick: () => openRewind(app.session, m.seq - 1) }, "Rewind"),
      h("button", { class: "changes small", title: "What this turn changed in the workspace",
        onclick: () => openDiff(app.session, m.seq) }, "Changes")), h("div", { class: "text", text: m.text }));
    case "assistant": return h("div", { class: "msg assistant", dataset: { seq: m.seq } }, h("div", { class: "who", text: "Bubu" }), modelText(m));
    case "thinking": return h("details", { class: "thinking", dataset: { seq: m.seq } }, h("summary", { text: "Thinking" }), h("div", { class: "text", text: m.text }));
    case "error": return h("div", { class: "msg error", dataset: { seq: m.seq }, text: m.text });
    case "notice": return h("div", { class: "notice-item", dataset: { seq: m.seq }, text: m.text });
    case "compaction": return h("div", { class: "compaction", dataset: { seq: m.seq } },
      h("span", { text: `${m.text} · the checkpoint covers events 1–${fmt(m.watermark)}` }));
    default: return h("div", { class: "note", dataset: { seq: m.seq } }, h("span", { text: m.text }));
  }
}

// The model's text as the server rendered it from Markdown and sanitized it (bubu.web.markdown);
// plain text when it came without.
function modelText(m) {
  if (typeof m.html !== "string") return h("div", { class: "text", text: m.text });
  const div = h("div", { class: "text md" });
  div.innerHTML = m.html;
  return div;
}

// The argument that names the call (the tool declares it; the server sends it as `headline`), on
// one line; a newline stays visible as ⏎ (two commands never read as one).
function mainArg(t) {
  const v = t.headline ?? "";
  return String(v).split("\n").map((l) => l.replace(/\s+/g, " ").trim()).join("⏎ ").slice(0, 120);
}

function toolCard(s, t) {
  const status = t.status === "recovered" && t.recovery ? `recovered · ${DECISION_LABEL[t.recovery] || t.recovery}` : t.status;
  const parts = [h("div", { class: "tool-head" },
    h("span", { class: "tool-name", text: t.name }), h("code", { class: "tool-arg", text: mainArg(t) }),
    h("span", { class: "spacer" }),
    t.effect ? h("span", { class: "effect", text: t.effect.replace("_", " ") }) : null,
    t.duration_ms !== null && t.duration_ms !== undefined ? h("span", { class: "muted small", text: t.duration_ms >= 1000 ? (t.duration_ms / 1000).toFixed(1) + " s" : t.duration_ms + " ms" }) : null,
    h("span", { class: "tool-status", text: status }))];
  parts.push(h("details", { class: "args" }, h("summary", { text: "arguments" }), h("pre", { class: "json", text: JSON.stringify(t.arguments, null, 2) })));
  if (t.result_head !== null) {
    parts.push(h("pre", { class: "result" + (t.is_error ? " err" : ""), text: t.result_head || "(empty)" }));
    if (t.truncated) {
      parts.push(h("button", { class: "link open-result", onclick: () => openViewer(s, t) },
        `Open the whole result (${fmt(t.result_lines)} lines, ${fmt(t.result_chars)} chars)`));
    }
  }
  return h("div", { class: "tool status-" + t.status, dataset: { seq: t.seq, call: t.call_id } }, parts);
}

function renderLive(s) {
  const el = $("#live");
  if (!el || !s.detail) return;
  const live = s.detail.live;
  const show = live.running_here && (live.activity || live.draft || live.thinking);
  el.hidden = !show;
  if (!show) { fill(el); return; }
  fill(el,
    h("div", { class: "activity" }, h("span", { class: "spinner" }), live.activity || "working"),
    live.thinking ? h("div", { class: "text thinking-draft", text: live.thinking }) : null,
    live.draft ? h("div", { class: "text", text: live.draft }) : null);
}

function followUpForm(sid) {
  const text = h("textarea", { id: "follow-up-text", rows: 2, placeholder: "Ask a follow-up…", required: true });
  return h("form", { id: "follow-up", class: "follow-up", hidden: true, onsubmit: async (ev) => {
    ev.preventDefault();
    const s = app.session;
    if (!s || !text.value.trim()) return;
    try {
      await api(`/api/sessions/${encodeURIComponent(sid)}/turns`, { json: { task: text.value } });
      text.value = "";
    } catch (e) { toast(e.message); }
    scheduleRefresh(0);
  } }, text, h("button", { class: "primary", type: "submit" }, "Send"));
}

// ---- raw log -------------------------------------------------------------------------------

async function loadLog(s) {
  const box = $("#tab-log");
  fill(box, h("table", { class: "list log" },
    h("thead", {}, h("tr", {}, ["seq", "kind", "role", "author", "turn", "run", "hash"].map((t) => h("th", { text: t })))),
    h("tbody", { id: "log-body" })));
  s.logRows = 0;
  let after = 0;
  for (;;) {
    const page = await api(`/api/sessions/${encodeURIComponent(s.sid)}/log?after=${after}&limit=2000`);
    if (app.session !== s) return;
    appendLogRows(s, page.rows, true);
    if (!page.rows.length || page.rows[page.rows.length - 1].seq >= page.high_water) break;
    after = page.rows[page.rows.length - 1].seq;
  }
  s.logLoaded = true;
}

function appendLogRows(s, rows, initial = false) {
  const body = $("#log-body");
  if (!body || (!s.logLoaded && !initial)) return;
  for (const r of rows) {
    if (r.seq <= s.logRows) continue;
    s.logRows = r.seq;
    const tr = h("tr", { class: "log-row vis-" + r.visibility, dataset: { seq: r.seq }, onclick: () => toggleEvent(s, tr, r.seq) },
      h("td", { class: "num", text: r.seq }), h("td", { class: "mono", text: r.kind }), h("td", { text: r.role }),
      h("td", { text: r.author }), h("td", { class: "mono small", text: (r.turn || "").slice(-8) }),
      h("td", { class: "mono small", text: (r.run || "").slice(-8) }),
      h("td", { class: "mono small", title: r.hash, text: r.hash.slice(0, 16) }));
    body.append(tr);
  }
}

async function toggleEvent(s, tr, seq) {
  const next = tr.nextElementSibling;
  if (next && next.classList.contains("event-json")) { next.remove(); return; }
  const ev = await api(`/api/sessions/${encodeURIComponent(s.sid)}/events/${seq}`);
  tr.after(h("tr", { class: "event-json" }, h("td", { colspan: 7 }, h("pre", { class: "json", text: JSON.stringify(ev, null, 2) }))));
}

// ---- context -------------------------------------------------------------------------------

async function loadContext(s) {
  const c = await api(`/api/sessions/${encodeURIComponent(s.sid)}/context`);
  if (app.session !== s) return;
  const msg = (m) => {
    if (m.role === "user") return h("div", { class: "ctx user" }, h("div", { class: "who", text: "user" }), h("div", { class: "text", text: m.text }));
    if (m.role === "assistant") {
      return h("div", { class: "ctx assistant" }, h("div", { class: "who", text: "assistant" }), m.parts.map((p) =>
        p.kind === "text" ? h("div", { class: "text", text: p.text })
          : p.kind === "thinking" ? h("details", { class: "thinking" }, h("summary", { text: "thinking" }), h("div", { class: "text", text: p.text }))
            : h("div", { class: "ctx-call" }, h("code", { text: `${p.name}(${JSON.stringify(p.arguments)})` }), h("span", { class: "muted small", text: p.call_id }))));
    }
    return h("div", { class: "ctx tool" }, h("div", { class: "who", text: "tool results" }), m.results.map((r) =>
      h("div", { class: "ctx-result" }, h("div", { class: "muted small", text: `${r.name} · ${r.call_id}${r.is_error ? " · error" : ""}` }),
        h("pre", { class: "result" + (r.is_error ? " err" : ""), text: r.content }))));
  };
  const counts = Object.entries(c.inclusion).sort().map(([k, n]) => `${fmt(n)} ${k}`).join(" · ");
  fill($("#tab-context"),
    h("p", { class: "muted" }, `The next model request, projected from events 1–${fmt(c.high_water)}: about ${fmt(c.calibrated_tokens)} tokens, digest `,
      h("code", { title: c.request_digest, text: c.request_digest.slice(0, 16) }), "."),
    h("p", { class: "muted small", text: "Events: " + counts }),
    c.checkpoint ? h("div", { class: "compaction" }, h("span", { text: `checkpoint ${c.checkpoint.key} covers events 1–${fmt(c.checkpoint.watermark)}` })) : null,
    h("details", { class: "ctx-block" }, h("summary", { text: "System prompt" }), h("pre", { class: "text-pre", text: c.system })),
    h("details", { class: "ctx-block" }, h("summary", { text: `Tools (${c.tools.length})` }),
      h("ul", { class: "tools" }, c.tools.map((t) => h("li", {}, h("code", { text: t.name }), " — ", t.description)))),
    h("div", { class: "ctx-messages" }, c.messages.map(msg)));
}

// ---- result viewer -------------------------------------------------------------------------

const PAGE = 200;
const viewer = { s: null, t: null, offset: 1, total: 0 };

async function openViewer(s, t) {
  Object.assign(viewer, { s, t, offset: 1, total: 0 });
  $("#viewer-title").textContent = `${t.name} ${mainArg(t)}`.trim();
  $("#viewer").showModal();
  await viewerPage(1);
}

async function viewerPage(offset) {
  const { s, t } = viewer;
  try {
    const p = await api(`/api/sessions/${encodeURIComponent(s.sid)}/calls/${encodeURIComponent(t.call_id)}/result?offset=${offset}&limit=${PAGE}`);
    viewer.offset = p.offset;
    viewer.total = p.total_lines;
    const last = Math.min(p.total_lines, p.offset + p.lines.length - 1);
    $("#viewer-meta").textContent = `${fmt(p.total_lines)} lines · ${fmt(p.size)} bytes` + (p.sha256 ? ` · sha256 ${p.sha256.slice(0, 12)}` : "");
    $("#viewer-page").textContent = `lines ${fmt(p.offset)}–${fmt(last)}`;
    $("#viewer-prev").disabled = p.offset <= 1;
    $("#viewer-next").disabled = last >= p.total_lines;
    fill($("#viewer-body"), ...p.lines.map((line, i) =>
      h("span", { class: "line" }, h("span", { class: "ln", text: p.offset + i }), line + "\n")));
    $("#viewer-body").scrollTop = 0;
  } catch (e) { toast(e.message); }
}

// ---- start ---------------------------------------------------------------------------------

// ---- browser notifications -----------------------------------------------------------------
// The same moments the notify command hears of: a turn ends, a permission is needed, a recovery
// happened, a session is blocked. Asked for on a click (browsers refuse a request without one).
const watch = { seen: null, timer: 0 };
const ENDED = new Set(["completed", "failed", "stopped"]);

function notifyButton() {
  const b = $("#notify-toggle");
  if (!("Notification" in window)) { b.hidden = true; return; }
  b.hidden = Notification.permission !== "default";
  if (Notification.permission === "granted") watchSessions();
}

async function askToNotify() {
  try { await Notification.requestPermission(); } catch (e) { /* an old browser: no promise */ }
  notifyButton();
}

function changes(before, s) {
  const out = [];
  if (ENDED.has(s.status) && before.status !== s.status) out.push(`Turn ${s.status}`);
  if (s.status === "blocked" && before.status !== "blocked") out.push("Session blocked: it needs you");
  if (s.pending_permissions > before.pending_permissions) out.push("Permission needed");
  if (s.notice && !before.notice && s.status !== "blocked") out.push("Recovered after a crash");
  return out;
}

async function watchSessions() {
  clearTimeout(watch.timer);
  if (!("Notification" in window) || Notification.permission !== "granted") return;
  try {
    const data = await api("/api/sessions");
    const now = new Map(data.sessions.map((s) => [s.id, s]));
    if (watch.seen) {
      for (const s of data.sessions) {
        const before = watch.seen.get(s.id) || { status: "queued", pending_permissions: 0, notice: false };
        for (const what of changes(before, s)) {
          const n = new Notification(`Bubu · ${what}`, { body: s.title, tag: s.id + ":" + what });
          n.onclick = () => { window.focus(); location.hash = "#/s/" + encodeURIComponent(s.id); };
        }
      }
    }
    watch.seen = now;
  } catch (e) { /* the next round tries again */ }
  watch.timer = setTimeout(watchSessions, 3000);
}

document.addEventListener("DOMContentLoaded", async () => {
  $("#notify-toggle").addEventListener("click", askToNotify);
  $("#new-task-open").addEventListener("click", openNewTask);
  $("#new-task-cancel").addEventListener("click", () => $("#new-task").close());
  $("#new-task-form").addEventListener("submit", submitNewTask);
  $("#viewer-close").addEventListener("click", () => $("#viewer").close());
  $("#viewer-prev").addEventListener("click", () => viewerPage(Math.max(1, viewer.offset - PAGE)));
  $("#viewer-next").addEventListener("click", () => viewerPage(viewer.offset + PAGE));
  window.addEventListener("hashchange", route);
  try {
    app.config = await api("/api/config");
  } catch (e) {
    // Without a good token nothing else can load: say so in the page instead of a string of toasts.
    fill($("#main"), h("section", { class: "locked", id: "locked" }, h("h1", { text: "Bubu" }), h("p", { text: e.message })));
    return;
  }
  notifyButton();
  route();
});

// ---- what a turn changed ------------------------------------------------------------------

async function openDiff(s, at) {
  if (!s) return;
  let d;
  try {
    d = await api(`/api/sessions/${encodeURIComponent(s.sid)}/diff?at=${at}`);
  } catch (e) {
    toast(e.message);
    return;
  }
  let dlg = $("#diff");
  if (!dlg) { dlg = h("dialog", { id: "diff", class: "rewind diff" }); document.body.append(dlg); }
  const body = d.reason
    ? h("p", { class: "muted", text: d.reason })
    : d.changes.length
      ? [h("ul", { class: "rw-files" }, ...d.changes.map((c) => h("li", { class: "mono small", text: c.line }))),
         h("pre", { class: "diff mono small", text: d.diff + (d.cut ? "\n… (cut: `bubu diff` prints it whole)" : "") })]
      : h("p", { text: "This turn changed nothing in the workspace." });
  fill(dlg, h("h2", { text: `What this turn changed (seq ${d.from}–${d.to})` }),
    ...(Array.isArray(body) ? body : [body]),
    h("div", { class: "buttons" }, h("button", { onclick: () => dlg.close() }, "Close")));
  if (!dlg.open) dlg.showModal();
}

// ---- rewind --------------------------------------------------------------------------------

const REWIND_LABEL = { restore: "restore", delete: "delete", keep: "keep", unchanged: "unchanged",
  changed: "changed since", cannot: "cannot restore" };

async function openRewind(s, to, force = []) {
  if (!s) return;
  const base = `/api/sessions/${encodeURIComponent(s.sid)}/rewind`;
  const params = new URLSearchParams({ to: String(to) });
  for (const f of force) params.append("force", f);
  let p;
  try {
    p = await api(base + "?" + params);
  } catch (e) {
    toast(e.message);
    return;
  }
  let dlg = $("#rewind");
  if (!dlg) { dlg = h("dialog", { id: "rewind", class: "rewind" }); document.body.append(dlg); }
  const rows = p.files.map((f) => h("li", { class: "rw-" + f.action, dataset: { path: f.path, action: f.action } },
    h("strong", { text: REWIND_LABEL[f.action] || f.action }), " ", h("code", { text: f.path }),
    h("div", { class: "muted small", text: f.reason }),
    f.action === "changed" || force.includes(f.path)
      ? h("label", { class: "small" }, h("input", { type: "checkbox", class: "rw-force", checked: force.includes(f.path),
        onchange: (ev) => openRewind(s, to, ev.target.checked ? [...force, f.path] : force.filter((x) => x !== f.path)) }),
        " overwrite it anyway") : null));
  const cmds = p.commands.length
    ? h("div", { class: "rw-commands" }, h("strong", { text: `Commands ran after this point (${p.commands_note}):` }),
      h("ul", {}, ...p.commands.map((c) => h("li", { class: "mono small", text: `seq ${c.seq}: ${c.label}` }))))
    : null;
  const confirm = h("button", { class: "primary", id: "rewind-confirm", onclick: async () => {
    confirm.disabled = true;
    try {
      const done = await api(base, { json: { to, token: p.token, force } });
      dlg.close();
      location.hash = "#/s/" + done.fork;
    } catch (e) {
      toast(e.message);
      confirm.disabled = false;
    }
  } }, "Rewind and fork");
  fill(dlg, h("h2", { text: `Rewind to seq ${p.to}` }),
    h("p", { class: "muted", text: `The files go back as they were before this turn, and the log is forked there. Workspace ${p.workspace}.` }),
    p.files.length ? h("ul", { class: "rw-files" }, ...rows) : h("p", { text: "No file was changed by Bubu after this point." }),
    cmds,
    h("div", { class: "buttons" }, h("button", { onclick: () => dlg.close() }, "Cancel"), confirm));
  if (!dlg.open) dlg.showModal();
}
