// The client: connect with a Rath credentials file and ask the ledger
// (docs/protocol.md, "Requests and replies"), as pkg/client does in Go.

import { randomBytes } from "node:crypto";

import { connect as natsConnect, credsAuthenticator, headers as natsHeaders, nkeyAuthenticator, type MsgHdrs, type NatsConnection } from "@nats-io/transport-node";

import { readCredentials, serviceTenant, type Credentials, type Principal } from "./creds.js";
import { Code, RathError } from "./errors.js";
import { schemaURNs, type EventData, type EventType, type SessionStarted } from "./events.gen.js";
import { expandSig, isRecordRef, Keyring, type Keys, type SigRecord } from "./sign.js";
import { watch, type WatchOptions } from "./watch.js";

/** A CloudEvent proposal in structured mode (docs/protocol.md, "The envelope"). */
export interface CloudEvent<T = unknown> {
  specversion: "1.0";
  id: string;
  source: string;
  type: string;
  subject?: string;
  time?: string;
  datacontenttype?: string;
  dataschema?: string;
  data?: T;
  /** Append only if the session's head is this sequence (0: it must not exist). */
  rathexpectedseq?: number;
  causationid?: string;
  correlationid?: string;
  [extension: string]: unknown;
}

/** A stored event, as the ledger's log serves it and the live subject carries it. */
export interface StoredEvent<T = unknown> extends CloudEvent<T> {
  subject: string;
  rathseq: number;
  rathprev?: string;
  rathhash: string;
  rathsig?: string;
  rathactor?: string;
  rathtenant?: string;
}

/**
 * An ack of an accepted append, fork or merge. With its sig it is a receipt:
 * proof, to anyone holding the ledger's public key, that the ledger stored
 * the event there (verifyReceipt).
 */
export interface Ack {
  id: string;
  session: string;
  seq: number;
  hash: string;
  sig?: string;
  stream_seq: number;
  duplicate?: boolean;
  /** The signature record sig refers to, for a compact batch receipt. */
  record?: SigRecord;
}

/** The decision on one event of a batch: an ack, or the ledger's refusal. */
export interface BatchResult {
  ack?: Ack;
  error?: RathError;
}

/** Options of an event the client builds. */
export interface EventOptions {
  /** The event ID (default: a new UUIDv7); reuse it to retry. */
  id?: string;
  /** The CloudEvents source (default: the client's). */
  source?: string;
  /** Append only if the session's head is this sequence. */
  expectedSeq?: number;
  causationID?: string;
  correlationID?: string;
  /** The event's time (default: now). */
  time?: Date;
}

/** A fork request (pkg/ledgerapi.ForkRequest). */
export interface ForkRequest {
  parent: string;
  /** The parent's sequence to fork after (0 or absent: its head). */
  at?: number;
  id?: string;
  reason?: string;
  labels?: Record<string, string>;
  event_id?: string;
  source?: string;
}

/** A merge request (pkg/ledgerapi.MergeRequest). */
export interface MergeRequest {
  target: string;
  source: string;
  reason?: string;
  event_id?: string;
  event_source?: string;
}

/** A range of a session's logical log: from..to (0: the head), the first limit of them. */
export interface Range {
  from?: number;
  to?: number;
  limit?: number;
}

/** A state request (docs/protocol.md, "state"); only the session is required. */
export interface StateOptions {
  at?: number;
  tail?: number;
  clip?: number;
  tool_calls?: string[];
}

/** The state overview (format rath.overview/1); see docs/protocol.md, "state". */
export interface Overview {
  format: string;
  id: string;
  tenant?: string;
  status: string;
  outcome?: string;
  workflow?: string;
  labels?: Record<string, string>;
  lineage?: { parent?: string; fork_seq?: number; fork_hash?: string; [k: string]: unknown };
  usage?: { total?: { in?: number; out?: number; calls?: number }; [k: string]: unknown };
  counts?: { events?: number; turns?: number; tool_calls?: number; [k: string]: number | Record<string, number> | undefined };
  seq: number;
  hash: string;
  last_id?: string;
  [k: string]: unknown;
}

/** The ledger's verify report (pkg/ledgerapi.Report). */
export interface Report {
  session: string;
  ok: boolean;
  head: number;
  head_hash?: string;
  head_sig?: string;
  key_id?: string;
  checked: number;
  signatures?: number;
  recorded_head?: number;
  fault?: { seq: number; session: string; stream_seq?: number; reason: string };
}

/** The JetStream ack of an inbox proposal: it is queued, not yet decided. */
export interface Queued {
  stream: string;
  seq: number;
  duplicate?: boolean;
}

/** Options of connect. */
export interface ConnectOptions {
  /** NATS server URL(s). */
  servers: string | string[];
  /** The credentials file: a Rath .nk seed file or a NATS user .creds file. */
  creds: string;
  /** The connection's name. */
  name?: string;
  /** Bounds one request in milliseconds (default 10 s). */
  timeoutMs?: number;
  /** How long transient failures are retried with the same event ID (default and maximum 2 min). */
  retryForMs?: number;
  /** The CloudEvents source of events the client builds (default "rath/client-ts"). */
  source?: string;
}

const contentStructured = "application/cloudevents+json";
const contentBatch = "application/cloudevents-batch+json";
const headerError = "Rath-Error";
const headerReceipts = "Rath-Receipts";
const retryHorizonMs = 2 * 60_000;
const enc = new TextEncoder();
const dec = new TextDecoder();

/**
 * connect reads the credentials file (a missing or broken one throws a
 * CredentialsError naming it, before any connection), connects with it and
 * sets the reply prefix a tenant's user must use, _INBOX.<tenant>.<user>.
 */
export async function connect(opts: ConnectOptions): Promise<Client> {
  const creds = readCredentials(opts.creds);
  const authenticator = creds.jwtFile ? credsAuthenticator(creds.jwtFile) : nkeyAuthenticator(enc.encode(creds.seed!));
  const nc = await natsConnect({
    servers: opts.servers,
    name: opts.name ?? "rath-client-ts",
    authenticator,
    ...(creds.inboxPrefix ? { inboxPrefix: creds.inboxPrefix } : {}),
  });
  return new Client(nc, creds, opts);
}

/** newID returns a UUIDv7: time-ordered, unique across the tenant's sessions. */
export function newID(): string {
  const b = randomBytes(16);
  const ms = BigInt(Date.now());
  for (let i = 0; i < 6; i++) b[i] = Number((ms >> BigInt(8 * (5 - i))) & 0xffn);
  b[6] = (b[6] & 0x0f) | 0x70;
  b[8] = (b[8] & 0x3f) | 0x80;
  const h = b.toString("hex");
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
}

/** Client talks to the session ledger as one principal. */
export class Client {
  /** The connection. */
  readonly nc: NatsConnection;
  /** Who the client asks as. */
  readonly principal: Principal;
  /** The credentials it connected with. */
  readonly creds: Credentials;
  private readonly timeoutMs: number;
  private readonly retryForMs: number;
  private readonly source: string;

  constructor(nc: NatsConnection, creds: Credentials, opts: Partial<ConnectOptions> = {}) {
    this.nc = nc;
    this.creds = creds;
    this.principal = creds.principal;
    this.timeoutMs = opts.timeoutMs ?? 10_000;
    this.retryForMs = Math.min(opts.retryForMs ?? retryHorizonMs, retryHorizonMs);
    this.source = opts.source ?? "rath/client-ts";
  }

  /** isService reports whether the client is one of Rath's services (tenant rath). */
  get isService(): boolean {
    return this.principal.tenant === serviceTenant;
  }

  /** close drains the connection. */
  async close(): Promise<void> {
    await this.nc.drain();
  }

  /** subject is the ledger's subject of op for the client's principal. */
  ledgerSubject(op: string): string {
    return `rath.ledger.${this.principal.tenant}.${this.principal.user}.${op}`;
  }

  /** inboxSubject is the client's inbox subject of a session ("new" for a start without an ID). */
  inboxSubject(session: string | undefined): string {
    return `rath.inbox.${this.principal.tenant}.${this.principal.user}.${session || "new"}`;
  }

  /**
   * event builds a proposal of a catalog kind for a session (an empty session
   * only on a start: the ledger chooses the ID), with its schema URN.
   */
  event<T extends EventType>(session: string | undefined, type: T, data: EventData[T], opts: EventOptions = {}): CloudEvent<EventData[T]> {
    const urn = schemaURNs[type];
    if (!urn) throw new RathError(Code.UnknownType, `unknown event type ${JSON.stringify(type)} (see docs/protocol.md for the catalog)`, "new event");
    const ev: CloudEvent<EventData[T]> = {
      specversion: "1.0",
      id: opts.id ?? newID(),
      source: opts.source ?? this.source,
      type,
      time: (opts.time ?? new Date()).toISOString(),
      datacontenttype: "application/json",
      dataschema: urn,
      data,
    };
    if (session) ev.subject = session;
    if (opts.expectedSeq !== undefined) ev.rathexpectedseq = opts.expectedSeq;
    if (opts.causationID) ev.causationid = opts.causationID;
    if (opts.correlationID) ev.correlationid = opts.correlationID;
    return ev;
  }

  /** start starts a session; an empty id lets the ledger choose one (the ack names it). */
  start(id: string | undefined, data: SessionStarted, opts?: EventOptions): Promise<Ack> {
    return this.append(this.event(id, "rath.session.started", data, opts));
  }

  /** emit builds an event of a catalog kind for a session and appends it. */
  emit<T extends EventType>(session: string, type: T, data: EventData[T], opts?: EventOptions): Promise<Ack> {
    return this.append(this.event(session, type, data, opts));
  }

  /**
   * append proposes an event and waits for the ledger's decision. Transient
   * failures are retried with the same event ID, so it is stored at most
   * once; a refusal throws a RathError with the ledger's code.
   */
  async append(ev: CloudEvent): Promise<Ack> {
    const h = natsHeaders();
    h.set("Content-Type", contentStructured);
    return (await this.call(this.ledgerSubject("append"), enc.encode(JSON.stringify(ev)), h, `append ${ev.id} to session ${ev.subject ?? "(new)"}`)) as Ack;
  }

  /**
   * appendBatch proposes up to 1000 events in one request and returns each
   * one's decision, in order. Results refused transiently are proposed again
   * with the same IDs until the retry horizon. The acks are compact receipts:
   * an event signed in a signature record carries the record in ack.record.
   */
  async appendBatch(evs: CloudEvent[]): Promise<BatchResult[]> {
    if (evs.length > 1000) throw new RathError(Code.TooLarge, `${evs.length} events in one batch, at most 1000`, "append batch");
    const out: BatchResult[] = new Array(evs.length);
    let todo = evs.map((_, i) => i);
    const deadline = Date.now() + this.retryForMs;
    let backoff = 20;
    for (;;) {
      const h = natsHeaders();
      h.set("Content-Type", contentBatch);
      h.set(headerReceipts, "record");
      const reply = (await this.call(this.ledgerSubject("batch"), enc.encode(JSON.stringify(todo.map((i) => evs[i]))), h, `append batch of ${todo.length}`)) as {
        results: { ack?: Ack; error?: { code: string; message: string } }[];
        records?: Record<string, SigRecord>;
      };
      if (!Array.isArray(reply.results) || reply.results.length !== todo.length) {
        throw new Error(`append batch: ${reply.results?.length} results for ${todo.length} events`);
      }
      const again: number[] = [];
      reply.results.forEach((r, j) => {
        const i = todo[j];
        if (r.ack) {
          const ack = r.ack;
          if (ack.sig && isRecordRef(ack.sig)) {
            const rec = reply.records?.[ack.sig.split(":")[1]];
            if (!rec) {
              out[i] = { error: new RathError(Code.Malformed, `the reply lacks the signature record ${ack.sig.split(":")[1]} of its ack`, `append ${evs[i].id}`) };
              return;
            }
            ack.record = rec;
          }
          out[i] = { ack };
        } else if (r.error) {
          const err = new RathError(r.error.code, r.error.message, `append ${evs[i].id}`);
          out[i] = { error: err };
          if (err.transient) again.push(i);
        } else {
          out[i] = { error: new RathError(Code.Malformed, "the ledger's reply has neither ack nor error", `append ${evs[i].id}`) };
        }
      });
      if (again.length === 0 || Date.now() + backoff > deadline) return out;
      await sleep(backoff);
      backoff = Math.min(backoff * 2, 2000);
      todo = again;
    }
  }

  /**
   * appendAtomic proposes up to 1000 events of one session to be stored all
   * or none, in order; any refusal throws, naming the event.
   */
  async appendAtomic(evs: CloudEvent[]): Promise<Ack[]> {
    const h = natsHeaders();
    h.set("Content-Type", contentBatch);
    const reply = (await this.call(this.ledgerSubject("atomic"), enc.encode(JSON.stringify(evs)), h, `append atomically ${evs.length} events`)) as { results: { ack?: Ack }[] };
    if (!Array.isArray(reply.results) || reply.results.length !== evs.length || reply.results.some((r) => !r.ack)) {
      throw new Error(`append atomically: the ledger answered ${reply.results?.length} acks for ${evs.length} events`);
    }
    return reply.results.map((r) => r.ack!);
  }

  /**
   * propose publishes an event to the client's inbox and returns once
   * JetStream holds it: the ledger decides later, even if it is down now.
   * The outcome is not sent back: watch the session, or read rejections.
   */
  async propose(ev: CloudEvent): Promise<Queued> {
    const h = natsHeaders();
    h.set("Content-Type", contentStructured);
    // The inbox deduplicates by message ID, scoped by principal.
    h.set("Nats-Msg-Id", `${this.principal.tenant}/${this.principal.user}/${ev.id}`);
    const subject = this.inboxSubject(ev.subject);
    const what = `propose ${ev.id} to session ${ev.subject ?? "(new)"}`;
    const reply = (await this.call(subject, enc.encode(JSON.stringify(ev)), h, what, true)) as Queued & { error?: { code?: number; err_code?: number; description?: string } };
    if (reply.error) throw new RathError(Code.Unavailable, `JetStream: ${reply.error.description ?? JSON.stringify(reply.error)}`, what);
    return reply;
  }

  /** state returns the bounded state overview of a session (at opts.at; 0: the head). */
  async state(session: string, opts: StateOptions = {}): Promise<Overview> {
    return (await this.request("state", { session, ...opts }, `state of ${session}`)) as Overview;
  }

  /**
   * wholeState returns the whole folded state of a session (pkg/session.State
   * as JSON), joining its parts and checking their SHA-256.
   */
  async wholeState(session: string, at = 0): Promise<Record<string, unknown>> {
    const { createHash } = await import("node:crypto");
    let req: { session: string; at: number; whole: true; part: number } = { session, at, whole: true, part: 0 };
    const parts: Buffer[] = [];
    let sum = "";
    for (;;) {
      const p = (await this.request("state", req, `state of ${session} at ${at}`)) as { seq: number; part: number; parts: number; sum: string; data: string };
      if (p.part !== req.part || p.part >= p.parts || (req.at !== 0 && p.seq !== req.at) || (sum !== "" && p.sum !== sum)) {
        throw new Error(`state of ${session} at ${at}: asked for part ${req.part} at ${req.at}, the ledger answered part ${p.part} of ${p.parts} at ${p.seq}`);
      }
      parts.push(Buffer.from(p.data, "base64"));
      sum = p.sum;
      if (p.part + 1 === p.parts) break;
      req = { session, at: p.seq, whole: true, part: p.part + 1 };
    }
    const body = Buffer.concat(parts);
    if (createHash("sha256").update(body).digest("hex") !== sum) throw new Error(`state of ${session} at ${at}: its parts do not join into the state the ledger summed`);
    return JSON.parse(body.toString("utf8"));
  }

  /**
   * log returns the events of a session's logical log (its fork ancestry
   * included) that r selects, asking for as many pages as that takes.
   */
  async log(session: string, r: Range = {}): Promise<StoredEvent[]> {
    const out: StoredEvent[] = [];
    let from = r.from ?? 0;
    for (;;) {
      let limit = 1000;
      if (r.limit && r.limit > 0) limit = Math.min(limit, r.limit - out.length);
      const page = (await this.request("log", { session, from, to: r.to ?? 0, limit }, `log of ${session}`)) as { events: StoredEvent[]; more?: boolean };
      if (!Array.isArray(page.events)) throw new Error(`log of ${session}: the reply has no events`);
      out.push(...page.events);
      if (!page.more || page.events.length === 0 || (r.limit && out.length >= r.limit)) return out;
      from = page.events[page.events.length - 1].rathseq + 1;
    }
  }

  /** fork branches a session after req.at (0: its head); the ack is the child's fork event. */
  async fork(req: ForkRequest): Promise<Ack> {
    const body = { ...req, event_id: req.event_id ?? newID(), source: req.source ?? this.source };
    return (await this.request("fork", body, `fork ${req.parent} at ${req.at ?? 0}`)) as Ack;
  }

  /** merge takes req.source's events the target does not hold into req.target. */
  async merge(req: MergeRequest): Promise<Ack> {
    const body = { ...req, event_id: req.event_id ?? newID(), event_source: req.event_source ?? this.source };
    return (await this.request("merge", body, `merge ${req.source} into ${req.target}`)) as Ack;
  }

  /** verify asks the ledger to recompute a session's chain and check its signatures. */
  async verify(session: string): Promise<Report> {
    return (await this.request("verify", { session }, `verify ${session}`)) as Report;
  }

  /** lineage returns the lineage graph around a session. */
  async lineage(session: string): Promise<Record<string, unknown>> {
    return (await this.request("lineage", { session }, `lineage of ${session}`)) as Record<string, unknown>;
  }

  /**
   * keys returns the keys the ledger signs with and accepts. Trusting them
   * because the ledger says so trusts the ledger: pin the key file
   * (Keyring.fromPEM) where it matters.
   */
  async keys(): Promise<Keys> {
    return (await this.request("keys", {}, "ledger keys")) as Keys;
  }

  /** keyring returns the ledger's keys as a Keyring, each key's ID checked. */
  async keyring(): Promise<Keyring> {
    return Keyring.fromKeys(await this.keys());
  }

  /**
   * putBlob stores bytes by content through the ledger (a workflow bundle, a
   * workspace seed) and returns their reference, sha256:<hex>. They must fit
   * in one message.
   */
  async putBlob(data: Uint8Array): Promise<string> {
    const r = (await this.call(this.ledgerSubject("putblob"), data, undefined, `put blob of ${data.length} bytes`)) as { ref?: string };
    if (typeof r.ref !== "string" || !/^sha256:[0-9a-f]{64}$/.test(r.ref)) throw new Error(`put blob of ${data.length} bytes: the reply names no reference`);
    return r.ref;
  }

  /** watch follows a session; see watch.ts. */
  watch(session: string, onEvent: (ev: StoredEvent) => void | boolean | Promise<void | boolean>, opts: WatchOptions = {}): Promise<void> {
    return watch(this, session, onEvent, opts);
  }

  /** request sends a JSON request to the ledger's op and returns the decoded reply. */
  async request(op: string, body: unknown, what: string): Promise<unknown> {
    return this.call(this.ledgerSubject(op), enc.encode(JSON.stringify(body)), undefined, what);
  }

  /**
   * call sends a request and decodes the reply, retrying transient failures
   * (no ledger listening, timeouts, conflict, unavailable) with backoff up
   * to the retry horizon: requests are idempotent, proposals carry their
   * event ID. An error reply (Rath-Error) is thrown as a RathError; raw
   * replies (a JetStream ack) are returned decoded as they are.
   */
  private async call(subject: string, payload: Uint8Array, h: MsgHdrs | undefined, what: string, raw = false): Promise<unknown> {
    const deadline = Date.now() + this.retryForMs;
    let backoff = 20;
    for (;;) {
      let err: Error;
      try {
        const m = await this.nc.request(subject, payload, { timeout: this.timeoutMs, ...(h ? { headers: h } : {}) });
        const code = raw ? undefined : m.headers?.get(headerError);
        let reply: unknown;
        try {
          reply = JSON.parse(dec.decode(m.data));
        } catch (e) {
          if (code) throw new RathError(code, dec.decode(m.data), what);
          throw new Error(`${what}: the reply on ${subject} is not JSON: ${(e as Error).message}`);
        }
        if (!code) return reply;
        const body = (reply as { error?: { code?: string; message?: string } }).error;
        err = new RathError(body?.code ?? code, body?.message ?? dec.decode(m.data), what);
        if (!(err as RathError).transient) throw err;
      } catch (e) {
        if (e instanceof RathError && !e.transient) throw e;
        if (!(e instanceof RathError) && !transport(e)) throw e instanceof Error && e.message.startsWith(what) ? e : new Error(`${what}: ${(e as Error).message}`, { cause: e });
        err = e as Error;
      }
      if (Date.now() + backoff > deadline) throw err instanceof RathError ? err : new RathError(Code.Unavailable, `no answer on ${subject}: ${err.message}`, what);
      await sleep(backoff);
      backoff = Math.min(backoff * 2, 2000);
    }
  }
}

/** transport reports whether a NATS request failed for want of an answer. */
function transport(e: unknown): boolean {
  const name = (e as Error)?.name ?? "";
  return name === "TimeoutError" || name === "NoRespondersError" || (name === "RequestError" && /no responders|timeout/i.test((e as Error).message));
}

function sleep(ms: number): Promise<void> {
  return new Promise((res) => setTimeout(res, ms));
}

/**
 * verifyReceipt checks an ack offline, as rath verify --receipt does: its
 * signature (a compact batch receipt expanded with its record first) is a
 * trusted key's, over its session, sequence and chain hash. It throws a
 * SignatureError naming what does not hold.
 */
export function verifyReceipt(ack: Ack, ring: Keyring): void {
  let sig = ack.sig;
  if (sig && isRecordRef(sig)) {
    if (!ack.record) throw new Error(`receipt of ${ack.session} at ${ack.seq}: its sig names a signature record the receipt does not carry`);
    sig = expandSig(sig, ack.record);
  }
  ring.verify(ack.session, ack.seq, ack.hash, sig);
}
