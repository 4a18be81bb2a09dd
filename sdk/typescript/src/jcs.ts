// The chain hash (docs/protocol.md, "The hash chain"; pkg/events/chain.go):
// the lowercase hex SHA-256 of the RFC 8785 (JCS) canonical JSON of a stored
// event without its rathhash and rathsig members.

import { createHash } from "node:crypto";

/**
 * canonicalize returns the RFC 8785 canonical JSON of a value read by
 * JSON.parse. JSON.stringify writes numbers (ECMAScript Number::toString)
 * and strings as RFC 8785 does; members are sorted by UTF-16 code units,
 * which is what the default sort compares. Values JSON cannot hold (NaN,
 * Infinity, undefined, functions) are refused, as Go's JCS refuses them.
 */
export function canonicalize(v: unknown): string {
  if (v === null || typeof v === "boolean") return JSON.stringify(v);
  if (typeof v === "string") return str(v);
  if (typeof v === "number") {
    if (!Number.isFinite(v)) throw new Error(`canonical JSON: ${v} is not a JSON number`);
    return JSON.stringify(v);
  }
  if (Array.isArray(v)) return `[${v.map(canonicalize).join(",")}]`;
  if (typeof v === "object") {
    const o = v as Record<string, unknown>;
    return `{${Object.keys(o)
      .sort()
      .map((k) => `${str(k)}:${canonicalize(o[k])}`)
      .join(",")}}`;
  }
  throw new Error(`canonical JSON: a ${typeof v} is not JSON`);
}


/** loneSurrogate matches a UTF-16 surrogate without its pair. */
const loneSurrogate = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

/**
 * str writes a string as RFC 8785 does. A string holding a lone surrogate
 * is not Unicode text, cannot be canonical (the ledger refuses such
 * proposals), and is refused.
 */
function str(s: string): string {
  if (loneSurrogate.test(s)) throw new Error("canonical JSON: a string holds a lone UTF-16 surrogate");
  return JSON.stringify(s);
}

/**
 * chainHash recomputes the rathhash of a stored event (parsed JSON):
 * SHA-256 of the canonical form of the event without rathhash and rathsig.
 */
export function chainHash(stored: Record<string, unknown>): string {
  const { rathhash: _h, rathsig: _s, ...rest } = stored;
  return createHash("sha256").update(canonicalize(rest), "utf8").digest("hex");
}
