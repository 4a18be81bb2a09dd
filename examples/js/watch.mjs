// Start a Rath workflow session from Node, watch it live, fork it, watch the
// fork through its ancestry, and read both states: everything over NATS
// request/reply and the live subject, as docs/protocol.md describes, with no
// Rath code. See README.md.
//
//   node watch.mjs [--nats URL] [--creds FILE] [--workflow FILE]
//                  [--workspace DIR] [--id SESSION] [--fork-agent NAME]
//
// The last line of the output is one JSON object summarising the run; the
// exit code is 0 only when every check held.

import { createHash, randomUUID } from "node:crypto";
import { readFileSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";

import { connect, nkeyAuthenticator, headers } from "@nats-io/transport-node";
import { CloudEvent, HTTP } from "cloudevents";
import { create as tarCreate } from "tar";
import YAML from "yaml";

const here = dirname(fileURLToPath(import.meta.url));

const { values: opt } = parseArgs({
  options: {
    nats: { type: "string", default: process.env.RATH_NATS_URL ?? "nats://127.0.0.1:4222" },
    creds: { type: "string", default: process.env.RATH_CREDS ?? ".rath/data/creds/client.nk" },
    workflow: { type: "string", default: join(here, "..", "fix-calc", "workflow.yaml") },
    workspace: { type: "string", default: join(here, "..", "fix-calc", "repo") },
    task: { type: "string", default: "make TestAdd pass" },
    id: { type: "string", default: `js-${randomUUID().slice(0, 8)}` },
    "fork-agent": { type: "string", default: "coder" },
    timeout: { type: "string", default: "120" },
  },
});

const deadline = Date.now() + Number(opt.timeout) * 1000;
const say = (...a) => console.log(...a);
const fail = (msg) => {
  throw new Error(msg);
};

// ---- credentials: an nkey seed file naming its principal -------------------

// readCreds reads a Rath credentials file: the line "# rath-identity: <role>
// <tenant>/<user>" and the nkey seed between the BEGIN/END lines.
function readCreds(path) {
  const text = readFileSync(path, "utf8");
  const who = text.match(/^# rath-identity: (\S+) ([a-z0-9][a-z0-9_-]*)\/([a-z0-9][a-z0-9_-]*)$/m);
  const seed = text.match(/^(S[A-Z2-7]{50,})$/m);
  if (!who || !seed) fail(`${path}: not a Rath credentials file`);
  return { role: who[1], tenant: who[2], user: who[3], seed: seed[1] };
}

// ---- the workspace seed -----------------------------------------------------

// packWorkspace packs a directory as a workspace seed: a gzip-compressed tar
// of its directories, files and symbolic links, without .git, owners or
// times (docs/protocol.md, "Workspace seeds").
async function packWorkspace(dir) {
  const chunks = [];
  const pack = tarCreate({ gzip: true, cwd: dir, portable: true, noMtime: true, filter: (p) => !/(^|\/)\.git(\/|$)/i.test(p) }, ["."]);
  for await (const chunk of pack) chunks.push(chunk);
  return Buffer.concat(chunks);
}

// ---- requests to the ledger -------------------------------------------------

class LedgerError extends Error {
  constructor(code, message) {
    super(`${code}: ${message}`);
    this.code = code;
  }
}

const enc = new TextEncoder();
const dec = new TextDecoder();

// ask sends one request to the ledger's <op> and returns the decoded reply;
// an error reply (header Rath-Error) is thrown as a LedgerError.
async function ask(nc, me, op, body, hdrs) {
  const payload = body instanceof Uint8Array ? body : enc.encode(typeof body === "string" ? body : JSON.stringify(body));
  const m = await nc.request(`rath.ledger.${me.tenant}.${me.user}.${op}`, payload, { timeout: 30_000, headers: hdrs });
  const reply = JSON.parse(dec.decode(m.data));
  if (m.headers?.get("Rath-Error")) throw new LedgerError(reply.error.code, reply.error.message);
  return reply;
}

// append proposes one CloudEvent (structured mode) and returns the ack.
async function append(nc, me, ce) {
  const msg = HTTP.structured(ce); // { headers: {content-type}, body: JSON text }
  const h = headers();
  h.set("Content-Type", msg.headers["content-type"]);
  return ask(nc, me, "append", msg.body, h);
}

// ---- the hash chain ---------------------------------------------------------

// jcs is RFC 8785 canonical JSON. JSON.stringify already writes numbers and
// strings as JCS wants; only the member order (UTF-16 code units, which is
// what Array.prototype.sort compares) needs doing.
function jcs(v) {
  if (v === null || typeof v !== "object") return JSON.stringify(v);
  if (Array.isArray(v)) return `[${v.map(jcs).join(",")}]`;
  return `{${Object.keys(v)
    .sort()
    .map((k) => `${JSON.stringify(k)}:${jcs(v[k])}`)
    .join(",")}}`;
}

// chainHash recomputes an event's rathhash: SHA-256 of the canonical JSON of
// the stored event without rathhash and rathsig.
function chainHash(stored) {
  const { rathhash, rathsig, ...rest } = stored;
  return createHash("sha256").update(jcs(rest), "utf8").digest("hex");
}

// ---- catch up, then follow ----------------------------------------------------

// Follower reads one session's logical log from sequence 1 and follows it
// live: subscribe first, read the log by pages up to its head, then handle
// the live messages, which only tell it to read further. What it shows comes
// from the ledger's log, checked for sequence continuity, chain links and
// hashes; the live subject is a notification, not evidence
// (docs/protocol.md, "Catch up, then follow").
class Follower {
  constructor(nc, me, session, show) {
    this.nc = nc;
    this.me = me;
    this.session = session;
    this.show = show;
    this.next = 1; // the next sequence to show
    this.prev = undefined; // rathhash of event next-1
    this.events = []; // every event shown, in order
    this.live = 0; // live messages received
    this.woke = 0; // live messages that made it read the log
    this.forged = 0;
    this.queue = [];
    this.wake = null;
    // 1. Subscribe to the live subject before reading anything, so that no
    // event stored after the read can be missed.
    this.sub = nc.subscribe(`rath.session.${me.tenant}.${session}.>`, {
      callback: (err, m) => {
        if (err) return;
        this.queue.push(m);
        this.wake?.();
      },
    });
  }

  // accept checks one event of the log against what was shown before it and
  // shows it.
  accept(ev, via) {
    if (ev.rathseq !== this.next) fail(`${this.session}: expected seq ${this.next}, the log has ${ev.rathseq}`);
    if (ev.rathprev !== this.prev) fail(`${this.session}: seq ${ev.rathseq}: rathprev does not name the hash of ${this.next - 1}`);
    if (chainHash(ev) !== ev.rathhash) fail(`${this.session}: seq ${ev.rathseq}: hash mismatch`);
    if (ev.type === "rath.session.forked") {
      const d = ev.data;
      if (d.at_seq !== this.next - 1 || d.parent_hash !== this.prev) fail(`${this.session}: seq ${ev.rathseq}: fork record does not match the chain`);
    }
    // The CloudEvents SDK reads the stored event (structured mode) too.
    const ce = HTTP.toEvent({ headers: { "content-type": "application/cloudevents+json" }, body: JSON.stringify(ev) });
    if (ce.subject !== ev.subject || ce.rathseq !== ev.rathseq) fail(`${this.session}: seq ${ev.rathseq}: the SDK reads another event`);
    this.events.push(ev);
    this.prev = ev.rathhash;
    this.next++;
    this.show(ev, via);
  }

  // readLog reads the log from next to its head, by pages, and accepts every
  // event; it returns the last sequence read.
  async readLog(via) {
    for (;;) {
      const page = await ask(this.nc, this.me, "log", { session: this.session, from: this.next });
      for (const ev of page.events) this.accept(ev, via);
      if (!page.more) return this.next - 1;
    }
  }

  // follow catches up and follows until until(event) is true for an event
  // shown, then unsubscribes. It returns the events shown.
  async follow(until) {
    // 2. Read the log by pages up to its head (the catch-up).
    await this.readLog("log");
    say(`  ${this.session}: caught up at seq ${this.next - 1}; following live`);
    // 3. Then the live messages, buffered since step 1.
    while (!this.events.some(until)) {
      if (this.queue.length === 0) {
        const left = deadline - Date.now();
        if (left <= 0) fail(`${this.session}: not done in ${opt.timeout}s (head ${this.next - 1})`);
        await new Promise((res) => {
          const t = setTimeout(res, left);
          this.wake = () => {
            clearTimeout(t);
            res();
          };
        });
        this.wake = null;
        continue;
      }
      const m = this.queue.shift();
      this.live++;
      let ev;
      try {
        ev = JSON.parse(dec.decode(m.data));
      } catch {
        say(`  ! ${this.session}: skipped a live message on ${m.subject} that is not JSON`);
        continue;
      }
      // Drop what was shown already (the catch-up read it, or an earlier
      // live message made it read further).
      if (!Number.isInteger(ev.rathseq) || ev.subject === undefined) {
        say(`  ! ${this.session}: skipped a live message on ${m.subject} that is not a stored event`);
        continue;
      }
      if (ev.rathseq < this.next) continue;
      // Check it on its own: its hash, and its link if it is the next one.
      if (chainHash(ev) !== ev.rathhash || (ev.rathseq === this.next && ev.rathprev !== this.prev)) {
        this.forged++;
        say(`  ! ${this.session}: skipped the live message of seq ${ev.rathseq}: its chain does not hold`);
        continue;
      }
      // 4. Read the log from next: it fills any gap the live feed left and
      // confirms the live event; the log's event is the one shown.
      this.woke++;
      const last = await this.readLog("live");
      if (last < ev.rathseq) {
        this.forged++;
        say(`  ! ${this.session}: the live message of seq ${ev.rathseq} is past the log's head ${last}`);
      } else if (this.events[ev.rathseq - 1].rathhash !== ev.rathhash) {
        this.forged++;
        say(`  ! ${this.session}: the live message of seq ${ev.rathseq} is not the log's event`);
      }
    }
    this.sub.unsubscribe();
    say(
      `  ${this.session}: ${this.events.length} events, seq 1-${this.next - 1} continuous; ` +
        `${this.live} live messages, ${this.woke} of them read the log, the rest were shown already; ${this.forged} skipped`,
    );
    return this.events;
  }
}

// ---- printing -----------------------------------------------------------------

function summary(ev) {
  const d = ev.data ?? {};
  switch (ev.type) {
    case "rath.session.started":
      return `workflow=${d.workflow} task=${JSON.stringify(d.task)}`;
    case "rath.session.forked":
      return `from ${d.parent}@${d.at_seq}: ${d.reason ?? ""}`;
    case "rath.session.closed":
      return `${d.outcome}: ${d.reason ?? ""}`;
    case "rath.selector.decided":
      return `${d.rule} -> ${d.route}`;
    case "rath.agent.turn.requested":
      return `${d.agent} ${d.turn_id}`;
    case "rath.agent.turn.completed":
      return `${d.agent} tool_calls=${d.tool_calls}`;
    case "rath.conversation.chunk.appended":
      return `${d.role}/${d.agent ?? "-"}: ${String(d.content).replace(/\s+/g, " ").slice(0, 60)}`;
    case "rath.tool.call.requested":
      return `${d.tool} ${d.call_id}`;
    case "rath.tool.call.started":
      return `${d.call_id} attempt ${d.attempt ?? 1}`;
    case "rath.sandbox.placed":
      return `${d.backend}/${d.sandbox_id}`;
    case "rath.tool.call.completed":
      return `${d.call_id} exit ${d.exit_code}`;
    case "rath.model.called":
      return `${d.agent} ${d.provider}/${d.model} in=${d.tokens_in} out=${d.tokens_out}`;
    default:
      return "";
  }
}

const printer = (label) => (ev, via) =>
  say(`  ${label.padEnd(14)} ${String(ev.rathseq).padStart(3)} ${via.padEnd(4)} ${ev.subject === label ? "" : `(${ev.subject}) `}${ev.type.replace(/^rath\./, "").padEnd(28)} ${summary(ev)}`);

// segments splits a logical log into runs of each session's own events:
// a fork's log is its ancestors' events up to each fork point, then its own.
function segments(log) {
  const out = [];
  for (const ev of log) {
    const last = out.at(-1);
    if (last && last.session === ev.subject) last.to = ev.rathseq;
    else out.push({ session: ev.subject, from: ev.rathseq, to: ev.rathseq });
  }
  return out;
}

// ---- the run ------------------------------------------------------------------

async function main() {
  const me = readCreds(opt.creds);
  const nc = await connect({
    servers: opt.nats,
    name: "rath-example-js",
    authenticator: nkeyAuthenticator(enc.encode(me.seed)),
    // A tenant's user may receive replies under _INBOX.<tenant>.<user> only.
    inboxPrefix: `_INBOX.${me.tenant}.${me.user}`,
  });
  say(`connected to ${opt.nats} as ${me.tenant}/${me.user}`);
  try {
    await run(nc, me);
  } finally {
    await nc.drain();
  }
}

async function run(nc, me) {
  const id = opt.id;
  const forkID = `${id}-b`;

  // The workflow bundle: the workflow file's bytes, each script it names and each agent's tools,
  // as one JSON document stored with putblob (written as rath start writes
  // it, scripts sorted by name, so the same files give the same reference).
  const specBytes = readFileSync(opt.workflow);
  const spec = YAML.parse(specBytes.toString("utf8"));
  const files = {};
  const scripts = [...new Set((spec.agents ?? []).map((a) => a.script).filter(Boolean))].sort();
  for (const name of scripts) files[name] = readFileSync(resolve(dirname(opt.workflow), name)).toString("base64");
  // Each agent's tools, agents sorted by name: custom tool servers check calls against
  // this table without parsing the YAML.
  const tools = {};
  for (const a of [...(spec.agents ?? [])].sort((x, y) => (x.name < y.name ? -1 : x.name > y.name ? 1 : 0))) tools[a.name] = a.tools ?? [];
  const bundle = { path: relative(process.cwd(), opt.workflow), spec: specBytes.toString("base64"), files, tools };
  const { ref } = await ask(nc, me, "putblob", enc.encode(JSON.stringify(bundle)));
  const workflowHash = `sha256:${createHash("sha256").update(specBytes).digest("hex")}`;
  say(`workflow ${spec.name} stored as ${ref}`);

  // The workspace seed: the directory packed as a gzip-compressed tar and
  // stored with putblob; the tool runner unpacks it into the session's
  // workspace. No path on the runner's machine is ever named.
  const { ref: seed } = await ask(nc, me, "putblob", await packWorkspace(opt.workspace));
  say(`workspace ${opt.workspace} stored as ${seed}`);

  // Subscribe before starting, so that the watch misses nothing.
  const parent = new Follower(nc, me, id, printer(id));
  const started = new CloudEvent({
    id: randomUUID(),
    source: "example/js",
    type: "rath.session.started",
    subject: id,
    datacontenttype: "application/json",
    dataschema: "urn:rath:schema:session.started.v1.json",
    data: { workflow: spec.name, workflow_hash: workflowHash, workflow_ref: ref, task: opt.task, labels: { workspace: seed, workspace_from: opt.workspace } },
  });
  const ack = await append(nc, me, started);
  say(`started ${ack.session} (seq ${ack.seq}, signed ${ack.sig.split(":")[0]})`);
  say(`watching ${id}:`);
  const plog = await parent.follow((ev) => ev.type === "rath.session.closed");

  // Fork where the agent before the fork agent finished: the last turn
  // completed before the fork agent's first turn was requested.
  const firstTurn = plog.find((ev) => ev.type === "rath.agent.turn.requested" && ev.data.agent === opt["fork-agent"]);
  if (!firstTurn) fail(`${id}: agent ${opt["fork-agent"]} never took a turn`);
  const at = plog.filter((ev) => ev.type === "rath.agent.turn.completed" && ev.rathseq < firstTurn.rathseq).at(-1)?.rathseq;
  if (!at) fail(`${id}: no turn completed before ${opt["fork-agent"]}'s`);

  const child = new Follower(nc, me, forkID, printer(forkID));
  const fack = await ask(nc, me, "fork", {
    parent: id,
    at,
    id: forkID,
    reason: `the ${opt["fork-agent"]} again, from ${at}`,
    event_id: randomUUID(),
    source: "example/js",
  });
  say(`forked ${id}@${at} as ${fack.session} (seq ${fack.seq})`);
  // Nothing in the workflow routes a fork, so ask for the fork agent's turn,
  // on the condition that the fork's head is still its fork event.
  await append(
    nc,
    me,
    new CloudEvent({
      id: randomUUID(),
      source: "example/js",
      type: "rath.agent.turn.requested",
      subject: forkID,
      datacontenttype: "application/json",
      rathexpectedseq: fack.seq,
      data: { turn_id: `turn-${randomUUID().slice(0, 8)}`, agent: opt["fork-agent"], reason: "asked by the JS example" },
    }),
  );
  say(`watching ${forkID} from seq 1 (its ancestry first):`);
  const flog = await child.follow((ev) => ev.type === "rath.session.closed");

  // The fork's log is the parent's events 1..at, then its own.
  const segs = segments(flog);
  for (let i = 0; i < at; i++) {
    if (flog[i].rathhash !== plog[i].rathhash) fail(`${forkID}: seq ${i + 1} is not ${id}'s event`);
  }
  const forked = flog[at];
  if (forked.type !== "rath.session.forked" || forked.data.parent !== id || forked.data.at_seq !== at || forked.rathprev !== plog[at - 1].rathhash)
    fail(`${forkID}: seq ${at + 1} is not the fork from ${id}@${at}`);
  say(`ancestry of ${forkID}: ${segs.map((s) => `${s.session} ${s.from}-${s.to}`).join(", ")}`);

  // The states, from the ledger's state request.
  const pst = await ask(nc, me, "state", { session: id });
  const fst = await ask(nc, me, "state", { session: forkID });
  for (const st of [pst, fst]) {
    if (st.format !== "rath.overview/1") fail(`${st.id}: state format ${st.format}`);
    const lin = st.lineage?.parent ? `, forked from ${st.lineage.parent}@${st.lineage.fork_seq}` : "";
    say(
      `state ${st.id}: ${st.status} (${st.outcome ?? "-"}), head ${st.seq}, ${st.counts.turns} turns, ${st.counts.tool_calls} tool calls, ` +
        `usage in ${st.usage.total.in} out ${st.usage.total.out}${lin}`,
    );
  }

  const result = {
    session: id,
    status: pst.status,
    outcome: pst.outcome,
    head: pst.seq,
    events: plog.length,
    live: parent.woke + child.woke,
    fork: forkID,
    fork_at: at,
    fork_status: fst.status,
    fork_outcome: fst.outcome,
    fork_head: fst.seq,
    fork_parent: fst.lineage?.parent,
    fork_segments: segs,
    continuous: plog.every((ev, i) => ev.rathseq === i + 1) && flog.every((ev, i) => ev.rathseq === i + 1),
    forged: parent.forged + child.forged,
  };
  say(JSON.stringify(result));
}

main().catch((err) => {
  console.error(`rath-example-js: ${err.message}`);
  process.exit(1);
});
