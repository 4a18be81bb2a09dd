// The ledger's signatures (docs/protocol.md, "Signatures"; pkg/events/sign.go,
// group.go, record.go): ed25519 over "rath.event.v1\n<session>\n<seq>\n<hash>",
// alone, in a Merkle group (RFC 9162), or in a signature record a batch's
// events refer to.

import { createHash, createPublicKey, verify as edVerify, type KeyObject } from "node:crypto";

/** A public key of the ledger, as the keys operation answers it. */
export interface LedgerKey {
  /** The key ID: the first 16 hex digits of the SHA-256 of the raw key. */
  id: string;
  /** The raw 32-byte ed25519 key in unpadded base64url. */
  public_key: string;
  /** The key as PKIX PEM. */
  pem?: string;
}

/** The keys operation's reply. */
export interface Keys {
  /** The ID of the key that signs new events. */
  current: string;
  keys: LedgerKey[];
}

/** SignatureError is a signature that does not hold, naming why. */
export class SignatureError extends Error {
  /** True when the signature names a record it must be expanded with first. */
  readonly detached: boolean;
  constructor(message: string, detached = false) {
    super(message);
    this.name = "SignatureError";
    this.detached = detached;
  }
}

const b64url = /^[A-Za-z0-9_-]*$/;

function decode64(s: string): Buffer | undefined {
  if (!b64url.test(s)) return undefined;
  const b = Buffer.from(s, "base64url");
  // One spelling per value: what decodes must encode back to it.
  return b.toString("base64url") === s ? b : undefined;
}

/** keyID returns the ID of a raw ed25519 public key. */
export function keyID(raw: Uint8Array): string {
  return createHash("sha256").update(raw).digest("hex").slice(0, 16);
}

/**
 * Keyring is the set of ledger keys a verifier trusts, by key ID. Build it
 * from the ledger's keys reply (which trusts the ledger) or, better, from a
 * pinned public key file (<data>/keys/ledger.pub).
 */
export class Keyring {
  private readonly keys = new Map<string, KeyObject>();

  /** fromKeys checks each key's ID against its bytes. */
  static fromKeys(k: Keys): Keyring {
    const r = new Keyring();
    for (const key of k.keys) {
      const raw = decode64(key.public_key);
      if (!raw || raw.length !== 32) throw new SignatureError(`key ${key.id}: not a 32-byte ed25519 key in base64url`);
      if (keyID(raw) !== key.id) throw new SignatureError(`key ${key.id}: its bytes have ID ${keyID(raw)}`);
      r.keys.set(key.id, createPublicKey({ key: { kty: "OKP", crv: "Ed25519", x: key.public_key }, format: "jwk" }));
    }
    return r;
  }

  /** fromPEM trusts the ed25519 public keys of PKIX PEM files' contents. */
  static fromPEM(...pems: string[]): Keyring {
    const r = new Keyring();
    for (const pem of pems) {
      const k = createPublicKey(pem);
      if (k.asymmetricKeyType !== "ed25519") throw new SignatureError(`a ${k.asymmetricKeyType} key, not ed25519`);
      const x = k.export({ format: "jwk" }).x as string;
      r.keys.set(keyID(Buffer.from(x, "base64url")), k);
    }
    return r;
  }

  /** ids lists the trusted key IDs. */
  ids(): string[] {
    return [...this.keys.keys()].sort();
  }

  /**
   * verify checks that sig (a rathsig, or an ack's sig) is a trusted key's
   * signature of the event at seq of session with the given chain hash. A
   * record reference is refused as detached: expand it with its record
   * first (expandSig), or read the event from the log, which serves it
   * expanded.
   */
  verify(session: string, seq: number, hash: string, sig: string | undefined): void {
    if (!sig) throw new SignatureError("not signed");
    const [id, ...parts] = sig.split(":");
    const key = this.keys.get(id);
    if (!key) throw new SignatureError(`signed by unknown key ${JSON.stringify(id)}`);
    const msg = eventMessage(session, seq, hash);
    if (parts.length === 3) throw new SignatureError("a reference to a signature record: expand it with its record first", true);
    if (parts.length === 5) return verifyGroup(key, id, parts, msg, session, seq, hash);
    if (parts.length !== 1) throw new SignatureError("not a single or a group signature");
    const raw = decode64(parts[0]);
    if (!raw || raw.length !== 64) throw new SignatureError("not an ed25519 signature in base64url");
    if (!edVerify(null, msg, key, raw)) throw new SignatureError(`key ${id} did not sign ${session} at ${seq} with hash ${hash.slice(0, 12)}`);
  }
}

function eventMessage(session: string, seq: number, hash: string): Buffer {
  return Buffer.from(`rath.event.v1\n${session}\n${seq}\n${hash}`, "utf8");
}

function leafHash(nonce: Buffer, msg: Buffer): Buffer {
  return createHash("sha256").update(Buffer.from([0])).update(nonce).update(msg).digest();
}

function node(a: Buffer, b: Buffer): Buffer {
  return createHash("sha256").update(Buffer.from([1])).update(a).update(b).digest();
}

/** split is the largest power of two smaller than n (n >= 2). */
function split(n: number): number {
  let k = 1;
  while (k * 2 < n) k *= 2;
  return k;
}

/** mth is RFC 9162's Merkle tree hash of leaves (at least one). */
function mth(leaves: Buffer[]): Buffer {
  if (leaves.length === 1) return leaves[0];
  const k = split(leaves.length);
  return node(mth(leaves.slice(0, k)), mth(leaves.slice(k)));
}

/** path is RFC 9162's inclusion path of leaf m, leaf level first. */
function path(m: number, leaves: Buffer[]): Buffer[] {
  if (leaves.length === 1) return [];
  const k = split(leaves.length);
  return m < k ? [...path(m, leaves.slice(0, k)), mth(leaves.slice(k))] : [...path(m - k, leaves.slice(k)), mth(leaves.slice(0, k))];
}

/** rootFromPath is RFC 9162 section 2.1.3.2; undefined if the path does not fit. */
function rootFromPath(leaf: Buffer, index: number, size: number, p: Buffer[]): Buffer | undefined {
  if (index >= size) return undefined;
  let fn = index;
  let sn = size - 1;
  let r = leaf;
  for (const c of p) {
    if (sn === 0) return undefined;
    if (fn % 2 === 1 || fn === sn) {
      r = node(c, r);
      while (fn % 2 === 0 && fn !== 0) {
        fn = Math.floor(fn / 2);
        sn = Math.floor(sn / 2);
      }
    } else {
      r = node(r, c);
    }
    fn = Math.floor(fn / 2);
    sn = Math.floor(sn / 2);
  }
  return sn === 0 ? r : undefined;
}

const decimal = /^(0|[1-9][0-9]{0,2})$/;
const maxRecord = 64;

function verifyGroup(key: KeyObject, id: string, parts: string[], msg: Buffer, session: string, seq: number, hash: string): void {
  const [sigS, indexS, sizeS, nonceS, pathS] = parts;
  const sig = decode64(sigS);
  const nonce = decode64(nonceS);
  const raw = decode64(pathS);
  if (!sig || sig.length !== 64 || !decimal.test(indexS) || !decimal.test(sizeS) || !nonce || nonce.length !== 16 || !raw || raw.length % 32 !== 0) {
    throw new SignatureError("malformed group signature");
  }
  const index = Number(indexS);
  const size = Number(sizeS);
  if (size < 2 || size > maxRecord) throw new SignatureError("malformed group signature");
  const p: Buffer[] = [];
  for (let i = 0; i < raw.length; i += 32) p.push(raw.subarray(i, i + 32));
  const root = rootFromPath(leafHash(nonce, msg), index, size, p);
  if (!root) throw new SignatureError(`the inclusion path does not fit leaf ${index} of ${size}`);
  const rootMsg = Buffer.from(`rath.root.v1\n${size}\n${root.toString("hex")}`, "utf8");
  if (!edVerify(null, rootMsg, key, sig)) throw new SignatureError(`key ${id} did not sign a group holding ${session} at ${seq} with hash ${hash.slice(0, 12)}`);
}

/** A signature record: the leaves of one batch round and their signature. */
export interface SigRecord {
  key: string;
  sig: string;
  leaves: string[];
}

/** isRecordRef reports whether a rathsig refers to a signature record. */
export function isRecordRef(sig: string): boolean {
  return sig.split(":").length === 4;
}

/**
 * expandSig turns a record reference (<key>:<record ID>:<index>:<nonce>)
 * into the inline group signature it stands for, checking that the record's
 * leaves have the root its ID names and that it is by the reference's key.
 * The signature itself is checked by Keyring.verify on the result.
 */
export function expandSig(ref: string, record: SigRecord): string {
  const [key, recID, indexS, nonce] = ref.split(":");
  if (ref.split(":").length !== 4 || !decimal.test(indexS) || !decode64(nonce)) throw new SignatureError(`not a record reference: ${ref}`);
  if (!record || typeof record !== "object" || !Array.isArray(record.leaves)) throw new SignatureError(`signature record ${recID} does not parse`);
  const n = record.leaves.length;
  if (n < 2 || n > maxRecord) throw new SignatureError(`signature record ${recID} holds ${n} leaves, want 2..${maxRecord}`);
  const leaves = record.leaves.map((l, i) => {
    const b = typeof l === "string" ? decode64(l) : undefined;
    if (!b || b.length !== 32) throw new SignatureError(`signature record ${recID}: leaf ${i} is not 32 bytes in base64url`);
    return b;
  });
  const root = mth(leaves);
  if (root.subarray(0, 12).toString("base64url") !== recID) throw new SignatureError(`the record has root ${root.subarray(0, 12).toString("base64url")}, the reference names ${recID}`);
  if (record.key !== key) throw new SignatureError(`signature record ${recID} is by key ${record.key}, the reference names ${key}`);
  const index = Number(indexS);
  if (index >= n) throw new SignatureError(`signature record ${recID} holds ${n} leaves, the reference names leaf ${index}`);
  const p = Buffer.concat(path(index, leaves)).toString("base64url");
  return `${key}:${record.sig}:${index}:${n}:${nonce}:${p}`;
}
