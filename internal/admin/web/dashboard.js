// Tsubame admin dashboard: setup, login, live stats (server-sent events),
// placements, cache purge, campaigns and reports. No framework; the one
// third-party file is uPlot (MIT, uplot.iife.min.js, served from the
// binary like this one), which draws the reports' charts.
"use strict";

const $ = (id) => document.getElementById(id);
let csrf = "";
let role = "";
let features = {}; // the optional sections this server has (GET /api/v1/whoami)
let stream = null;
let streamRetry = 0;
const history = [];
const pageSize = 20;
const page = { offset: 0, total: 0, q: "" }; // the placements page shown

async function api(method, path, body) {
  const opts = { method, headers: {}, credentials: "same-origin" };
  if (body !== undefined) {
    opts.headers["Content-Type"] = "application/json";
    opts.body = JSON.stringify(body);
  }
  if (method !== "GET" && csrf) opts.headers["X-CSRF-Token"] = csrf;
  const res = await fetch(path, opts);
  let data = null;
  if (res.status !== 204) {
    try { data = await res.json(); } catch (e) { data = null; }
  }
  if (res.status === 401 && path !== "/api/v1/login" && path !== "/api/v1/setup") showLogin(); // their own forms say why
  return { status: res.status, data, retryAfter: res.headers.get("Retry-After") };
}

function show(section) {
  for (const id of ["setup", "login", "dash"]) $(id).hidden = id !== section;
  $("logout").hidden = section !== "dash";
}

function stopStream() {
  clearTimeout(streamRetry);
  if (stream) { stream.close(); stream = null; }
}

function showLogin() {
  stopStream();
  csrf = "";
  $("whoami").textContent = "";
  show("login");
}

// start asks who is logged in: /api/v1/whoami answers 200 either way (a
// 401 would be an error in the console on every load).
async function start() {
  const s = await api("GET", "/api/v1/whoami");
  if (s.status === 200 && s.data && s.data.user) { enter(s.data); return; }
  const setup = await api("GET", "/api/v1/setup");
  if (setup.status === 200 && setup.data.needed) { show("setup"); return; }
  showLogin();
}

const canEdit = () => role === "editor" || role === "admin";

// enter shows the dashboard to the user whoami named, asking only for the
// sections this server has.
function enter(session) {
  csrf = session.csrf_token || "";
  role = session.role;
  features = session.features || {};
  $("whoami").textContent = `${session.user} (${session.role})`;
  // Viewers read; editors and admins also change placements, purge and
  // change line items.
  $("editor-tools").hidden = !canEdit();
  $("placement-new").hidden = !canEdit();
  closeEditor(placementEditor);
  closeEditor(lineItemEditor);
  show("dash");
  $("endpoints-section").hidden = !features.endpoints;
  if (features.stats) startStream();
  else $("updated").textContent = "— not measured: this server keeps no live figures";
  loadPage(0);
  for (const [name, note, why] of [
    ["campaigns", "campaigns-count", "not kept: this server's store keeps no campaigns"],
    ["budgets", "budgets-count", "not kept: this server's store keeps no budgets"],
    ["reports", "report-range", "off on this server (report.enabled, or no endpoint writes the file access log)"],
    ["forecast", "forecast-range", "off on this server: forecasts are made from the reports"],
  ]) {
    $(name + "-body").hidden = !features[name];
    if (!features[name]) $(note).textContent = `${dash} ${why}`;
  }
  $("li-new").hidden = !canEdit() || !features.campaigns;
  if (features.campaigns) loadCampaigns();
  enterCreatives();
  enterObjects();
  if (features.reports) loadReport();
  if (features.forecast) loadForecast();
  $("explain-section").hidden = !features.explain || role !== "admin";
}

// Budgets: what the store holds of every budget and impression limit,
// read every 10 s while the dashboard is shown. What was committed, as the
// server recorded it and as the page read it since, is drawn beside the
// ideal curve.
const committedSeen = new Map(); // key -> [[time ms, committed], ...]
let budgetsTimer = null;
let budgetsByLine = new Map(); // line item -> its impression usage (total, else today's)

async function loadBudgets() {
  clearTimeout(budgetsTimer);
  if ($("dash").hidden || !features.budgets) return;
  budgetsTimer = setTimeout(loadBudgets, 10000);
  const r = await api("GET", "/api/v1/budgets");
  const body = $("budgets").tBodies[0];
  if (r.status !== 200 || !r.data) {
    body.replaceChildren();
    $("budgets-count").textContent = "";
    $("budgets-error").textContent = (r.data && r.data.error) || `Cannot read the budgets (${r.status}).`;
    return;
  }
  $("budgets-error").textContent = "";
  renderBudgets(r.data.budgets || []);
}

// amount shows an impression count or an amount of spend as the API gives
// it (spend is a decimal string of the currency: never a float here).
function amount(u, v) {
  if (u.kind === "spend") return `${v} ${currencyShown}`;
  return Number(v).toLocaleString("en");
}
let currencyShown = "";

let budgetList = []; // the last /api/v1/budgets answer, for the reports' spend chart

function renderBudgets(list) {
  budgetList = list;
  const body = $("budgets").tBodies[0];
  body.replaceChildren();
  budgetsByLine = new Map();
  const now = Date.now();
  for (const u of list) {
    if (u.kind === "impressions" && (!budgetsByLine.has(u.line_item) || !u.date)) budgetsByLine.set(u.line_item, u);
    const committed = Number(u.settled) + Number(u.reserved);
    // What the server recorded, then what this page read since.
    const recorded = (u.committed || []).map((p) => [Date.parse(p.time), Number(p.value)]);
    const since = recorded.length ? recorded[recorded.length - 1][0] : 0;
    const seen = (committedSeen.get(u.key) || []).filter(([t]) => t > since);
    seen.push([now, committed]);
    if (seen.length > 2000) seen.shift();
    committedSeen.set(u.key, seen);
    const curve = recorded.concat(seen);
    const tr = document.createElement("tr");
    tr.dataset.key = u.key;
    cell(tr, u.line_item ? `${u.line_item} (${u.campaign})` : `campaign ${u.campaign}`);
    cell(tr, `${u.kind === "spend" ? "spend" : "impressions"}, ${u.date ? u.date : "total"} · ${u.pacing}`);
    cell(tr, amount(u, u.booked), "num booked");
    cell(tr, amount(u, u.settled), "num delivered");
    cell(tr, amount(u, u.reserved), "num reserved");
    cell(tr, amount(u, u.remaining), "num remaining");
    const ahead = committed > Number(u.target);
    const td = cell(tr, amount(u, u.target), ahead ? "num target ahead" : "num target");
    if (ahead) td.title = "committed is ahead of the ideal: a lease round's worth at most";
    const c = document.createElement("canvas");
    c.className = "pace";
    c.width = 160; c.height = 36;
    c.setAttribute("aria-label", `pacing of ${u.key}`);
    cell(tr, "").appendChild(c);
    drawPace(c, u, curve);
    body.appendChild(tr);
  }
  $("budgets-count").textContent = list.length === 0 ? "no line item has a limit, no campaign a budget" :
    `${list.length} limits and budgets`;
  for (const td of document.querySelectorAll("#campaigns td.delivered")) {
    const u = budgetsByLine.get(td.parentElement.dataset.id);
    td.textContent = u ? amount(u, u.settled) : "—";
    td.title = u ? `impressions shown${u.date ? " on " + u.date : ""}, of ${amount(u, u.booked)} booked` :
      "counted for line items with an impression limit";
  }
}

// drawPace draws the ideal curve over the period (grey), what was
// committed while the page was open (blue) and now (a dot).
function drawPace(c, u, seen) {
  const g = c.getContext("2d");
  const w = c.width, h = c.height, booked = Number(u.booked) || 1;
  g.clearRect(0, 0, w, h);
  const ideal = u.ideal || [];
  if (ideal.length < 2) { // no bounded period: a bar of what is committed
    g.fillStyle = "#3b7ddd";
    g.fillRect(0, h / 3, w * Math.min(1, seen[seen.length - 1][1] / booked), h / 3);
    return;
  }
  const t0 = Date.parse(ideal[0].time), t1 = Date.parse(ideal[ideal.length - 1].time);
  const x = (t) => ((t - t0) / (t1 - t0)) * (w - 4) + 2;
  const y = (v) => h - 2 - (Number(v) / booked) * (h - 4);
  g.strokeStyle = "#999"; g.lineWidth = 1; g.beginPath();
  ideal.forEach((p, i) => (i ? g.lineTo : g.moveTo).call(g, x(Date.parse(p.time)), y(p.value)));
  g.stroke();
  g.strokeStyle = "#1f64c4"; g.fillStyle = "#1f64c4"; g.lineWidth = 2; g.beginPath();
  seen.forEach(([t, v], i) => (i ? g.lineTo : g.moveTo).call(g, x(t), y(v)));
  g.stroke();
  const [tn, vn] = seen[seen.length - 1];
  g.beginPath(); g.arc(Math.min(Math.max(x(tn), 2), w - 2), y(vn), 2.5, 0, 2 * Math.PI); g.fill();
}

$("setup-form").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  $("setup-error").textContent = "";
  const r = await api("POST", "/api/v1/setup", {
    token: $("setup-token").value.trim(), user: $("setup-user").value, password: $("setup-password").value,
  });
  if (r.status !== 201) { $("setup-error").textContent = (r.data && r.data.error) || "setup failed"; return; }
  // The token is spent: the form goes, the next step (the second factor,
  // then logging in) takes its place.
  $("setup-form").hidden = true;
  $("setup-token").value = "";
  $("setup-password").value = "";
  $("setup-name").textContent = r.data.user;
  $("setup-qr").src = r.data.totp_qr || "";
  $("setup-qr").hidden = !r.data.totp_qr;
  $("setup-secret").textContent = r.data.totp_secret;
  $("setup-url").textContent = r.data.totp_url;
  $("setup-done").hidden = false;
});

$("setup-continue").addEventListener("click", () => {
  $("login-user").value = $("setup-user").value;
  $("setup-qr").removeAttribute("src"); // the secret leaves the page
  $("setup-secret").textContent = "";
  $("setup-url").textContent = "";
  showLogin();
  $("login-password").focus();
});

$("login-form").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  $("login-error").textContent = "";
  const r = await api("POST", "/api/v1/login", {
    user: $("login-user").value, password: $("login-password").value, totp: $("login-totp").value.trim(),
  });
  $("login-password").value = "";
  $("login-totp").value = "";
  if (r.status === 429) { $("login-error").textContent = `Too many attempts; try again in ${r.retryAfter} s.`; return; }
  if (r.status !== 200) { $("login-error").textContent = "Invalid credentials."; return; }
  start(); // whoami: the session and the features
});

$("logout").addEventListener("click", async () => {
  stopStream(); // before the server ends it: no reconnection to a 401
  await api("POST", "/api/v1/logout");
  showLogin();
});

// Live stats: a point a second, then the per-endpoint view.
function startStream() {
  stopStream();
  stream = new EventSource("/api/v1/stats/stream");
  stream.onmessage = (ev) => {
    const p = JSON.parse(ev.data);
    history.push(p);
    if (history.length > 300) history.shift();
    render(p);
  };
  stream.addEventListener("endpoints", (ev) => renderEndpoints(JSON.parse(ev.data)));
  stream.onerror = async () => {
    // The server ends the stream when the session ends. No reconnection
    // by the browser (to a 401, if the session is gone): ask, then
    // reopen it only for a live session.
    stopStream();
    let s = null;
    try { s = await api("GET", "/api/v1/whoami"); } catch (e) { s = null; } // the server is away
    if (s && s.status === 200 && s.data && !s.data.user) { showLogin(); return; }
    const wait = s && s.status === 200 ? 2000 : 5000;
    streamRetry = setTimeout(() => { if (!$("dash").hidden) startStream(); }, wait);
  };
}

// The figures' one convention: a measured figure shows its number and
// unit, zero included ("0 req/s", "0 B"); "—" says nothing was measured
// (no request to time, no cache lookup, no /proc/stat) or the feature is
// not configured, and the tile's note says which. Nothing shows NaN, an
// empty tile or another dash.
const dash = "—";
const finite = (v) => typeof v === "number" && Number.isFinite(v);
const fmt = {
  num: (v) => (!finite(v) ? dash : v >= 1000 ? Math.round(v).toLocaleString("en") : v.toFixed(v < 10 && v !== 0 ? 1 : 0)),
  rate: (v) => (finite(v) ? fmt.num(v) + " req/s" : dash),
  count: (v, unit) => (finite(v) ? Math.round(v).toLocaleString("en") + (unit ? " " + unit : "") : dash),
  ms: (v) => (!finite(v) ? dash : (v >= 10 ? v.toFixed(0) : v.toFixed(2)) + " ms"),
  pct: (v, digits) => (finite(v) ? v.toFixed(digits) + " %" : dash),
  bytes: (v) => {
    if (!finite(v)) return dash;
    const units = ["B", "KiB", "MiB", "GiB"];
    let i = 0;
    while (v >= 1024 && i < units.length - 1) { v /= 1024; i++; }
    return v.toFixed(i ? 1 : 0) + " " + units[i];
  },
};

function render(p) {
  $("health").textContent = (p.ready ? "ready" : "not ready") + " / " + (p.store_up ? "up" : "down");
  $("rps").textContent = fmt.rate(p.rps);
  // Latency is measured on requests: none in the last second, none timed.
  const idle = !(p.rps > 0);
  $("p50").textContent = idle ? dash : fmt.ms(p.p50_ms);
  $("p99").textContent = idle ? dash : fmt.ms(p.p99_ms);
  $("p50-note").textContent = idle ? "no request in the last second" : "half of the last second's requests took less";
  $("p99-note").textContent = idle ? "no request in the last second" : "99 % of the last second's requests took less";
  const lookups = finite(p.cache_hit_rate) && p.cache_hit_rate >= 0;
  $("hit").textContent = lookups ? fmt.pct(100 * p.cache_hit_rate, 1) : dash;
  $("hit-note").textContent = lookups ? "lookups answered from memory, last second" : "no cache lookup in the last second";
  $("logq").textContent = fmt.bytes(p.log_buffered_bytes);
  $("logq-note").textContent = p.log_failing ? "FAILING: the log files cannot be written" : "in memory, not yet written to the log files";
  const shipping = finite(p.kafka_lag_lines) && p.kafka_lag_lines >= 0;
  $("kafka-tile").hidden = !shipping;
  if (shipping) {
    $("kafkalag").textContent = fmt.count(p.kafka_lag_lines, "lines");
    $("kafka-note").textContent = p.kafka_failing ? "FAILING: resending after an error" :
      p.kafka_oldest_seconds >= 1 ? `the oldest waits for ${Math.round(p.kafka_oldest_seconds)} s` : "written to the log, not yet acknowledged by Kafka";
  }
  $("hookq").textContent = fmt.count(p.webhook_queued, "waiting");
  $("hookq-note").textContent = `in the queue; ${fmt.count(p.webhook_in_flight)} being processed`;
  $("conns").textContent = fmt.count(p.connections, "open");
  $("goroutines").textContent = fmt.count(p.goroutines);
  $("rss").textContent = fmt.bytes(p.rss_bytes);
  $("rss-note").textContent = `resident memory of this process; Go heap ${fmt.bytes(p.heap_bytes)}`;
  $("pcpu").textContent = fmt.pct(p.process_cpu, 0);
  const cpu = p.cpu || [];
  $("mcpu").textContent = cpu.length ? fmt.pct(cpu.reduce((a, b) => a + b, 0) / cpu.length, 0) : dash;
  $("mcpu-note").textContent = cpu.length ? `all processes, average of ${cpu.length} cores (/proc/stat)` : "not measured: no /proc/stat here";
  $("updated").textContent = "updated " + new Date(p.time).toLocaleTimeString();
  renderCores(cpu);
  drawChart();
}

// What the routes that are not configured endpoints answer, for the
// endpoint table's titles.
const routePaths = {
  decide: "/api/decide", imp: "impression pixel", click: "click redirect",
  rtb: "OpenRTB bid requests", win: "win notices", bill: "billing notices", loss: "loss notices",
  json: "/json", callback: "/callback", lib: "/lib/ static files", health: "/healthz and /readyz",
  other: "unknown paths, hosts and endpoints",
};

// renderEndpoints fills the per-endpoint table from the stats stream's
// "endpoints" event: each route's requests, error share and latency over
// the window, and its requests since the start.
function renderEndpoints(w) {
  const secs = Math.round(w.window_seconds);
  $("endpoints-window").textContent = secs >= 60 ? "last minute" : `last ${secs} s (since the server started)`;
  const body = $("endpoints").tBodies[0];
  body.replaceChildren();
  for (const e of w.endpoints) {
    const tr = document.createElement("tr");
    tr.dataset.endpoint = e.endpoint;
    const name = cell(tr, e.endpoint, "name");
    const hint = e.configured ? `/api/${e.endpoint}.js` : routePaths[e.endpoint] || (e.endpoint.startsWith("webhook_") ? "webhook" : "");
    if (hint) {
      const small = document.createElement("small");
      small.textContent = " " + hint;
      name.appendChild(small);
    }
    name.title = e.configured ? "a configured endpoint, in all its formats (.js, .json...)" : "a route of the server";
    cell(tr, fmt.rate(e.rps), "num rps");
    cell(tr, fmt.count(e.requests), "num requests");
    cell(tr, fmt.count(e.client_errors), "num client");
    cell(tr, fmt.count(e.server_errors), "num server");
    const rate = cell(tr, e.error_rate == null ? dash : fmt.pct(100 * e.error_rate, 1), "num rate");
    if (e.error_rate > 0) rate.classList.add("bad");
    rate.title = Object.entries(e.codes || {}).map(([c, n]) => `${c === "0" ? "other" : c}: ${n}`).join(", ") || "no request in the window";
    cell(tr, e.p50_ms == null ? dash : fmt.ms(e.p50_ms), "num p50");
    cell(tr, e.p99_ms == null ? dash : fmt.ms(e.p99_ms), "num p99");
    cell(tr, fmt.count(e.total), "num total");
    body.appendChild(tr);
  }
  if (w.endpoints.length === 0) {
    const tr = document.createElement("tr");
    cell(tr, "no endpoint configured, no request yet").colSpan = 9;
    body.appendChild(tr);
  }
}

function renderCores(cpu) {
  const box = $("cores");
  while (box.children.length > cpu.length) box.lastChild.remove();
  while (box.children.length < cpu.length) {
    const row = document.createElement("div");
    row.className = "core";
    const name = document.createElement("span");
    name.textContent = "cpu" + box.children.length;
    const bar = document.createElement("div");
    bar.className = "bar";
    bar.appendChild(document.createElement("div"));
    const val = document.createElement("span");
    row.append(name, bar, val);
    box.appendChild(row);
  }
  $("cores-none").hidden = cpu.length > 0;
  cpu.forEach((v, i) => {
    const row = box.children[i];
    row.children[1].firstChild.style.width = (finite(v) ? Math.min(100, v) : 0).toFixed(1) + "%";
    row.children[2].textContent = fmt.pct(v, 0);
  });
}

// niceCeil is the smallest 1, 2 or 5 times a power of ten at least v.
function niceCeil(v) {
  const p = Math.pow(10, Math.floor(Math.log10(v)));
  for (const m of [1, 2, 5, 10]) if (m * p >= v) return m * p;
  return 10 * p;
}

// drawChart plots requests/s over the last five minutes: a y axis in
// requests/s with grid lines, an x axis with the clock time of each minute.
function drawChart() {
  const c = $("chart");
  const g = c.getContext("2d");
  const W = c.width, H = c.height, left = 64, right = 12, top = 12, bottom = 26;
  const pw = W - left - right, ph = H - top - bottom;
  const span = 300 * 1000; // ms shown
  g.clearRect(0, 0, W, H);
  g.font = "12px system-ui, sans-serif";
  const now = history.length ? Date.parse(history[history.length - 1].time) : Date.now();
  const max = niceCeil(Math.max(10, ...history.map((p) => p.rps)));
  const x = (t) => left + pw - ((now - t) / span) * pw;
  const y = (v) => top + ph - (v / max) * ph;
  // Y axis: five intervals, labelled.
  g.textAlign = "right";
  g.textBaseline = "middle";
  for (let i = 0; i <= 5; i++) {
    const v = (max * i) / 5;
    g.strokeStyle = i === 0 ? "#99a" : "#e3e5ea";
    g.lineWidth = 1;
    g.beginPath();
    g.moveTo(left, Math.round(y(v)) + 0.5);
    g.lineTo(left + pw, Math.round(y(v)) + 0.5);
    g.stroke();
    g.fillStyle = "#556";
    g.fillText(fmt.num(v), left - 8, y(v));
  }
  g.save();
  g.translate(14, top + ph / 2);
  g.rotate(-Math.PI / 2);
  g.textAlign = "center";
  g.fillText("req/s", 0, 0);
  g.restore();
  // X axis: a tick and the time at each whole minute.
  g.textAlign = "center";
  g.textBaseline = "top";
  for (let t = Math.ceil((now - span) / 60000) * 60000; t <= now; t += 60000) {
    const px = Math.round(x(t)) + 0.5;
    g.strokeStyle = "#e3e5ea";
    g.beginPath();
    g.moveTo(px, top);
    g.lineTo(px, top + ph + 4);
    g.stroke();
    g.fillStyle = "#556";
    g.fillText(new Date(t).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" }), px, top + ph + 7);
  }
  g.strokeStyle = "#99a";
  g.beginPath();
  g.moveTo(left + 0.5, top);
  g.lineTo(left + 0.5, top + ph);
  g.stroke();
  if (history.length < 2) return;
  g.save();
  g.beginPath();
  g.rect(left, top, pw, ph);
  g.clip();
  g.strokeStyle = "#3b7ddd";
  g.lineWidth = 2;
  g.beginPath();
  history.forEach((p, i) => {
    const px = x(Date.parse(p.time)), py = y(p.rps);
    if (i === 0) g.moveTo(px, py); else g.lineTo(px, py);
  });
  g.stroke();
  g.restore();
}

// Placements: a page at a time, in natural id order, with the count, and
// a search by id or name.
async function loadPage(offset) {
  const q = new URLSearchParams({ limit: String(pageSize), offset: String(Math.max(0, offset)) });
  if (page.q) q.set("q", page.q);
  const r = await api("GET", "/api/v1/placements?" + q);
  if (r.status !== 200) return;
  // A page past the end (placements deleted meanwhile): show the last one.
  if (r.data.placements.length === 0 && r.data.total > 0 && offset > 0) {
    loadPage(Math.floor((r.data.total - 1) / pageSize) * pageSize);
    return;
  }
  page.offset = r.data.offset;
  page.total = r.data.total;
  const body = $("placements").tBodies[0];
  parkEditor(placementEditor);
  body.replaceChildren();
  for (const p of r.data.placements) {
    const tr = document.createElement("tr");
    tr.dataset.id = p.id;
    for (const v of [p.id, p.name || "", p.urls.join("\n"), new Date(p.updated_at).toLocaleString()]) {
      const td = document.createElement("td");
      td.textContent = v; // never innerHTML: placement data is untrusted
      tr.appendChild(td);
    }
    tr.children[2].className = "urls";
    tagButton(tr, p.id);
    if (canEdit()) rowKeys(tr).addEventListener("click", () => edit(p));
    else tr.className = "readonly";
    body.appendChild(tr);
  }
  placeEditor(placementEditor);
  const shown = r.data.placements.length;
  const what = page.q ? `matching “${page.q}”` : "";
  $("page-count").textContent = page.total === 0
    ? (page.q ? `no placement ${what}` : "no placements")
    : `${(page.offset + 1).toLocaleString("en")}–${(page.offset + shown).toLocaleString("en")} of ${page.total.toLocaleString("en")} ${what}`.trim();
  $("page-first").disabled = $("page-prev").disabled = page.offset === 0;
  $("page-next").disabled = page.offset + shown >= page.total;
}

// rowKeys lets the keyboard open what a click on the row tr opens: the row
// takes the focus in its turn (Tab), and Enter or Space on it is the click.
function rowKeys(tr) {
  tr.tabIndex = 0;
  tr.addEventListener("keydown", (ev) => {
    if (ev.target !== tr || (ev.key !== "Enter" && ev.key !== " ")) return;
    ev.preventDefault();
    tr.click();
  });
  return tr;
}

// Another page closes the editor: its row is gone.
$("page-first").addEventListener("click", () => { closeEditor(placementEditor); loadPage(0); });
$("page-prev").addEventListener("click", () => { closeEditor(placementEditor); loadPage(page.offset - pageSize); });
$("page-next").addEventListener("click", () => { closeEditor(placementEditor); loadPage(page.offset + pageSize); });

// Ad tags: a placement's "Get tag" shows the snippets a publisher pastes
// into a page (GET /api/v1/placements/{id}/tag writes them, every value
// escaped), as text, with a Copy button each.
function tagButton(tr, id) {
  const b = document.createElement("button");
  b.type = "button";
  b.className = "tag";
  b.textContent = "Get tag";
  b.setAttribute("aria-label", `Get tag of placement ${id}`); // the visible text first, for speech input
  b.addEventListener("click", (ev) => { ev.stopPropagation(); showTag(id); });
  cell(tr, "").appendChild(b);
}

async function showTag(id) {
  const panel = $("tag-panel");
  panel.hidden = false;
  $("tag-title").textContent = `Ad tag of placement ${id}`;
  $("tag-status").textContent = "";
  const r = await api("GET", `/api/v1/placements/${encodeURIComponent(id)}/tag`);
  const ok = r.status === 200 && r.data;
  $("tag-error").textContent = ok ? "" : `Cannot make the tag: ${(r.data && r.data.error) || r.status}`;
  $("tag-base").textContent = ok ? `Public address: ${r.data.base_url} (${r.data.base_note}).` : "";
  for (const [kind, what] of [["script", "no endpoint answers .js as JSONP of a stored placement"], ["decide", "/api/decide is off (ads.enabled)"]]) {
    const t = ok && r.data[kind];
    $(`tag-${kind}`).value = t ? t.snippet : "";
    $(`tag-${kind}-note`).textContent = t ? t.note : ok ? `Not served: ${what}.` : "";
    $(`tag-${kind}-copy`).disabled = !t;
  }
  $("tag-endpoint").textContent = ok && r.data.script ? `/api/${r.data.script.endpoint}.js` : "";
  panel.scrollIntoView({ block: "nearest" });
}

async function copyTag(kind) {
  const text = $(`tag-${kind}`).value;
  try {
    await navigator.clipboard.writeText(text);
  } catch (e) { // no clipboard API (a page not served over a secure origin): select it
    $(`tag-${kind}`).select();
    if (!document.execCommand("copy")) { $("tag-status").textContent = "Select the text and copy it."; return; }
  }
  $("tag-status").textContent = "Copied.";
}
$("tag-script-copy").addEventListener("click", () => copyTag("script"));
$("tag-decide-copy").addEventListener("click", () => copyTag("decide"));
$("tag-close").addEventListener("click", () => { $("tag-panel").hidden = true; });

let searchTimer = 0;
function searchNow() {
  clearTimeout(searchTimer);
  page.q = $("search").value.trim();
  closeEditor(placementEditor);
  loadPage(0);
}
$("search").addEventListener("input", () => {
  clearTimeout(searchTimer);
  searchTimer = setTimeout(searchNow, 250);
});
$("search-form").addEventListener("submit", (ev) => { ev.preventDefault(); searchNow(); });

// The editors open in a row of their own right below the row they edit
// (first in the table for a new one), and follow that row when the table
// is drawn again. Closed, an editor waits hidden where the page holds it.
function makeEditor(id, table, cols) {
  const el = $(id);
  const row = document.createElement("tr");
  row.className = "editor-row";
  const td = document.createElement("td");
  td.colSpan = cols;
  row.appendChild(td);
  return { el, table, row, home: el.parentNode, next: el.nextSibling, anchor: null };
}
const placementEditor = makeEditor("placement-editor", "placements", 5);
const lineItemEditor = makeEditor("line-item-tools", "campaigns", 8);

// openEditor shows ed under the row of the given data-id ("": a new one).
function openEditor(ed, anchor) {
  ed.anchor = anchor;
  placeEditor(ed);
  ed.row.scrollIntoView({ block: "nearest" });
}

function placeEditor(ed) {
  if (ed.anchor === null) return;
  const body = $(ed.table).tBodies[0];
  const target = ed.anchor === "" ? null : [...body.rows].find((r) => r.dataset.id === ed.anchor);
  ed.row.firstChild.appendChild(ed.el);
  ed.el.hidden = false;
  if (target) target.after(ed.row);
  else body.prepend(ed.row);
}

// parkEditor puts ed back in its place before its table is drawn again,
// so that the page always holds its fields.
function parkEditor(ed) {
  ed.home.insertBefore(ed.el, ed.next);
  ed.row.remove();
}

function closeEditor(ed) {
  ed.anchor = null;
  parkEditor(ed);
  ed.el.hidden = true;
}

function edit(p) {
  $("edit-title").textContent = `Edit placement ${p.id}`;
  $("edit-id").value = p.id;
  $("edit-name").value = p.name || "";
  $("edit-urls").value = p.urls.join("\n");
  $("edit-deps").value = (p.deps || []).join("\n");
  $("edit-status").textContent = "";
  openEditor(placementEditor, p.id);
}

$("placement-new").addEventListener("click", () => {
  edit({ id: "", urls: [] });
  $("edit-title").textContent = "New placement";
  $("edit-id").focus();
});
$("edit-close").addEventListener("click", () => closeEditor(placementEditor));

const lines = (s) => s.split("\n").map((l) => l.trim()).filter((l) => l);

$("edit-form").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const id = $("edit-id").value.trim();
  const body = { urls: lines($("edit-urls").value), name: $("edit-name").value, deps: lines($("edit-deps").value) };
  const r = await api("PUT", "/api/v1/placements/" + encodeURIComponent(id), body);
  $("edit-status").textContent = r.status === 200 ? `Saved ${id}.` : `Not saved: ${(r.data && r.data.error) || r.status}`;
  if (r.status === 200) {
    placementEditor.anchor = id; // a new placement's row, when this page shows it
    $("edit-title").textContent = `Edit placement ${id}`;
    loadPage(page.offset);
  }
});

$("edit-delete").addEventListener("click", async () => {
  const id = $("edit-id").value.trim();
  if (!id || !confirm(`Delete placement ${id}?`)) return;
  const r = await api("DELETE", "/api/v1/placements/" + encodeURIComponent(id));
  $("edit-status").textContent = r.status === 204 ? `Deleted ${id}.` : `Not deleted: ${(r.data && r.data.error) || r.status}`;
  if (r.status === 204) loadPage(page.offset);
});

$("purge-form").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const keys = lines($("purge-keys").value);
  const kind = document.querySelector('input[name="purge-kind"]:checked').value;
  const r = await api("POST", "/api/v1/purge", kind === "ids" ? { ids: keys } : { deps: keys });
  $("purge-status").textContent = r.status === 200 ? `Purged ${keys.length} ${kind}.` : `Not purged: ${(r.data && r.data.error) || r.status}`;
});

// Campaigns: advertisers, their campaigns, and each campaign's line items,
// from one export of the stored set (a consistent view).
let lineItem = null; // the line item in the editor, as loaded

async function loadCampaigns() {
  const r = await api("GET", "/api/v1/campaigns/export");
  const body = $("campaigns").tBodies[0];
  if (r.status !== 200 || !r.data) {
    closeEditor(lineItemEditor);
    body.replaceChildren();
    $("campaigns-count").textContent = "";
    $("campaigns-error").textContent = (r.data && r.data.error) || `Cannot read the campaigns (${r.status}).`;
    return;
  }
  $("campaigns-error").textContent = "";
  currencyShown = r.data.currency || "USD";
  renderCampaigns(r.data);
  loadBudgets();
  loadLineStatus();
}

function byKey(list, key) {
  const m = new Map();
  for (const o of list) {
    if (!m.has(o[key])) m.set(o[key], []);
    m.get(o[key]).push(o);
  }
  return m;
}

// cell appends a cell holding text: never innerHTML, campaign data is
// untrusted.
function cell(tr, text, className) {
  const td = document.createElement("td");
  td.textContent = text;
  if (className) td.className = className;
  tr.appendChild(td);
  return td;
}

function groupRow(className, text) {
  const tr = document.createElement("tr");
  tr.className = className;
  cell(tr, text).colSpan = 9;
  return tr;
}

// flight is the window a line item serves in, its own within its
// campaign's: dates (and times, unless midnight) as the file writes them,
// in full in the title.
function flight(c, li) {
  const at = (s) => (s ? Date.parse(s) : NaN);
  const start = !li.start || at(c.start) > at(li.start) ? c.start : li.start;
  const end = !li.end || at(c.end) < at(li.end) ? c.end : li.end;
  const short = (s) => {
    const m = /^(\d{4}-\d\d-\d\d)T(\d\d:\d\d)/.exec(s || "");
    return !m ? s : m[2] === "00:00" ? m[1] : `${m[1]} ${m[2]}`;
  };
  if (!start && !end) return { text: "always", title: "" };
  return { text: `${short(start) || "now"} → ${short(end) || "open"}`, title: `${start || "now"} → ${end || "open"}` };
}

function campaignText(c, currency) {
  const parts = [`campaign ${c.id}`, flight(c, {}).text];
  const b = c.budget || {};
  if (b.total) parts.push(`budget ${b.total} ${currency}`);
  if (b.daily) parts.push(`${b.daily} ${currency} a day`);
  const pacing = typeof c.pacing === "string" ? c.pacing : (c.pacing && c.pacing.mode);
  if (pacing) parts.push(`pacing ${pacing}`);
  return parts.join(" · ");
}

function lineRow(li, c, currency) {
  const tr = document.createElement("tr");
  tr.className = canEdit() ? "line" : "line readonly";
  tr.dataset.id = li.id;
  const paused = li.status === "paused";
  cell(tr, li.id);
  cell(tr, paused ? "paused" : "active", paused ? "status paused" : "status");
  cell(tr, "…", "serving"); // filled in by loadLineStatus
  cell(tr, String(li.priority), "num");
  cell(tr, String(li.weight), "num");
  cell(tr, `${li.cpm} ${currency}`, "num");
  const f = flight(c, li);
  cell(tr, f.text, "flight").title = f.title;
  // Filled in from the budgets (loadBudgets): line items with an
  // impression limit have their delivery counted in the store.
  const u = budgetsByLine.get(li.id);
  cell(tr, u ? amount(u, u.settled) : "—", "num delivered").title = u ? "impressions shown" : "counted for line items with an impression limit";
  const b = document.createElement("button");
  b.type = "button";
  b.className = "pause";
  b.textContent = paused ? "Resume" : "Pause";
  b.disabled = !canEdit();
  b.title = canEdit() ? "" : "editors pause and resume line items";
  b.addEventListener("click", (ev) => { ev.stopPropagation(); setPaused(li.id, !paused); });
  cell(tr, "").appendChild(b);
  if (canEdit()) rowKeys(tr).addEventListener("click", () => editLineItem(li));
  return tr;
}

function renderCampaigns(set) {
  const body = $("campaigns").tBodies[0];
  parkEditor(lineItemEditor);
  body.replaceChildren();
  const currency = set.currency || "USD";
  const campaignsOf = byKey(set.campaigns, "advertiser"), itemsOf = byKey(set.line_items, "campaign");
  // The line items of an archived advertiser or campaign are done with as
  // theirs are: listed with the archived line items only.
  const showArchived = $("show-archived").checked;
  for (const a of set.advertisers) {
    if (a.status === "archived" && !showArchived) continue;
    body.appendChild(groupRow("adv", `${a.name} (${a.id})${a.status === "archived" ? ": archived, none of its line items serves" : ""}`));
    for (const c of campaignsOf.get(a.id) || []) {
      if (c.status === "archived" && !showArchived) continue;
      body.appendChild(groupRow("camp", campaignText(c, currency))).dataset.campaign = c.id;
      const items = itemsOf.get(c.id) || [];
      if (items.length === 0) body.appendChild(groupRow("none", "no line items"));
      for (const li of items) body.appendChild(lineRow(li, c, currency));
    }
  }
  bulkControls(set);
  placeEditor(lineItemEditor);
  const paused = set.line_items.filter((li) => li.status === "paused").length;
  $("campaigns-count").textContent = set.advertisers.length === 0 ? "none yet: import a campaign file" :
    `${set.advertisers.length} advertisers, ${set.campaigns.length} campaigns, ${set.line_items.length} line items (${paused} paused)`;
}

async function setPaused(id, pause) {
  const r = await api("POST", `/api/v1/line-items/${encodeURIComponent(id)}/${pause ? "pause" : "resume"}`);
  if (r.status !== 200) {
    $("campaigns-error").textContent = `Not ${pause ? "paused" : "resumed"}: ${(r.data && r.data.error) || r.status}`;
    return;
  }
  await loadCampaigns();
  if (lineItem && lineItem.id === id && lineItemEditor.anchor === id) editLineItem(r.data);
}

// The line item form's fields by the names of a problem's path (the API's,
// from the object: cpm, creatives[0], targeting.countries[0],
// frequency[1].per), the longest that names a field: each targeting list
// has its picker, include and exclude alike.
const lineItemFields = { id: "li-id", campaign: "li-campaign", status: "li-status", priority: "li-priority",
  weight: "li-weight", cpm: "li-cpm", creatives: "li-creatives", targeting: "li-targeting",
  name: "li-name", start: "li-start", end: "li-end", limits: "li-limits",
  "limits.impressions.total": "li-limit-total", "limits.impressions.daily": "li-limit-daily",
  frequency: "li-frequency", deals: "li-deals", "targeting.exclude": "li-x" };
const liCriteriaNames = ["placements", "sites", "apps", "countries", "regions", "devices", "os", "browsers", "hours",
  "weekdays", "keyvalues"];
for (const n of liCriteriaNames) {
  lineItemFields["targeting." + n] = "li-t-" + n;
  lineItemFields["targeting.exclude." + n] = "li-x-" + n;
}

// showFieldProblems shows each problem under the field its path names,
// marking the field invalid, and clears the fields without one; it returns
// the problems no field shows (of other fields or objects), as text. A
// path naming the edited object by kind and id (line_item "li-9".cpm) is
// that object's.
function showFieldProblems(fields, id, problems) {
  const byField = {}, rest = [];
  const own = `"${id}".`;
  for (const p of problems) {
    let path = p.path || "";
    const at = path.indexOf(own);
    if (at >= 0 && !path.slice(0, at).includes(".")) path = path.slice(at + own.length);
    // The longest name that is a field's: targeting.exclude.countries[0]
    // is targeting.exclude.countries's, else targeting.exclude's, ...
    let name = path.replace(/\[[^\]]*\]/g, "");
    while (!fields[name] && name.includes(".")) name = name.slice(0, name.lastIndexOf("."));
    if (!fields[name]) name = path.split(/[.[]/)[0];
    const field = fields[name];
    if (field) {
      (byField[field] = byField[field] || []).push((path === name ? "" : path + ": ") + p.message);
    } else {
      rest.push((p.path ? p.path + ": " : "") + p.message);
    }
  }
  for (const field of Object.values(fields)) {
    const input = $(field);
    let note = document.getElementById(field + "-problem");
    if (!byField[field]) {
      input.removeAttribute("aria-invalid");
      if (note) note.remove();
      continue;
    }
    if (!note) {
      note = document.createElement("span");
      note.id = field + "-problem";
      note.className = "field-problem";
      input.insertAdjacentElement("afterend", note);
    }
    note.textContent = byField[field].join("\n");
    input.setAttribute("aria-invalid", "true");
    input.setAttribute("aria-describedby", note.id);
  }
  return rest;
}

// loadHistory lists the changes of line item id that the audit log holds,
// newest first (GET /api/v1/line-items/{id}/history).
async function loadHistory(id) {
  const box = $("li-history-box"), list = $("li-history"), note = $("li-history-note");
  list.replaceChildren();
  note.textContent = "";
  box.hidden = !id;
  if (!id) return;
  const r = await api("GET", `/api/v1/line-items/${encodeURIComponent(id)}/history?limit=20`);
  if (r.status !== 200) {
    note.textContent = `Cannot read the changes: ${(r.data && r.data.error) || r.status}`;
    return;
  }
  for (const c of r.data.changes) {
    const item = document.createElement("li");
    const when = document.createElement("time");
    when.dateTime = c.time;
    when.textContent = new Date(c.time).toLocaleString();
    item.append(when, ` ${c.actor || "unknown"}: ${c.action.replace(/^line_item\./, "")}${c.detail ? " (" + c.detail + ")" : ""}`);
    list.append(item);
  }
  note.textContent = r.data.changes.length === 0
    ? "No change through this server's admin in its audit log (imports are logged once for their whole file)."
    : "From this server's audit log; imports are logged once for their whole file.";
}

function editLineItem(li) {
  lineItem = li;
  $("li-title").textContent = li.id ? `Edit line item ${li.id}` : "New line item";
  fillLineItem(li);
  $("li-edit-status").textContent = "";
  showFieldProblems(lineItemFields, li.id, []);
  openEditor(lineItemEditor, li.id);
  loadHistory(li.id);
  loadLineItemChoices(li);
}

$("li-new").addEventListener("click", () => {
  editLineItem({ id: "", campaign: "", priority: 8, weight: 1, cpm: "", creatives: [], targeting: {} });
  lineItem = null;
  $("li-id").focus();
});
$("li-close").addEventListener("click", () => closeEditor(lineItemEditor));

$("li-form").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const id = $("li-id").value.trim();
  const body = readLineItem();
  showFieldProblems(lineItemFields, id, []);
  const r = await api("PUT", "/api/v1/line-items/" + encodeURIComponent(id), body);
  if (r.status !== 200) {
    const rest = showFieldProblems(lineItemFields, id, (r.data && r.data.problems) || []);
    $("li-edit-status").textContent = r.data && r.data.problems
      ? `Not saved: ${r.data.problems.length === 1 ? "1 problem" : r.data.problems.length + " problems"}` +
        (rest.length ? `:\n${rest.join("\n")}` : ", shown on the fields.")
      : `Not saved: ${(r.data && r.data.error) || r.status}`;
    return;
  }
  $("li-edit-status").textContent = `Saved ${id}.`;
  lineItem = r.data;
  lineItemEditor.anchor = id;
  $("li-title").textContent = `Edit line item ${id}`;
  loadCampaigns();
  loadHistory(id);
  loadLineGeo(id, true);
});

$("li-delete").addEventListener("click", async () => {
  const id = $("li-id").value.trim();
  if (!id || !confirm(`Delete line item ${id}?`)) return;
  const r = await api("DELETE", "/api/v1/line-items/" + encodeURIComponent(id));
  $("li-edit-status").textContent = r.status === 204 ? `Deleted ${id}.` : `Not deleted: ${(r.data && r.data.error) || r.status}`;
  if (r.status === 204) { lineItem = null; loadCampaigns(); }
});

// The line item form: every field of the model, and pickers for the
// targeting, include and exclude alike, that write exactly the objects the
// API takes (empty lists left out). A line item read fills them back
// losslessly: each list keeps its order and its values the pickers do not
// offer, and a time left as it was is written as it was read. The JSON
// disclosure shows, read-only, the object Save will send.
const liForm = { set: null, times: {}, lists: { "li-t": {}, "li-x": {} }, found: { "li-t": [], "li-x": [] }, total: {} };
// The values validation and the User-Agent parser know (campaign.go,
// internal/device; docs/ads.md lists them).
const liDevices = ["desktop", "mobile", "tablet", "tv"];
const liOSes = ["windows", "macos", "ios", "android", "linux", "chromeos", "freebsd", "openbsd"];
const liBrowsers = ["chrome", "safari", "firefox", "edge", "opera", "operamini", "samsung", "ie", "vivaldi", "yandex",
  "silk", "huawei", "falkon", "nintendo", "androidbrowser"];
const liWeekdays = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"];
// ISO 3166-1 alpha-2, the codes assigned; their names are the browser's.
const liCountries = ("AD AE AF AG AI AL AM AO AQ AR AS AT AU AW AX AZ BA BB BD BE BF BG BH BI BJ BL BM BN BO BQ BR BS BT " +
  "BV BW BY BZ CA CC CD CF CG CH CI CK CL CM CN CO CR CU CV CW CX CY CZ DE DJ DK DM DO DZ EC EE EG EH ER ES ET FI FJ FK " +
  "FM FO FR GA GB GD GE GF GG GH GI GL GM GN GP GQ GR GS GT GU GW GY HK HM HN HR HT HU ID IE IL IM IN IO IQ IR IS IT JE " +
  "JM JO JP KE KG KH KI KM KN KP KR KW KY KZ LA LB LC LI LK LR LS LT LU LV LY MA MC MD ME MF MG MH MK ML MM MN MO MP MQ " +
  "MR MS MT MU MV MW MX MY MZ NA NC NE NF NG NI NL NO NP NR NU NZ OM PA PE PF PG PH PK PL PM PN PR PS PT PW PY QA RE RO " +
  "RS RU RW SA SB SC SD SE SG SH SI SJ SK SL SM SN SO SR SS ST SV SX SY SZ TC TD TF TG TH TJ TK TL TM TN TO TR TT TV TW " +
  "TZ UA UG UM US UY UZ VA VC VE VG VI VN VU WF WS YE YT ZA ZM ZW").split(" ");
const liListNames = ["placements", "countries", "regions", "devices", "os", "browsers", "weekdays"];
let liCountryNamer = null;
function liCountryName(code) {
  try {
    liCountryNamer = liCountryNamer || new Intl.DisplayNames(["en"], { type: "region" });
    const n = liCountryNamer.of(code);
    return n && n !== code ? n : "";
  } catch (e) {
    return "";
  }
}

function liEl(tag, props, ...children) {
  const e = document.createElement(tag);
  Object.assign(e, props || {});
  e.append(...children);
  return e;
}

// buildCriteria makes the pickers of one Criteria under the element
// prefix ("li-t" include, "li-x" exclude); each picker's id is
// prefix-name, as lineItemFields names them.
function buildCriteria(prefix) {
  const box = $(prefix);
  // Each picker in a box of its own, which holds its problems too.
  const set = (name, legend, ...body) => liEl("div", { className: "picker-box" },
    liEl("fieldset", { id: `${prefix}-${name}`, className: "picker " + name }, liEl("legend", { textContent: legend }), ...body));
  const search = liEl("input", { id: `${prefix}-placements-q`, type: "search", maxLength: 128, autocomplete: "off", placeholder: "search by id or name" });
  search.setAttribute("aria-label", "search the placements");
  let searchTimer = 0;
  search.addEventListener("keydown", (ev) => { if (ev.key === "Enter") ev.preventDefault(); }); // a search, not a save
  search.addEventListener("input", () => { clearTimeout(searchTimer); searchTimer = setTimeout(() => loadLinePlacements(prefix, search.value.trim()), 250); });
  const chips = (name, hint, list) => {
    const input = liEl("input", { id: `${prefix}-${name}-in`, maxLength: 64, autocomplete: "off", placeholder: hint });
    if (list) input.setAttribute("list", list);
    input.setAttribute("aria-label", `add ${name}`);
    const add = liEl("button", { type: "button", id: `${prefix}-${name}-add`, textContent: "Add" });
    const addNow = () => {
      for (const v of input.value.split(/[\s,]+/).map((x) => x.trim().toUpperCase()).filter((x) => x)) {
        if (!liForm.lists[prefix][name].includes(v)) liForm.lists[prefix][name].push(v);
      }
      input.value = "";
      renderChips(prefix, name);
      lineItemJSON();
    };
    add.addEventListener("click", addNow);
    input.addEventListener("keydown", (ev) => { if (ev.key === "Enter") { ev.preventDefault(); addNow(); } });
    return [liEl("div", { id: `${prefix}-${name}-chips`, className: "chips" }), liEl("div", { className: "chip-add" }, input, add)];
  };
  const hourOptions = (first, last, any) => [new Option(any, ""), ...Array.from({ length: last - first + 1 }, (_, i) => new Option(`${String(first + i).padStart(2, "0")}:00`, String(first + i)))];
  const from = liEl("select", { id: `${prefix}-hours-from` }, ...hourOptions(0, 23, "any hour"));
  const to = liEl("select", { id: `${prefix}-hours-to` }, ...hourOptions(1, 24, "—"));
  const kvAdd = liEl("button", { type: "button", id: `${prefix}-keyvalues-add`, textContent: "Add a key" });
  kvAdd.addEventListener("click", () => { addKeyValueRow(prefix, "", []); lineItemJSON(); });
  box.replaceChildren(
    set("placements", "Placements", search, liEl("div", { id: `${prefix}-placements-list`, className: "checks scroll" }),
      liEl("p", { id: `${prefix}-placements-note`, className: "hint" })),
    liEl("div", { className: "fields" },
      liEl("label", {}, "Sites, one domain per line (with its subdomains)", liEl("textarea", { id: `${prefix}-sites`, rows: 2, spellcheck: false })),
      liEl("label", {}, "Apps, one store id per line", liEl("textarea", { id: `${prefix}-apps`, rows: 2, spellcheck: false }))),
    liEl("div", { className: "fields" },
      set("countries", "Countries (ISO 3166-1)", ...chips("countries", "JP, or a name", "li-country-codes"),
        liEl("p", { id: `${prefix}-geo-warning`, className: "warning", hidden: true })),
      set("regions", "Regions (ISO 3166-2)", ...chips("regions", "JP-13"))),
    liEl("div", { className: "fields" },
      set("devices", "Devices", liEl("div", { id: `${prefix}-devices-list`, className: "checks" })),
      set("os", "Operating systems", liEl("div", { id: `${prefix}-os-list`, className: "checks" })),
      set("browsers", "Browsers", liEl("div", { id: `${prefix}-browsers-list`, className: "checks" }))),
    liEl("div", { className: "fields" },
      set("hours", "Hours", liEl("div", { className: "hour-range" }, liEl("label", {}, "From", from), liEl("label", {}, "To (excluded)", to)),
        liEl("p", { className: "hint", textContent: "In the campaign's time zone. From 22 to 6 wraps midnight: 22:00 to 06:00." })),
      set("weekdays", "Weekdays", liEl("div", { id: `${prefix}-weekdays-list`, className: "checks" })),
      set("keyvalues", "Key-values (kv.KEY=VALUE of the request)", liEl("div", { id: `${prefix}-keyvalues-rows` }), kvAdd,
        liEl("p", { className: "hint", textContent: "Every key listed must match one of its values." }))),
  );
}

// renderChecks draws a checklist of options ([value, label, note]) with the
// values of list ticked, and the values of list no option offers after
// them, so that none is lost; ticking adds at the end, unticking removes.
function renderChecks(box, options, list, onChange) {
  const known = new Set(options.map((o) => o[0]));
  const all = options.concat(list.filter((v) => !known.has(v)).map((v) => [v, v, "not in the list"]));
  box.replaceChildren(...all.map(([value, label, note]) => {
    const c = liEl("input", { type: "checkbox", value, checked: list.includes(value) });
    c.addEventListener("change", () => {
      const i = list.indexOf(value);
      if (c.checked && i < 0) list.push(value);
      if (!c.checked && i >= 0) list.splice(i, 1);
      if (onChange) onChange();
      lineItemJSON();
    });
    const l = liEl("label", { className: "check" }, c, " " + label);
    if (note) l.append(" ", liEl("small", { textContent: note, className: note === "pending" || note === "rejected" ? "status " + note : "" }));
    return l;
  }));
}

function renderChips(prefix, name) {
  const list = liForm.lists[prefix][name];
  $(`${prefix}-${name}-chips`).replaceChildren(...list.map((v) => {
    const x = liEl("button", { type: "button", textContent: "×", className: "chip-remove" });
    x.setAttribute("aria-label", `remove ${v}`);
    x.addEventListener("click", () => { list.splice(list.indexOf(v), 1); renderChips(prefix, name); lineItemJSON(); });
    const label = name === "countries" && liCountryName(v) ? `${v} ${liCountryName(v)}` : v;
    return liEl("span", { className: "chip", title: v }, label, x);
  }));
  geoWarning(prefix);
}

// geoWarning warns, next to countries and regions, that the server has no
// geo database (the line item's reasons say no_geo_database): such
// targeting never matches there.
function geoWarning(prefix) {
  const w = $(`${prefix}-geo-warning`);
  const lists = liForm.lists[prefix];
  const geo = (lists.countries || []).length + (lists.regions || []).length > 0;
  w.hidden = !(liForm.noGeo && geo);
  w.textContent = "This server has no geo database (geo.database): countries and regions never match, so " +
    (prefix === "li-t" ? "the line item serves nothing." : "this exclusion excludes nothing.");
}

function addKeyValueRow(prefix, key, values) {
  const sep = values.some((v) => v.includes(",")) ? " " : ", ";
  const k = liEl("input", { className: "kv-key", value: key, maxLength: 64, autocomplete: "off", placeholder: "key" });
  const v = liEl("input", { className: "kv-values", value: values.join(sep), maxLength: 4000, autocomplete: "off",
    placeholder: "values, comma-separated" });
  k.setAttribute("aria-label", "key");
  v.setAttribute("aria-label", "values");
  const x = liEl("button", { type: "button", textContent: "Remove" });
  const row = liEl("div", { className: "kv-row" }, k, v, x);
  row.dataset.sep = sep;
  x.addEventListener("click", () => { row.remove(); lineItemJSON(); });
  $(`${prefix}-keyvalues-rows`).append(row);
}

// The frequency caps' windows: Go durations ("24h", "1h30m") as seconds
// and back, written as the server writes them.
const liUnits = [["days", 86400], ["hours", 3600], ["minutes", 60], ["seconds", 1]];
function durationSeconds(s) {
  const m = /^(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$/.exec(s || "");
  if (!m || !s) return NaN;
  return Number(m[1] || 0) * 3600 + Number(m[2] || 0) * 60 + Number(m[3] || 0);
}
function durationText(sec) {
  const h = Math.floor(sec / 3600), m = Math.floor((sec % 3600) / 60), s = sec % 60;
  return (h ? h + "h" : "") + (m ? m + "m" : "") + (s ? s + "s" : "") || "0s";
}

function addFrequencyRow(cap) {
  const sec = durationSeconds(cap.per);
  const [unit, size] = liUnits.find(([, n]) => sec > 0 && sec % n === 0) || ["hours", 3600];
  const imps = liEl("input", { type: "number", min: 1, step: 1, className: "fc-imps", value: cap.impressions === undefined ? "" : cap.impressions });
  const n = liEl("input", { type: "number", min: 1, step: 1, className: "fc-n", value: sec > 0 ? sec / size : "" });
  const u = liEl("select", { className: "fc-unit" }, ...liUnits.map(([name, s]) => new Option(name, String(s))));
  u.value = String(size);
  imps.setAttribute("aria-label", "impressions");
  n.setAttribute("aria-label", "per how many");
  u.setAttribute("aria-label", "unit");
  const x = liEl("button", { type: "button", textContent: "Remove" });
  const row = liEl("div", { className: "fc-row" }, imps, " impressions per ", n, u, x);
  // A window the form cannot show (not whole seconds) is kept as it is.
  if (cap.per && !(sec > 0)) row.dataset.raw = cap.per;
  x.addEventListener("click", () => { row.remove(); lineItemJSON(); });
  $("li-frequency-rows").append(row);
}

// Times: a datetime-local input shows an instant in the campaign's time
// zone; what it holds is written in RFC 3339 with the zone's offset.
function liZone() {
  const c = liCampaign();
  return (c && c.timezone) || "Asia/Tokyo";
}
function liCampaign() {
  const id = $("li-campaign").value;
  return ((liForm.set && liForm.set.campaigns) || []).find((c) => c.id === id) || null;
}
function zoneLocal(iso, zone) {
  const t = Date.parse(iso);
  if (Number.isNaN(t)) return "";
  const p = zoneParts(t, zone);
  const two = (n) => String(n).padStart(2, "0");
  return `${p.year}-${two(p.month)}-${two(p.day)}T${two(p.hour)}:${two(p.minute)}:${two(p.second)}`;
}
function zoneRFC3339(local, zone) {
  const m = /^(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d)(?::(\d\d))?/.exec(local);
  if (!m) return local;
  const t = zoneTime(Number(m[1]), Number(m[2]) - 1, Number(m[3]), Number(m[4]), zone) + (Number(m[5]) * 60 + Number(m[6] || 0)) * 1000;
  const p = zoneParts(t, zone);
  const off = Math.round((Date.UTC(p.year, p.month - 1, p.day, p.hour, p.minute, p.second) - t) / 60000);
  const two = (n) => String(n).padStart(2, "0");
  const zoneText = off === 0 ? "Z" : `${off < 0 ? "-" : "+"}${two(Math.floor(Math.abs(off) / 60))}:${two(Math.abs(off) % 60)}`;
  return `${m[1]}-${m[2]}-${m[3]}T${m[4]}:${m[5]}:${m[6] || "00"}${zoneText}`;
}
function showTime(name, iso) {
  const input = $("li-" + name);
  input.value = iso ? zoneLocal(iso, liZone()) : "";
  liForm.times[name] = iso ? { raw: iso, shown: input.value } : null;
}
function readTime(name) {
  const v = $("li-" + name).value;
  const was = liForm.times[name];
  if (!v) return undefined;
  return was && was.shown === v ? was.raw : zoneRFC3339(v, liZone());
}

// fillLineItem puts li into the form's fields and pickers.
function fillLineItem(li) {
  $("li-id").value = li.id;
  $("li-name").value = li.name || "";
  campaignOptions(li.campaign);
  $("li-status").value = ["paused", "archived"].includes(li.status) ? li.status : "active";
  liForm.statusWritten = li.status !== undefined;
  $("li-priority").value = li.priority;
  $("li-weight").value = li.weight;
  $("li-cpm").value = li.cpm;
  liForm.creatives = (li.creatives || []).slice();
  renderLineCreatives();
  showTime("start", li.start);
  showTime("end", li.end);
  const im = (li.limits && li.limits.impressions) || {};
  $("li-limit-total").value = im.total || "";
  $("li-limit-daily").value = im.daily || "";
  $("li-frequency-rows").replaceChildren();
  for (const f of li.frequency || []) addFrequencyRow(f);
  $("li-deals").value = (li.deals || []).join("\n");
  const t = li.targeting || {};
  fillCriteria("li-t", t);
  fillCriteria("li-x", t.exclude || {});
  $("li-x-box").open = !!t.exclude;
  if ((li.reasons || []).some((r) => r.reason === "no_geo_database")) liForm.noGeo = true;
  geoWarning("li-t");
  geoWarning("li-x");
  lineItemJSON();
}

function fillCriteria(prefix, c) {
  const lists = liForm.lists[prefix];
  for (const n of liListNames) lists[n] = (c[n] || []).slice();
  $(`${prefix}-sites`).value = (c.sites || []).join("\n");
  $(`${prefix}-apps`).value = (c.apps || []).join("\n");
  renderChips(prefix, "countries");
  renderChips(prefix, "regions");
  renderChecks($(`${prefix}-devices-list`), liDevices.map((d) => [d, d]), lists.devices);
  renderChecks($(`${prefix}-os-list`), liOSes.map((d) => [d, d]), lists.os);
  renderChecks($(`${prefix}-browsers-list`), liBrowsers.map((d) => [d, d]), lists.browsers);
  renderChecks($(`${prefix}-weekdays-list`), liWeekdays.map((d) => [d, d]), lists.weekdays);
  $(`${prefix}-hours-from`).value = c.hours ? String(c.hours.from) : "";
  $(`${prefix}-hours-to`).value = c.hours ? String(c.hours.to) : "";
  $(`${prefix}-keyvalues-rows`).replaceChildren();
  for (const [k, v] of Object.entries(c.keyvalues || {})) addKeyValueRow(prefix, k, v);
  renderLinePlacements(prefix);
}

function readCriteria(prefix) {
  const c = {}, lists = liForm.lists[prefix];
  const put = (name, list) => { if (list.length) c[name] = list.slice(); };
  put("placements", lists.placements);
  put("sites", lines($(`${prefix}-sites`).value));
  put("apps", lines($(`${prefix}-apps`).value));
  for (const n of ["countries", "regions", "devices", "os", "browsers"]) put(n, lists[n]);
  const from = $(`${prefix}-hours-from`).value, to = $(`${prefix}-hours-to`).value;
  if (from !== "" || to !== "") c.hours = { from: Number(from || 0), to: Number(to || 24) };
  put("weekdays", lists.weekdays);
  const kv = {};
  let any = false;
  for (const row of $(`${prefix}-keyvalues-rows`).children) {
    const k = row.querySelector(".kv-key").value.trim();
    const raw = row.querySelector(".kv-values").value;
    const vs = (row.dataset.sep === " " ? raw.split(/\s+/) : raw.split(/[\s,]+/)).filter((v) => v);
    if (!k && vs.length === 0) continue;
    kv[k] = vs;
    any = true;
  }
  if (any) c.keyvalues = kv;
  return c;
}

// readLineItem is the line item the form holds, as the API takes it.
function readLineItem() {
  const li = { id: $("li-id").value.trim() };
  const name = $("li-name").value.trim();
  if (name) li.name = name;
  li.campaign = $("li-campaign").value;
  const status = $("li-status").value;
  if (status !== "active" || liForm.statusWritten) li.status = status;
  li.priority = Number($("li-priority").value);
  li.weight = Number($("li-weight").value);
  li.cpm = $("li-cpm").value.trim();
  li.creatives = liForm.creatives.slice();
  const start = readTime("start"), end = readTime("end");
  if (start) li.start = start;
  if (end) li.end = end;
  const im = {};
  const total = $("li-limit-total").value, daily = $("li-limit-daily").value;
  if (total !== "" && Number(total) !== 0) im.total = Number(total);
  if (daily !== "" && Number(daily) !== 0) im.daily = Number(daily);
  if (Object.keys(im).length) li.limits = { impressions: im };
  const caps = [...$("li-frequency-rows").children].map((row) => {
    const n = row.querySelector(".fc-n").value;
    const per = row.dataset.raw && n === "" ? row.dataset.raw : durationText(Number(n) * Number(row.querySelector(".fc-unit").value));
    return { impressions: Number(row.querySelector(".fc-imps").value), per };
  });
  if (caps.length) li.frequency = caps;
  const deals = lines($("li-deals").value);
  if (deals.length) li.deals = deals;
  const t = readCriteria("li-t"), x = readCriteria("li-x");
  if (Object.keys(x).length) t.exclude = x;
  if (Object.keys(t).length) li.targeting = t;
  return li;
}

function lineItemJSON() {
  $("li-json").textContent = JSON.stringify(readLineItem(), null, 2);
  const x = readCriteria("li-x");
  const n = Object.keys(x).length;
  $("li-x-count").textContent = n ? `(${n} ${n === 1 ? "list" : "lists"})` : "";
}

// campaignOptions lists the stored campaigns, by name and id, with id
// chosen (kept in the list when it is not stored: the server says why).
function campaignOptions(id) {
  const sel = $("li-campaign");
  const cs = (liForm.set && liForm.set.campaigns) || [];
  const opts = cs.map((c) => new Option(c.name ? `${c.name} (${c.id})` : c.id, c.id));
  if (id && !cs.some((c) => c.id === id)) opts.push(new Option(liForm.set ? `${id} (not stored)` : id, id));
  if (!id) opts.unshift(new Option("— choose a campaign —", ""));
  sel.replaceChildren(...opts);
  sel.value = id || "";
  $("li-zone").textContent = `in ${liZone()}`;
}

// renderLineCreatives lists the creatives of the chosen campaign's
// advertiser, and any other the line item names.
function renderLineCreatives() {
  const c = liCampaign();
  const all = (liForm.set && liForm.set.creatives) || [];
  const own = all.filter((cr) => c && cr.advertiser === c.advertiser);
  const options = own.map((cr) => [cr.id, `${cr.name ? cr.name + " " : ""}${cr.id}, ${cr.format} ${cr.w}×${cr.h}`, cr.archived ? "archived" : cr.status || "pending"]);
  for (const id of liForm.creatives) {
    const cr = all.find((x) => x.id === id);
    if (cr && !own.includes(cr)) options.push([id, `${id}, ${cr.format} ${cr.w}×${cr.h}`, `of advertiser ${cr.advertiser}`]);
  }
  renderChecks($("li-creatives-list"), options, liForm.creatives);
  markArchivedChecks($("li-creatives-list"));
  if (options.length === 0) $("li-creatives-list").append(liEl("p", { className: "hint", textContent: c ? "This advertiser has no creative yet." : "Choose a campaign first." }));
}

// markArchivedChecks marks the archived creatives of a checklist as
// renderChecks marks the pending and rejected: they serve nowhere.
function markArchivedChecks(box) {
  for (const note of box.querySelectorAll("label.check small")) {
    if (note.textContent === "archived") note.className = "status archived";
  }
}

// loadLineItemChoices reads what the pickers offer: the campaigns and
// creatives (one export), the placements; and whether the server has a
// geo database, from the line item's own status.
async function loadLineItemChoices(li) {
  $("li-form").dataset.ready = "";
  const set = await api("GET", "/api/v1/campaigns/export");
  if (set.status === 200 && set.data) liForm.set = set.data;
  campaignOptions($("li-campaign").value);
  // Times as they were read, shown again in the campaign's zone now known.
  for (const n of ["start", "end"]) {
    const was = liForm.times[n];
    if (was && $("li-" + n).value === was.shown) showTime(n, was.raw);
  }
  renderLineCreatives();
  for (const p of ["li-t", "li-x"]) $(`${p}-placements-q`).value = "";
  await Promise.all([loadLinePlacements("li-t", ""), loadLinePlacements("li-x", ""), loadLineGeo(li.id)]);
  lineItemJSON();
  $("li-form").dataset.ready = "true";
}

// loadLineGeo learns from a stored line item's status whether the server
// has no geo database: a line item that targets countries or regions there
// says so in its reasons (no_geo_database), and the server stays so.
async function loadLineGeo(id, stored) {
  stored = stored || ((liForm.set && liForm.set.line_items) || []).some((l) => l.id === id);
  if (!id || !stored) return;
  const r = await api("GET", "/api/v1/line-items/" + encodeURIComponent(id));
  if (r.status !== 200 || !r.data) return;
  if ((r.data.reasons || []).some((x) => x.reason === "no_geo_database")) liForm.noGeo = true;
  geoWarning("li-t");
  geoWarning("li-x");
}

// loadLinePlacements lists the first placements (100) whose id or name
// holds q under the picker of prefix.
async function loadLinePlacements(prefix, q) {
  const r = await api("GET", "/api/v1/placements?limit=100" + (q ? "&q=" + encodeURIComponent(q) : ""));
  if (r.status === 200 && r.data) {
    liForm.found[prefix] = r.data.placements || [];
    liForm.total[prefix] = r.data.total || 0;
  }
  renderLinePlacements(prefix);
}

function renderLinePlacements(prefix) {
  const list = liForm.lists[prefix].placements || [];
  const found = liForm.found[prefix].map((p) => [p.id, p.name ? `${p.id} ${p.name}` : p.id]);
  const foundIDs = new Set(found.map((o) => o[0]));
  // The chosen first, in their order; then what the search found.
  const options = list.map((id) => [id, id, ""]).filter((o) => !foundIDs.has(o[0]))
    .concat(found.filter((o) => list.includes(o[0])), found.filter((o) => !list.includes(o[0])));
  renderChecks($(`${prefix}-placements-list`), options, list);
  const shown = liForm.found[prefix].length, total = liForm.total[prefix] || 0;
  $(`${prefix}-placements-note`).textContent = total > shown ? `${shown} of ${total} shown: search for the others.` : "";
}

// freeCopyID is the first of id-copy, id-copy-2, ... no line item has.
function freeCopyID(id) {
  const taken = new Set(((liForm.set && liForm.set.line_items) || []).map((l) => l.id));
  let n = 1, next = `${id}-copy`;
  while (taken.has(next)) next = `${id}-copy-${++n}`;
  return next;
}

// Duplicate opens the form as a new line item: what it holds, under a
// free id, paused.
$("li-duplicate").addEventListener("click", () => {
  const from = $("li-id").value.trim();
  const li = readLineItem();
  li.id = freeCopyID(from || "line-item");
  li.status = "paused";
  editLineItem(li);
  lineItem = null;
  $("li-title").textContent = `New line item (a copy of ${from})`;
  $("li-edit-status").textContent = `A copy of ${from}, paused: save it to create it.`;
});

$("li-campaign").addEventListener("change", () => {
  // Times left as they were stay the same instants, shown in the new zone.
  const times = { start: readTime("start"), end: readTime("end") };
  $("li-zone").textContent = `in ${liZone()}`;
  for (const n of ["start", "end"]) {
    const was = liForm.times[n];
    if (was && times[n] === was.raw) showTime(n, was.raw);
  }
  renderLineCreatives();
  lineItemJSON();
});
$("li-frequency-add").addEventListener("click", () => { addFrequencyRow({ impressions: 1, per: "24h" }); lineItemJSON(); });
$("li-form").addEventListener("input", lineItemJSON);
$("li-form").addEventListener("change", lineItemJSON);
buildCriteria("li-t");
buildCriteria("li-x");
$("li-country-codes").replaceChildren(...liCountries.map((c) => new Option(liCountryName(c) || c, c)));

start();

// Reports: the rollups of the access log (GET /api/v1/reports), for a
// period (a quick range or dates of the browser's zone, the query's), by
// day, by hour or for the whole period, broken down by one dimension. The
// table shows the API's rows as they are, with totals per currency and
// sortable columns, and exports exactly what it shows as CSV; the charts
// sum the rows per time (or show one line item's), and the spend chart
// sets a campaign's spend beside its budget's pacing curve.
// window.tsubameReport holds what is shown.
const reportCharts = {};
window.tsubameReport = null;

function reportZone() {
  try { return Intl.DateTimeFormat().resolvedOptions().timeZone || "UTC"; } catch (e) { return "UTC"; }
}

// rfc3339 writes a time as the API reads it: whole seconds, UTC.
const rfc3339 = (d) => d.toISOString().replace(/\.\d{3}Z$/, "Z");

// The breakdowns: the dimensions asked (a line item's campaign too: the
// line item filter and the spend chart read it) and the column's name.
const reportBreakdowns = {
  line_item: { by: "campaign,line_item", label: "line item" },
  campaign: { by: "campaign", label: "campaign" },
  advertiser: { by: "advertiser", label: "advertiser" },
  creative: { by: "creative", label: "creative" },
  placement: { by: "placement", label: "placement" },
  country: { by: "country", label: "country" },
  exchange: { by: "exchange", label: "exchange" },
  partner: { by: "partner", label: "partner" },
  site: { by: "site", label: "site" },
  device: { by: "device", label: "device" },
  deal: { by: "deal", label: "deal" },
};
// The dimensions of an ad's delivery: the ad requests' row has none of
// them (their slots, filled or not, are no ad's delivery), so it is left
// out of these breakdowns; the refused tracking URLs' row is kept.
const deliveryDims = ["line_item", "campaign", "advertiser", "creative"];

// The zone of the report's days and hours: the browser's, the server's
// report.timezone or UTC (the form's choice). Dates are calendar days of
// that zone, whatever the browser's: a day's bounds are its midnights
// there, sent to the API as instants with the zone in tz.
const reportTZ = () => $("report-tz").value || reportZone();
const zoneFormats = new Map();

// zoneParts is the wall-clock date and time of instant t (ms) in zone.
function zoneParts(t, zone) {
  let f = zoneFormats.get(zone);
  if (!f) {
    f = new Intl.DateTimeFormat("en-US", { timeZone: zone, hourCycle: "h23", year: "numeric", month: "2-digit",
      day: "2-digit", hour: "2-digit", minute: "2-digit", second: "2-digit" });
    zoneFormats.set(zone, f);
  }
  const p = {};
  for (const x of f.formatToParts(new Date(t))) if (x.type !== "literal") p[x.type] = Number(x.value);
  return p;
}

// zoneTime is the instant (ms) of a wall-clock date and hour in zone (the
// fields may overflow, as Date.UTC's: day 0 is the month's last before).
function zoneTime(y, mo, d, h, zone) {
  const want = Date.UTC(y, mo, d, h);
  let t = want;
  for (let i = 0; i < 3; i++) {
    const p = zoneParts(t, zone);
    t += want - Date.UTC(p.year, p.month - 1, p.day, p.hour, p.minute, p.second);
  }
  return t;
}

// zoneDate is the calendar date of instant t in zone, as a date input
// writes it (YYYY-MM-DD).
function zoneDate(t, zone) {
  const p = zoneParts(t, zone);
  return `${p.year}-${String(p.month).padStart(2, "0")}-${String(p.day).padStart(2, "0")}`;
}

// dayStart is midnight of a date input's day (plus days) in zone, or null.
function dayStart(s, days, zone) {
  const m = /^(\d{4})-(\d{2})-(\d{2})$/.exec(s || "");
  return m ? new Date(zoneTime(Number(m[1]), Number(m[2]) - 1, Number(m[3]) + days, 0, zone)) : null;
}

// quickRange is a quick period's start, its end (null: now) and its rows'
// time, in zone; the rolling ones start on the hour, a bound the rollups
// always take.
function quickRange(period, zone) {
  const now = Date.now(), p = zoneParts(now, zone);
  const day = (months, days) => new Date(zoneTime(p.year, p.month - 1 + months, days, 0, zone));
  const rolling = (hours, time) => {
    const from = new Date(now - hours * 3600e3);
    from.setUTCMinutes(0, 0, 0);
    return { from, to: null, time };
  };
  switch (period) {
    case "24h": return rolling(24, "hour");
    case "7d": return rolling(24 * 7, "day");
    case "30d": return rolling(24 * 30, "day");
    case "today": return { from: day(0, p.day), to: day(0, p.day + 1), time: "hour" };
    case "yesterday": return { from: day(0, p.day - 1), to: day(0, p.day), time: "hour" };
    case "month": return { from: day(0, 1), to: day(1, 1), time: "day" };
    case "lastmonth": return { from: day(-1, 1), to: day(0, 1), time: "day" };
  }
  return null;
}

// fillRange shows a quick period's dates (the end included) and its rows'
// time in the form.
function fillRange() {
  const zone = reportTZ(), r = quickRange($("report-period").value, zone);
  if (!r) return;
  $("report-from").value = zoneDate(r.from.getTime(), zone);
  $("report-to").value = zoneDate(r.to ? r.to.getTime() - 1 : Date.now(), zone);
  $("report-time").value = r.time;
}

// reportQuery is the API's query for the form, or {error} for a period it
// cannot be (the form says why: the API's limits it says itself).
function reportQuery() {
  const zone = reportTZ();
  let range = quickRange($("report-period").value, zone);
  for (const id of ["report-from", "report-to"]) $(id).removeAttribute("aria-invalid");
  if (!range) {
    const from = $("report-from").value, last = $("report-to").value;
    if (!dayStart(from, 0, zone) || !dayStart(last, 0, zone)) {
      $(dayStart(from, 0, zone) ? "report-to" : "report-from").setAttribute("aria-invalid", "true");
      return { error: "Choose a start and an end date." };
    }
    if (last < from) {
      $("report-to").setAttribute("aria-invalid", "true");
      return { error: `The end date (${last}) is before the start date (${from}).` };
    }
    range = { from: dayStart(from, 0, zone), to: dayStart(last, 1, zone) };
  }
  const bd = $("report-by").value in reportBreakdowns ? $("report-by").value : "line_item";
  const time = $("report-time").value;
  const q = new URLSearchParams({ from: rfc3339(range.from) });
  if (range.to) q.set("to", rfc3339(range.to));
  q.set("by", (time ? time + "," : "") + reportBreakdowns[bd].by);
  q.set("tz", zone);
  return { q, bd, time };
}

// bucketTime is a row's time bucket as Unix seconds: a day at midnight of
// the query's zone, an hour as the API wrote it.
function bucketTime(row, zone) {
  if (row.day) {
    const [y, m, d] = row.day.split("-").map(Number);
    return zoneTime(y, m - 1, d, 0, zone) / 1000;
  }
  return Date.parse(row.hour || row.minute) / 1000;
}

// Decimal amounts as the API writes them ("0.0025", "12.50"), added and
// compared exactly: in billionths, as BigInt. Never a float.
function parseAmount(s) {
  const m = /^(-?)(\d+)(?:\.(\d{1,9}))?$/.exec(String(s));
  if (!m) return 0n;
  const v = BigInt(m[2]) * 1000000000n + BigInt((m[3] || "").padEnd(9, "0"));
  return m[1] ? -v : v;
}
function formatAmount(v) {
  const neg = v < 0n;
  if (neg) v = -v;
  let frac = String(v % 1000000000n).padStart(9, "0").replace(/0+$/, "");
  if (frac.length < 2) frac = frac.padEnd(2, "0");
  return (neg ? "-" : "") + String(v / 1000000000n) + "." + frac;
}
// ratio is num ÷ den to six decimals, rounded half up, as the API's ctr
// ("0" when den is 0).
function ratio(num, den) {
  num = BigInt(num); den = BigInt(den);
  if (den <= 0n || num < 0n) return "0";
  let q = num / den, r = num % den, frac = 0n;
  for (let i = 0; i < 6; i++) { r *= 10n; frac = frac * 10n + r / den; r %= den; }
  if (2n * r >= den) { frac++; if (frac === 1000000n) { q++; frac = 0n; } }
  return `${q}.${String(frac).padStart(6, "0")}`;
}

// reportColumns are the table's columns: the time (if any), the
// breakdown, the currency, then the counts. kind: text, int, money or rate
// (num ÷ den of two counts).
function reportColumns(bd, time) {
  const int = (key, label) => ({ key, label: label || key, kind: "int", value: (x) => x[key] || 0 });
  const cols = [];
  if (time) cols.push({ key: time, label: time, kind: "text", value: (x) => x[time] || "" });
  cols.push({ key: bd, label: reportBreakdowns[bd].label, kind: "text",
    value: (x) => x[bd] || (x.rejected && deliveryDims.includes(bd) ? "(refused tracking URLs)" : "(none)") });
  cols.push({ key: "currency", label: "currency", kind: "text", value: (x) => x.currency || "" });
  cols.push(int("impressions"), int("clicks"), { key: "ctr", label: "CTR", kind: "rate", num: "clicks", den: "impressions" },
    { key: "spend", label: "spend", kind: "money" });
  if (bd === "partner") {
    cols.push(int("partner_requests", "bid requests"), int("partner_bids", "bids"),
      { key: "bid_rate", label: "bid rate", kind: "rate", num: "partner_bids", den: "partner_requests" },
      int("partner_wins", "wins"), { key: "win_rate", label: "win rate", kind: "rate", num: "partner_wins", den: "partner_bids" },
      { key: "revenue", label: "revenue", kind: "money" });
  }
  cols.push({ ...int("overage"), title: "impressions and bills after their reservation" }, { key: "invalid", label: "invalid", kind: "int",
    title: "repeats, crawlers, test auctions",
    value: (x) => (x.invalid_impressions || 0) + (x.invalid_clicks || 0) + (x.invalid_bids || 0) + (x.invalid_bills || 0) });
  for (const c of cols) {
    if (c.kind === "money") c.value = (x) => x[c.key] || "0.00";
    if (c.kind === "rate") c.value = (x) => x[c.key] || ratio(x[c.num] || 0, x[c.den] || 0);
  }
  return cols;
}

// reportTotals sums the rows per currency (amounts are never added across
// currencies); the rows without a currency (refused tracking URLs, ad
// requests) carry no amount, and join the one currency when there is one.
function reportTotals(cols, rows) {
  const groups = new Map();
  for (const x of rows) {
    const cur = x.currency || "";
    if (!groups.has(cur)) groups.set(cur, []);
    groups.get(cur).push(x);
  }
  const named = [...groups.keys()].filter((c) => c);
  if (groups.has("") && named.length === 1) {
    groups.get(named[0]).push(...groups.get(""));
    groups.delete("");
  }
  const out = [];
  for (const cur of [...groups.keys()].sort()) {
    const list = groups.get(cur), sum = {};
    for (const x of list) {
      for (const c of cols) {
        if (c.kind === "int") sum[c.key] = (sum[c.key] || 0) + c.value(x);
        if (c.kind === "money") sum[c.key] = (sum[c.key] || 0n) + parseAmount(c.value(x));
        if (c.kind === "rate") for (const k of [c.num, c.den]) sum["n." + k] = (sum["n." + k] || 0) + (x[k] || 0);
      }
    }
    out.push(cols.map((c, i) => {
      if (i === 0) return "total";
      if (c.key === "currency") return cur;
      if (c.kind === "int") return sum[c.key];
      if (c.kind === "money") return formatAmount(sum[c.key]);
      if (c.kind === "rate") return ratio(sum["n." + c.num], sum["n." + c.den]);
      return "";
    }));
  }
  return out;
}

const reportSort = { key: "", dir: 1 }; // a column's key; "": the API's order
const shownValue = (c, v) => (c.kind === "int" ? Number(v).toLocaleString("en") : String(v));

function compareCells(c, a, b) {
  if (c.kind === "int") return a - b;
  if (c.kind === "money" || c.kind === "rate") { const x = parseAmount(a), y = parseAmount(b); return x < y ? -1 : x > y ? 1 : 0; }
  return a < b ? -1 : a > b ? 1 : 0;
}

// renderReportTable draws the rows (as the API answered them, or sorted
// by a column) and the totals, and keeps what it shows, cell for cell, in
// window.tsubameReport.table for the CSV export.
function renderReportTable(cols, shown) {
  const table = $("report-table");
  const head = document.createElement("tr");
  for (const c of cols) {
    const th = document.createElement("th");
    if (c.kind !== "text") th.className = "num";
    if (c.title) th.title = c.title;
    const b = document.createElement("button");
    b.type = "button";
    b.className = "sort";
    b.textContent = c.label;
    b.title = `sort by ${c.label}`;
    b.addEventListener("click", () => {
      reportSort.dir = reportSort.key === c.key ? -reportSort.dir : c.kind === "text" ? 1 : -1;
      reportSort.key = c.key;
      renderReportTable(cols, shown);
    });
    th.appendChild(b);
    th.setAttribute("aria-sort", reportSort.key !== c.key ? "none" : reportSort.dir > 0 ? "ascending" : "descending");
    head.appendChild(th);
  }
  table.tHead.replaceChildren(head);
  let rows = shown.map((x) => ({ x, cells: cols.map((c) => c.value(x)) }));
  const si = cols.findIndex((c) => c.key === reportSort.key);
  if (si >= 0) rows = rows.slice().sort((a, b) => reportSort.dir * compareCells(cols[si], a.cells[si], b.cells[si]));
  const body = table.tBodies[0];
  body.replaceChildren();
  for (const { x, cells } of rows) {
    const tr = document.createElement("tr");
    tr.dataset.time = x.day || x.hour || "";
    tr.dataset.lineItem = x.line_item || "";
    cols.forEach((c, i) => cell(tr, shownValue(c, cells[i]), c.kind === "text" ? "" : "num"));
    body.appendChild(tr);
  }
  if (rows.length === 0) {
    const tr = document.createElement("tr");
    cell(tr, "no events in this period").colSpan = cols.length;
    body.appendChild(tr);
  }
  const totals = shown.length ? reportTotals(cols, shown) : [];
  const foot = table.tFoot || table.createTFoot();
  foot.replaceChildren();
  for (const t of totals) {
    const tr = document.createElement("tr");
    tr.className = "total";
    cols.forEach((c, i) => cell(tr, shownValue(c, t[i]), c.kind === "text" ? "" : "num"));
    foot.appendChild(tr);
  }
  if (window.tsubameReport) {
    window.tsubameReport.table = { columns: cols.map((c) => c.label), rows: rows.map((r) => r.cells.map(String)), totals: totals.map((t) => t.map(String)) };
  }
}

// csvCell writes a value as the API's CSV does: quoted (its quotes
// doubled) when it holds a separator, a quote, a line break or spaces at
// an end; a value a spreadsheet would run as a formula gets a ' first.
function csvCell(v) {
  let s = String(v);
  const t = s.replace(/^ +/, "");
  if (t !== "" && !/^-?[0-9]+(\.[0-9]+)?$/.test(s) && /^[=+\-@\t\r\n＝＋－＠]/.test(t)) s = "'" + s;
  if (/[,;\t"\r\n]/.test(s) || s.trim() !== s) s = '"' + s.replace(/"/g, '""') + '"';
  return s;
}

// exportReport downloads the table as shown: its columns, its rows in
// their order, its totals; counts without separators, amounts as the
// API's exact decimals.
function exportReport() {
  const t = window.tsubameReport && window.tsubameReport.table;
  if (!t) return;
  const text = [t.columns, ...t.rows, ...t.totals].map((r) => r.map(csvCell).join(",")).join("\n") + "\n";
  if (window.tsubameReport.csvURL) URL.revokeObjectURL(window.tsubameReport.csvURL);
  const url = URL.createObjectURL(new Blob([text], { type: "text/csv;charset=utf-8" }));
  window.tsubameReport.csvURL = url;
  const q = new URLSearchParams(window.tsubameReport.query);
  const a = document.createElement("a");
  a.href = url;
  a.download = `tsubame-report-${(q.get("from") || "").slice(0, 10)}-${q.get("by").replace(/,/g, "-")}.csv`;
  document.body.appendChild(a);
  a.click();
  a.remove();
}

// reportZones offers the server's zone of reports (report.timezone, from
// the configuration) beside the browser's and UTC, once.
let reportZonesAsked = false;
async function reportZones() {
  if (reportZonesAsked) return;
  reportZonesAsked = true;
  $("report-tz-browser").textContent = `this browser's (${reportZone()})`;
  const r = await api("GET", "/api/v1/config");
  const zone = r.status === 200 && r.data && r.data.report && r.data.report.timezone;
  if (typeof zone !== "string" || !zone || zone === "UTC" || zone === reportZone()) return;
  try { zoneParts(0, zone); } catch (e) { return; } // a zone this browser does not know
  $("report-tz").insertBefore(new Option(`the server's reports (${zone})`, zone), $("report-tz").options[1]);
}

async function loadReport() {
  await reportZones();
  const rq = reportQuery();
  if (rq.error) {
    $("report-error").textContent = rq.error;
    return;
  }
  const { q, bd, time } = rq;
  $("report-csv").href = "/api/v1/reports?" + q + "&format=csv";
  $("report-line-label").hidden = bd !== "line_item";
  const r = await api("GET", "/api/v1/reports?" + q);
  const body = $("report-table").tBodies[0];
  if (r.status !== 200) {
    body.replaceChildren();
    if ($("report-table").tFoot) $("report-table").tFoot.replaceChildren();
    window.tsubameReport = null;
    $("report-error").textContent = (r.data && r.data.error) || `Cannot read the reports (${r.status}).`;
    return;
  }
  $("report-error").textContent = "";
  const rows = r.data.rows || [];
  const select = $("report-line"), chosen = select.value;
  const lines = [...new Set(rows.map((x) => x.line_item).filter((x) => x))].sort();
  select.replaceChildren(new Option("all", ""), ...lines.map((id) => new Option(id, id)));
  select.value = lines.includes(chosen) ? chosen : "";
  const sel = bd === "line_item" ? select.value : "";
  const shown = rows.filter((x) => (!deliveryDims.includes(bd) || x[bd] || x.rejected) && (!sel || x.line_item === sel));
  const at = (v) => new Date(v).toLocaleString(undefined, { timeZone: q.get("tz") });
  $("report-range").textContent = q.has("to") ? `${at(q.get("from"))} to ${at(q.get("to"))} (${q.get("tz")})`
    : `since ${at(q.get("from"))} (${q.get("tz")})`;

  window.tsubameReport = { query: q.toString(), rows: shown, times: [], impressions: [], clicks: [], ctr: [], spend: [], currency: "" };
  const cols = reportColumns(bd, time);
  if (reportSort.key && !cols.some((c) => c.key === reportSort.key)) reportSort.key = "";
  renderReportTable(cols, shown);

  // Per time bucket: sums over the rows shown. Spend is charted in one
  // currency, the one most rows have.
  const currencies = new Map();
  for (const x of shown) if (x.currency) currencies.set(x.currency, (currencies.get(x.currency) || 0) + 1);
  const currency = [...currencies.entries()].sort((a, b) => b[1] - a[1]).map((e) => e[0])[0] || "";
  window.tsubameReport.currency = currency;
  $("report-charts").hidden = !time;
  if (!time) { // the whole period: no time to chart
    for (const name of ["delivery", "ctr", "spend"]) if (reportCharts[name]) { reportCharts[name].destroy(); delete reportCharts[name]; }
    $("report-budget").textContent = "";
    return;
  }
  const byTime = new Map();
  for (const x of shown) {
    const t = bucketTime(x, q.get("tz"));
    const b = byTime.get(t) || { impressions: 0, clicks: 0, spend: 0 };
    b.impressions += x.impressions;
    b.clicks += x.clicks;
    if (x.currency === currency) b.spend += Number(x.spend); // a chart's scale: a float is fine here
    byTime.set(t, b);
  }
  for (const t of periodBuckets(q)) if (!byTime.has(t)) byTime.set(t, { impressions: 0, clicks: 0, spend: 0 });
  const times = [...byTime.keys()].sort((a, b) => a - b);
  const imps = times.map((t) => byTime.get(t).impressions);
  const clicks = times.map((t) => byTime.get(t).clicks);
  const ctr = times.map((t, i) => (imps[i] ? clicks[i] / imps[i] : null));
  let sum = 0;
  const spend = times.map((t) => (sum += byTime.get(t).spend));
  Object.assign(window.tsubameReport, { times, impressions: imps, clicks, ctr, spend });

  chart("delivery", [times, imps, clicks], [
    { label: "impressions", stroke: "#1f64c4", width: 2 },
    { label: "clicks", stroke: "#e07b00", width: 2, scale: "clicks" },
  ], [{ scale: "y" }, { scale: "clicks", side: 1, grid: { show: false } }]);
  chart("ctr", [times, ctr], [{ label: "CTR", stroke: "#2a9d4b", width: 2, value: (u, v) => (v == null ? "–" : (v * 100).toFixed(2) + " %") }],
    [{ values: (u, vs) => vs.map((v) => (v * 100).toFixed(2) + " %") }]);
  await spendChart(sel, shown, times, spend, currency);
}

// periodBuckets lists the starts of the query's time buckets up to its
// end or now (hours or days of the query's zone), so that the charts show
// the whole period, zero where nothing happened.
function periodBuckets(q) {
  const by = q.get("by").split(",")[0], zone = q.get("tz"), out = [];
  const from = Date.parse(q.get("from"));
  const end = Math.min(Date.now(), q.has("to") ? Date.parse(q.get("to")) - 1 : Date.now());
  const p = zoneParts(from, zone);
  for (let n = 0; n < 2300; n++) {
    const t = by === "hour" ? from - (p.minute * 60 + p.second) * 1000 + n * 3600e3 : zoneTime(p.year, p.month - 1, p.day + n, 0, zone);
    if (t > end) break;
    out.push(t / 1000);
  }
  return out;
}

// chart draws (or redraws) one of the reports' charts.
function chart(name, data, series, axes) {
  const el = $("report-" + name);
  if (reportCharts[name]) reportCharts[name].destroy();
  if (typeof uPlot === "undefined") return; // the bundled library did not load
  reportCharts[name] = new uPlot({
    width: 420, height: 200,
    scales: { x: { time: true } },
    series: [{}, ...series],
    axes: [{}, ...axes.map((a) => ({ size: 64, ...a }))],
  }, data, el);
  legendKeys(reportCharts[name]);
}

// legendKeys lets the keyboard show and hide a chart's series, as a click
// on its name in the legend does.
function legendKeys(u) {
  for (const th of u.root.querySelectorAll(".u-legend .u-series:not(:first-child) th")) { // the first is the time axis
    th.tabIndex = 0;
    th.addEventListener("keydown", (ev) => {
      if (ev.key !== "Enter" && ev.key !== " ") return;
      ev.preventDefault();
      th.click();
    });
  }
}

// spendChart: the selection's spend, cumulative over the period; with one
// line item chosen whose campaign has a budget over a bounded period, the
// campaign's spend since the budget's start beside the pacing's ideal
// curve and the budget.
async function spendChart(sel, shown, times, spend, currency) {
  $("report-budget").textContent = "";
  const campaign = sel && (shown.find((x) => x.line_item === sel) || {}).campaign;
  const u = campaign && budgetList.find((b) => b.kind === "spend" && b.campaign === campaign && !b.date && (b.ideal || []).length > 1);
  if (!u) {
    chart("spend", [times, spend], [{ label: `spend ${currency}`, stroke: "#7a3fb8", width: 2 }], [{}]);
    if (sel) $("report-budget").textContent = `(campaign ${campaign || "?"} has no budget over a bounded period)`;
    return;
  }
  const from = new Date(u.start);
  from.setUTCMinutes(Math.floor(from.getUTCMinutes() / 15) * 15, 0, 0);
  const q = new URLSearchParams({ from: rfc3339(from), by: "hour,campaign", tz: "UTC" });
  const r = await api("GET", "/api/v1/reports?" + q);
  const rows = r.status === 200 ? (r.data.rows || []).filter((x) => x.campaign === campaign && x.currency === currency) : [];
  const points = new Map(); // time -> [spent so far, ideal]
  let spent = 0;
  for (const x of rows) points.set(Date.parse(x.hour) / 1000, [(spent += Number(x.spend)), null]);
  for (const p of u.ideal) {
    const t = Date.parse(p.time) / 1000;
    points.set(t, [(points.get(t) || [null])[0], Number(p.value)]);
  }
  const xs = [...points.keys()].sort((a, b) => a - b);
  const booked = Number(u.booked);
  chart("spend", [xs, xs.map((t) => points.get(t)[0]), xs.map((t) => points.get(t)[1]), xs.map(() => booked)], [
    { label: `spent ${currency}`, stroke: "#7a3fb8", width: 2, spanGaps: true },
    { label: "ideal", stroke: "#999", width: 1, spanGaps: true },
    { label: "budget", stroke: "#c33", width: 1, dash: [4, 4] },
  ], [{}]);
  $("report-budget").textContent = `(campaign ${campaign}: ${u.booked} ${currency}, ${u.pacing})`;
}

// Forecast (GET /api/v1/forecast): the impressions a selection of traffic
// is forecast to offer over whole days of the browser's zone, hour by
// hour, what booked line items take of them and what is left to sell.
// window.tsubameForecast holds what is shown: the API's query and answer.
window.tsubameForecast = null;

// isoDate writes a local date as the API reads it (YYYY-MM-DD).
const isoDate = (d) => `${d.getFullYear()}-${String(d.getMonth() + 1).padStart(2, "0")}-${String(d.getDate()).padStart(2, "0")}`;

async function loadForecast() {
  if (!$("forecast-from").value) {
    const d = new Date();
    d.setDate(d.getDate() + 1);
    $("forecast-from").value = isoDate(d);
    d.setDate(d.getDate() + 7);
    $("forecast-to").value = isoDate(d);
  }
  const q = new URLSearchParams({ from: $("forecast-from").value, to: $("forecast-to").value, tz: reportZone() });
  for (const k of ["placement", "site", "country", "device"]) {
    const v = $("forecast-" + k).value.trim();
    if (v) q.set(k, v);
  }
  const r = await api("GET", "/api/v1/forecast?" + q);
  const body = $("forecast-lines").tBodies[0];
  body.replaceChildren();
  if (r.status !== 200 || !r.data) {
    $("forecast-summary").textContent = "";
    $("forecast-error").textContent = (r.data && r.data.error) || `Cannot make the forecast (${r.status}).`;
    window.tsubameForecast = null;
    return;
  }
  $("forecast-error").textContent = "";
  const f = r.data;
  window.tsubameForecast = { query: q.toString(), result: f };
  const n = (v) => Number(v).toLocaleString("en");
  $("forecast-range").textContent = `${new Date(f.from).toLocaleString()} to ${new Date(f.to).toLocaleString()} (${f.timezone})`;
  $("forecast-summary").textContent = f.history_days === 0
    ? "No traffic counted in the days before today: nothing to forecast from yet."
    : `${n(f.available)} available, ${n(f.booked)} booked, ${n(f.net)} left to sell (learned from ${f.history_days} days of traffic).`;
  for (const b of f.line_items || []) {
    const tr = document.createElement("tr");
    tr.dataset.lineItem = b.line_item;
    cell(tr, b.line_item);
    cell(tr, b.campaign);
    cell(tr, String(b.priority), "num");
    cell(tr, n(b.wants), "num");
    cell(tr, n(b.takes), "num");
    cell(tr, n(b.short), "num");
    body.appendChild(tr);
  }
  if (!(f.line_items || []).length) {
    const tr = document.createElement("tr");
    cell(tr, "no booked line item takes from this selection");
    tr.cells[0].colSpan = 6;
    body.appendChild(tr);
  }
  const hours = f.hours || [];
  const el = $("forecast-chart");
  if (reportCharts.forecast) reportCharts.forecast.destroy();
  if (typeof uPlot === "undefined") return;
  reportCharts.forecast = new uPlot({
    width: 860, height: 220,
    scales: { x: { time: true } },
    series: [{}, { label: "available", stroke: "#1f64c4", width: 2 }, { label: "booked", stroke: "#e07b00", width: 2 },
      { label: "net", stroke: "#2a9d4b", width: 2 }],
    axes: [{}, { size: 64 }],
  }, [hours.map((h) => Date.parse(h.time) / 1000), hours.map((h) => h.available), hours.map((h) => h.booked), hours.map((h) => h.net)], el);
  legendKeys(reportCharts.forecast);
}
$("forecast-form").addEventListener("submit", (ev) => { ev.preventDefault(); loadForecast(); });

// Bulk work on the campaigns table: a box on each line item's row selects
// it for Pause selected / Resume selected / Archive selected (one call
// each, audited each), and each campaign's row has its own Pause or
// Resume, which stops or restarts all its line items at once (their own
// status stays as it is). The selection lives across redraws of the
// table. Archived line items serve nothing and are left out of the table
// unless "Show archived line items" is ticked; Restore makes one active.
const picked = new Set();

function bulkControls(set) {
  $("li-csv-upload-label").hidden = !canEdit();
  const ids = new Set(set.line_items.map((li) => li.id));
  for (const id of [...picked]) if (!ids.has(id)) picked.delete(id);
  const campaigns = new Map(set.campaigns.map((c) => [c.id, c]));
  for (const tr of document.querySelectorAll("#campaigns tr.camp")) {
    const c = campaigns.get(tr.dataset.campaign);
    if (!c) continue;
    const paused = c.status === "paused";
    const td = tr.cells[0];
    if (c.status === "archived") { // restored from the Campaigns section, not paused from here
      const note = document.createElement("span");
      note.className = "paused";
      note.textContent = "archived: none of its line items serves";
      td.appendChild(note);
      continue;
    }
    if (paused) {
      const note = document.createElement("span");
      note.className = "paused";
      note.textContent = "paused: none of its line items serves";
      td.appendChild(note);
    }
    const b = document.createElement("button");
    b.type = "button";
    b.className = "campaign-pause";
    b.textContent = paused ? "Resume campaign" : "Pause campaign";
    b.disabled = !canEdit();
    b.title = canEdit() ? "" : "editors pause and resume campaigns";
    b.addEventListener("click", () => setCampaignPaused(c.id, !paused));
    td.appendChild(b);
  }
  // A paused campaign's line items keep their own status, and serve nothing.
  const stopped = new Set(set.line_items.filter((li) => (campaigns.get(li.campaign) || {}).status === "paused").map((li) => li.id));
  for (const tr of document.querySelectorAll("#campaigns tr.line")) {
    if (stopped.has(tr.dataset.id)) tr.querySelector("td.status").title = "its campaign is paused: it serves nothing";
  }
  const archived = new Set(set.line_items.filter((li) => li.status === "archived").map((li) => li.id));
  $("archived-count").textContent = archived.size ? `(${archived.size})` : "";
  for (const tr of document.querySelectorAll("#campaigns tr.line")) {
    const id = tr.dataset.id;
    if (!archived.has(id)) continue;
    if (!$("show-archived").checked) { tr.remove(); picked.delete(id); continue; }
    tr.querySelector("td.status").textContent = "archived";
    tr.querySelector("td.status").className = "status archived";
    const old = tr.querySelector("button.pause"), restore = old.cloneNode(false); // without its pause
    restore.textContent = "Restore";
    restore.addEventListener("click", (ev) => { ev.stopPropagation(); setPaused(id, false); });
    old.replaceWith(restore);
  }
  if (!canEdit()) { $("bulk-bar").hidden = true; return; }
  for (const tr of document.querySelectorAll("#campaigns tr.line")) {
    const id = tr.dataset.id;
    const box = document.createElement("input");
    box.type = "checkbox";
    box.className = "pick";
    box.checked = picked.has(id);
    box.setAttribute("aria-label", `select line item ${id}`);
    box.addEventListener("click", (ev) => ev.stopPropagation()); // not the row's editor
    box.addEventListener("change", () => {
      if (box.checked) picked.add(id); else picked.delete(id);
      bulkBar();
    });
    tr.cells[0].prepend(box);
  }
  bulkBar();
}

function bulkBar() {
  $("bulk-bar").hidden = picked.size === 0;
  $("bulk-count").textContent = `${picked.size} line item${picked.size === 1 ? "" : "s"} selected`;
}

async function bulkSet(verb) {
  const failed = [];
  for (const id of [...picked].sort()) {
    const r = await api("POST", `/api/v1/line-items/${encodeURIComponent(id)}/${verb}`);
    if (r.status !== 200) failed.push(`${id}: ${(r.data && r.data.error) || r.status}`);
  }
  $("campaigns-error").textContent = failed.length ? `Not ${verb}d:\n${failed.join("\n")}` : "";
  await loadCampaigns();
}
$("bulk-pause").addEventListener("click", () => bulkSet("pause"));
$("bulk-resume").addEventListener("click", () => bulkSet("resume"));
$("bulk-archive").addEventListener("click", () => {
  if (confirm(`Archive ${picked.size} line item${picked.size === 1 ? "" : "s"}? They stop serving and leave the table (Show archived line items brings them back).`)) bulkSet("archive");
});
$("show-archived").addEventListener("change", () => loadCampaigns());

// Line items as CSV (docs/ads.md, "Line items as CSV"): the download is
// the export's; an upload is merged into the stored set, every problem
// listed by its row, nothing written when there is one.
$("li-csv-upload").addEventListener("change", async (ev) => {
  const file = ev.target.files[0];
  if (!file) return;
  const out = $("li-csv-result");
  out.textContent = `Importing ${file.name}…`;
  const res = await fetch("/api/v1/campaigns/import?format=csv&name=" + encodeURIComponent(file.name), {
    method: "POST", credentials: "same-origin",
    headers: { "Content-Type": "text/csv", "X-CSRF-Token": csrf }, body: await file.text() });
  let data = null;
  try { data = await res.json(); } catch (e) { data = null; }
  ev.target.value = "";
  if (res.status === 200 && data) {
    out.textContent = `Imported ${file.name}: ${data.imported.line_items} line items.`;
    loadCampaigns();
    return;
  }
  if (res.status === 401) { showLogin(); return; }
  out.textContent = (data && data.error) || `The import failed (HTTP ${res.status}).`;
});
$("bulk-clear").addEventListener("click", () => {
  picked.clear();
  for (const box of document.querySelectorAll("#campaigns input.pick")) box.checked = false;
  bulkBar();
});

async function setCampaignPaused(id, pause) {
  const r = await api("POST", `/api/v1/campaigns/${encodeURIComponent(id)}/${pause ? "pause" : "resume"}`);
  $("campaigns-error").textContent = r.status === 200 ? "" :
    `Campaign ${id} not ${pause ? "paused" : "resumed"}: ${(r.data && r.data.error) || r.status}`;
  await loadCampaigns();
}

// Creatives: the approval queue (GET /api/v1/creatives?status=pending, or
// another status, archived among them) with a preview of each creative,
// Approve and Reject (with a reason), Archive and Restore, and a form adding a creative by URL for review. A preview
// never puts creative markup into this page: an image is an <img>, a video
// a <video> that loads nothing until played, and HTML a frame sandboxed
// without scripts or this page's origin (its document its own, which this
// page cannot reach and which cannot reach this page).
function enterCreatives() {
  const on = !!features.campaigns;
  $("creatives-body").hidden = !on;
  $("creative-new").hidden = !on || !canEdit();
  $("creative-tools").hidden = true;
  $("creatives-status").value = "pending"; // a new session starts at the queue
  if (!on) { $("creatives-count").textContent = `${dash} not kept: this server's store keeps no campaigns`; return; }
  loadCreatives();
}

const creativeStatusText = { pending: "waiting for review", approved: "approved", rejected: "rejected" };

async function loadCreatives() {
  const status = $("creatives-status").value;
  const r = await api("GET", "/api/v1/creatives" + (status ? "?status=" + encodeURIComponent(status) : ""));
  const body = $("creatives").tBodies[0];
  if (r.status !== 200 || !r.data) {
    body.replaceChildren();
    $("creatives-count").textContent = "";
    $("creatives-error").textContent = (r.data && r.data.error) || `Cannot read the creatives (${r.status}).`;
    return;
  }
  $("creatives-error").textContent = "";
  body.replaceChildren(...r.data.creatives.map(creativeRow));
  if (r.data.creatives.length === 0) {
    const tr = document.createElement("tr");
    cell(tr, status === "pending" ? "no creative waits for review" : "no creative").colSpan = 6;
    body.appendChild(tr);
  }
  const n = r.data.total;
  $("creatives-count").textContent = status === "pending" ? `${n} waiting for review` :
    `${n} ${status || "not archived"}`;
}

function creativeRow(c) {
  const tr = document.createElement("tr");
  tr.dataset.id = c.id;
  const status = c.status || "pending";
  cell(tr, c.id, "id");
  cell(tr, c.advertiser);
  cell(tr, `${c.format} ${c.w}×${c.h}${c.duration ? ", " + c.duration + " s" : ""}`);
  const st = cell(tr, creativeStatusText[status] || status, "status " + status);
  if (c.reason) st.textContent += `: ${c.reason}`;
  if (c.archived) markArchivedCreative(tr, st);
  cell(tr, "", "preview").appendChild(creativePreview(c));
  const actions = cell(tr, "", "review");
  for (const [label, cls, hide] of [["Approve", "approve", status === "approved"], ["Reject", "reject", status === "rejected"]]) {
    if (hide) continue;
    const b = document.createElement("button");
    b.type = "button";
    b.className = cls;
    b.textContent = label;
    b.disabled = !canEdit();
    b.title = canEdit() ? "" : "editors approve and reject creatives";
    b.addEventListener("click", () => (cls === "approve" ? reviewCreative(c.id, "approve") : askReason(actions, c.id)));
    actions.appendChild(b);
  }
  if (canEdit()) {
    for (const [label, cls, open] of [["Edit", "edit", editCreative], ["Duplicate", "duplicate", duplicateCreative]]) {
      const b = document.createElement("button");
      b.type = "button";
      b.className = cls;
      b.textContent = label;
      b.addEventListener("click", () => open(c));
      actions.appendChild(b);
    }
    archiveButton(actions, c);
  }
  return tr;
}

// markArchivedCreative marks the row of an archived creative, whose
// review (the status cell) it keeps.
function markArchivedCreative(tr, st) {
  tr.classList.add("archived");
  st.classList.add("archived");
  st.textContent = `archived (${st.textContent})`;
}

// archiveButton adds Archive (after a confirm) or Restore to an
// editor's creative row: an archived creative serves nowhere, keeping
// its review, until it is restored.
function archiveButton(td, c) {
  if (c.archived) {
    actionButton(td, "Restore", "restore", () => archiveCreative(c.id, "restore"));
    return;
  }
  actionButton(td, "Archive", "archive", () => {
    if (confirm(`Archive creative ${c.id}? It serves nowhere until it is restored, and keeps its review.`)) archiveCreative(c.id, "archive");
  });
}

async function archiveCreative(id, verb) {
  const r = await api("POST", `/api/v1/creatives/${encodeURIComponent(id)}/${verb}`);
  if (r.status !== 200) {
    $("creatives-error").textContent = `Not ${verb}d: ${(r.data && r.data.error) || r.status}`;
    return;
  }
  $("creatives-error").textContent = "";
  await loadCreatives();
}

// creativePreview is the creative as a page would show it, scaled down to
// fit, or its URL when there is nothing to show.
function creativePreview(c) {
  const size = (el) => {
    el.width = Math.min(c.w, 320);
    el.height = Math.round(c.h * (el.width / c.w));
  };
  if (c.format === "video" && c.media) {
    const box = document.createElement("div");
    const v = document.createElement("video");
    v.controls = true;
    v.preload = "none";
    v.src = c.media;
    size(v);
    const a = document.createElement("a");
    a.href = c.media;
    a.textContent = c.media;
    a.rel = "noopener noreferrer";
    a.target = "_blank";
    box.append(v, a);
    return box;
  }
  if (c.image) {
    const img = document.createElement("img");
    img.referrerPolicy = "no-referrer";
    img.alt = `creative ${c.id}`;
    img.src = c.image;
    size(img);
    return img;
  }
  if (c.html) {
    const f = document.createElement("iframe");
    f.setAttribute("sandbox", ""); // before the content: no script, an origin of its own
    f.referrerPolicy = "no-referrer";
    f.title = `creative ${c.id}`;
    f.width = c.w;
    f.height = c.h;
    f.srcdoc = c.html;
    return f;
  }
  return document.createTextNode(dash);
}

async function reviewCreative(id, verb, reason) {
  const r = await api("POST", `/api/v1/creatives/${encodeURIComponent(id)}/${verb}`, reason === undefined ? undefined : { reason });
  if (r.status !== 200) {
    $("creatives-error").textContent = `Not ${verb === "approve" ? "approved" : "rejected"}: ${(r.data && r.data.error) || r.status}`;
    return false;
  }
  $("creatives-error").textContent = "";
  await loadCreatives();
  return true;
}

// askReason opens a small form in the row for the rejection's reason.
function askReason(td, id) {
  if (td.querySelector("form.reject")) return;
  const f = document.createElement("form");
  f.className = "reject";
  const label = document.createElement("label");
  label.textContent = "Why is it rejected? ";
  const input = document.createElement("input");
  input.required = true;
  input.maxLength = 1024;
  input.className = "reason";
  label.appendChild(input);
  const ok = document.createElement("button");
  ok.type = "submit";
  ok.className = "danger";
  ok.textContent = "Reject";
  const cancel = document.createElement("button");
  cancel.type = "button";
  cancel.textContent = "Cancel";
  cancel.addEventListener("click", () => f.remove());
  f.append(label, ok, cancel);
  f.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    await reviewCreative(id, "reject", input.value.trim());
  });
  td.appendChild(f);
  input.focus();
}

$("creatives-status").addEventListener("change", () => loadCreatives());
$("creatives-filter").addEventListener("submit", (ev) => { ev.preventDefault(); loadCreatives(); });

// The form's fields by the first name of a problem's path.
const creativeFields = { id: "cr-id", advertiser: "cr-advertiser", format: "cr-format", w: "cr-w", h: "cr-h",
  duration: "cr-duration", image: "cr-image", media: "cr-media", mimes: "cr-mimes", click: "cr-click", html: "cr-html",
  file: "cr-file" };

// crEditing is the creative the form edits as the API answered it (its
// fields the form does not show kept as they are), or null: the form adds
// a new one, which waits for review.
let crEditing = null;

// crCopyOf is the creative a duplicate copies (its fields the form does
// not show go with the copy), or null.
let crCopyOf = null;

// creativeKind is the form's kind of creative: banner (an image), html
// (a banner of HTML) or video.
function creativeKind(c) {
  if (c.format === "video") return "video";
  return c.html ? "html" : "banner";
}

function creativeFormat() {
  const kind = $("cr-format").value;
  const show = { "cr-video": kind === "video", "cr-image": kind === "banner", "cr-html": kind === "html", "cr-file": kind !== "html" };
  for (const [cls, on] of Object.entries(show)) {
    for (const el of document.querySelectorAll("#cr-form ." + cls)) el.hidden = !on;
  }
  creativeFormPreview();
}
$("cr-format").addEventListener("change", creativeFormat);

// creativeFromForm is the creative the form describes, over what it edits.
function creativeFromForm() {
  const kind = $("cr-format").value;
  const body = Object.assign({}, crEditing || {});
  delete body.id;
  for (const k of ["image", "html", "media", "mimes", "duration"]) delete body[k];
  Object.assign(body, { advertiser: $("cr-advertiser").value.trim(), format: kind === "video" ? "video" : "banner",
    w: Number($("cr-w").value), h: Number($("cr-h").value), click: $("cr-click").value.trim() });
  if (kind === "video") {
    body.duration = Number($("cr-duration").value);
    body.media = $("cr-media").value.trim();
    body.mimes = $("cr-mimes").value.split(",").map((m) => m.trim()).filter((m) => m);
  } else if (kind === "html") {
    body.html = $("cr-html").value;
  } else {
    body.image = $("cr-image").value.trim();
  }
  return body;
}

// creativeFormPreview shows the form's creative as the queue would, once
// it has something to show.
function creativeFormPreview() {
  const c = creativeFromForm();
  c.id = $("cr-id").value.trim();
  const box = $("cr-preview");
  box.replaceChildren();
  if (!(c.w > 0 && c.h > 0) || !(c.image || c.html || c.media)) return;
  box.appendChild(creativePreview(c));
}
for (const id of ["cr-image", "cr-media", "cr-html", "cr-w", "cr-h"]) $(id).addEventListener("change", creativeFormPreview);

// contentChanged reports whether a save changes what a creative shows (or
// where its click leads), which its review approved or rejected.
function contentChanged(was, now) {
  const same = (a, b) => JSON.stringify(a === undefined ? null : a) === JSON.stringify(b === undefined ? null : b);
  return ["format", "w", "h", "image", "html", "media", "mimes", "duration", "click", "advertiser"].some((k) => !same(was[k], now[k]));
}

// openCreativeForm fills the form with c (nothing for a new creative) and
// opens it, for an edit of it (editing) or a new one.
async function openCreativeForm(c, editing, title, note) {
  crEditing = editing ? c : null;
  $("cr-title").textContent = title;
  $("cr-save").textContent = editing ? "Save" : "Add for review";
  $("cr-id").readOnly = editing;
  $("cr-id").value = c.id || "";
  $("cr-advertiser").value = c.advertiser || "";
  $("cr-format").value = creativeKind(c);
  $("cr-w").value = c.w || "";
  $("cr-h").value = c.h || "";
  $("cr-duration").value = c.duration || "";
  $("cr-image").value = c.image || "";
  $("cr-media").value = c.media || "";
  $("cr-mimes").value = (c.mimes || ["video/mp4"]).join(", ");
  $("cr-html").value = c.html || "";
  $("cr-click").value = c.click || "";
  $("cr-file").value = "";
  $("cr-upload-status").textContent = "";
  $("cr-status").textContent = note || "";
  await showCreativeForm();
}

// showCreativeForm opens the form as it is.
async function showCreativeForm() {
  $("creative-tools").hidden = false;
  showFieldProblems(creativeFields, $("cr-id").value.trim(), []);
  creativeFormat();
  (crEditing ? $("cr-advertiser") : $("cr-id")).focus();
  const r = await api("GET", "/api/v1/advertisers");
  if (r.status === 200 && r.data) {
    $("cr-advertisers").replaceChildren(...r.data.advertisers.map((a) => new Option(a.name, a.id)));
  }
}

// A new creative: the form as it was left, unless it was an edit or a
// copy of another.
$("creative-new").addEventListener("click", () => {
  $("cr-status").textContent = "";
  if (crEditing || crCopyOf) {
    crCopyOf = null;
    openCreativeForm({}, false, "Add a creative");
    return;
  }
  $("cr-title").textContent = "Add a creative";
  showCreativeForm();
});
$("cr-close").addEventListener("click", () => { $("creative-tools").hidden = true; });

// editCreative opens the form on c, as the API has it now.
async function editCreative(c) {
  const r = await api("GET", "/api/v1/creatives/" + encodeURIComponent(c.id));
  if (r.status !== 200 || !r.data) {
    $("creatives-error").textContent = `Cannot read ${c.id}: ${(r.data && r.data.error) || r.status}`;
    return;
  }
  const status = r.data.status || "pending";
  crCopyOf = null;
  openCreativeForm(r.data, true, `Edit ${c.id}`, status === "pending" ? "" :
    `It is ${status}: a change of what it shows or where it leads sends it back to review.`);
}

// duplicateCreative opens the form on a copy of c under the first free id
// of <id>-copy, <id>-copy-2...: a new creative, which waits for review.
async function duplicateCreative(c) {
  const all = await api("GET", "/api/v1/creatives?status=all"); // an archived one's id is taken too
  const taken = new Set(all.status === 200 && all.data ? all.data.creatives.map((x) => x.id) : []);
  let id = `${c.id}-copy`;
  for (let n = 2; taken.has(id); n++) id = `${c.id}-copy-${n}`;
  const copy = Object.assign({}, c, { id });
  delete copy.status;
  delete copy.reason;
  delete copy.archived;
  crCopyOf = copy; // what the form does not show goes with the copy
  await openCreativeForm(copy, false, `Duplicate ${c.id}`, `A copy of ${c.id}: change what differs, then add it for review.`);
}

// The file picked is uploaded at once (POST /api/v1/assets): its URL fills
// the image or media field, an image's size the width and height.
$("cr-file").addEventListener("change", async () => {
  const file = $("cr-file").files[0];
  const id = $("cr-id").value.trim();
  if (!file) return;
  $("cr-upload-status").textContent = `Uploading ${file.name}…`;
  showFieldProblems(creativeFields, id, []);
  const res = await fetch("/api/v1/assets", { method: "POST", credentials: "same-origin",
    headers: { "Content-Type": "application/octet-stream", "X-CSRF-Token": csrf }, body: file });
  let data = null;
  try { data = await res.json(); } catch (e) { data = null; }
  if (res.status === 401) { showLogin(); return; }
  if (res.status !== 200 || !data) {
    $("cr-upload-status").textContent = "";
    showFieldProblems(creativeFields, id, [{ path: "file", message: `${file.name} not uploaded: ${(data && data.error) || res.status}` }]);
    $("cr-file").value = "";
    return;
  }
  if (data.video) {
    $("cr-format").value = "video";
    $("cr-media").value = data.url;
    const mimes = $("cr-mimes").value.split(",").map((m) => m.trim()).filter((m) => m);
    if (!mimes.includes(data.content_type)) $("cr-mimes").value = [data.content_type, ...mimes.filter((m) => m !== "video/mp4")].join(", ");
  } else {
    $("cr-format").value = "banner";
    $("cr-image").value = data.url;
    $("cr-w").value = data.w;
    $("cr-h").value = data.h;
  }
  $("cr-upload-status").textContent = `Uploaded ${file.name}: ${data.content_type}` +
    (data.w ? `, ${data.w}×${data.h} px` : "") + `, ${data.bytes} bytes.`;
  creativeFormat();
});

$("cr-form").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const id = $("cr-id").value.trim();
  const was = crEditing;
  const body = creativeFromForm();
  if (!was && crCopyOf) {
    for (const k of ["name", "categories", "app"]) if (crCopyOf[k] !== undefined) body[k] = crCopyOf[k];
  }
  showFieldProblems(creativeFields, id, []);
  let back = false;
  if (was) {
    // The API keeps the status a put names: a change of what an approved
    // or rejected creative shows is sent back to review here.
    const status = was.status || "pending";
    back = status !== "pending" && contentChanged(was, body);
    if (back) { body.status = "pending"; delete body.reason; }
  } else {
    delete body.status;
    delete body.reason;
    // A new creative only: one with this id already is another's, not this
    // form's to replace (read from the list: a GET of a missing one would be
    // a 404 in the console).
    const all = await api("GET", "/api/v1/creatives?status=all");
    if (all.status === 200 && all.data && all.data.creatives.some((c) => c.id === id)) {
      showFieldProblems(creativeFields, id, [{ path: "id", message: `a creative ${id} exists already` }]);
      $("cr-status").textContent = "Not added: 1 problem, shown on the fields.";
      return;
    }
  }
  const verb = was ? "saved" : "added";
  const r = await api("PUT", "/api/v1/creatives/" + encodeURIComponent(id), body);
  if (r.status !== 200) {
    const problems = (r.data && r.data.problems) || [];
    const rest = showFieldProblems(creativeFields, id, problems);
    $("cr-status").textContent = problems.length
      ? `Not ${verb}: ${problems.length === 1 ? "1 problem" : problems.length + " problems"}` +
        (rest.length ? `:\n${rest.join("\n")}` : ", shown on the fields.")
      : `Not ${verb}: ${(r.data && r.data.error) || r.status}`;
    return;
  }
  crCopyOf = null;
  if (was) {
    crEditing = r.data;
    const status = r.data.status || "pending";
    $("cr-status").textContent = back ? `Saved ${id}: its content changed, so it went back to review (it does not serve until approved again).`
      : `Saved ${id}: it stays ${creativeStatusText[status] || status}.`;
    if (back) $("creatives-status").value = "pending";
  } else {
    $("cr-status").textContent = `Added ${id}: it waits for review.`;
    $("creatives-status").value = "pending";
  }
  loadCreatives();
});

$("report-form").addEventListener("submit", (ev) => { ev.preventDefault(); loadReport(); });
$("report-line").addEventListener("change", () => loadReport());
$("report-period").addEventListener("change", () => { fillRange(); loadReport(); });
for (const id of ["report-from", "report-to"]) $(id).addEventListener("change", () => { $("report-period").value = "custom"; });
$("report-by").addEventListener("change", () => { reportSort.key = ""; loadReport(); });
$("report-time").addEventListener("change", () => loadReport());
$("report-tz").addEventListener("change", () => { if ($("report-period").value !== "custom") fillRange(); loadReport(); });
$("report-export").addEventListener("click", exportReport);
fillRange();

// Line item status (GET /api/v1/line-items): whether each can serve now
// and, if not, why, shown in the campaigns table's serving column.
async function loadLineStatus() {
  const r = await api("GET", "/api/v1/line-items");
  const items = (r.status === 200 && r.data && r.data.line_items) || [];
  const byID = new Map(items.map((li) => [li.id, li]));
  for (const tr of $("campaigns").querySelectorAll("tr.line")) {
    const td = tr.querySelector("td.serving");
    const li = byID.get(tr.dataset.id);
    if (!td) continue;
    if (!li || typeof li.serving !== "boolean") {
      td.textContent = "—";
      td.title = "not told by this server";
      continue;
    }
    const reasons = li.reasons || [];
    td.textContent = li.serving ? "yes" : "no: " + reasons.map((x) => x.reason.replaceAll("_", " ")).join(", ");
    td.title = li.serving ? "nothing keeps it from serving: targeting, caps and pacing decide each request"
      : reasons.map((x) => x.detail).join("; ");
    td.classList.toggle("not-serving", !li.serving);
    // Its pacing, shown after the answer (the style writes "ahead of plan"
    // or "behind plan"; the detail is in the title).
    const p = li.pacing;
    td.classList.toggle("pacing-ahead", !!p && p.state === "ahead");
    td.classList.toggle("pacing-behind", !!p && p.state === "behind");
    if (p) td.title += `\nPacing (${p.budget}): ${p.detail}`;
  }
}

// Why not this ad? (GET /api/v1/decide/explain, admins): what /api/decide
// would answer a request, and the first rule that excluded each line item
// of its placement. window.tsubameExplain holds the API's last answer.
window.tsubameExplain = null;

async function runExplain() {
  const q = new URLSearchParams({ placement: $("explain-placement").value.trim() });
  for (const k of ["site", "country", "region", "ip", "ua", "w", "h", "count"]) {
    const v = $("explain-" + k).value.trim();
    if (v) q.set(k, v);
  }
  for (const kv of $("explain-kv").value.split(",")) {
    const [k, ...v] = kv.split("=");
    if (k.trim()) q.append("kv." + k.trim(), v.join("=").trim());
  }
  const r = await api("GET", "/api/v1/decide/explain?" + q);
  const body = $("explain-lines").tBodies[0];
  body.replaceChildren();
  if (r.status !== 200 || !r.data) {
    $("explain-summary").textContent = "";
    $("explain-error").textContent = (r.data && r.data.error) || `Cannot explain (${r.status}).`;
    window.tsubameExplain = null;
    return;
  }
  $("explain-error").textContent = "";
  const x = r.data;
  window.tsubameExplain = x;
  const rq = x.request;
  const who = [rq.country || "no country", rq.region, rq.device || "no device", rq.os, rq.browser].filter(Boolean).join(", ");
  const won = (x.decisions || []).map((d) => `${d.id} (${d.creative})`).join(", ");
  $("explain-summary").textContent = (won ? `Serves ${won}` : "Serves nothing") + ` to ${who}` +
    (rq.bot ? "; this User-Agent is a crawler's, which /api/decide answers with nothing" : "") +
    (x.sold ? "; the placement is sold in an auction first" : "") +
    (x.more ? `; ${x.more} more line items not listed` : "") + ".";
  for (const l of x.line_items || []) {
    const tr = document.createElement("tr");
    tr.dataset.lineItem = l.id;
    if (l.reason === "won") tr.className = "won";
    cell(tr, l.name ? `${l.name} (${l.id})` : l.id);
    cell(tr, l.campaign);
    cell(tr, String(l.priority), "num");
    cell(tr, l.reason.replaceAll("_", " "));
    cell(tr, l.detail);
    body.appendChild(tr);
  }
  if (!(x.line_items || []).length) {
    const tr = document.createElement("tr");
    cell(tr, "no line item names this placement, or none at all");
    tr.cells[0].colSpan = 5;
    body.appendChild(tr);
  }
}
$("explain-form").addEventListener("submit", (ev) => { ev.preventDefault(); runExplain(); });

// Advertisers and campaigns: a table of each (GET /api/v1/advertisers and
// /api/v1/campaigns with ?status=all, the archived shown only when "Show
// archived" is ticked), and for editors a form per object that opens
// below its row (New, Edit or a click on its id, Duplicate), Archive and
// Restore, and a campaign's Pause and Resume. A campaign's start and end
// are wall-clock times of its own time zone in the form, written to the
// API as RFC 3339 instants with that zone's offset then.
const advertiserEditor = makeEditor("adv-editor", "advertisers", 5);
const campaignEditor = makeEditor("camp-editor", "camps", 9);
const objects = { advertisers: [], campaigns: [] }; // as listed, archived too
let advertiserShown = null; // the advertiser in the form, as loaded (null: a new one)
let campaignShown = null; // the campaign in the form, as loaded (null: a new one)
let campaignBase = {}; // what the form was filled from: an existing campaign, the one duplicated, or nothing

// Common IANA zones for the time zone field's list; any other is typed.
const commonZones = ["Asia/Tokyo", "UTC", "Asia/Seoul", "Asia/Shanghai", "Asia/Hong_Kong", "Asia/Taipei", "Asia/Singapore",
  "Asia/Bangkok", "Asia/Jakarta", "Asia/Kolkata", "Asia/Dubai", "Australia/Sydney", "Pacific/Auckland", "Pacific/Honolulu",
  "Europe/London", "Europe/Paris", "Europe/Berlin", "Europe/Madrid", "Europe/Moscow", "Africa/Johannesburg",
  "America/New_York", "America/Chicago", "America/Denver", "America/Los_Angeles", "America/Toronto",
  "America/Mexico_City", "America/Sao_Paulo"];
const defaultZone = "Asia/Tokyo"; // a campaign's time zone when it names none (the model's)
$("camp-zones").replaceChildren(...commonZones.map((z) => new Option(z, z)));

// The form fields by the first name of a problem's path (a campaign's
// budget.total and budget.daily are told apart first: budgetPaths).
const advertiserFields = { id: "adv-id", name: "adv-name", domains: "adv-domains" };
const campaignFields = { id: "camp-id", name: "camp-name", advertiser: "camp-advertiser", start: "camp-start", end: "camp-end",
  timezone: "camp-timezone", budget_total: "camp-budget-total", budget_daily: "camp-budget-daily", budget: "camp-budget-total",
  pacing: "camp-pacing", status: "camp-status" };
const budgetPaths = (problems) => problems.map((p) => Object.assign({}, p, { path: (p.path || "").replace(/\bbudget\.(total|daily)\b/, "budget_$1") }));

const two = (n) => String(n).padStart(2, "0");

// zoneInput is instant s (RFC 3339) as a datetime-local value of its
// wall-clock time in zone ("": none); seconds only when it has them.
function zoneInput(s, zone) {
  if (!s) return "";
  const p = zoneParts(Date.parse(s), zone);
  const v = `${p.year}-${two(p.month)}-${two(p.day)}T${two(p.hour)}:${two(p.minute)}`;
  return p.second ? `${v}:${two(p.second)}` : v;
}

// zoneInstant is a datetime-local value, read as a wall-clock time in
// zone, as RFC 3339 with the zone's offset at that time ("": none; null:
// not a time). A time a clock change skips is taken as the zone's offset
// before it gives it.
function zoneInstant(v, zone) {
  if (!v) return "";
  const m = /^(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d)(?::(\d\d))?$/.exec(v);
  if (!m) return null;
  const [y, mo, d, h, mi, sec] = m.slice(1).map((x) => Number(x || 0));
  const want = Date.UTC(y, mo - 1, d, h, mi, sec);
  let t = want;
  for (let i = 0; i < 3; i++) {
    const p = zoneParts(t, zone);
    t += want - Date.UTC(p.year, p.month - 1, p.day, p.hour, p.minute, p.second);
  }
  const off = Math.round((want - t) / 60000), a = Math.abs(off);
  return `${m[1]}-${m[2]}-${m[3]}T${m[4]}:${m[5]}:${two(sec)}${off < 0 ? "-" : "+"}${two(Math.floor(a / 60))}:${two(a % 60)}`;
}

// knownZone reports whether this browser knows zone (the API decides
// which zones are valid; the form needs the zone to read its times).
function knownZone(zone) {
  try { zoneParts(0, zone); return true; } catch (e) { return false; }
}

const objectStatus = (o) => o.status || "active";

function enterObjects() {
  const on = !!features.campaigns;
  $("adv-body").hidden = !on;
  $("camp-body").hidden = !on;
  $("adv-new").hidden = !on || !canEdit();
  $("camp-new").hidden = !on || !canEdit();
  closeEditor(advertiserEditor);
  closeEditor(campaignEditor);
  if (!on) {
    for (const id of ["adv-count", "camp-count"]) $(id).textContent = `${dash} not kept: this server's store keeps no campaigns`;
    return;
  }
  loadObjects();
}

async function loadObjects() {
  const [a, c] = await Promise.all([api("GET", "/api/v1/advertisers?status=all"), api("GET", "/api/v1/campaigns?status=all")]);
  if (a.status !== 200 || !a.data || c.status !== 200 || !c.data) {
    const bad = a.status !== 200 || !a.data ? a : c;
    $("adv-error").textContent = (bad.data && bad.data.error) || `Cannot read the advertisers and campaigns (${bad.status}).`;
    return;
  }
  $("adv-error").textContent = "";
  objects.advertisers = a.data.advertisers;
  objects.campaigns = c.data.campaigns;
  renderAdvertisers();
  renderCampaignTable();
}

// reloadAll draws both tables and the line items' again after a write
// (their serving reasons follow a campaign's or advertiser's status).
let reloading = false;
async function reloadAll() {
  reloading = true;
  try {
    await loadObjects();
    if (features.campaigns) await loadCampaigns();
  } finally {
    reloading = false;
  }
}

// The line items' table drawn again (a campaign paused from its row, an
// import, the currency read): the two tables follow, unless a form is
// open, which a redraw would take the focus from.
new MutationObserver(() => {
  if (!reloading && !$("dash").hidden && features.campaigns && advertiserEditor.anchor === null && campaignEditor.anchor === null) loadObjects();
}).observe($("campaigns-count"), { childList: true, characterData: true, subtree: true });

function actionButton(td, text, className, onClick) {
  const b = document.createElement("button");
  b.type = "button";
  b.className = className;
  b.textContent = text;
  b.addEventListener("click", (ev) => { ev.stopPropagation(); onClick(); });
  td.appendChild(b);
  return b;
}

// idCell shows an object's id, a button opening its form for editors.
function idCell(tr, id, open) {
  const td = cell(tr, canEdit() ? "" : id, "id");
  if (canEdit()) actionButton(td, id, "link", open);
  return td;
}

function renderAdvertisers() {
  const body = $("advertisers").tBodies[0];
  parkEditor(advertiserEditor);
  body.replaceChildren();
  const all = objects.advertisers, show = $("adv-show-archived").checked;
  const archived = all.filter((a) => a.status === "archived").length;
  for (const a of all) {
    if (a.status === "archived" && !show) continue;
    const tr = document.createElement("tr");
    tr.className = canEdit() ? "object" : "object readonly";
    tr.dataset.id = a.id;
    idCell(tr, a.id, () => editAdvertiser(a));
    cell(tr, a.name);
    cell(tr, (a.domains || []).join(", "));
    cell(tr, objectStatus(a), "status " + objectStatus(a));
    const td = cell(tr, "", "tools");
    if (canEdit()) {
      actionButton(td, "Edit", "edit", () => editAdvertiser(a));
      actionButton(td, "Duplicate", "duplicate", () => duplicateAdvertiser(a));
      if (a.status === "archived") actionButton(td, "Restore", "restore", () => setObjectStatus("advertisers", a.id, "resume"));
      else actionButton(td, "Archive", "archive", () => {
        if (confirm(`Archive advertiser ${a.id}? None of its campaigns serves until it is restored.`)) setObjectStatus("advertisers", a.id, "archive");
      });
    }
    body.appendChild(tr);
  }
  placeEditor(advertiserEditor);
  $("adv-archived-count").textContent = archived ? `(${archived})` : "";
  $("adv-count").textContent = all.length === 0 ? "none yet" :
    `${all.length - archived} active${archived ? `, ${archived} archived` : ""}`;
}

// flightText is a campaign's flight in its own time zone.
function flightText(c) {
  const zone = c.timezone || defaultZone;
  if (!c.start && !c.end) return "always";
  if (!knownZone(zone)) return `${c.start || "now"} → ${c.end || "open"}`;
  const at = (s) => zoneInput(s, zone).replace("T", " ");
  return `${at(c.start) || "now"} → ${at(c.end) || "open"} (${zone})`;
}

const pacingMode = (c) => (typeof c.pacing === "string" ? c.pacing : (c.pacing && c.pacing.mode)) || "";

function renderCampaignTable() {
  const body = $("camps").tBodies[0];
  parkEditor(campaignEditor);
  body.replaceChildren();
  const all = objects.campaigns, show = $("camp-show-archived").checked;
  const names = new Map(objects.advertisers.map((a) => [a.id, a]));
  const archived = all.filter((c) => c.status === "archived").length;
  const money = (v) => (v ? `${v} ${currencyShown}`.trim() : "—");
  for (const c of all) {
    if (c.status === "archived" && !show) continue;
    const tr = document.createElement("tr");
    tr.className = canEdit() ? "object" : "object readonly";
    tr.dataset.id = c.id;
    idCell(tr, c.id, () => editCampaign(c));
    cell(tr, c.name || "");
    const adv = names.get(c.advertiser);
    cell(tr, adv ? `${adv.name} (${adv.id})` : c.advertiser, "advertiser").title =
      adv && adv.status === "archived" ? "archived: none of its campaigns serves" : "";
    cell(tr, objectStatus(c), "status " + objectStatus(c));
    cell(tr, flightText(c), "flight");
    const b = c.budget || {};
    cell(tr, money(b.total), "num total");
    cell(tr, money(b.daily), "num daily");
    const mode = pacingMode(c);
    cell(tr, (mode || "even") + (c.pacing && c.pacing.hour_weights ? ", hour weights" : ""), "pacing");
    const td = cell(tr, "", "tools");
    if (canEdit()) {
      actionButton(td, "Edit", "edit", () => editCampaign(c));
      actionButton(td, "Duplicate", "duplicate", () => duplicateCampaign(c));
      if (c.status === "archived") {
        actionButton(td, "Restore", "restore", () => setObjectStatus("campaigns", c.id, "resume"));
      } else {
        const paused = c.status === "paused";
        actionButton(td, paused ? "Resume" : "Pause", "pause", () => setObjectStatus("campaigns", c.id, paused ? "resume" : "pause"));
        actionButton(td, "Archive", "archive", () => {
          if (confirm(`Archive campaign ${c.id}? None of its line items serves until it is restored.`)) setObjectStatus("campaigns", c.id, "archive");
        });
      }
    }
    body.appendChild(tr);
  }
  placeEditor(campaignEditor);
  $("camp-archived-count").textContent = archived ? `(${archived})` : "";
  $("camp-count").textContent = all.length === 0 ? "none yet" :
    `${all.length - archived} not archived${archived ? `, ${archived} archived` : ""}`;
}

// setObjectStatus posts a status verb (pause, archive, resume) of an
// advertiser or campaign, then draws the tables again.
async function setObjectStatus(kind, id, verb) {
  const r = await api("POST", `/api/v1/${kind}/${encodeURIComponent(id)}/${verb}`);
  const err = kind === "advertisers" ? "adv-error" : "camp-error";
  $(err).textContent = r.status === 200 ? "" : `${kind === "advertisers" ? "Advertiser" : "Campaign"} ${id} not ${verb === "resume" ? "resumed" : verb + "d"}: ${(r.data && r.data.error) || r.status}`;
  await reloadAll();
  if (r.status !== 200) return;
  if (kind === "advertisers" && advertiserShown && advertiserShown.id === id && advertiserEditor.anchor === id) editAdvertiser(r.data);
  if (kind === "campaigns" && campaignShown && campaignShown.id === id && campaignEditor.anchor === id) editCampaign(r.data);
}

// freeID is the first of id-copy, id-copy-2, ... that no object of the
// list has.
function freeID(id, list) {
  const taken = new Set(list.map((o) => o.id));
  for (let n = 1; ; n++) {
    const c = `${id}-copy${n === 1 ? "" : "-" + n}`;
    if (!taken.has(c)) return c;
  }
}

// loadObjectHistory lists the changes of an object that the audit log
// holds, newest first (GET /api/v1/{kind}/{id}/history), in the box
// prefix-history-box.
async function loadObjectHistory(kind, action, prefix, id) {
  const box = $(prefix + "-history-box"), list = $(prefix + "-history"), note = $(prefix + "-history-note");
  list.replaceChildren();
  note.textContent = "";
  box.hidden = !id;
  if (!id) return;
  const r = await api("GET", `/api/v1/${kind}/${encodeURIComponent(id)}/history?limit=20`);
  if (r.status !== 200) {
    note.textContent = `Cannot read the changes: ${(r.data && r.data.error) || r.status}`;
    return;
  }
  for (const c of r.data.changes) {
    const item = document.createElement("li");
    const when = document.createElement("time");
    when.dateTime = c.time;
    when.textContent = new Date(c.time).toLocaleString();
    item.append(when, ` ${c.actor || "unknown"}: ${c.action.replace(action + ".", "")}${c.detail ? " (" + c.detail + ")" : ""}`);
    list.append(item);
  }
  note.textContent = r.data.changes.length === 0
    ? "No change through this server's admin in its audit log (imports are logged once for their whole file)."
    : "From this server's audit log; imports are logged once for their whole file.";
}

// showProblems shows an answer's problems on the form's fields (all at
// once) and the rest in the status line; verb is what failed ("saved").
function showProblems(fields, id, r, statusID, verb) {
  const problems = (r.data && r.data.problems) || [];
  const rest = showFieldProblems(fields, id, fields === campaignFields ? budgetPaths(problems) : problems);
  $(statusID).textContent = problems.length
    ? `Not ${verb}: ${problems.length === 1 ? "1 problem" : problems.length + " problems"}` +
      (rest.length ? `:\n${rest.join("\n")}` : ", shown on the fields.")
    : `Not ${verb}: ${(r.data && r.data.error) || r.status}`;
}

function editAdvertiser(a, title) {
  advertiserShown = a.id && title === undefined ? a : null;
  $("adv-title").textContent = title || `Edit advertiser ${a.id}`;
  $("adv-id").value = a.id || "";
  $("adv-id").readOnly = !!advertiserShown;
  $("adv-name").value = a.name || "";
  $("adv-domains").value = (a.domains || []).join("\n");
  $("adv-status").textContent = "";
  showFieldProblems(advertiserFields, a.id || "", []);
  openEditor(advertiserEditor, advertiserShown ? a.id : "");
  loadObjectHistory("advertisers", "advertiser", "adv", advertiserShown ? a.id : "");
}

function duplicateAdvertiser(a) {
  editAdvertiser(Object.assign({}, a, { id: freeID(a.id, objects.advertisers), status: "" }), `New advertiser (a copy of ${a.id})`);
}

$("adv-new").addEventListener("click", () => {
  editAdvertiser({ id: "" }, "New advertiser");
  $("adv-id").focus();
});
$("adv-close").addEventListener("click", () => closeEditor(advertiserEditor));
$("adv-show-archived").addEventListener("change", renderAdvertisers);

$("adv-form").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const id = $("adv-id").value.trim();
  showFieldProblems(advertiserFields, id, []);
  // A new one only: an id taken is another's, not this form's to replace.
  if (!advertiserShown && objects.advertisers.some((a) => a.id === id)) {
    showFieldProblems(advertiserFields, id, [{ path: "id", message: `an advertiser ${id} exists already` }]);
    $("adv-status").textContent = "Not saved: 1 problem, shown on the fields.";
    return;
  }
  const body = { id, name: $("adv-name").value.trim(), domains: lines($("adv-domains").value) };
  if (advertiserShown && advertiserShown.status) body.status = advertiserShown.status; // Archive and Restore change it
  const r = await api("PUT", "/api/v1/advertisers/" + encodeURIComponent(id), body);
  if (r.status !== 200) {
    showProblems(advertiserFields, id, r, "adv-status", "saved");
    return;
  }
  advertiserShown = r.data;
  advertiserEditor.anchor = id;
  $("adv-id").readOnly = true;
  $("adv-title").textContent = `Edit advertiser ${id}`;
  $("adv-status").textContent = `Saved ${id}.`;
  await reloadAll();
  loadObjectHistory("advertisers", "advertiser", "adv", id);
});

// fillAdvertisers lists the advertisers in the campaign form's select:
// the active ones, and the campaign's own even when archived.
function fillAdvertisers(current) {
  const opts = objects.advertisers.filter((a) => a.status !== "archived" || a.id === current)
    .map((a) => new Option(`${a.name} (${a.id})${a.status === "archived" ? ", archived" : ""}`, a.id));
  if (current && !objects.advertisers.some((a) => a.id === current)) opts.push(new Option(current, current));
  $("camp-advertiser").replaceChildren(new Option("choose an advertiser", ""), ...opts);
  $("camp-advertiser").value = current || "";
}

function editCampaign(c, title) {
  campaignShown = c.id && title === undefined ? c : null;
  campaignBase = c;
  const zone = c.timezone || defaultZone;
  $("camp-title").textContent = title || `Edit campaign ${c.id}`;
  $("camp-id").value = c.id || "";
  $("camp-id").readOnly = !!campaignShown;
  $("camp-name").value = c.name || "";
  fillAdvertisers(c.advertiser);
  $("camp-timezone").value = zone;
  const known = knownZone(zone);
  for (const [field, v] of [["camp-start", c.start], ["camp-end", c.end]]) {
    const value = known ? zoneInput(v, zone) : "";
    $(field).step = value.length > 16 ? "1" : "60";
    $(field).value = value;
  }
  const b = c.budget || {};
  $("camp-budget-total").value = b.total || "";
  $("camp-budget-daily").value = b.daily || "";
  $("camp-pacing").value = pacingMode(c) || "even";
  $("camp-status").value = objectStatus(c);
  $("camp-edit-status").textContent = known ? "" : `This browser does not know the time zone ${zone}: its start and end are not shown.`;
  showFieldProblems(campaignFields, c.id || "", []);
  openEditor(campaignEditor, campaignShown ? c.id : "");
  loadObjectHistory("campaigns", "campaign", "camp", campaignShown ? c.id : "");
}

function duplicateCampaign(c) {
  const status = c.status === "archived" ? "" : c.status; // a copy of one done with is a new start
  editCampaign(Object.assign({}, c, { id: freeID(c.id, objects.campaigns), status }), `New campaign (a copy of ${c.id})`);
}

$("camp-new").addEventListener("click", () => {
  editCampaign({ id: "", status: "" }, "New campaign");
  $("camp-id").focus();
});
$("camp-close").addEventListener("click", () => closeEditor(campaignEditor));
$("camp-show-archived").addEventListener("change", renderCampaignTable);

// campaignBody is the campaign the form describes, over the fields it
// does not show of the one it edits (a pacing's hour weights), and the
// problems the form finds itself (a time zone this browser cannot read
// times in).
function campaignBody(id) {
  const was = campaignBase;
  const body = { id, advertiser: $("camp-advertiser").value };
  const name = $("camp-name").value.trim();
  if (name) body.name = name;
  const zone = $("camp-timezone").value.trim();
  const problems = [];
  // The model's default left as it was: no time zone written.
  if (zone && !(zone === defaultZone && !was.timezone)) body.timezone = zone;
  const readZone = zone || defaultZone;
  if (!knownZone(readZone)) {
    problems.push({ path: "timezone", message: `${readZone} is not a time zone this browser knows (such as Asia/Tokyo or UTC)` });
  } else {
    for (const f of ["start", "end"]) {
      const v = zoneInstant($("camp-" + f).value, readZone);
      if (v === null) problems.push({ path: f, message: "not a date and time" });
      // The same instant as it was is written as it was (2026-11-15T00:00:00Z
      // stays so): a save changes only what the form changed.
      else if (v) body[f] = was[f] && Date.parse(was[f]) === Date.parse(v) ? was[f] : v;
    }
  }
  const budget = {};
  for (const f of ["total", "daily"]) {
    const v = $("camp-budget-" + f).value.trim();
    if (v !== "") budget[f] = v;
  }
  if (Object.keys(budget).length) body.budget = budget;
  const mode = $("camp-pacing").value;
  if (was.pacing && typeof was.pacing === "object" && was.pacing.hour_weights) {
    body.pacing = Object.assign({}, was.pacing, { mode });
  } else if (mode !== "even" || pacingMode(was)) {
    body.pacing = mode;
  }
  const status = $("camp-status").value;
  if (status !== "active" || was.status === "active") body.status = status;
  return { body, problems };
}

$("camp-form").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const id = $("camp-id").value.trim();
  showFieldProblems(campaignFields, id, []);
  const { body, problems } = campaignBody(id);
  if (!campaignShown && objects.campaigns.some((c) => c.id === id)) problems.push({ path: "id", message: `a campaign ${id} exists already` });
  if (problems.length) {
    showProblems(campaignFields, id, { data: { problems } }, "camp-edit-status", "saved");
    return;
  }
  const r = await api("PUT", "/api/v1/campaigns/" + encodeURIComponent(id), body);
  if (r.status !== 200) {
    showProblems(campaignFields, id, r, "camp-edit-status", "saved");
    return;
  }
  campaignShown = r.data;
  campaignEditor.anchor = id;
  $("camp-id").readOnly = true;
  $("camp-title").textContent = `Edit campaign ${id}`;
  $("camp-edit-status").textContent = `Saved ${id}.`;
  await reloadAll();
  loadObjectHistory("campaigns", "campaign", "camp", id);
});
