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

// clockText is the time of day of a stamp (UTC), for the timeline's rows;
// the whole stamp is the cell's title.
function clockText(iso) {
  const d = new Date(iso);
  return isNaN(d) ? "" : d.toISOString().slice(11, 23);
}

// The timeline is virtualised: however long the session, the page holds the
// rows in view (and a few either side) between two spacers sized for the
// rest, and fetches the pages of events it scrolls to. At most keepEvents
// events stay cached; the farthest from the view leave first.
const pageSize = 200, keepEvents = 2000, overscan = 12;

// Timeline of one session.
function timeline(table) {
  const id = table.dataset.session;
  const body = table.tBodies[0];
  const box = document.getElementById("timeline-scroll");
  const status = document.getElementById("live-status");
  const detail = document.getElementById("detail");
  const cache = new Map(); // seq → event row
  const loading = new Set(), broken = new Map(); // pages in flight; failed ones, when
  const faults = new Set(), fresh = new Set();
  let head = 0, rowH = 29, selected = 0, drawn = "", version = 0;
  // stick: the view follows the end (where the page opens); the last
  // scroll says whether it still does. (Whether it is at the end cannot be
  // read while rows are being resized: the rows drawn so far are.)
  let stick = true;

  const pageOf = (seq) => Math.floor((seq - 1) / pageSize);
  const headH = () => table.tHead.offsetHeight;
  function grow(seq) { if (seq > head) { head = seq; version++; } }

  async function load(page) {
    if (loading.has(page) || Date.now() - (broken.get(page) || 0) < 5000) return;
    loading.add(page);
    try {
      const p = await getJSON(`/api/s/${id}/events?from=${page * pageSize + 1}&limit=${pageSize}`);
      for (const ev of p.events) cache.set(ev.seq, ev);
      grow(p.head);
      broken.delete(page);
    } catch (e) {
      broken.set(page, Date.now());
      status.textContent = String(e.message || e);
    } finally {
      loading.delete(page);
    }
    version++;
    prune();
    draw();
  }
  // prune keeps the cache bounded, dropping the events farthest from view.
  function prune() {
    if (cache.size <= keepEvents) return;
    const [a, b] = range(), mid = (a + b) / 2;
    const far = [...cache.keys()].sort((x, y) => Math.abs(y - mid) - Math.abs(x - mid));
    for (const seq of far.slice(0, cache.size - keepEvents)) cache.delete(seq);
  }
  // range is the first and last sequence to draw: those in view and
  // overscan more on either side.
  function range() {
    const top = Math.max(0, box.scrollTop - headH());
    const a = Math.max(1, Math.floor(top / rowH) + 1 - overscan);
    const b = Math.min(head, Math.ceil((top + box.clientHeight) / rowH) + overscan);
    return [a, Math.max(a - 1, b)];
  }
  function spacer(rows) {
    const td = el("td", { colspan: "5" });
    td.style.height = rows * rowH + "px";
    return el("tr", { class: "spacer", "aria-hidden": "true" }, td);
  }
  // signOf is what a row shows besides its event: a row whose sign did not
  // change is kept as it is when the table redraws.
  function signOf(seq) {
    return [seq === selected ? "selected" : "", faults.has(seq) ? "fault" : "", cache.has(seq) ? "" : "loading"].filter(Boolean).join(" ");
  }
  function row(seq) {
    const ev = cache.get(seq), sign = signOf(seq);
    const tr = el("tr", { "data-seq": seq, id: "ev-" + seq, tabindex: "0", class: (fresh.has(seq) ? "fresh " : "") + sign, "data-sign": sign });
    if (!ev) {
      tr.append(el("td", {}, seq), el("td", { colspan: "4", class: "muted" }, "loading…"));
      return tr;
    }
    tr.append(
      el("td", {}, seq),
      el("td", { title: timeText(ev.time) }, clockText(ev.time)),
      el("td", { class: typeClass(ev.type), title: ev.type }, ev.type.replace(/^rath\./, "")),
      el("td", { title: ev.actor || "" }, ev.actor || ""),
      el("td", ev.session !== id ? { class: "inherited", title: `inherited from ${ev.session}: ${ev.summary}` } : { title: ev.summary }, ev.summary,
        ...(ev.diff ? [" ", el("span", { class: "badge" }, "diff")] : [])));
    return tr;
  }
  // draw puts the rows of the current range in the table between the two
  // spacers, unless they are there already: rows that stay in range and
  // show the same are kept (and so keep the focus and the pointer), the
  // others leave, and the missing ones are made.
  const above = spacer(0), below = spacer(0);
  body.replaceChildren(above, below);
  function draw() {
    const [a, b] = range();
    const key = `${a}:${b}:${head}:${version}`;
    if (key === drawn) return;
    drawn = key;
    const had = document.activeElement && body.contains(document.activeElement) ? Number(document.activeElement.dataset.seq) : 0;
    above.firstChild.style.height = (a - 1) * rowH + "px";
    below.firstChild.style.height = (head - b) * rowH + "px";
    for (const tr of [...body.querySelectorAll("tr[data-seq]")]) {
      const seq = Number(tr.dataset.seq);
      if (seq < a || seq > b || tr.dataset.sign !== signOf(seq)) tr.remove();
    }
    let at = above;
    for (let seq = a; seq <= b; seq++) {
      let tr = document.getElementById("ev-" + seq);
      if (!tr) {
        tr = row(seq);
        at.after(tr);
      }
      at = tr;
      if (!cache.has(seq)) load(pageOf(seq));
    }
    fresh.clear();
    if (measure()) return;
    if (had && document.activeElement !== document.getElementById("ev-" + had)) document.getElementById("ev-" + had)?.focus({ preventScroll: true });
  }
  // measure sizes the spacers by the height rows really have here, keeping
  // the view where it was (or at the end), and redraws.
  function measure() {
    // The pitch from one row to the next: a row's own box is half a
    // border short next to a spacer (collapsed borders are shared).
    const rs = body.querySelectorAll("tr[data-seq]");
    const h = rs.length > 1 ? (rs[rs.length - 1].getBoundingClientRect().top - rs[0].getBoundingClientRect().top) / (rs.length - 1)
      : rs.length ? rs[0].getBoundingClientRect().height : 0;
    if (h <= 0 || Math.abs(h - rowH) < 0.01) return false; // exact: a small error adds up over the rows in view
    const end = stick, rows = box.scrollTop / rowH;
    rowH = h;
    fit();
    drawn = "";
    draw(); // the spacers at the new height
    box.scrollTop = end ? box.scrollHeight : snap(rows * h);
    draw();
    return true;
  }
  // A row is at the top of the view, whole, under the header, when the
  // view is scrolled by a whole number of rows (snap); fit makes the view
  // a whole number of rows high, so that the bottom row is whole too, at
  // the end as anywhere (no half-cut row when the page opens).
  const snap = (y) => Math.max(0, Math.round(y / rowH) * rowH);
  function fit() {
    const frame = box.offsetHeight - box.clientHeight; // its borders
    const rows = Math.max(3, Math.floor((window.innerHeight * 0.75 - headH() - frame) / rowH));
    box.style.maxHeight = headH() + rows * rowH + frame + "px";
  }
  // reveal scrolls seq into view (centred if far) and draws it.
  function reveal(seq, centre) {
    const top = headH() + (seq - 1) * rowH;
    if (centre) box.scrollTop = snap((seq - 1) * rowH - (box.clientHeight - headH() - rowH) / 2);
    else if (top < box.scrollTop + headH()) box.scrollTop = top - headH();
    else if (top + rowH > box.scrollTop + box.clientHeight) box.scrollTop = top + rowH - box.clientHeight;
    draw();
  }
  function go(seq) {
    seq = Math.min(Math.max(1, seq), head);
    reveal(seq, false);
    document.getElementById("ev-" + seq)?.focus({ preventScroll: true });
  }
  const atEnd = () => box.scrollTop + box.clientHeight >= box.scrollHeight - 2 * rowH;

  body.addEventListener("click", (e) => {
    const tr = e.target.closest("tr[data-seq]");
    if (tr) open(Number(tr.dataset.seq));
  });
  body.addEventListener("keydown", (k) => {
    const tr = k.target.closest("tr[data-seq]");
    if (!tr) return;
    const seq = Number(tr.dataset.seq), pageRows = Math.max(1, Math.floor(box.clientHeight / rowH) - 1);
    // Enter opens the event; the arrows, Page Up/Down, Home and End move.
    const to = { ArrowDown: seq + 1, ArrowUp: seq - 1, PageDown: seq + pageRows, PageUp: seq - pageRows, Home: 1, End: head }[k.key];
    if (k.key === "Enter") open(seq);
    else if (to !== undefined) { k.preventDefault(); go(to); }
  });
  box.addEventListener("scroll", () => { stick = atEnd(); requestAnimationFrame(draw); }, { passive: true });
  window.addEventListener("resize", () => requestAnimationFrame(() => {
    fit();
    box.scrollTop = stick ? box.scrollHeight : snap(box.scrollTop); // still whole rows
    draw();
  }));

  async function open(seq) {
    selected = seq;
    version++;
    draw();
    detail.replaceChildren(el("p", { class: "muted" }, "Loading event " + seq + "…"));
    try {
      const [ev, st] = await Promise.all([getJSON(`/api/s/${id}/event/${seq}`), getJSON(`/api/s/${id}/state?at=${seq}`)]);
      if (selected !== seq) return; // another event was opened meanwhile
      const kids = [el("h2", {}, `Event ${seq}: ${ev.row.type}`), el("p", { class: "muted" }, ev.row.summary)];
      if (ev.facts && ev.facts.length) {
        // What the event records, named: tokens, arguments, exit code,
        // result, placement, rule, verdict, approver.
        const dl = el("dl", { class: "event-facts" });
        for (const f of ev.facts) {
          const v = f.code ? el("pre", {}, f.value) : el("span", {}, f.value);
          const dd = el("dd", {}, v);
          if (f.seq && f.seq !== seq) dd.append(el("br"), "requested at ", el("a", { href: `#ev-${f.seq}` }, `#${f.seq}`));
          dl.append(el("dt", {}, f.name), dd);
        }
        kids.push(dl);
      }
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
      if (selected === seq) detail.replaceChildren(el("p", { class: "bad" }, String(e.message || e)));
    }
  }
  function follow() {
    // The browser resends the last event ID when it reconnects; the first
    // connection starts after the head the page loaded.
    const src = new EventSource(`/api/s/${id}/live?after=${head}`);
    src.addEventListener("open", () => { status.textContent = "● live"; });
    src.addEventListener("event", (m) => {
      const ev = JSON.parse(m.data), end = atEnd();
      cache.set(ev.seq, ev);
      fresh.add(ev.seq);
      grow(ev.seq);
      version++;
      prune(); // a session watched for hours stays within keepEvents
      draw();
      if (end) { box.scrollTop = box.scrollHeight; draw(); } // following the newest
    });
    // An answer as it streams (token deltas: live, never stored), shown
    // below the timeline until its stored events arrive.
    const growing = document.getElementById("growing");
    let answer = "", said = "";
    src.addEventListener("delta", (m) => {
      const d = JSON.parse(m.data);
      if (d.answer !== answer) { answer = d.answer; said = ""; }
      said += d.text || "";
      if (d.tool) said += d.tool.name ? ` [tool ${d.tool.name} ${d.tool.arguments || ""}` : (d.tool.arguments || "");
      growing.textContent = `${d.agent || "model"} is answering: ${said}`;
      growing.hidden = false;
    });
    src.addEventListener("event", (m) => {
      const t = JSON.parse(m.data).type;
      if (t === "rath.model.called" || t === "rath.model.call.failed" || t === "rath.agent.turn.failed") {
        growing.hidden = true; // the stored answer (or its failure) is in the timeline now
        answer = "";
      }
    });
    src.addEventListener("failure", (m) => { status.textContent = "live stream failed: " + JSON.parse(m.data); });
    src.addEventListener("error", () => { status.textContent = "reconnecting…"; });
  }
  // show opens event seq: scrolls to it, waits for its page, opens it.
  async function show(seq) {
    if (seq < 1 || seq > head) return;
    reveal(seq, true);
    if (!cache.has(seq)) await load(pageOf(seq));
    document.getElementById("ev-" + seq)?.focus({ preventScroll: true });
    await open(seq);
  }
  window.rathShow = show; // the verification's "show" link
  window.rathFault = (seq) => { faults.add(seq); version++; draw(); };
  return (async () => {
    try {
      const page = await getJSON(`/api/s/${id}/events`); // the last page
      for (const ev of page.events) cache.set(ev.seq, ev);
      grow(page.head);
      // The newest events first: size the table, go to its end, then draw
      // (drawing the top first would fetch a page no one looks at).
      below.firstChild.style.height = head * rowH + "px";
      fit();
      box.scrollTop = box.scrollHeight;
      draw();
      follow();
      // A link to one event, on arrival or within the page; else the
      // newest is open beside the timeline (a closed session's close, with
      // its outcome), rather than an empty panel.
      const linked = () => {
        const m = location.hash.match(/^#ev-(\d+)$/);
        return m ? show(Number(m[1])) : undefined;
      };
      window.addEventListener("hashchange", linked);
      if (location.hash.match(/^#ev-(\d+)$/)) await linked();
      else if (head > 0 && !selected) await open(head);
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
      if (window.rathFault) window.rathFault(f.seq); // a fork shares its parent's sequences up to the fork
      const go = el("button", { type: "button" }, `show event ${f.seq}`);
      go.addEventListener("click", () => window.rathShow && window.rathShow(f.seq));
      dd.append(go);
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
        // As the page drew it: the branch name beside the ID, the outcome
        // or what it waits for, the task's first line.
        const b = s.badge || { text: s.status, class: s.status };
        const parent = s.parent_name ? el("b", { class: "branch" }, s.parent_name) : el("span", { class: "id" }, s.parent || "");
        body.append(el("tr", {},
          el("td", { class: "id-cell" }, el("a", { href: "/s/" + s.id }, ...(s.name ? [el("b", { class: "branch" }, s.name), " "] : []), el("span", { class: "id" }, s.id))),
          el("td", {}, el("span", { class: "status " + b.class, title: b.title || "" }, b.text), ...(s.waits ? [el("div", { class: "waits" }, "for " + s.waits)] : [])),
          el("td", {}, s.workflow || ""),
          el("td", { class: "task-cell", title: s.task || "" }, s.task_line || ""),
          el("td", { class: "parent-cell" }, ...(s.parent ? [el("a", { href: "/s/" + s.parent, title: s.parent }, parent), " @" + s.fork_seq] : [])),
          el("td", { class: "num" }, ...(s.forks ? [el("a", { href: `/s/${s.id}#graph`, title: `${s.forks} ${s.forks === 1 ? "session was" : "sessions were"} forked from ${s.id}` }, String(s.forks))] : [])),
          el("td", { class: "num" }, s.seq),
          el("td", { class: "labels" }, ...labels),
          el("td", { title: s.active }, timeText(s.active))));
      }
      if (body.children.length) table.tBodies[0].replaceWith(body);
      count.textContent = `${p.Matched} ` + (p.Matched === 1 ? "session" : "sessions") + (p.Status || p.Query ? (p.Matched === 1 ? " matches" : " match") : "") + (p.Matched > (p.Rows || []).length ? `, the ${(p.Rows || []).length} active last shown` : "");
    } catch (e) { /* the next tick retries */ }
  }, 3000);
}

document.addEventListener("DOMContentLoaded", async () => {
  // A sign-in link's page goes on at once: from the console's own page,
  // so the request carries the sign-in's SameSite=Strict cookie.
  const go = document.querySelector("a[data-continue]");
  if (go) { location.replace(go.href); return; }
  // The timeline first: the graph and the verification read the whole
  // tree, which takes a while on a long session, and come in after it.
  const t = document.getElementById("timeline");
  if (t) await timeline(t);
  const g = document.getElementById("graph");
  if (g) graph(g);
  const v = document.getElementById("verify");
  if (v) verify(v);
  const s = document.getElementById("sessions");
  if (s) sessions(s);
  for (const pre of document.querySelectorAll("pre[data-diff]")) colourDiff(pre, pre.textContent);
});
