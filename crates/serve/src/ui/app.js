// isnode status page: polls GET /v1/status every second and renders it; plays titles
// (MP4 with <video>; MPEG-TS objects, encrypted ones (AES-128) and titles with renditions
// with hls.js, vendored in the binary, and a rung picker); operator
// actions (upload, delete, broadcasts) with a token kept in sessionStorage.
"use strict";

const TOKEN_KEY = "isnode.token";
const POLL_MS = 1000;
const $ = (id) => document.getElementById(id);

const state = { status: null, titles: [], plays: 0, updates: 0, playing: null, player: null, signatures: {} };

// ---------- formatting ----------

function fmtBytes(n) {
  const u = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
  return (i === 0 ? n.toFixed(0) : n.toFixed(n < 10 ? 2 : 1)) + " " + u[i];
}

function fmtRate(bps) {
  const u = ["bit/s", "kbit/s", "Mbit/s", "Gbit/s"];
  let i = 0;
  while (bps >= 1000 && i < u.length - 1) { bps /= 1000; i++; }
  return (i === 0 ? bps.toFixed(0) : bps.toFixed(bps < 10 ? 2 : 1)) + " " + u[i];
}

function fmtTime(s) {
  if (!isFinite(s) || s < 0) return "–";
  s = Math.floor(s);
  const h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60), sec = s % 60;
  const mm = String(m).padStart(h ? 2 : 1, "0"), ss = String(sec).padStart(2, "0");
  return h ? `${h}:${mm}:${ss}` : `${mm}:${ss}`;
}

function kind(contentType) {
  if (contentType === "video/mp4" || contentType === "audio/mp4") return "MP4";
  if (contentType === "video/mp2t") return "MPEG-TS";
  return contentType || "other";
}

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v;
    else if (k.startsWith("data-")) e.setAttribute(k, v);
    else if (k === "title") e.title = v;
    else e[k] = v;
  }
  for (const c of children) e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return e;
}

// ---------- API ----------

function token() { return sessionStorage.getItem(TOKEN_KEY) || ""; }

function headers(extra) {
  const h = Object.assign({}, extra || {});
  if (token()) h["Authorization"] = "Bearer " + token();
  return h;
}

async function api(method, path, body) {
  const init = { method, headers: headers(body ? { "Content-Type": "application/json" } : {}) };
  if (body) init.body = JSON.stringify(body);
  const r = await fetch(path, init);
  if (!r.ok) {
    let msg = r.status + " " + r.statusText;
    try { const j = await r.json(); if (j.error) msg = j.error + " (" + r.status + ")"; } catch (_) { /* not JSON */ }
    throw new Error(msg);
  }
  return r.status === 204 ? null : r.json().catch(() => null);
}

let noticeTimer = null;
function notice(text, kindName) {
  const n = $("notice");
  n.textContent = text;
  n.className = "notice" + (kindName === "info" ? " info" : "");
  n.hidden = !text;
  clearTimeout(noticeTimer);
  if (text && kindName === "info") noticeTimer = setTimeout(() => { n.hidden = true; }, 4000);
}

// ---------- polling ----------

async function poll() {
  try {
    const s = await api("GET", "/v1/status");
    // Titles with renditions (viewer role): none listed where the token cannot read them.
    state.titles = await api("GET", "/v1/titles").catch(() => []) || [];
    state.status = s;
    state.updates++;
    render(s);
    $("live").className = "live on";
    $("live").title = "updated " + new Date().toLocaleTimeString();
    if ($("notice").dataset.poll === "1") { notice(""); $("notice").dataset.poll = ""; }
  } catch (e) {
    $("live").className = "live off";
    notice("Status unavailable: " + e.message + (token() ? "" : " — a token with the metrics role may be needed"));
    $("notice").dataset.poll = "1";
  } finally {
    setTimeout(poll, POLL_MS);
  }
}

function render(s) {
  document.body.dataset.updates = String(state.updates);
  $("meta").textContent = `v${s.version} · ${s.engine} · up ${fmtTime(s.uptime_s)}`;
  renderCards(s);
  renderChart(s.egress, s.egress_interval_s);
  renderTitles(s.titles);
  renderSessions(s.sessions, s.titles);
  renderBroadcasts(s.broadcasts);
}

function renderCards(s) {
  const streaming = s.sessions.filter((x) => x.state === "streaming").length;
  $("k-sessions").textContent = streaming;
  $("k-sessions-sub").textContent = `${s.totals.sessions_started} started · ${s.totals.sessions_refused} refused`;
  $("k-broadcasts").textContent = s.broadcasts.length;
  const viewers = s.broadcasts.reduce((a, b) => a + b.viewers, 0);
  $("k-broadcasts-sub").textContent = `${viewers} viewers · ${s.totals.broadcasts_started} started`;
  const last = s.egress.length ? s.egress[s.egress.length - 1] : { udp_bps: 0, http_bps: 0 };
  $("k-egress").textContent = fmtRate(last.udp_bps + last.http_bps);
  $("k-egress-sub").textContent = `${fmtBytes(s.totals.udp_bytes_sent)} UDP · ${fmtBytes(s.totals.http_bytes_sent)} HTTP`;
  const c = s.cache;
  $("k-cache").textContent = c.hit_ratio == null ? "–" : (c.hit_ratio * 100).toFixed(1) + " %";
  $("k-cache-sub").textContent = `${fmtBytes(c.bytes)} of ${fmtBytes(c.pool_bytes)} · ${c.evictions} evictions`;
  const failed = s.members.filter((m) => m.health !== "ok").length;
  $("k-members").textContent = failed ? `${s.members.length - failed}/${s.members.length} ok` : `${s.members.length} ok`;
  const box = $("members");
  box.className = "sub members";
  box.replaceChildren(...s.members.map((m) => el("span", {
    class: "member" + (m.health === "ok" ? "" : m.health === "slow" ? " slow" : " failed"),
    title: `member ${m.member}: ${m.health}, ${m.read_errors} read errors`,
    "data-health": m.health,
  })));
}

// ---------- egress chart (inline SVG) ----------

const SVG_NS = "http://www.w3.org/2000/svg";
function svg(tag, attrs) {
  const e = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  return e;
}

function niceMax(v) {
  if (v <= 0) return 1e6;
  const p = Math.pow(10, Math.floor(Math.log10(v)));
  for (const m of [1, 2, 2.5, 5, 10]) if (v <= m * p) return m * p;
  return 10 * p;
}

function renderChart(samples, interval) {
  const chart = $("chart");
  // Drawn in CSS pixels (the viewBox follows the element's width): text is not stretched.
  const W = Math.max(200, Math.round(chart.clientWidth || 800)), H = 160, top = 14, bottom = 18, span = 300;
  chart.setAttribute("viewBox", `0 0 ${W} ${H}`);
  const max = niceMax(Math.max(0, ...samples.map((x) => x.udp_bps + x.http_bps)));
  const now = samples.length ? samples[samples.length - 1].t_s : 0;
  const x = (t) => W - ((now - t) / span) * W;
  const y = (v) => H - bottom - (v / max) * (H - top - bottom);
  const nodes = [];
  for (let i = 0; i <= 2; i++) {
    const v = (max * i) / 2, yy = y(v);
    nodes.push(svg("line", { x1: 0, x2: W, y1: yy, y2: yy, class: "grid-line" }));
    const label = svg("text", { x: 4, y: yy - 3, class: "axis" });
    label.textContent = fmtRate(v);
    if (i > 0) nodes.push(label);
  }
  const area = (f, cls) => {
    if (samples.length < 2) return;
    const pts = samples.map((s) => `${x(s.t_s).toFixed(1)},${y(f(s)).toFixed(1)}`);
    const first = x(samples[0].t_s).toFixed(1), last = x(now).toFixed(1), base = y(0).toFixed(1);
    nodes.push(svg("path", { d: `M${first},${base} L${pts.join(" L")} L${last},${base} Z`, class: cls }));
  };
  // HTTP stacked on top of UDP.
  area((s) => s.udp_bps + s.http_bps, "http");
  area((s) => s.udp_bps, "udp");
  const left = svg("text", { x: 4, y: H - 3, class: "axis" });
  left.textContent = `${Math.round(span / 60)} min ago`;
  const right = svg("text", { x: W - 4, y: H - 3, class: "axis", "text-anchor": "end" });
  right.textContent = "now";
  nodes.push(left, right);
  chart.replaceChildren(...nodes);
  $("egress-window").textContent = `· ${interval} s samples`;
}

// ---------- tables ----------

function changed(key, value) {
  const sig = JSON.stringify(value);
  if (state.signatures[key] === sig) return false;
  state.signatures[key] = sig;
  return true;
}

function renderTitles(titles) {
  $("titles-count").textContent = titles.length + state.titles.length;
  if (!changed("titles", [titles, state.titles, state.playing, !!token()])) return;
  const body = $("titles").tBodies[0];
  if (!titles.length && !state.titles.length) {
    body.replaceChildren(el("tr", {}, el("td", { class: "empty", colSpan: 8 }, "No titles yet: drop a file above or run isnode ingest.")));
    return;
  }
  const ladders = state.titles.map((t) => ladderRow(t, titles));
  body.replaceChildren(...ladders, ...titles.map((t) => {
    const ok = t.status === "ok";
    const actions = el("td", { class: "actions" });
    if (ok) actions.append(el("button", { class: "btn small", type: "button", "data-action": "play" }, "Play"));
    actions.append(
      el("button", { class: "btn small", type: "button", "data-action": "broadcast", disabled: !ok }, "Broadcast"),
      el("button", { class: "btn small danger", type: "button", "data-action": "delete" }, "Delete"),
    );
    return el("tr", { class: "title-row" + (state.playing === t.name ? " playing" : ""), "data-title": t.name },
      el("td", { class: "title-name" }, t.name),
      el("td", {}, kind(t.content_type)),
      el("td", { class: "num" }, fmtBytes(t.size_bytes)),
      el("td", { class: "num" }, fmtTime(t.duration_s)),
      el("td", { class: "num" }, fmtRate(t.bitrate_bps)),
      el("td", { class: "num" }, t.sessions),
      el("td", {}, el("span", { class: "pill " + (ok ? "ok" : "bad"), title: t.problem || "" }, t.status)),
      actions);
  }));
}

// A title with renditions: its rungs' objects are rows of their own below.
function ladderRow(t, objects) {
  const rungs = t.renditions.map((r) => objects.find((o) => o.name === r.object)).filter(Boolean);
  const size = rungs.reduce((a, o) => a + o.size_bytes, 0);
  const sessions = rungs.reduce((a, o) => a + o.sessions, 0);
  const top = Math.max(0, ...t.renditions.map((r) => r.bitrate_bps || 0));
  const ok = rungs.length === t.renditions.length && rungs.every((o) => o.status === "ok");
  return el("tr", { class: "title-row" + (state.playing === t.name ? " playing" : ""), "data-title": t.name, "data-kind": "title" },
    el("td", { class: "title-name" }, t.name),
    el("td", {}, `title · ${t.renditions.length} renditions`),
    el("td", { class: "num" }, fmtBytes(size)),
    el("td", { class: "num" }, fmtTime(rungs.length ? rungs[0].duration_s : NaN)),
    el("td", { class: "num", title: "top rung" }, fmtRate(top)),
    el("td", { class: "num" }, sessions),
    el("td", {}, el("span", { class: "pill " + (ok ? "ok" : "bad") }, ok ? "ok" : "incomplete")),
    el("td", { class: "actions" }, el("button", { class: "btn small", type: "button", "data-action": "play", disabled: !ok }, "Play"),
      el("button", { class: "btn small danger", type: "button", "data-action": "delete" }, "Delete")));
}

function renderSessions(sessions, titles) {
  $("sessions-count").textContent = sessions.length;
  const body = $("sessions").tBodies[0];
  if (!sessions.length) {
    if (changed("sessions", [])) body.replaceChildren(el("tr", {}, el("td", { class: "empty", colSpan: 7 }, "No sessions.")));
    return;
  }
  state.signatures.sessions = null;
  const duration = new Map(titles.map((t) => [t.name, t.duration_s]));
  body.replaceChildren(...sessions.map((s) => {
    const d = duration.get(s.title) || 0;
    const pct = d > 0 ? Math.min(100, (s.position_s / d) * 100) : 0;
    const st = s.state !== "streaming" ? ["idle", "done"] : s.paused ? ["idle", "paused"] : ["streaming", "streaming"];
    return el("tr", { "data-session-id": s.id },
      el("td", { class: "mono", title: s.id }, s.id.slice(0, 12)),
      el("td", {}, s.title),
      el("td", {}, el("div", { class: "pos" },
        el("div", { class: "track" }, el("div", { class: "fill", style: `width:${pct.toFixed(1)}%` })),
        `${fmtTime(s.position_s)} / ${fmtTime(d)}`)),
      el("td", { class: "num" }, fmtRate(s.rate_bps)),
      el("td", { class: "num" }, s.loss_rate == null ? "–" : (s.loss_rate * 100).toFixed(2) + " %"),
      el("td", { class: "mono" }, s.peer),
      el("td", {}, el("span", { class: "pill " + st[0] }, st[1])));
  }));
}

function renderBroadcasts(list) {
  $("broadcasts-count").textContent = list.length;
  if (!changed("broadcasts", [list, !!token()])) return;
  const body = $("broadcasts").tBodies[0];
  if (!list.length) {
    body.replaceChildren(el("tr", {}, el("td", { class: "empty", colSpan: 7 }, "No broadcasts.")));
    return;
  }
  body.replaceChildren(...list.map((b) => el("tr", { "data-broadcast-id": b.id },
    el("td", { class: "mono", title: b.id }, b.id.slice(0, 12)),
    el("td", {}, b.title, b.automatic ? el("span", { class: "pill idle", style: "margin-left:6px" }, "auto") : ""),
    el("td", {}, b.scheme),
    el("td", { class: "num" }, b.channels),
    el("td", { class: "num" }, b.viewers),
    el("td", { class: "num" }, fmtRate(b.send_rate_bps)),
    el("td", { class: "actions" }, el("button", { class: "btn small danger", type: "button", "data-action": "stop" }, "Stop")))));
}

// ---------- player ----------

function stopPlayer() {
  const v = $("player");
  if (state.player) state.player.destroy();
  state.player = null;
  $("rung-box").hidden = true;
  v.onerror = null;
  v.pause();
  v.removeAttribute("src");
  v.load();
}

// The title (`GET /v1/titles`) named `name`, or undefined.
function titleNamed(name) { return state.titles.find((x) => x.name === name); }

async function play(name) {
  const title = titleNamed(name);
  const t = state.status && state.status.titles.find((x) => x.name === name);
  if (!t && !title) return;
  stopPlayer();
  const gen = ++state.plays;
  delete document.body.dataset.playerError;
  state.playing = name;
  $("player-panel").hidden = false;
  $("player-title").textContent = name;
  state.signatures.titles = null;
  if (state.status) renderTitles(state.status.titles);
  const v = $("player");
  const enc = encodeURIComponent(name);
  const info = title
    ? `${title.renditions.length} renditions · ${fmtTime(titleDuration(title))}`
    : `${fmtRate(t.bitrate_bps)} · ${fmtTime(t.duration_s)}`;
  $("player-info").textContent = info;
  // Encrypted CMAF (CENC cbcs) plays here by DASH with EME Clear Key (dash.js); its HLS
  // (SAMPLE-AES, KEYFORMAT org.w3.clearkey) needs hls.js given a Clear Key licence URL.
  const cenc = (title || t.content_type === "video/mp4") && await protectedCmaf(enc);
  if (gen !== state.plays) return;
  // The token typed here never goes into a media URL (URLs end in logs, history and
  // referrers): hls.js and dash.js send it in an Authorization header on every request
  // they make (keys and licences need a token with the viewer role); a <video src>
  // cannot, so progressive files play only where anonymous viewers are let in.
  let how;
  if (cenc) {
    how = await startDash(v, enc);
    if (gen !== state.plays) return;
  } else if (title) {
    how = startHls(v, `/v1/objects/${enc}/master.m3u8`, "adaptive HLS (hls.js)");
  } else if (t.content_type === "video/mp2t") {
    how = startHls(v, `/v1/objects/${enc}/index.m3u8`, "HLS (hls.js)");
  } else {
    v.src = `/o/${enc}`;
    how = `progressive (${t.content_type || "unknown type"})`;
    v.onerror = () => explainRefusal(v.src);
  }
  $("player-info").textContent = `${info} · ${how}`;
  v.play().catch((e) => { if (gen === state.plays) $("player-info").textContent += " · " + e.message; });
}

// Whether the object or title `enc` (URL-encoded) is CENC-encrypted CMAF: its MPD names
// a ContentProtection (a clear or non-fragmented one answers none, or no MPD).
async function protectedCmaf(enc) {
  const r = await fetch(`/v1/objects/${enc}/manifest.mpd`, { headers: headers() }).catch(() => null);
  return !!r && r.ok && (await r.text().catch(() => "")).includes("<ContentProtection");
}

// dash.js, loaded on first use (801 KB: only encrypted CMAF needs it).
function loadDash() {
  if (window.dashjs) return Promise.resolve();
  return new Promise((resolve, reject) => {
    const s = document.createElement("script");
    s.src = "/ui/vendor/dash.all.min.js";
    s.onload = () => resolve();
    s.onerror = () => reject(new Error("dash.js did not load"));
    document.head.append(s);
  });
}

async function startDash(v, enc) {
  try {
    await loadDash();
  } catch (e) {
    return e.message;
  }
  state.player = new DashPlayer(v, `/v1/objects/${enc}/manifest.mpd`);
  return "DASH with Clear Key (dash.js)";
}

// Plays `url` with hls.js (Media Source Extensions), or natively where the browser plays
// HLS and MSE is missing; what it plays with.
function startHls(v, url, label) {
  if (window.Hls && Hls.isSupported()) {
    state.player = new HlsPlayer(v, url);
    return label;
  }
  if (v.canPlayType("application/vnd.apple.mpegurl")) {
    v.src = url;
    v.onerror = () => explainRefusal(v.src);
    return "HLS (native; no rung picker, no token for keys)";
  }
  return "this browser plays neither HLS nor Media Source Extensions";
}

function titleDuration(title) {
  const o = state.status && state.status.titles.find((x) => x.name === title.renditions[0].object);
  return o ? o.duration_s : NaN;
}

// Says why the <video> could not load `url`: a server closed to anonymous viewers refuses
// a URL that carries no token, and the page does not put the operator's token into one.
async function explainRefusal(url) {
  const r = await fetch(url, { method: "HEAD" }).catch(() => null);
  if (r && (r.status === 401 || r.status === 403)) {
    $("player-info").textContent += " · this server lets no anonymous viewer play: the page " +
      "does not put your token into media URLs (play with `isnode play --token`, or give a " +
      "player a viewer-only token)";
  }
}

// hls.js on one playlist (a multivariant master.m3u8 or a media index.m3u8), with the
// rung picker: "auto" (hls.js's own estimate) or one rung, loaded from the next segment.
class HlsPlayer {
  constructor(video, url) {
    this.video = video;
    const origin = location.origin;
    this.hls = new Hls({
      // The token only to this node (every URL the playlists list is on it).
      xhrSetup: (xhr, u) => {
        if (token() && new URL(u, location.href).origin === origin) xhr.setRequestHeader("Authorization", "Bearer " + token());
      },
    });
    this.hls.on(Hls.Events.MANIFEST_PARSED, (_, d) => this.showRungs(d.levels));
    this.hls.on(Hls.Events.LEVEL_SWITCHED, (_, d) => this.showLevel(d.level));
    this.hls.on(Hls.Events.ERROR, (_, d) => this.error(d));
    this.hls.loadSource(url);
    this.hls.attachMedia(video);
  }
  destroy() { this.hls.destroy(); }
  showRungs(levels) {
    const pick = $("rung");
    const options = [el("option", { value: "-1" }, "auto")];
    levels.forEach((l, i) => options.push(el("option", { value: String(i) },
      (l.height ? `${l.width}x${l.height} · ` : "") + fmtRate(l.bitrate))));
    pick.replaceChildren(...options);
    pick.value = "-1";
    pick.onchange = () => this.pick(Number(pick.value));
    $("rung-box").hidden = levels.length < 2;
  }
  // -1: automatic; otherwise rung i from now on (hls.js drops what it buffered of another).
  pick(i) {
    if (i < 0) this.hls.currentLevel = -1;
    else this.hls.currentLevel = i;
    this.showLevel(this.hls.currentLevel);
  }
  showLevel(i) {
    const l = this.hls.levels[i];
    const mode = this.hls.autoLevelEnabled ? "auto" : "manual";
    $("rung-now").textContent = l ? `${mode}: playing ${l.height ? l.height + "p, " : ""}${fmtRate(l.bitrate)}` : mode;
  }
  error(d) {
    if (!d.fatal) return;
    let why = d.details;
    const code = d.response && d.response.code;
    if (d.details && d.details.startsWith("key") && (code === 401 || code === 403)) {
      why = `the title is encrypted: its key needs a token with the viewer role (${code})`;
    } else if (code) {
      why += ` (${code})`;
    }
    $("player-info").textContent += " · cannot play: " + why;
    document.body.dataset.playerError = why;
  }
}

// dash.js on an encrypted CMAF title's MPD: the licence (the MPD's Clear Key licence URL)
// and every request to this node carry the token in a header.
class DashPlayer {
  constructor(video, url) {
    const p = dashjs.MediaPlayer().create();
    this.p = p;
    const auth = token() ? { Authorization: "Bearer " + token() } : {};
    const ours = (url) => token() && new URL(url, location.href).origin === location.origin;
    // Not protection data: with it dash.js puts the MPD's W3C common-pssh Clear Key entry
    // first and hands its PSSH to Clear Key as key ids, which Chromium refuses.
    p.registerLicenseRequestFilter((req) => {
      if (ours(req.url)) req.headers = Object.assign({}, req.headers || {}, auth);
      return Promise.resolve();
    });
    p.addRequestInterceptor((req) => {
      if (ours(req.url)) req.headers = Object.assign({}, req.headers || {}, auth);
      return Promise.resolve(req);
    });
    const E = dashjs.MediaPlayer.events;
    p.on(E.ERROR, (e) => this.error(e.error || e));
    p.initialize(video, url, true);
  }
  destroy() { this.p.destroy(); }
  error(e) {
    const msg = String((e && (e.message || e.code)) || "error");
    const why = /licen[cs]e|401|403/i.test(msg)
      ? `the title is encrypted: its licence needs a token with the viewer role (${msg})`
      : msg;
    $("player-info").textContent += " · cannot play: " + why;
    document.body.dataset.playerError = why;
  }
}

// ---------- operator actions ----------

function needToken() {
  if (token()) return false;
  notice("Type an operator token at the top right first.");
  $("token").focus();
  return true;
}

async function deleteTitle(name) {
  if (needToken() || !confirm(`Delete ${name}? Sessions streaming it must end first.`)) return;
  try {
    await api("DELETE", `/v1/objects/${encodeURIComponent(name)}`);
    if (state.playing === name) { stopPlayer(); $("player-panel").hidden = true; state.playing = null; }
    notice(`Deleted ${name}.`, "info");
  } catch (e) { notice(`Delete failed: ${e.message}`); }
}

function askBroadcast(name) {
  if (needToken()) return;
  $("bcast-title").textContent = name;
  $("bcast-dialog").dataset.title = name;
  $("bcast-dialog").showModal();
}

async function startBroadcast(name) {
  const body = { object: name, scheme: $("bcast-scheme").value, max_wait_s: Number($("bcast-wait").value) };
  try {
    const b = await api("POST", "/v1/broadcasts", body);
    notice(`Broadcast ${b && b.id ? b.id : ""} of ${name} started.`, "info");
  } catch (e) { notice(`Broadcast failed: ${e.message}`); }
}

async function stopBroadcast(id) {
  if (needToken()) return;
  try { await api("DELETE", `/v1/broadcasts/${encodeURIComponent(id)}`); notice("Broadcast stopped.", "info"); }
  catch (e) { notice(`Stop failed: ${e.message}`); }
}

function upload(file) {
  if (needToken()) return;
  const name = file.name.replace(/[^A-Za-z0-9._-]/g, "_");
  const xhr = new XMLHttpRequest();
  const bar = $("upload-bar"), label = $("upload-label"), box = $("upload-progress");
  box.hidden = false;
  bar.style.width = "0";
  label.textContent = `${name}: starting`;
  xhr.upload.onprogress = (e) => {
    if (!e.lengthComputable) return;
    const pct = (e.loaded / e.total) * 100;
    bar.style.width = `${pct.toFixed(1)}%`;
    label.textContent = `${name}: ${pct.toFixed(0)} % of ${fmtBytes(e.total)}`;
  };
  xhr.onload = () => {
    if (xhr.status >= 200 && xhr.status < 300) {
      label.textContent = `${name}: stored`;
      notice(`Uploaded ${name}.`, "info");
    } else {
      let msg = String(xhr.status);
      try { msg = JSON.parse(xhr.responseText).error + ` (${xhr.status})`; } catch (_) { /* not JSON */ }
      label.textContent = `${name}: failed`;
      notice(`Upload of ${name} failed: ${msg}`);
    }
    document.body.dataset.lastUpload = `${name}:${xhr.status}`;
  };
  xhr.onerror = () => { label.textContent = `${name}: failed`; notice(`Upload of ${name} failed: connection error`); };
  xhr.open("PUT", `/v1/objects/${encodeURIComponent(name)}`);
  if (token()) xhr.setRequestHeader("Authorization", "Bearer " + token());
  xhr.send(file);
}

// ---------- wiring ----------

function wire() {
  $("token").value = token();
  $("token-form").addEventListener("submit", (e) => {
    e.preventDefault();
    const t = $("token").value.trim();
    if (t) sessionStorage.setItem(TOKEN_KEY, t); else sessionStorage.removeItem(TOKEN_KEY);
    notice(t ? "Token set for this tab." : "Token forgotten.", "info");
  });
  $("token-clear").addEventListener("click", () => {
    sessionStorage.removeItem(TOKEN_KEY);
    $("token").value = "";
    notice("Token forgotten.", "info");
  });
  $("titles").tBodies[0].addEventListener("click", (e) => {
    const row = e.target.closest("tr[data-title]");
    if (!row) return;
    const name = row.dataset.title;
    const action = e.target.closest("button") ? e.target.closest("button").dataset.action : "play";
    if (action === "delete") deleteTitle(name);
    else if (action === "broadcast") askBroadcast(name);
    else play(name);
  });
  $("broadcasts").tBodies[0].addEventListener("click", (e) => {
    const b = e.target.closest("button[data-action=stop]");
    const row = e.target.closest("tr[data-broadcast-id]");
    if (b && row) stopBroadcast(row.dataset.broadcastId);
  });
  $("bcast-dialog").addEventListener("close", () => {
    const d = $("bcast-dialog");
    if (d.returnValue === "start") startBroadcast(d.dataset.title);
  });
  $("player-close").addEventListener("click", () => {
    stopPlayer();
    state.playing = null;
    $("player-panel").hidden = true;
    state.signatures.titles = null;
    if (state.status) renderTitles(state.status.titles);
  });
  const drop = $("drop");
  ["dragenter", "dragover"].forEach((t) => drop.addEventListener(t, (e) => { e.preventDefault(); drop.classList.add("over"); }));
  ["dragleave", "drop"].forEach((t) => drop.addEventListener(t, (e) => { e.preventDefault(); drop.classList.remove("over"); }));
  drop.addEventListener("drop", (e) => {
    const f = e.dataTransfer && e.dataTransfer.files && e.dataTransfer.files[0];
    if (f) upload(f);
  });
  // A file dropped elsewhere on the page must not navigate away from it.
  window.addEventListener("dragover", (e) => e.preventDefault());
  window.addEventListener("drop", (e) => e.preventDefault());
}

// For tests and the console: the last status and the player.
window.isnode = { state, play };

wire();
poll();
