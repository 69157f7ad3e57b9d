// tarkit view: the page over the server's JSON (tarkit/viewing/server.py).
//
// Every value from a shard (keys, field names, text, JSON, labels) goes into the document
// as text: through textContent, Node.append(string) or an attribute's value, never as
// markup. Fields' bytes are shown only through their own URLs (/field/…), which the
// server gives and which this script checks before use.
"use strict";

const $ = (id) => document.getElementById(id);
const view = { info: null, start: 0, where: "", next: null, trail: [], generation: 0 };
let summaryTimer = null;

// -- talking to the server -------------------------------------------------------------

async function api(path, params = {}) {
  const url = new URL(path, window.location.origin);
  for (const [name, value] of Object.entries(params)) {
    if (value !== null && value !== undefined && value !== "") url.searchParams.set(name, value);
  }
  const response = await fetch(url, { headers: { Accept: "application/json" } });
  let body;
  try {
    body = await response.json();
  } catch (_) {
    body = { error: `${response.status} ${response.statusText}` };
  }
  if (!response.ok || body.error) throw new Error(body.error || response.statusText);
  return body;
}

function fieldUrl(url) {
  // Only the server's own field addresses: never a URL a shard could have made.
  return typeof url === "string" && url.startsWith("/field/") ? url : "about:blank";
}

// -- building the document (text only) ---------------------------------------------------

function el(tag, attributes = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) {
    if (name === "class") node.className = value;
    else node.setAttribute(name, value);
  }
  node.append(...children); // strings become text nodes
  return node;
}

function size(bytes) {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let value = bytes;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit += 1;
  }
  return unit === 0 ? `${bytes} B` : `${value.toFixed(1)} ${units[unit]}`;
}

function count(n) {
  return n === null || n === undefined ? "?" : n.toLocaleString("en");
}

function shape(dims) {
  return `(${dims.join(", ")}${dims.length === 1 ? "," : ""})`;
}

function fieldView(sample, field) {
  const url = fieldUrl(field.url);
  const head = el("div", { class: "field-head" },
    el("span", { class: "name" }, field.name), el("span", {}, size(field.size)),
    el("a", { href: url, target: "_blank", rel: "noopener noreferrer" }, "open"));
  const box = el("div", { class: "field", "data-field": field.name }, head);
  const more = field.more ? [el("div", { class: "more" }, `… ${size(field.more)} more`)] : [];
  switch (field.kind) {
    case "image":
      box.append(el("img", { src: url, alt: `${sample.key}.${field.name}` }));
      break;
    case "audio":
      box.append(el("audio", { src: url, controls: "", preload: "none" }));
      break;
    case "video":
      box.append(el("video", { src: url, controls: "", preload: "metadata", muted: "" }));
      break;
    case "class":
      box.append(el("div", { class: "class" }, field.label ? `${field.text} · ${field.label}` : field.text));
      break;
    case "array":
      for (const array of field.arrays) {
        const name = array.name ? `${array.name}: ` : "";
        box.append(el("div", { class: "array" }, `${name}${array.dtype} ${shape(array.shape)}`));
      }
      break;
    default: // text, json, binary (a hex and ASCII peek)
      box.append(el("pre", { class: field.kind }, field.text), ...more);
  }
  return box;
}

function sampleCard(sample) {
  const card = el("article", { class: "sample", "data-position": String(sample.position) },
    el("header", {}, el("span", { class: "position" }, `#${sample.position}`),
      el("span", { class: "key" }, sample.key)));
  card.title = sample.shard;
  for (const field of sample.fields) card.append(fieldView(sample, field));
  return card;
}

// -- pages -----------------------------------------------------------------------------

function setStatus(text) {
  $("status").textContent = text;
}

function setError(text) {
  $("error").textContent = text;
}

function remember() {
  const state = new URLSearchParams();
  state.set("start", String(view.start));
  if (view.where) state.set("where", view.where);
  const hash = `#${state}`;
  if (window.location.hash !== hash) window.history.replaceState(null, "", hash);
}

async function show(start, where, found = null) {
  const mine = ++view.generation;
  view.start = start;
  view.where = where;
  $("where").value = where;
  remember();
  setError("");
  setStatus("loading…");
  const grid = $("grid");
  grid.replaceChildren();
  const wanted = view.info.per_page;
  let from = start;
  let kept = 0;
  let scanned = 0;
  let page = null;
  for (;;) {
    try {
      page = await api("/api/page", { start: from, count: wanted - kept, where });
    } catch (error) {
      if (mine === view.generation) {
        setStatus("");
        setError(error.message);
        navigation(null);
      }
      return;
    }
    if (mine !== view.generation) return; // another page was asked for meanwhile
    for (const sample of page.samples) grid.append(sampleCard(sample));
    kept += page.samples.length;
    scanned += page.scanned;
    if (page.total !== null) view.info.samples = page.total;
    if (!where || kept >= wanted || page.next === null) break;
    from = page.next;
    setStatus(`searching: ${count(scanned)} samples read, ${count(kept)} kept…`);
  }
  view.next = page.next;
  if (found !== null) {
    const card = grid.querySelector(`[data-position="${found}"]`);
    if (card) card.classList.add("found");
  }
  facts();
  navigation(page, kept, scanned);
  setStatus("");
}

function navigation(page, kept = 0, scanned = 0) {
  const last = view.start + (view.where ? scanned : kept) - 1;
  let text;
  if (page === null) text = "";
  else if (kept === 0) text = view.where ? `no sample kept from #${view.start} on` : `no sample at #${view.start}`;
  else if (view.where) text = `${count(kept)} kept of #${view.start}–#${last} (${count(scanned)} read)`;
  else text = `#${view.start}–#${last} of ${count(view.info.samples)}`;
  $("range").textContent = text;
  $("previous").disabled = view.start === 0;
  $("next").disabled = page === null || view.next === null;
}

function facts() {
  const info = view.info;
  const how = info.indexed ? "read by index" : "read in order";
  const samples = info.samples === null ? "samples: not known until read" : `${count(info.samples)} samples`;
  const note = info.note ? ` (${info.note})` : "";
  $("facts").textContent = `${samples} in ${count(info.shards)} shards, ${how}${note}`;
}

// -- going places ----------------------------------------------------------------------

function previous() {
  if (view.where && view.trail.length) show(view.trail.pop(), view.where);
  else show(Math.max(0, view.start - view.info.per_page), view.where);
}

function next() {
  if (view.next === null) return;
  view.trail.push(view.start);
  show(view.next, view.where);
}

function toIndex(event) {
  event.preventDefault();
  const text = $("index").value.trim();
  if (!/^\d+$/.test(text)) {
    setError(`an index is a whole number from 0 (got "${text}")`);
    return;
  }
  view.trail = [];
  show(Number(text), view.where);
}

async function toKey(event) {
  event.preventDefault();
  const key = $("key").value;
  if (!key) return;
  const mine = ++view.generation;
  setError("");
  let start = 0;
  for (;;) {
    setStatus(`looking for key ${key} from #${start}…`);
    let found;
    try {
      found = await api("/api/find", { key, start });
    } catch (error) {
      if (mine === view.generation) {
        setStatus("");
        setError(error.message);
      }
      return;
    }
    if (mine !== view.generation) return;
    if (found.position !== null) {
      view.trail = [];
      show(found.position, "", found.position);
      return;
    }
    if (found.next === null) {
      setStatus("");
      setError(`no sample has the key ${key}`);
      return;
    }
    start = found.next;
  }
}

function filter(event) {
  event.preventDefault();
  view.trail = [];
  show(0, $("where").value.trim());
}

// -- the summary (tarkit stats) ----------------------------------------------------------

function table(head, rows) {
  const heading = head.length ? [el("thead", {}, el("tr", {}, ...head.map((h) => el("th", {}, h))))] : [];
  return el("table", {}, ...heading,
    el("tbody", {}, ...rows.map((row) => el("tr", {}, ...row.map((cell) => el("td", {}, cell))))));
}

function spread(s, format = count) {
  return s ? [format(s.min), `${s.exact ? "" : "≈"}${format(s.median)}`, format(s.max)] : ["", "", ""];
}

function renderSummary(state) {
  const box = $("summary");
  const stats = state.stats;
  const parts = [];
  if (state.state === "reading") parts.push(el("p", {}, "Reading the shards for the summary…"));
  if (state.state === "failed") parts.push(el("p", { class: "failed" }, `The summary failed: ${state.error}`));
  if (stats) {
    const keys = stats.keys.duplicates === null ? "not known" : count(stats.keys.duplicates);
    parts.push(table([], [["shards", count(stats.shards)], ["samples", count(stats.samples)],
      ["bytes", `${count(stats.bytes)} (${size(stats.bytes)})`], ["duplicate keys", keys]]));
    const fieldRows = Object.entries(stats.fields).map(([name, f]) => [name, count(f.samples),
      stats.samples ? `${(100 * f.samples / stats.samples).toFixed(1)}%` : "-", ...spread(f.size, size)]);
    if (fieldRows.length) {
      parts.push(el("h2", {}, "Fields"),
        table(["field", "samples", "share", "min size", "median", "max size"], fieldRows));
    }
    const imageRows = Object.entries(stats.fields).filter(([, f]) => f.images).map(([name, f]) =>
      [name, count(f.images.images), ...spread(f.images.width), ...spread(f.images.height)]);
    if (imageRows.length) {
      parts.push(el("h2", {}, "Images"), table(["image", "images", "width min", "median", "max",
        "height min", "median", "max"], imageRows));
    }
    for (const [name, histogram] of Object.entries(stats.classes)) {
      parts.push(el("h2", {}, `${name}: ${histogram.distinct === null ? "not a class field" : `${count(histogram.distinct)} values`}`));
      const labels = [...histogram.labels].sort((a, b) => b.samples - a.samples).slice(0, 20);
      if (labels.length) {
        parts.push(table(["value", "name", "samples"], labels.map((l) => [l.label, l.name || "", count(l.samples)])));
      }
    }
  }
  box.replaceChildren(...parts);
}

async function loadSummary() {
  clearTimeout(summaryTimer);
  if ($("summary").hidden) return;
  let state;
  try {
    state = await api("/api/stats");
  } catch (error) {
    state = { state: "failed", error: error.message, stats: null };
  }
  renderSummary(state);
  if (state.state === "reading") summaryTimer = setTimeout(loadSummary, 1000);
}

function toggleSummary() {
  const box = $("summary");
  box.hidden = !box.hidden;
  $("show-summary").setAttribute("aria-expanded", String(!box.hidden));
  loadSummary();
}

// -- start -----------------------------------------------------------------------------

async function start() {
  $("previous").addEventListener("click", previous);
  $("next").addEventListener("click", next);
  $("to-index").addEventListener("submit", toIndex);
  $("to-key").addEventListener("submit", toKey);
  $("filter").addEventListener("submit", filter);
  $("clear").addEventListener("click", () => { view.trail = []; show(0, ""); });
  $("show-summary").addEventListener("click", toggleSummary);
  try {
    view.info = await api("/api/info");
  } catch (error) {
    setError(error.message);
    return;
  }
  $("source").textContent = `tarkit view: ${view.info.source}`;
  document.title = `tarkit view: ${view.info.source}`;
  facts();
  const state = new URLSearchParams(window.location.hash.slice(1));
  const at = state.get("start");
  const where = state.has("where") ? state.get("where") : (view.info.where || "");
  show(at && /^\d+$/.test(at) ? Number(at) : 0, where);
}

start();
