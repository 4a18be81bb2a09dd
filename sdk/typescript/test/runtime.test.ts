// Tests against a real runtime that e2e/ts_test.go starts (go test ./e2e
// -run TestTypeScriptSDK): it passes the NATS URL, credentials files and the
// chain-hash vectors Go computed, in the environment.

import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";
import { after, before, test } from "node:test";

import { chainHash, Client, Code, connect, CredentialsError, isCode, newID, RathError, verifyReceipt, type Keyring, type StoredEvent, type Warning } from "../src/index.js";

function env(name: string): string {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set: run these tests with go test ./e2e -run TestTypeScriptSDK, which starts a runtime`);
  return v;
}

const url = env("RATH_NATS_URL");
let c: Client;
let other: Client;
let admin: Client;
let ring: Keyring;
const run = newID().slice(-8);
const sid = (name: string) => `ts-${name}-${run}`;

before(async () => {
  c = await connect({ servers: url, creds: env("RATH_CREDS"), source: "test/ts" });
  other = await connect({ servers: url, creds: env("RATH_OTHER_CREDS") });
  admin = await connect({ servers: url, creds: env("RATH_ADMIN_CREDS") });
  ring = await c.keyring();
});

after(async () => {
  await Promise.all([c?.close(), other?.close(), admin?.close()]);
});

const chunk = (content: string) => ({ role: "user" as const, content });

test("the chain hash matches Go's on every golden event and on hard canonical cases", () => {
  const vectors = JSON.parse(readFileSync(env("RATH_VECTORS"), "utf8")) as { name: string; body: string; hash: string }[];
  assert.ok(vectors.length > 38, `${vectors.length} vectors`);
  for (const v of vectors) assert.equal(chainHash(JSON.parse(v.body)), v.hash, v.name);
});

test("connect sets the reply prefix: a tenant's user's requests are answered", async () => {
  assert.deepEqual(c.principal, { tenant: "default", user: "client" });
  assert.equal(c.creds.inboxPrefix, "_INBOX.default.client");
  const k = await c.keys();
  assert.ok(k.keys.some((key) => key.id === k.current));
});

test("start, emit, state and log", async () => {
  const id = sid("basic");
  const a1 = await c.start(id, { task: "from TypeScript", labels: { lang: "ts" } });
  assert.equal(a1.session, id);
  assert.equal(a1.seq, 1);
  verifyReceipt(a1, ring);
  const a2 = await c.emit(id, "rath.conversation.chunk.appended", chunk("hello"));
  assert.equal(a2.seq, 2);
  const st = await c.state(id);
  assert.equal(st.format, "rath.overview/1");
  assert.equal(st.status, "active");
  assert.equal(st.seq, 2);
  assert.equal(st.hash, a2.hash);
  assert.equal(st.labels?.lang, "ts");
  const whole = await c.wholeState(id);
  assert.equal(whole.seq, 2);
  const log = await c.log(id);
  assert.deepEqual(log.map((e) => e.rathseq), [1, 2]);
  assert.equal(log[1].rathprev, log[0].rathhash);
  for (const ev of log) assert.equal(chainHash(ev), ev.rathhash);
  assert.equal((log[1].data as { content: string }).content, "hello");
  assert.equal(log[1].rathactor, "default/client");
  assert.deepEqual((await c.log(id, { from: 2, to: 2 })).map((e) => e.rathseq), [2]);
  assert.deepEqual((await c.log(id, { limit: 1 })).map((e) => e.rathseq), [1]);
  assert.deepEqual(await c.log(id, { from: 9 }), [], "asking from past the head is not an error");
  const ledgerStarted = await c.start(undefined, {});
  assert.match(ledgerStarted.session, /^[0-9a-f-]{36}$/, "a start without an ID gets one from the ledger");
  const r = await c.verify(id);
  assert.equal(r.ok, true);
  assert.equal(r.head, 2);
  const blob = new TextEncoder().encode("a workspace seed");
  assert.equal(await c.putBlob(blob), `sha256:${createHash("sha256").update(blob).digest("hex")}`);
});

test("a stale expected sequence is refused with stale_sequence; other refusals carry their codes", async () => {
  const id = sid("stale");
  await c.start(id, {});
  await c.emit(id, "rath.conversation.chunk.appended", chunk("one"), { expectedSeq: 1 });
  await assert.rejects(c.emit(id, "rath.conversation.chunk.appended", chunk("two"), { expectedSeq: 1 }), (e: unknown) => isCode(e, Code.Stale) && e instanceof RathError && /stale/.test(e.message));
  await assert.rejects(c.start(id, {}), (e: unknown) => isCode(e, Code.Exists));
  await assert.rejects(c.append({ specversion: "1.0", id: newID(), source: "t", type: "rath.session.exploded", subject: id }), (e: unknown) => isCode(e, Code.UnknownType));
  await assert.rejects(c.append({ specversion: "1.0", id: newID(), source: "t", type: "rath.conversation.chunk.appended", subject: id, data: { role: "narrator" } }), (e: unknown) => isCode(e, Code.Schema));
  await assert.rejects(c.state("a.b"), (e: unknown) => isCode(e, Code.InvalidSession));
  await assert.rejects(c.state(id, { at: 99 }), (e: unknown) => isCode(e, Code.OutOfRange));
  await assert.rejects(c.state(sid("never")), (e: unknown) => isCode(e, Code.NotFound));
  assert.throws(() => c.event(id, "rath.nope" as "rath.work.done", { work_id: "w" }), (e: unknown) => isCode(e, Code.UnknownType));
});

test("atomic and batch appends; compact batch receipts verify offline", async () => {
  const id = sid("atomic");
  await c.start(id, {});
  const acks = await c.appendAtomic([
    c.event(id, "rath.conversation.chunk.appended", chunk("a")),
    c.event(id, "rath.conversation.chunk.appended", chunk("b")),
    c.event(id, "rath.work.pending", { work_id: "w1", kind: "review" }),
  ]);
  assert.deepEqual(acks.map((a) => a.seq), [2, 3, 4]);
  for (const a of acks) verifyReceipt(a, ring);
  await assert.rejects(
    c.appendAtomic([c.event(id, "rath.conversation.chunk.appended", chunk("c")), c.event(id, "rath.conversation.chunk.appended", { role: "narrator" } as never)]),
    (e: unknown) => isCode(e, Code.Schema) && /event 1 of the atomic append/.test((e as Error).message),
  );
  assert.equal((await c.state(id)).seq, 4, "a refused atomic append stores nothing");

  const ids = [0, 1, 2, 3, 4].map((i) => sid(`batch${i}`));
  for (const s of ids) await c.start(s, {});
  const res = await c.appendBatch([...ids.map((s) => c.event(s, "rath.conversation.chunk.appended", chunk(`to ${s}`))), c.event(sid("nobatch"), "rath.work.done", { work_id: "w" })]);
  assert.equal(res.length, 6);
  for (const r of res.slice(0, 5)) {
    assert.ok(r.ack, r.error?.message);
    assert.equal(r.ack.seq, 2);
    verifyReceipt(r.ack, ring);
  }
  assert.ok(res.some((r) => r.ack?.record), "events of a batch round are signed in a record");
  assert.ok(isCode(res[5].error, Code.NotFound));
  // A receipt whose hash was altered does not verify.
  const forged = { ...res[0].ack!, hash: "0".repeat(64) };
  assert.throws(() => verifyReceipt(forged, ring));
  const moved = { ...res[0].ack!, seq: 3 };
  assert.throws(() => verifyReceipt(moved, ring));
  // A compact receipt's record is checked: its leaves' root, its key, the leaf named.
  const compact = res.find((r) => r.ack?.record)!.ack!;
  const rec = compact.record!;
  const otherLeaf = { ...rec, leaves: [rec.leaves[1], rec.leaves[0], ...rec.leaves.slice(2)] };
  assert.throws(() => verifyReceipt({ ...compact, record: otherLeaf }, ring), /root/);
  assert.throws(() => verifyReceipt({ ...compact, record: { ...rec, key: "0000000000000000" } }, ring), /by key/);
  const [k, recID, , nonce] = compact.sig!.split(":");
  assert.throws(() => verifyReceipt({ ...compact, sig: `${k}:${recID}:63:${nonce}` }, ring), /leaves/);
  assert.throws(() => verifyReceipt({ ...compact, record: undefined }, ring), /does not carry/);
  assert.throws(() => verifyReceipt({ ...compact, record: { ...rec, leaves: ["x"] } }, ring), /leaves/);
});

test("fork and merge", async () => {
  const id = sid("parent");
  await c.start(id, {});
  await c.emit(id, "rath.conversation.chunk.appended", chunk("p2"));
  const child = sid("child");
  const f = await c.fork({ parent: id, at: 2, id: child, reason: "try another" });
  assert.equal(f.session, child);
  assert.equal(f.seq, 3);
  verifyReceipt(f, ring);
  await c.emit(child, "rath.conversation.chunk.appended", chunk("c4"));
  const log = await c.log(child);
  assert.deepEqual(log.map((e) => e.subject), [id, id, child, child]);
  assert.equal(log[2].type, "rath.session.forked");
  const m = await c.merge({ target: id, source: child, reason: "it passed" });
  assert.equal(m.session, id);
  assert.equal(m.seq, 3);
  verifyReceipt(m, ring);
  await assert.rejects(c.merge({ target: id, source: child }), (e: unknown) => isCode(e, Code.NothingToMerge));
  await assert.rejects(c.fork({ parent: id, at: 99 }), (e: unknown) => isCode(e, Code.OutOfRange));
  const st = await c.state(child);
  assert.equal(st.lineage?.parent, id);
});

/** Waiter resolves waits on a condition each time it is poked (no sleeps). */
class Waiter {
  private waits: { cond: () => boolean; res: () => void }[] = [];
  poke(): void {
    this.waits = this.waits.filter((w) => !(w.cond() && (w.res(), true)));
  }
  until(cond: () => boolean): Promise<void> {
    return new Promise((res) => {
      if (cond()) res();
      else this.waits.push({ cond, res });
    });
  }
}

test("a proposal through the inbox is stored, and seen by a watch", async () => {
  const id = sid("inbox");
  await c.start(id, {});
  const ev = c.event(id, "rath.conversation.chunk.appended", chunk("via the inbox"));
  const seen: StoredEvent[] = [];
  let caughtUp = -1;
  const w = new Waiter();
  const stop = new AbortController();
  const watching = c.watch(
    id,
    (e) => {
      seen.push(e);
      w.poke();
    },
    { onCaughtUp: (head) => (caughtUp = head), signal: stop.signal },
  );
  const q = await c.propose(ev);
  assert.equal(q.stream, "RATH_INBOX");
  assert.ok(q.seq > 0);
  await w.until(() => seen.some((e) => e.id === ev.id));
  stop.abort();
  await watching;
  assert.deepEqual(seen.map((e) => e.rathseq), [1, 2]);
  assert.equal(seen[1].id, ev.id);
  assert.equal(seen[1].rathactor, "default/client");
  assert.ok(caughtUp === 1 || caughtUp === 2, `caught up at ${caughtUp}`);
});

test("watch follows live in order, skips garbage and forged live events, and checks signatures", async () => {
  const id = sid("watch");
  const a1 = await c.start(id, {});
  const a2 = await c.emit(id, "rath.conversation.chunk.appended", chunk("two"));
  const seen: StoredEvent[] = [];
  const warnings: Warning[] = [];
  const w = new Waiter();
  const stop = new AbortController();
  const watching = c.watch(
    id,
    (e) => {
      seen.push(e);
      w.poke();
    },
    {
      verifySignatures: ring,
      signal: stop.signal,
      onWarning: (x) => {
        warnings.push(x);
        w.poke();
      },
    },
  );
  await w.until(() => seen.length >= 2);
  assert.deepEqual(seen.map((e) => e.rathhash), [a1.hash, a2.hash]);

  // Forge event 3 on the live subject, as anyone who may publish there can.
  const live = `rath.session.default.${id}.conversation`;
  const enc = new TextEncoder();
  const real = seen[1];
  const forged: StoredEvent = { ...real, id: newID(), rathseq: 3, rathprev: real.rathhash, data: chunk("forged") };
  forged.rathhash = chainHash(forged); // a forger seals it correctly: the head hash is public
  const tampered = { ...forged, data: chunk("altered") }; // and one whose hash no longer holds
  const farFuture = { ...forged, rathseq: 2147483646, rathprev: "0".repeat(64) };
  farFuture.rathhash = chainHash(farFuture);
  admin.nc.publish(live, enc.encode("garbage"));
  admin.nc.publish(live, enc.encode(JSON.stringify({ ...real, subject: "someone-else" })));
  admin.nc.publish(live, enc.encode(JSON.stringify(forged)));
  admin.nc.publish(live, enc.encode(JSON.stringify(tampered)));
  admin.nc.publish(live, enc.encode(JSON.stringify(farFuture)));
  await admin.nc.flush();
  await w.until(() => warnings.length >= 5);
  assert.deepEqual(warnings.map((x) => x.reason), ["not_event", "not_event", "forged", "forged", "forged"]);
  assert.match(warnings[1].message, /someone-else/);
  assert.match(warnings[2].message, /did not sign/, "the forgery sealed correctly is caught by its signature");
  assert.match(warnings[3].message, /hash mismatch/);
  assert.match(warnings[4].message, /did not sign/);
  assert.equal(seen.length, 2, "nothing forged was shown");

  // The real events 3 and 4 are shown, in order, with the ledger's hashes.
  const a3 = await c.emit(id, "rath.conversation.chunk.appended", chunk("three"));
  const a4 = await c.emit(id, "rath.conversation.chunk.appended", chunk("four"));
  await w.until(() => seen.length >= 4);
  stop.abort();
  await watching;
  assert.deepEqual(seen.map((e) => e.rathseq), [1, 2, 3, 4]);
  assert.deepEqual(seen.slice(2).map((e) => e.rathhash), [a3.hash, a4.hash]);

  // Without a signature check, a forgery sealed correctly is caught by the log.
  const plainWarnings: Warning[] = [];
  const plain: StoredEvent[] = [];
  const stop2 = new AbortController();
  const w2 = c.watch(
    id,
    (e) => {
      plain.push(e);
      w.poke();
    },
    {
      from: 3,
      signal: stop2.signal,
      onWarning: (x) => {
        plainWarnings.push(x);
        w.poke();
      },
    },
  );
  await w.until(() => plain.length >= 2); // it has read the log to 4
  const forged5: StoredEvent = { ...seen[3], id: newID(), rathseq: 5, rathprev: a4.hash, data: chunk("forged 5") };
  forged5.rathhash = chainHash(forged5);
  admin.nc.publish(live, enc.encode(JSON.stringify(forged5)));
  await w.until(() => plainWarnings.length >= 1);
  stop2.abort();
  await w2;
  assert.equal(plainWarnings[0].reason, "forged");
  assert.match(plainWarnings[0].message, /log has no event 5/);
  assert.deepEqual(plain.map((e) => e.rathseq), [3, 4]);
});

test("another tenant's session reads as not found; hostile credentials are refused before connecting", async () => {
  const id = sid("mine");
  await c.start(id, {});
  assert.deepEqual(other.principal, { tenant: "acme", user: "alice" });
  const hers = sid("alice");
  await other.start(hers, {});
  const asks = [() => other.state(id), () => other.log(id), () => other.verify(id), () => other.emit(id, "rath.conversation.chunk.appended", chunk("x")), () => other.fork({ parent: id }), () => other.merge({ target: id, source: hers }), () => other.merge({ target: hers, source: id })];
  for (const ask of asks) {
    await assert.rejects(ask(), (e: unknown) => isCode(e, Code.NotFound) && /does not exist/.test((e as Error).message));
  }
  await assert.rejects(other.start(id, {}), (e: unknown) => isCode(e, Code.Exists));
  await assert.rejects(connect({ servers: url, creds: "/nonexistent/client.nk" }), (e: unknown) => e instanceof CredentialsError && e.missing);
  await assert.rejects(connect({ servers: url, creds: env("RATH_VECTORS") }), (e: unknown) => e instanceof CredentialsError && !e.missing);
});
