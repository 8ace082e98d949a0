// Tsubame admin dashboard: setup, login, live stats (server-sent events),
// placements and cache purge. No framework, no third-party code.
"use strict";

const $ = (id) => document.getElementById(id);
let csrf = "";
let stream = null;
const history = [];
let pageAfter = [""]; // the "after" of each page shown so far

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
  if (res.status === 401 && path !== "/api/v1/login") showLogin();
  return { status: res.status, data, retryAfter: res.headers.get("Retry-After") };
}

function show(section) {
  for (const id of ["setup", "login", "dash"]) $(id).hidden = id !== section;
  $("logout").hidden = section !== "dash";
}

function showLogin() {
  if (stream) { stream.close(); stream = null; }
  csrf = "";
  $("whoami").textContent = "";
  show("login");
}

async function start() {
  const s = await api("GET", "/api/v1/session");
  if (s.status === 200) { enter(s.data); return; }
  const setup = await api("GET", "/api/v1/setup");
  if (setup.status === 200 && setup.data.needed) { show("setup"); return; }
  showLogin();
}

function enter(session) {
  csrf = session.csrf_token || "";
  $("whoami").textContent = `${session.user} (${session.role})`;
  // Viewers read; editors and admins also change placements and purge.
  $("editor-tools").hidden = !(session.role === "editor" || session.role === "admin");
  show("dash");
  startStream();
  loadPage("");
}

$("setup-form").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  $("setup-error").textContent = "";
  const r = await api("POST", "/api/v1/setup", {
    token: $("setup-token").value.trim(), user: $("setup-user").value, password: $("setup-password").value,
  });
  if (r.status !== 201) { $("setup-error").textContent = (r.data && r.data.error) || "setup failed"; return; }
  $("setup-form").hidden = true;
  $("setup-secret").textContent = r.data.totp_secret;
  $("setup-url").textContent = r.data.totp_url;
  $("setup-done").hidden = false;
});

$("setup-continue").addEventListener("click", () => {
  $("login-user").value = $("setup-user").value;
  showLogin();
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
  enter(r.data);
});

$("logout").addEventListener("click", async () => {
  await api("POST", "/api/v1/logout");
  showLogin();
});

// Live stats.
function startStream() {
  if (stream) stream.close();
  stream = new EventSource("/api/v1/stats/stream");
  stream.onmessage = (ev) => {
    const p = JSON.parse(ev.data);
    history.push(p);
    if (history.length > 300) history.shift();
    render(p);
  };
  stream.onerror = async () => {
    // The server ends the stream when the session ends; check which.
    const s = await api("GET", "/api/v1/session");
    if (s.status !== 200) showLogin();
  };
}

const fmt = {
  num: (v) => (v >= 1000 ? Math.round(v).toLocaleString("en") : v.toFixed(v < 10 ? 1 : 0)),
  ms: (v) => (v >= 10 ? v.toFixed(0) : v.toFixed(2)) + " ms",
  bytes: (v) => {
    const units = ["B", "KiB", "MiB", "GiB"];
    let i = 0;
    while (v >= 1024 && i < units.length - 1) { v /= 1024; i++; }
    return v.toFixed(i ? 1 : 0) + " " + units[i];
  },
};

function render(p) {
  $("rps").textContent = fmt.num(p.rps);
  $("p50").textContent = fmt.ms(p.p50_ms);
  $("p99").textContent = fmt.ms(p.p99_ms);
  $("hit").textContent = p.cache_hit_rate < 0 ? "–" : (100 * p.cache_hit_rate).toFixed(1) + " %";
  $("logq").textContent = fmt.bytes(p.log_buffered_bytes) + (p.log_failing ? " (failing)" : "");
  $("kafka-tile").hidden = p.kafka_lag_lines < 0;
  if (p.kafka_lag_lines >= 0) {
    $("kafkalag").textContent = p.kafka_lag_lines + " lines" +
      (p.kafka_oldest_seconds >= 1 ? ", oldest " + Math.round(p.kafka_oldest_seconds) + " s" : "") +
      (p.kafka_failing ? " (failing)" : "");
  }
  $("hookq").textContent = `${p.webhook_queued} + ${p.webhook_in_flight}`;
  $("conns").textContent = p.connections;
  $("goroutines").textContent = p.goroutines;
  $("rss").textContent = fmt.bytes(p.rss_bytes);
  $("pcpu").textContent = p.process_cpu.toFixed(0) + " %";
  $("updated").textContent = "updated " + new Date(p.time).toLocaleTimeString();
  renderCores(p.cpu || []);
  drawChart();
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
  cpu.forEach((v, i) => {
    const row = box.children[i];
    row.children[1].firstChild.style.width = Math.min(100, v).toFixed(1) + "%";
    row.children[2].textContent = v.toFixed(0) + " %";
  });
}

function drawChart() {
  const c = $("chart");
  const g = c.getContext("2d");
  g.clearRect(0, 0, c.width, c.height);
  if (history.length < 2) return;
  const max = Math.max(1, ...history.map((p) => p.rps));
  const step = c.width / 299;
  g.strokeStyle = "#3b7ddd";
  g.lineWidth = 2;
  g.beginPath();
  history.forEach((p, i) => {
    const x = c.width - (history.length - 1 - i) * step;
    const y = c.height - 8 - (p.rps / max) * (c.height - 24);
    if (i === 0) g.moveTo(x, y); else g.lineTo(x, y);
  });
  g.stroke();
  g.fillStyle = "#667";
  g.font = "12px system-ui";
  g.fillText("max " + fmt.num(max) + " req/s", 8, 14);
}

// Placements.
async function loadPage(after) {
  const q = new URLSearchParams({ limit: "20" });
  if (after) q.set("after", after);
  const r = await api("GET", "/api/v1/placements?" + q);
  if (r.status !== 200) return;
  const body = $("placements").tBodies[0];
  body.replaceChildren();
  for (const p of r.data.placements) {
    const tr = document.createElement("tr");
    for (const v of [p.id, p.name || "", p.urls.join("\n"), new Date(p.updated_at).toLocaleString()]) {
      const td = document.createElement("td");
      td.textContent = v; // never innerHTML: placement data is untrusted
      tr.appendChild(td);
    }
    tr.children[2].className = "urls";
    tr.addEventListener("click", () => edit(p));
    body.appendChild(tr);
  }
  $("page-next").disabled = !r.data.next;
  $("page-next").dataset.after = r.data.next;
}

$("page-first").addEventListener("click", () => loadPage(""));
$("page-next").addEventListener("click", () => loadPage($("page-next").dataset.after));

function edit(p) {
  $("edit-id").value = p.id;
  $("edit-name").value = p.name || "";
  $("edit-urls").value = p.urls.join("\n");
  $("edit-deps").value = (p.deps || []).join("\n");
  $("edit-status").textContent = "";
}

const lines = (s) => s.split("\n").map((l) => l.trim()).filter((l) => l);

$("edit-form").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const id = $("edit-id").value.trim();
  const body = { urls: lines($("edit-urls").value), name: $("edit-name").value, deps: lines($("edit-deps").value) };
  const r = await api("PUT", "/api/v1/placements/" + encodeURIComponent(id), body);
  $("edit-status").textContent = r.status === 200 ? `Saved ${id}.` : `Not saved: ${(r.data && r.data.error) || r.status}`;
  if (r.status === 200) loadPage("");
});

$("edit-delete").addEventListener("click", async () => {
  const id = $("edit-id").value.trim();
  if (!id || !confirm(`Delete placement ${id}?`)) return;
  const r = await api("DELETE", "/api/v1/placements/" + encodeURIComponent(id));
  $("edit-status").textContent = r.status === 204 ? `Deleted ${id}.` : `Not deleted: ${(r.data && r.data.error) || r.status}`;
  if (r.status === 204) loadPage("");
});

$("purge-form").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const keys = lines($("purge-keys").value);
  const kind = document.querySelector('input[name="purge-kind"]:checked').value;
  const r = await api("POST", "/api/v1/purge", kind === "ids" ? { ids: keys } : { deps: keys });
  $("purge-status").textContent = r.status === 200 ? `Purged ${keys.length} ${kind}.` : `Not purged: ${(r.data && r.data.error) || r.status}`;
});

start();
