// Start a Rath workflow session from Node, watch it live, fork it, watch the
// fork through its ancestry, and read both states, on the TypeScript SDK
// (@openrath/rath, sdk/typescript): it connects with a Rath credentials
// file, and its watch checks every sequence, chain link, hash and
// signature. See README.md.
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

import { connect } from "@openrath/rath";
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

// ---- catch up, then follow ----------------------------------------------------

// follow watches one session from sequence 1 with the SDK's watch: the log
// first (the catch-up), then the live subject, every event checked (its
// sequence, chain link, hash, and the ledger's signature of each live
// event), forged live messages skipped with a warning. It stops once until(event)
// holds, or at the deadline. It returns the events shown, how many were
// shown live, and how many live messages were skipped.
async function follow(rath, ring, session, until) {
  const show = printer(session);
  const events = [];
  let live = 0;
  let forged = 0;
  let caughtUp = false;
  const stop = new AbortController();
  const timer = setTimeout(() => stop.abort(), Math.max(deadline - Date.now(), 0));
  try {
    await rath.watch(
      session,
      (ev) => {
        events.push(ev);
        if (caughtUp) live++;
        show(ev, caughtUp ? "live" : "log");
        return !until(ev);
      },
      {
        verifySignatures: ring,
        signal: stop.signal,
        onCaughtUp: (head) => {
          caughtUp = true;
          say(`  ${session}: caught up at seq ${head}; following live`);
        },
        onWarning: (w) => {
          forged++;
          say(`  ! ${session}: skipped the live message on ${w.subject}${w.seq ? ` (seq ${w.seq})` : ""}: ${w.message}`);
        },
      },
    );
  } finally {
    clearTimeout(timer);
  }
  if (!events.some(until)) fail(`${session}: not done in ${opt.timeout}s (head ${events.at(-1)?.rathseq ?? 0})`);
  say(`  ${session}: ${events.length} events, seq 1-${events.at(-1).rathseq} continuous; ${live} shown live; ${forged} skipped`);
  return { events, live, forged };
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
  // connect reads the credentials file (its principal, default/client for
  // client.nk) and sets the reply prefix _INBOX.<tenant>.<user>.
  const rath = await connect({ servers: opt.nats, creds: opt.creds, name: "rath-example-js", source: "example/js", timeoutMs: 30_000 });
  say(`connected to ${opt.nats} as ${rath.principal.tenant}/${rath.principal.user}`);
  try {
    await run(rath);
  } finally {
    await rath.close();
  }
}

async function run(rath) {
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
  const ref = await rath.putBlob(new TextEncoder().encode(JSON.stringify(bundle)));
  const workflowHash = `sha256:${createHash("sha256").update(specBytes).digest("hex")}`;
  say(`workflow ${spec.name} stored as ${ref}`);

  // The workspace seed: the directory packed as a gzip-compressed tar and
  // stored with putblob; the tool runner unpacks it into the session's
  // workspace. No path on the runner's machine is ever named.
  const seed = await rath.putBlob(await packWorkspace(opt.workspace));
  say(`workspace ${opt.workspace} stored as ${seed}`);

  // The ledger's keys, to check the signature of each live event (an
  // auditor pins <data>/keys/ledger.pub instead: Keyring.fromPEM).
  const ring = await rath.keyring();
  const ack = await rath.start(id, {
    workflow: spec.name,
    workflow_hash: workflowHash,
    workflow_ref: ref,
    task: opt.task,
    labels: { workspace: seed, workspace_from: opt.workspace },
  });
  say(`started ${ack.session} (seq ${ack.seq}, signed ${ack.sig.split(":")[0]})`);
  say(`watching ${id}:`);
  const parent = await follow(rath, ring, id, (ev) => ev.type === "rath.session.closed");
  const plog = parent.events;

  // Fork where the agent before the fork agent finished: the last turn
  // completed before the fork agent's first turn was requested.
  const firstTurn = plog.find((ev) => ev.type === "rath.agent.turn.requested" && ev.data.agent === opt["fork-agent"]);
  if (!firstTurn) fail(`${id}: agent ${opt["fork-agent"]} never took a turn`);
  const at = plog.filter((ev) => ev.type === "rath.agent.turn.completed" && ev.rathseq < firstTurn.rathseq).at(-1)?.rathseq;
  if (!at) fail(`${id}: no turn completed before ${opt["fork-agent"]}'s`);

  const fack = await rath.fork({ parent: id, at, id: forkID, reason: `the ${opt["fork-agent"]} again, from ${at}` });
  say(`forked ${id}@${at} as ${fack.session} (seq ${fack.seq})`);
  // Nothing in the workflow routes a fork, so ask for the fork agent's turn,
  // on the condition that the fork's head is still its fork event.
  await rath.emit(
    forkID,
    "rath.agent.turn.requested",
    { turn_id: `turn-${randomUUID().slice(0, 8)}`, agent: opt["fork-agent"], reason: "asked by the JS example" },
    { expectedSeq: fack.seq },
  );
  say(`watching ${forkID} from seq 1 (its ancestry first):`);
  const child = await follow(rath, ring, forkID, (ev) => ev.type === "rath.session.closed");
  const flog = child.events;

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
  const pst = await rath.state(id);
  const fst = await rath.state(forkID);
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
    live: parent.live + child.live,
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
