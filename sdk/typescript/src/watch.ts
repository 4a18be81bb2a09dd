// Watch: catch up from the ledger's log, then follow the live subject, as
// pkg/client/watch.go does (docs/protocol.md, "What a watcher must check"
// and "Catch up, then follow"). The live subject is a notification, not
// evidence: only the ledger's log is, or the ledger's signature.

import type { Msg, Subscription } from "@nats-io/transport-node";

import type { Client, StoredEvent } from "./client.js";
import { ChainError, Code, isCode } from "./errors.js";
import { chainHash } from "./jcs.js";
import { Keyring, SignatureError } from "./sign.js";

/** Why a live message was skipped. */
export type WarningReason = "not_event" | "forged";

/** A live message watch skipped: anyone who may publish on a live subject can put messages there. */
export interface Warning {
  session: string;
  subject: string;
  /** The sequence it claims (0: none readable). */
  seq: number;
  reason: WarningReason;
  message: string;
}

/** Options of watch. */
export interface WatchOptions {
  /** Start at this sequence instead of 1. */
  from?: number;
  /**
   * Check each live event's rathsig: a Keyring (better: from a pinned key
   * file), or true to use the ledger's keys reply. An event at the next
   * sequence that passes is shown without asking the log; one whose
   * signature fails is skipped as forged.
   */
  verifySignatures?: Keyring | boolean;
  /** Called for each live message skipped (default: console.warn). */
  onWarning?: (w: Warning) => void;
  /** Called once the log was read to its head, before the live events. */
  onCaughtUp?: (head: number) => void;
  /** Stops the watch; the promise then resolves. */
  signal?: AbortSignal;
}

const dec = new TextDecoder();

/**
 * watch calls onEvent for each event of a session's logical log (through its
 * fork ancestry) in order, from the first or opts.from, then for each new
 * event as it is stored, until opts.signal aborts (resolves) or onEvent
 * returns false (resolves) or throws (rejects). No event is skipped or
 * repeated; a session that does not exist yet is waited for.
 *
 * Each event of the log is checked: its sequence is the next, its rathprev
 * the previous event's hash, its hash recomputes (RFC 8785), a fork event's
 * at_seq and parent_hash match; a failure rejects with a ChainError. A live
 * message that is not a stored event of the session, or whose hash, link or
 * signature fails, is skipped with a warning. Any other live event is
 * confirmed by the log, which fills any gap; the log's event is shown, and a
 * live event the log does not hold is reported forged.
 */
export async function watch(
  c: Client,
  session: string,
  onEvent: (ev: StoredEvent) => void | boolean | Promise<void | boolean>,
  opts: WatchOptions = {},
): Promise<void> {
  const warn = opts.onWarning ?? ((w: Warning) => console.warn(`rath: watch ${w.session}: skipped the live message on ${w.subject}${w.seq ? ` (seq ${w.seq})` : ""}: ${w.message}`));
  let ring: Keyring | undefined;
  if (opts.verifySignatures instanceof Keyring) ring = opts.verifySignatures;
  else if (opts.verifySignatures === true) ring = await c.keyring();

  const queue: Msg[] = [];
  let wake: (() => void) | undefined;
  const tenant = c.isService ? "*" : c.principal.tenant;
  // Subscribe before reading the log, or an event stored in between is missed.
  const sub: Subscription = c.nc.subscribe(`rath.session.${tenant}.${session}.>`, {
    callback: (err, m) => {
      if (err) return;
      queue.push(m);
      wake?.();
    },
  });
  const onAbort = () => wake?.();
  opts.signal?.addEventListener("abort", onAbort);
  try {
    await c.nc.flush();
    const w = new Watcher(c, session, onEvent, warn, ring, Math.max(opts.from ?? 1, 1));
    if (!(await w.fill())) return;
    opts.onCaughtUp?.(w.next - 1);
    for (;;) {
      if (opts.signal?.aborted) return;
      const m = queue.shift();
      if (!m) {
        await new Promise<void>((res) => (wake = res));
        wake = undefined;
        continue;
      }
      if (!(await w.live(m))) return;
    }
  } finally {
    opts.signal?.removeEventListener("abort", onAbort);
    sub.unsubscribe();
  }
}

class Watcher {
  next: number;
  prev = "";
  /** linked: prev is known (after event 1 has no predecessor, or once an event was shown). */
  linked: boolean;

  constructor(
    private readonly c: Client,
    private readonly session: string,
    private readonly fn: (ev: StoredEvent) => void | boolean | Promise<void | boolean>,
    private readonly warnFn: (w: Warning) => void,
    private readonly ring: Keyring | undefined,
    from: number,
  ) {
    this.next = from;
    this.linked = from === 1;
  }

  warn(subject: string, seq: number, reason: WarningReason, message: string): void {
    this.warnFn({ session: this.session, subject, seq, reason, message });
  }

  /** live decides one live message; false stops the watch. */
  async live(m: Msg): Promise<boolean> {
    let ev: StoredEvent;
    try {
      ev = JSON.parse(dec.decode(m.data));
    } catch (err) {
      this.warn(m.subject, 0, "not_event", `not a stored event: ${(err as Error).message}`);
      return true;
    }
    if (ev === null || typeof ev !== "object" || Array.isArray(ev) || !Number.isSafeInteger(ev.rathseq) || ev.rathseq < 1 || typeof ev.rathhash !== "string") {
      this.warn(m.subject, 0, "not_event", "not a stored event: no integer rathseq and rathhash");
      return true;
    }
    if (ev.subject !== this.session) {
      this.warn(m.subject, ev.rathseq, "not_event", `not a stored event: it names session ${JSON.stringify(ev.subject)}`);
      return true;
    }
    if (ev.rathseq < this.next) return true; // shown already
    let vouched = false;
    try {
      vouched = this.check(ev);
    } catch (err) {
      this.warn(m.subject, ev.rathseq, "forged", `not the ledger's event: ${(err as Error).message}`);
      return true;
    }
    if (ev.rathseq === this.next && this.linked && vouched) return this.deliver(ev);
    return this.confirm(m.subject, ev);
  }

  /** check runs what a live event can pass on its own; true if its signature vouches for it. */
  check(ev: StoredEvent): boolean {
    const hash = chainHash(ev);
    if (hash !== ev.rathhash) throw new Error(`hash mismatch: the body hashes to ${hash}, it claims rathhash ${ev.rathhash}`);
    if (ev.rathseq === this.next && this.linked && (ev.rathprev ?? "") !== this.prev) {
      throw new Error(`chain link: rathprev ${JSON.stringify(ev.rathprev ?? "")}, but event ${ev.rathseq - 1}'s hash is ${this.prev}`);
    }
    if (!this.ring) return false;
    try {
      this.ring.verify(this.session, ev.rathseq, ev.rathhash, ev.rathsig);
    } catch (err) {
      // A reference to a signature record vouches for nothing: the log
      // serves the event with its signature expanded.
      if (err instanceof SignatureError && err.detached) return false;
      throw err;
    }
    return true;
  }

  /** confirm shows the log from next on and checks the live event against it; the log wins. */
  async confirm(subject: string, ev: StoredEvent): Promise<boolean> {
    let logged = "";
    const go = await this.fill((le) => {
      if (le.rathseq === ev.rathseq) logged = le.rathhash;
    });
    if (!go) return false;
    if (logged === "") this.warn(subject, ev.rathseq, "forged", `not the ledger's event: the ledger's log has no event ${ev.rathseq} (it ends at ${this.next - 1})`);
    else if (logged !== ev.rathhash) this.warn(subject, ev.rathseq, "forged", `not the ledger's event: the ledger's log holds another event at ${ev.rathseq} (hash ${logged}, not ${ev.rathhash}); the log's was shown`);
    return true;
  }

  /** fill shows the log's events from next to the head, each accepted first; false stops the watch. */
  async fill(seen?: (ev: StoredEvent) => void): Promise<boolean> {
    let events: StoredEvent[];
    try {
      events = await this.c.log(this.session, { from: this.next });
    } catch (err) {
      if (isCode(err, Code.NotFound)) return true; // not started yet: the live feed brings its events
      throw err;
    }
    for (const ev of events) {
      if (ev.rathseq < this.next) continue;
      this.accept(ev);
      seen?.(ev);
      if (!(await this.deliver(ev))) return false;
    }
    return true;
  }

  /** accept checks an event of the log: a failure is a broken log, not a bad message. */
  accept(ev: StoredEvent): void {
    const where = `watch ${this.session}: the ledger's log at ${ev.rathseq}`;
    if (ev.rathseq !== this.next) throw new ChainError(`${where}: expected sequence ${this.next}`);
    if (this.linked && (ev.rathprev ?? "") !== this.prev) throw new ChainError(`${where}: rathprev ${JSON.stringify(ev.rathprev ?? "")} does not name event ${this.next - 1}'s hash ${this.prev}`);
    const hash = chainHash(ev);
    if (hash !== ev.rathhash) throw new ChainError(`${where}: hash mismatch: the body hashes to ${hash}, it claims ${ev.rathhash}`);
    if (ev.type === "rath.session.forked" && this.linked) {
      const d = ev.data as { at_seq?: number; parent_hash?: string } | undefined;
      if (d?.at_seq !== this.next - 1 || d?.parent_hash !== this.prev) throw new ChainError(`${where}: the fork record does not match the chain`);
    }
  }

  /** deliver shows an event and moves past it; false stops the watch. */
  async deliver(ev: StoredEvent): Promise<boolean> {
    const r = await this.fn(ev);
    this.next = ev.rathseq + 1;
    this.prev = ev.rathhash;
    this.linked = true;
    return r !== false;
  }
}
