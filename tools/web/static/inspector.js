// turnlog inspector: the live timeline and the replay button.
// Everything from the log is put into the page with textContent, never as HTML.
"use strict";

// Control, C1 and bidi characters shown as escapes, as the server shows them.
const CONTROLS = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029]/g;

function visible(text) {
  return String(text).replace(CONTROLS, function (c) {
    const code = c.charCodeAt(0);
    return code < 0x100 ? "\\x" + code.toString(16).padStart(2, "0")
                        : "\\u" + code.toString(16).padStart(4, "0");
  });
}

function el(tag, cls, text) {
  const node = document.createElement(tag);
  if (cls) node.className = cls;
  if (text !== undefined && text !== null) node.textContent = visible(text);
  return node;
}

// Paths come from the server's own link builder; accept nothing but a path.
function safePath(value) {
  return typeof value === "string" && value.startsWith("/") && !value.startsWith("//") ? value : "#";
}

function eventRow(row) {
  const tr = el("tr", "new");
  tr.id = "e" + row.seq;
  const seq = el("td", "num mono");
  const link = el("a", "", row.seq);
  link.href = safePath(row.href);
  seq.appendChild(link);
  tr.appendChild(seq);
  tr.appendChild(el("td", "nowrap small", row.when));
  const kind = el("td");
  kind.appendChild(el("span", "badge k-" + String(row.kind).replace(/[^a-z_]/g, ""), row.kind));
  tr.appendChild(kind);
  const body = el("td");
  body.appendChild(el("div", "summary-line", row.summary));
  if (Array.isArray(row.links) && row.links.length) {
    const links = el("div", "small");
    row.links.forEach(function (l, i) {
      if (i) links.appendChild(document.createTextNode(" · "));
      const a = el("a", "", l.label);
      a.href = safePath(l.href);
      links.appendChild(a);
    });
    body.appendChild(links);
  }
  tr.appendChild(body);
  return tr;
}

function follow(table) {
  const url = safePath(table.dataset.follow);
  if (url === "#" || !window.EventSource) return;
  const live = document.getElementById("live");
  const tbody = table.querySelector("tbody");
  const source = new EventSource(url);
  source.onopen = function () { if (live) { live.classList.add("on"); live.textContent = "live"; } };
  source.onerror = function () { if (live) { live.classList.remove("on"); live.textContent = "reconnecting"; } };
  source.addEventListener("append", function (message) {
    let row;
    try { row = JSON.parse(message.data); } catch (e) { return; }
    if (document.getElementById("e" + row.seq)) return;
    tbody.appendChild(eventRow(row));
    if (live) live.textContent = "live: #" + visible(row.seq);
  });
}

function replay(button) {
  const out = document.getElementById("replay-result");
  button.addEventListener("click", function () {
    button.disabled = true;
    out.className = "replay-result muted";
    out.textContent = "re-packing…";
    fetch(safePath(button.dataset.href), { credentials: "same-origin" })
      .then(function (r) { return r.json(); })
      .then(function (result) {
        if (result.ok) {
          out.className = "replay-result ok";
          out.textContent = "identical: re-packed to the recorded bytes (" + String(result.replayed_hash).slice(0, 16) + ")";
        } else {
          out.className = "replay-result bad";
          out.textContent = "DIFFERS: " + (result.difference || result.error || "unknown");
        }
      })
      .catch(function (e) { out.className = "replay-result bad"; out.textContent = "replay failed: " + e; })
      .finally(function () { button.disabled = false; });
  });
}

// The request body is loaded when its section is first opened (it can be large).
function body(details) {
  const out = document.getElementById("body-text");
  details.addEventListener("toggle", function () {
    if (!details.open || details.dataset.loaded) return;
    details.dataset.loaded = "1";
    fetch(safePath(details.dataset.href), { credentials: "same-origin" })
      .then(function (r) { return r.json(); })
      .then(function (result) {
        out.className = "";
        let text = result.error ? "cannot render: " + result.error : String(result.text);
        if (result.more) text += "\n… " + result.more + " more characters";
        out.textContent = visible(text);
        const summary = details.querySelector("summary");
        if (summary && result.bytes !== undefined) {
          summary.appendChild(document.createTextNode(" · " + result.bytes + " bytes"));
        }
      })
      .catch(function (e) { out.textContent = "loading failed: " + e; });
  });
}

document.addEventListener("DOMContentLoaded", function () {
  const details = document.getElementById("body");
  if (details && details.dataset.href) body(details);
  const table = document.getElementById("events");
  if (table && table.dataset.follow) follow(table);
  const button = document.getElementById("replay");
  if (button) replay(button);
});
