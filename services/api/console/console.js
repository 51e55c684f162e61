// The Tickerwire partner console (docs/console.md). Plain ES module, no framework, no build.
// Every value from the server reaches the page through textContent (never innerHTML), so an
// endpoint description or a receiver's response holding markup shows as text.

const API = document.querySelector('meta[name="tw-api-base"]').content;
const STREAM = document.querySelector('meta[name="tw-stream-url"]').content;
const LIVE_KEPT = 50; // messages shown at most, newest first
const CSRF_KEY = "tw_console_csrf";
const $ = (id) => document.getElementById(id);
let current = null; // the endpoint shown in the detail section
let attempts = [];
let socket = null; // the live view's WebSocket, while open

function say(message) {
  $("status").textContent = message;
}

function el(tag, text, className) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = String(text);
  if (className) node.className = className;
  return node;
}

function list(value) {
  const items = value.split(",").map((s) => s.trim()).filter(Boolean);
  return items.length ? items : null;
}

function joined(value) {
  return value ? value.join(", ") : "";
}

function showUsage(response) {
  const h = (name) => response.headers.get(name);
  if (h("X-Quota-Limit") === null) return;
  const quota = Number(h("X-Quota-Limit"));
  const rate = Number(h("X-RateLimit-Limit"));
  $("usage-day").textContent = `${quota - Number(h("X-Quota-Remaining"))} of ${quota} (resets ${h("X-Quota-Reset")})`;
  $("usage-minute").textContent = `${rate - Number(h("X-RateLimit-Remaining"))} of ${rate} per minute`;
}

function signedOut(message) {
  if (socket) stopLive("Stopped.");
  sessionStorage.removeItem(CSRF_KEY);
  $("console").hidden = true;
  $("sign-out").hidden = true;
  $("who").hidden = true;
  $("sign-in-section").hidden = false;
  say(message || "");
}

// One call of the partner API as the session: the CSRF token on every method.
async function call(method, path, body) {
  const headers = { "X-CSRF-Token": sessionStorage.getItem(CSRF_KEY) || "" };
  const init = { method, headers, credentials: "same-origin" };
  if (body !== undefined) {
    headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const response = await fetch(path.startsWith("/console") ? path : API + path, init);
  showUsage(response);
  const data = response.status === 204 ? null : await response.json().catch(() => null);
  if (response.status === 401) {
    signedOut(data && data.error ? data.error.message : "Signed out.");
    throw new Error("signed out");
  }
  if (!response.ok) {
    const message = data && data.error ? `${data.error.code}: ${data.error.message}` : `HTTP ${response.status}`;
    say(message);
    throw new Error(message);
  }
  return data;
}

function filtersText(f) {
  const parts = [];
  for (const name of ["locales", "tickers", "categories"]) {
    if (f && f[name]) parts.push(`${name}: ${f[name].join(", ")}`);
  }
  return parts.length ? parts.join("; ") : "all posts";
}

function endpointItem(e) {
  const item = el("li");
  item.dataset.id = e.id;
  item.append(el("strong", e.url));
  if (e.description) item.append(el("p", e.description, "description"));
  item.append(el("p", `${e.id} · ${e.status} · ${filtersText(e.filters)} · ${e.delivered} delivered`, "meta"));
  if (e.disabled_reason) item.append(el("p", `Disabled: ${e.disabled_reason}`, "meta"));
  const open = el("button", "Details and attempts");
  open.type = "button";
  open.addEventListener("click", () => showDetail(e));
  item.append(open);
  return item;
}

async function loadEndpoints() {
  const data = await call("GET", "/webhooks/endpoints");
  $("endpoints").replaceChildren(...data.endpoints.map(endpointItem));
  $("no-endpoints").hidden = data.endpoints.length > 0;
  return data.endpoints;
}

function attemptItem(a) {
  const item = el("li");
  const when = `${a.attempted_at} · ${a.type || "post.created"} · attempt ${a.attempt}`;
  item.append(el("strong", `${a.outcome}${a.status ? " " + a.status : ""}`));
  item.append(el("p", `${a.webhook_id} · ${when}`, "meta"));
  if (a.latency_ms !== null && a.latency_ms !== undefined) item.append(el("p", `${a.latency_ms} ms`, "meta"));
  if (a.error) item.append(el("p", a.error, "meta"));
  if (a.response_excerpt) item.append(el("pre", a.response_excerpt, "excerpt"));
  return item;
}

function showAttempts() {
  const outcome = $("outcome").value;
  const shown = attempts.filter((a) => !outcome || a.outcome === outcome);
  $("attempts").replaceChildren(...shown.map(attemptItem));
  $("no-attempts").hidden = shown.length > 0;
}

async function showDetail(e) {
  current = e;
  $("detail").hidden = false;
  $("detail-id").textContent = e.id;
  $("edit-url").value = e.url;
  $("edit-description").value = e.description || "";
  $("edit-locales").value = joined(e.filters && e.filters.locales);
  $("edit-tickers").value = joined(e.filters && e.filters.tickers);
  $("edit-categories").value = joined(e.filters && e.filters.categories);
  $("pause").hidden = e.status === "paused";
  $("resume").hidden = e.status !== "paused";
  await loadAttempts();
  $("detail-title").focus();
}

async function loadAttempts() {
  const data = await call("GET", `/webhooks/endpoints/${encodeURIComponent(current.id)}/attempts`);
  attempts = data.attempts;
  showAttempts();
}

function showSecret(secret) {
  $("secret").textContent = secret;
  $("secret-box").hidden = false;
}

function formFilters(form) {
  const f = new FormData(form);
  return {
    url: f.get("url"),
    description: f.get("description") || "",
    locales: list(f.get("locales") || ""),
    tickers: list(f.get("tickers") || ""),
    categories: list(f.get("categories") || ""),
  };
}

async function act(path, method = "POST", body) {
  const id = encodeURIComponent(current.id);
  const data = await call(method, `/webhooks/endpoints/${id}${path}`, body);
  await loadEndpoints();
  return data;
}

async function signedIn(workspace) {
  $("sign-in-section").hidden = true;
  $("console").hidden = false;
  $("sign-out").hidden = false;
  $("who").hidden = false;
  $("who").textContent = `Workspace ${workspace}`;
  await loadEndpoints();
}

$("sign-in").addEventListener("submit", async (event) => {
  event.preventDefault();
  const key = $("key").value.trim();
  event.target.reset(); // the key leaves the page now
  const response = await fetch("/console/sessions", {
    method: "POST",
    headers: { Authorization: `Bearer ${key}` },
    credentials: "same-origin",
  });
  const data = await response.json().catch(() => null);
  if (response.status !== 201) {
    say(data && data.error ? data.error.message : `Sign-in failed (HTTP ${response.status}).`);
    return;
  }
  showUsage(response);
  sessionStorage.setItem(CSRF_KEY, data.csrf_token);
  sessionStorage.setItem("tw_console_workspace", data.workspace_id);
  say(`Signed in until ${data.expires_at}.`);
  await signedIn(data.workspace_id);
});

$("sign-out").addEventListener("click", async () => {
  await call("DELETE", "/console/sessions/current").catch(() => null);
  signedOut("Signed out.");
});

$("refresh").addEventListener("click", () => loadEndpoints().catch(() => null));
$("outcome").addEventListener("change", showAttempts);
$("reload-attempts").addEventListener("click", () => (current ? loadAttempts().catch(() => null) : null));

$("create").addEventListener("submit", async (event) => {
  event.preventDefault();
  const data = await call("POST", "/webhooks/endpoints", formFilters(event.target)).catch(() => null);
  if (!data) return;
  event.target.reset();
  showSecret(data.secret);
  say(`Endpoint ${data.endpoint.id} added.`);
  await loadEndpoints();
});

$("edit").addEventListener("submit", async (event) => {
  event.preventDefault();
  const data = await act("", "PATCH", formFilters(event.target)).catch(() => null);
  if (data) say(`Endpoint ${data.id} saved.`);
});

for (const [id, path, done] of [
  ["pause", "/pause", "paused"],
  ["resume", "/resume", "resumed"],
  ["test", "/test", "test event queued"],
]) {
  $(id).addEventListener("click", async () => {
    const data = await act(path).catch(() => null);
    if (!data) return;
    say(`Endpoint ${current.id}: ${done}${data.webhook_id ? ` (${data.webhook_id})` : ""}.`);
    if (data.status) await showDetail(data);
  });
}

$("rotate").addEventListener("click", async () => {
  const data = await act("/rotate-secret").catch(() => null);
  if (!data) return;
  showSecret(data.secret);
  say(`Endpoint ${current.id}: secret rotated.`);
});

$("delete").addEventListener("click", async () => {
  const id = current.id;
  if ((await act("", "DELETE").catch(() => false)) === false) return;
  $("detail").hidden = true;
  say(`Endpoint ${id} deleted.`);
});

$("replay").addEventListener("submit", async (event) => {
  event.preventDefault();
  const since = new Date(`${new FormData(event.target).get("since")}Z`).toISOString();
  const data = await act("/replay", "POST", { since }).catch(() => null);
  if (data) say(`Endpoint ${current.id}: replaying since ${since}.`);
});

// The live view: a single-use ticket from the API (the session's key never reaches the page),
// then a WebSocket to the stream with the chosen filters.
function liveMessage(message) {
  const item = el("li");
  if (message.type === "post.created" && message.data) {
    item.append(el("strong", message.data.title || message.data.id));
    const categories = (message.data.categories || []).map((c) => c.name || c.slug || c).join(", ");
    item.append(el("p", `${message.ts} · ${message.data.lang || ""} · ${categories}`, "meta"));
  } else {
    item.append(el("p", `${message.type}${message.ts ? " · " + message.ts : ""}`, "meta"));
  }
  $("live-messages").prepend(item);
  while ($("live-messages").children.length > LIVE_KEPT) $("live-messages").lastChild.remove();
}

function stopLive(state) {
  if (socket) socket.close(1000);
  socket = null;
  $("live-start").disabled = false;
  $("live-stop").disabled = true;
  if (state) $("live-state").textContent = state;
}

$("live").addEventListener("submit", async (event) => {
  event.preventDefault();
  stopLive();
  const granted = await call("POST", "/console/stream-tickets").catch(() => null);
  if (!granted) return;
  const query = new URLSearchParams({ ticket: granted.ticket });
  const f = new FormData(event.target);
  for (const name of ["locales", "tickers", "categories"]) {
    const value = list(f.get(name) || "");
    if (value) query.set(name, value.join(","));
  }
  socket = new WebSocket(`${granted.url}?${query}`);
  $("live-start").disabled = true;
  $("live-stop").disabled = false;
  $("live-state").textContent = "Connecting…";
  socket.addEventListener("open", () => ($("live-state").textContent = "Watching."));
  socket.addEventListener("message", (m) => {
    try {
      liveMessage(JSON.parse(m.data));
    } catch {
      // not JSON: nothing to show
    }
  });
  socket.addEventListener("close", (e) => {
    if (socket) stopLive(`Closed (${e.code}${e.reason ? ": " + e.reason : ""}).`);
  });
});
$("live-stop").addEventListener("click", () => stopLive("Stopped."));
$("live").hidden = !STREAM;
$("live-off").hidden = Boolean(STREAM);

$("detail-title").tabIndex = -1;
if (sessionStorage.getItem(CSRF_KEY)) {
  signedIn(sessionStorage.getItem("tw_console_workspace") || "").catch(() => null);
}
