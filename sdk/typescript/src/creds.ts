// Rath credentials files (internal/auth/creds.go, internal/auth/jwt.go): an
// nkey seed file whose "# rath-identity:" line names its role and principal
// (rath up's <data>/creds/<role>.nk, tenants/<tenant>/<user>.nk), or a NATS
// user credentials file (.creds: a user JWT and its seed) whose JWT names
// the principal with a tag rath-principal:<tenant>/<user>.

import { readFileSync, statSync } from "node:fs";
import { basename } from "node:path";

import { nkeys } from "@nats-io/transport-node";

import { CredentialsError } from "./errors.js";

/** A principal: who a connection acts as, <tenant>/<user>. */
export interface Principal {
  tenant: string;
  user: string;
}

/** The tenant of Rath's own services and operators. */
export const serviceTenant = "rath";

/** A credentials file read and checked. */
export interface Credentials {
  /** The file's path. */
  path: string;
  /** The role it names: client for a tenant's user, else a service or admin. */
  role: string;
  /** The principal it acts as. */
  principal: Principal;
  /** The nkey seed (an nkey seed file), or undefined for a JWT file. */
  seed?: string;
  /** The whole file, for a NATS user JWT credentials file. */
  jwtFile?: Uint8Array;
  /**
   * The reply prefix the connection must use: _INBOX.<tenant>.<user> for
   * a tenant's user (the only one it may subscribe to); undefined for a
   * service, which keeps the default.
   */
  inboxPrefix?: string;
}

const nameRE = /^[a-z0-9][a-z0-9_-]{0,31}$/;
const roles = new Set(["ledger", "selector", "agent-worker", "tool-runner", "memory-svc", "admin", "client"]);
const identityLine = "# rath-identity: ";
const jwtBegin = "-----BEGIN NATS USER JWT-----";

/** maxCredsBytes bounds what is read: a credentials file is a few KiB. */
const maxCredsBytes = 64 << 10;

/** parsePrincipal reads "<tenant>/<user>", checking both names. */
export function parsePrincipal(s: string): Principal {
  const parts = s.split("/");
  if (parts.length !== 2 || !nameRE.test(parts[0]) || !nameRE.test(parts[1])) {
    throw new Error(`principal ${JSON.stringify(s)}: want <tenant>/<user>, each 1-32 characters of a-z 0-9 _ - starting with a letter or digit`);
  }
  return { tenant: parts[0], user: parts[1] };
}

/**
 * readCredentials reads and checks a credentials file before any
 * connection, so a missing or broken one is reported by name
 * (CredentialsError).
 */
export function readCredentials(path: string): Credentials {
  let size: number;
  try {
    size = statSync(path).size;
  } catch (err) {
    const e = err as NodeJS.ErrnoException;
    if (e.code === "ENOENT") throw new CredentialsError(path, "the file does not exist (rath up writes .rath/data/creds/client.nk; rath creds add makes a tenant's user)", true);
    throw new CredentialsError(path, e.message);
  }
  if (size > maxCredsBytes) throw new CredentialsError(path, `${size} bytes, above the ${maxCredsBytes} a credentials file can be`);
  let text: string;
  try {
    text = readFileSync(path, "utf8");
  } catch (err) {
    throw new CredentialsError(path, (err as Error).message);
  }
  return text.includes(jwtBegin) ? readJWTFile(path, text) : readSeedFile(path, text);
}

function readSeedFile(path: string, text: string): Credentials {
  const seeds = text.split(/\r?\n/).map((l) => l.trim()).filter((l) => /^SU[A-Z2-7]+$/.test(l));
  if (seeds.length !== 1) throw new CredentialsError(path, seeds.length === 0 ? "no user nkey seed (a line starting SU)" : "more than one user nkey seed");
  const seed = seeds[0];
  try {
    nkeys.fromSeed(new TextEncoder().encode(seed));
  } catch (err) {
    throw new CredentialsError(path, `the user nkey seed: ${(err as Error).message}`);
  }
  let role: string;
  let principal: Principal;
  const line = text.split(/\r?\n/).find((l) => l.startsWith(identityLine));
  if (line !== undefined) {
    const fields = line.slice(identityLine.length).trim().split(/\s+/);
    if (fields.length !== 2) throw new CredentialsError(path, `want "${identityLine}<role> <tenant>/<user>"`);
    role = fields[0];
    if (!roles.has(role)) throw new CredentialsError(path, `unknown role ${JSON.stringify(role)}`);
    try {
      principal = parsePrincipal(fields[1]);
    } catch (err) {
      throw new CredentialsError(path, (err as Error).message);
    }
    if ((role === "client") === (principal.tenant === serviceTenant)) {
      throw new CredentialsError(path, `role ${role} cannot act as ${principal.tenant}/${principal.user}`);
    }
  } else {
    // An earlier Rath's file: the role is its name.
    role = basename(path).replace(/\.(nk|creds)$/, "");
    if (!roles.has(role)) throw new CredentialsError(path, `no "${identityLine.trim()}" line, and the file name names no role`);
    principal = role === "client" ? { tenant: "default", user: "client" } : { tenant: serviceTenant, user: role };
  }
  return withInbox({ path, role, principal, seed });
}

function readJWTFile(path: string, text: string): Credentials {
  const m = text.match(/-----BEGIN NATS USER JWT-----\s*\r?\n\s*([A-Za-z0-9_.=-]+)\s*\r?\n\s*-*END NATS USER JWT-*/);
  if (!m) throw new CredentialsError(path, "the user JWT: no JWT between its BEGIN and END lines");
  const parts = m[1].split(".");
  let claims: { sub?: string; exp?: number; nbf?: number; name?: string; nats?: { tags?: string[] } };
  try {
    if (parts.length !== 3) throw new Error("not three dot-separated parts");
    claims = JSON.parse(Buffer.from(parts[1], "base64url").toString("utf8"));
    if (claims === null || typeof claims !== "object") throw new Error("its claims are not an object");
  } catch (err) {
    throw new CredentialsError(path, `the user JWT does not decode: ${(err as Error).message}`);
  }
  const now = Math.floor(Date.now() / 1000);
  if (claims.exp && now >= claims.exp) throw new CredentialsError(path, `the user JWT of ${claims.name ?? claims.sub} expired at ${new Date(claims.exp * 1000).toISOString()}: mint a new one`);
  if (claims.nbf && now < claims.nbf) throw new CredentialsError(path, `the user JWT of ${claims.name ?? claims.sub} is not valid before ${new Date(claims.nbf * 1000).toISOString()}`);
  const seeds = text.split(/\r?\n/).map((l) => l.trim()).filter((l) => /^SU[A-Z2-7]+$/.test(l));
  if (seeds.length !== 1) throw new CredentialsError(path, "the user nkey seed: want one line starting SU");
  let pub: string;
  try {
    pub = nkeys.fromSeed(new TextEncoder().encode(seeds[0])).getPublicKey();
  } catch (err) {
    throw new CredentialsError(path, `the user nkey seed: ${(err as Error).message}`);
  }
  if (pub !== claims.sub) throw new CredentialsError(path, `the seed is of user ${pub}, the JWT is of user ${claims.sub}: the file pairs a JWT with another user's seed`);
  const named = (claims.nats?.tags ?? []).filter((t) => typeof t === "string" && t.startsWith("rath-principal:")).map((t) => t.slice("rath-principal:".length));
  if (named.length !== 1) {
    throw new CredentialsError(path, named.length === 0 ? "the user JWT names no Rath principal: tag it rath-principal:<tenant>/<user>" : `the user JWT names ${named.length} Rath principals: keep one rath-principal tag`);
  }
  let principal: Principal;
  try {
    principal = parsePrincipal(named[0]);
  } catch (err) {
    throw new CredentialsError(path, `the rath-principal tag: ${(err as Error).message}`);
  }
  let role = "client";
  if (principal.tenant === serviceTenant) {
    role = principal.user;
    if (!roles.has(role) || role === "client") throw new CredentialsError(path, `the rath-principal tag names ${named[0]}: a principal of tenant rath must name a service role or admin`);
  }
  return withInbox({ path, role, principal, jwtFile: new TextEncoder().encode(text) });
}

function withInbox(c: Credentials): Credentials {
  if (c.role === "client") c.inboxPrefix = `_INBOX.${c.principal.tenant}.${c.principal.user}`;
  return c;
}
