// Rath console: pages the timeline, follows it live over Server-Sent
// Events (resuming after the last sequence shown), opens events with the
// state at their sequence, draws the lineage graph, and refreshes the
// sessions list. No framework, nothing loaded from elsewhere.
"use strict";

function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v; else e.setAttribute(k, v);
  }
  for (const k of kids) e.append(k instanceof Node ? k : document.createTextNode(String(k)));
  return e;
}

async function getJSON(url) {
  const r = await fetch(url, { headers: { Accept: "application/json" } });
  if (!r.ok) throw new Error(url + ": " + r.status + " " + (await r.text()).trim());
  return r.json();
}

function typeClass(type) {
  const t = type.replace(/^rath\./, "");
  for (const p of ["tool", "model", "memory", "approval", "session", "validation"]) {
    if (t.startsWith(p)) return "type-" + p;
  }
  return "";
}

function timeText(iso) {
  const d = new Date(iso);
  return isNaN(d) ? "" : d.toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z");
}

// maxRows bounds the events one timeline holds in the page.
const maxRows = 2000;

// Timeline of one session.
function timeline(table) {
  const id = table.dataset.session;
  const body = table.tBodies[0];
  const status = document.getElementById("live-status");
  const earlier = document.getElementById("earlier");
  const detail = document.getElementById("detail");
  let first = 0, last = 0;
  const seen = new Set();

  function row(ev, fresh) {
    const tr = el("tr", { "data-seq": ev.seq, id: "ev-" + ev.seq, tabindex: "0", class: fresh ? "fresh" : "" },
      el("td", {}, ev.seq),
      el("td", { title: ev.time }, timeText(ev.time)),
      el("td", { class: typeClass(ev.type) }, ev.type.replace(/^rath\./, "")),
      el("td", {}, ev.actor || ""),
      el("td", ev.session !== id ? { class: "inherited", title: "inherited from " + ev.session } : {}, ev.summary,
        ...(ev.diff ? [" ", el("span", { class: "badge" }, "diff")] : [])));
    tr.addEventListener("click", () => open(ev.seq, tr));
    tr.addEventListener("keydown", (k) => {
      // Enter opens the event; the arrows move between events.
      if (k.key === "Enter") open(ev.seq, tr);
      else if (k.key === "ArrowDown" && tr.nextElementSibling) { k.preventDefault(); tr.nextElementSibling.focus(); }
      else if (k.key === "ArrowUp" && tr.previousElementSibling) { k.preventDefault(); tr.previousElementSibling.focus(); }
    });
    return tr;
  }
  function append(ev, fresh) {
    if (seen.has(ev.seq) || ev.seq <= last) return; // never twice
    seen.add(ev.seq);
    body.append(row(ev, fresh));
    last = ev.seq;
    if (!first) first = ev.seq;
    // The page holds at most maxRows events however long the session
    // runs: the oldest leave (Load earlier brings them back).
    while (body.rows.length > maxRows) {
      const old = body.firstElementChild;
      seen.delete(Number(old.dataset.seq));
      old.remove();
      first = Number(body.firstElementChild.dataset.seq);
      earlier.hidden = false;
    }
  }
  async function loadEarlier() {
    const from = Math.max(1, first - 200);
    const page = await getJSON(`/api/s/${id}/events?from=${from}&limit=${first - from}`);
    const top = body.firstChild;
    for (const ev of page.events) {
      if (seen.has(ev.seq)) continue;
      seen.add(ev.seq);
      body.insertBefore(row(ev, false), top);
    }
    first = from;
    earlier.hidden = first <= 1;
  }
  async function open(seq, tr) {
    for (const s of body.querySelectorAll("tr.selected")) s.classList.remove("selected");
    tr.classList.add("selected");
    detail.replaceChildren(el("p", { class: "muted" }, "Loading event " + seq + "…"));
    try {
      const [ev, st] = await Promise.all([getJSON(`/api/s/${id}/event/${seq}`), getJSON(`/api/s/${id}/state?at=${seq}`)]);
      const kids = [el("h2", {}, `Event ${seq}: ${ev.row.type}`), el("p", { class: "muted" }, ev.row.summary)];
      if (ev.recalled && ev.recalled.length) {
        // Each recalled version, linked to the session and events it was
        // written from.
        const ul = el("ul", { class: "recalled" });
        for (const it of ev.recalled) {
          const li = el("li", {}, el("code", {}, `${it.item_id} v${it.version}`), " ", it.content || "");
          if (it.session) {
            li.append(el("br"), "written on ", el("a", { href: `/s/${it.session}` }, it.session));
            for (const s of it.seqs || []) li.append(" ", el("a", { href: `/s/${it.session}#ev-${s}` }, `#${s}`));
            if (it.evidence) li.append(` (${it.evidence})`);
          } else if (it.missing) {
            li.append(el("br"), el("span", { class: "muted" }, "writer unknown: " + it.missing));
          }
          ul.append(li);
        }
        kids.push(el("h2", {}, "Recalled"), ul);
      }
      if (ev.diff) {
        const pre = el("pre", { class: "diff" });
        colourDiff(pre, ev.diff);
        kids.push(el("h2", {}, "Diff"), pre);
      }
      // Fork here: a new branch sharing the log up to this event, with
      // an optional message the agents resume on.
      const fork = el("form", { method: "post", action: `/s/${id}/fork`, class: "fork" },
        el("input", { type: "hidden", name: "at", value: seq }),
        el("input", { name: "message", placeholder: "optional message to the fork (a correction, a hint)" }),
        el("button", { type: "submit" }, `Fork at ${seq}`));
      kids.push(fork);
      kids.push(el("h2", {}, "Event as stored"), el("pre", {}, JSON.stringify(ev.event, null, 2)));
      kids.push(el("h2", {}, `State at ${seq}`), el("pre", {}, JSON.stringify(st, null, 2)));
      detail.replaceChildren(...kids);
    } catch (e) {
      detail.replaceChildren(el("p", { class: "bad" }, String(e.message || e)));
    }
  }
  function follow() {
    // The browser resends the last event ID when it reconnects; the first
    // connection starts after the last event the page shows.
    const src = new EventSource(`/api/s/${id}/live?after=${last}`);
    src.addEventListener("open", () => { status.textContent = "● live"; });
    src.addEventListener("event", (m) => append(JSON.parse(m.data), true));
    src.addEventListener("failure", (m) => { status.textContent = "live stream failed: " + JSON.parse(m.data); });
    src.addEventListener("error", () => { status.textContent = "reconnecting…"; });
  }
  // show opens event seq, loading earlier pages until it is there.
  async function show(seq) {
    while (first > seq && first > 1) await loadEarlier();
    const tr = document.getElementById("ev-" + seq);
    if (!tr) return;
    tr.scrollIntoView({ block: "center" });
    tr.focus();
    await open(seq, tr);
  }
  window.rathShow = show; // the verification's "show" link
  (async () => {
    try {
      const page = await getJSON(`/api/s/${id}/events`);
      for (const ev of page.events) append(ev, false);
      if (!first) first = page.head + 1;
      earlier.hidden = first <= 1;
      earlier.addEventListener("click", loadEarlier);
      follow();
      const m = location.hash.match(/^#ev-(\d+)$/); // a link to one event
      if (m) await show(Number(m[1]));
    } catch (e) {
      status.textContent = String(e.message || e);
    }
  })();
}

// colourDiff fills pre with a unified diff, a span per line.
function colourDiff(pre, diff) {
  pre.replaceChildren();
  for (const line of diff.split("\n")) {
    const c = line.startsWith("@@") ? "hunk" : line.startsWith("+") && !line.startsWith("+++") ? "add" : line.startsWith("-") && !line.startsWith("---") ? "del" : "";
    pre.append(el("span", c ? { class: c } : {}, line + "\n"));
  }
}

// verify shows the ledger's verification of the session once it is done.
async function verify(dd) {
  try {
    const rep = await getJSON(dd.dataset.src);
    if (rep.ok) {
      dd.replaceChildren(el("span", { class: "ok", "data-done": "" }, "✓ chain and signatures verify"), ` (${rep.checked} events, head ${rep.head})`);
    } else {
      const f = rep.fault || {};
      dd.replaceChildren(el("span", { class: "bad", "data-done": "" }, `✗ fails at event ${f.seq}`), ` of ${f.session}: ${f.reason} `);
      // The first bad event, marked in the timeline.
      const go = el("button", { type: "button" }, `show event ${f.seq}`);
      go.addEventListener("click", async () => {
        if (window.rathShow) await window.rathShow(f.seq);
        const tr = document.getElementById("ev-" + f.seq);
        if (tr) tr.classList.add("fault");
      });
      dd.append(go);
      const tr = document.getElementById("ev-" + f.seq);
      if (tr) tr.classList.add("fault");
    }
  } catch (e) {
    dd.replaceChildren(el("span", { class: "bad", "data-done": "" }, "cannot verify: " + (e.message || e)));
  }
}

async function graph(div) {
  try {
    const r = await fetch(div.dataset.src);
    if (!r.ok) throw new Error((await r.text()).trim());
    div.innerHTML = await r.text(); // the dossier's SVG: every text in it is escaped
  } catch (e) {
    div.replaceChildren(el("p", { class: "bad" }, "No graph: " + (e.message || e)));
  }
}

// The sessions list refreshes itself every few seconds.
function sessions(table) {
  const count = document.getElementById("count");
  setInterval(async () => {
    try {
      const p = await getJSON(table.dataset.live);
      const body = el("tbody");
      for (const s of p.Rows || []) {
        const labels = Object.entries(s.labels || {}).map(([k, v]) => el("span", { class: "label" }, `${k}=${v}`));
        body.append(el("tr", {},
          el("td", {}, el("a", { href: "/s/" + s.id }, s.id)),
          el("td", {}, el("span", { class: "status " + s.status }, s.status)),
          el("td", {}, s.workflow || ""),
          el("td", { class: "task-cell", title: s.task || "" }, s.task || ""),
          el("td", {}, ...(s.parent ? [el("a", { href: "/s/" + s.parent }, s.parent), " @" + s.fork_seq] : [])),
          el("td", { class: "num" }, ...(s.forks ? [el("a", { href: `/s/${s.id}#graph`, title: `${s.forks} ${s.forks === 1 ? "session was" : "sessions were"} forked from ${s.id}` }, String(s.forks))] : [])),
          el("td", { class: "num" }, s.seq),
          el("td", {}, ...labels),
          el("td", { title: s.active }, timeText(s.active))));
      }
      if (body.children.length) table.tBodies[0].replaceWith(body);
      count.textContent = `${p.Matched} ` + (p.Matched === 1 ? "session" : "sessions") + (p.Status || p.Query ? (p.Matched === 1 ? " matches" : " match") : "") + (p.Matched > (p.Rows || []).length ? `, the ${(p.Rows || []).length} active last shown` : "");
    } catch (e) { /* the next tick retries */ }
  }, 3000);
}

document.addEventListener("DOMContentLoaded", () => {
  const t = document.getElementById("timeline");
  if (t) timeline(t);
  const g = document.getElementById("graph");
  if (g) graph(g);
  const v = document.getElementById("verify");
  if (v) verify(v);
  const s = document.getElementById("sessions");
  if (s) sessions(s);
  for (const pre of document.querySelectorAll("pre[data-diff]")) colourDiff(pre, pre.textContent);
});
