// isnode status page: polls GET /v1/status every second and renders it; plays titles
// (MP4 with <video>, MPEG-TS with native HLS or Media Source Extensions); operator
// actions (upload, delete, broadcasts) with a token kept in sessionStorage.
"use strict";

const TOKEN_KEY = "isnode.token";
const POLL_MS = 1000;
const $ = (id) => document.getElementById(id);

const state = { status: null, updates: 0, playing: null, player: null, signatures: {} };

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
  $("titles-count").textContent = titles.length;
  if (!changed("titles", [titles, state.playing, !!token()])) return;
  const body = $("titles").tBodies[0];
  if (!titles.length) {
    body.replaceChildren(el("tr", {}, el("td", { class: "empty", colSpan: 8 }, "No titles yet: drop a file above or run isnode ingest.")));
    return;
  }
  body.replaceChildren(...titles.map((t) => {
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
  if (state.player && state.player.abort) state.player.abort();
  state.player = null;
  v.onerror = null;
  v.pause();
  v.removeAttribute("src");
  v.load();
}

function play(name) {
  const t = state.status && state.status.titles.find((x) => x.name === name);
  if (!t) return;
  stopPlayer();
  state.playing = name;
  $("player-panel").hidden = false;
  $("player-title").textContent = name;
  const v = $("player");
  const enc = encodeURIComponent(name);
  // The token typed here is an operator's: it never goes into a media URL (URLs end in
  // logs, history and referrers). Requests the page makes itself carry it in a header;
  // a <video src> cannot, so those play only where anonymous viewers are let in.
  let how;
  if (t.content_type === "video/mp2t") {
    const playlist = `/v1/objects/${enc}/index.m3u8`;
    if (window.MediaSource && MediaSource.isTypeSupported('video/mp2t; codecs="avc1.42E01E,mp4a.40.2"')) {
      state.player = new TsPlayer(v, playlist);
      how = "HLS via Media Source Extensions (video/mp2t)";
    } else if (v.canPlayType("application/vnd.apple.mpegurl")) {
      v.src = playlist;
      how = "HLS (native)";
    } else {
      how = "this browser plays neither HLS nor MPEG-TS";
    }
  } else {
    v.src = `/o/${enc}`;
    how = `progressive (${t.content_type || "unknown type"})`;
  }
  v.onerror = () => explainRefusal(v.src);
  $("player-info").textContent = `${fmtRate(t.bitrate_bps)} · ${fmtTime(t.duration_s)} · ${how}`;
  v.play().catch((e) => { $("player-info").textContent += " · " + e.message; });
  state.signatures.titles = null;
  if (state.status) renderTitles(state.status.titles);
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

// A small HLS VOD player for MPEG-TS playlists: reads the m3u8 (EXTINF, EXT-X-BYTERANGE),
// fetches the segments in order and appends them to a SourceBuffer, keeping about 30 s
// ahead of the playhead.
class TsPlayer {
  constructor(video, playlistUrl) {
    this.video = video;
    this.url = new URL(playlistUrl, location.href);
    this.aborted = false;
    this.ms = new MediaSource();
    video.src = URL.createObjectURL(this.ms);
    this.ms.addEventListener("sourceopen", () => this.run().catch((e) => this.fail(e)), { once: true });
  }
  abort() { this.aborted = true; }
  fail(e) { if (!this.aborted) $("player-info").textContent += " · " + e.message; }
  async run() {
    const r = await fetch(this.url, { headers: headers() });
    if (!r.ok) throw new Error("playlist: " + r.status);
    const segments = parsePlaylist(await r.text(), this.url);
    const sb = this.ms.addSourceBuffer('video/mp2t; codecs="avc1.42E01E,mp4a.40.2"');
    const done = () => new Promise((res) => sb.addEventListener("updateend", res, { once: true }));
    for (const seg of segments) {
      while (!this.aborted && this.ahead() > 30) await new Promise((res) => setTimeout(res, 500));
      if (this.aborted) return;
      const h = headers(seg.range ? { Range: `bytes=${seg.range[0]}-${seg.range[1]}` } : {});
      const resp = await fetch(seg.url, { headers: h });
      if (!resp.ok) throw new Error("segment: " + resp.status);
      sb.appendBuffer(await resp.arrayBuffer());
      await done();
      this.skipLeadingGap();
    }
    if (!this.aborted && this.ms.readyState === "open") this.ms.endOfStream();
  }
  // MPEG-TS timestamps rarely start at 0 (ffmpeg starts at 1.4 s): start where the
  // buffered media starts, or the playhead waits before a gap for ever.
  skipLeadingGap() {
    const b = this.video.buffered;
    if (b.length && this.video.currentTime < b.start(0)) this.video.currentTime = b.start(0);
  }
  ahead() {
    const b = this.video.buffered;
    return b.length ? b.end(b.length - 1) - this.video.currentTime : 0;
  }
}

function parsePlaylist(text, base) {
  const out = [];
  let range = null, next = 0;
  for (const raw of text.split("\n")) {
    const line = raw.trim();
    if (line.startsWith("#EXT-X-BYTERANGE:")) {
      const [len, at] = line.slice(17).split("@");
      const start = at === undefined ? next : Number(at);
      range = [start, start + Number(len) - 1];
      next = start + Number(len);
    } else if (line && !line.startsWith("#")) {
      out.push({ url: new URL(line, base), range });
      range = null;
    }
  }
  return out;
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
