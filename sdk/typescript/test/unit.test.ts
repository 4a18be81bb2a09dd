// Tests that need no runtime: credentials files (hostile ones above all),
// canonical JSON, signatures, and the generated event types.

import assert from "node:assert/strict";
import { generateKeyPairSync, sign } from "node:crypto";
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { test } from "node:test";
import { fileURLToPath, pathToFileURL } from "node:url";

import { nkeys } from "@nats-io/transport-node";

import { canonicalize, chainHash, CredentialsError, eventTypes, keyID, Keyring, readCredentials, schemaURNs, SignatureError } from "../src/index.js";

const pkg = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..");
const dir = mkdtempSync(join(tmpdir(), "rath-ts-"));
const seed = new TextDecoder().decode(nkeys.createUser().getSeed());

function file(name: string, text: string): string {
  const p = join(dir, name);
  writeFileSync(p, text);
  return p;
}

function seedFile(header: string): string {
  return `# Rath NATS identity\n${header}\n-----BEGIN USER NKEY SEED-----\n${seed}\n------END USER NKEY SEED------\n`;
}

test("a Rath .nk file gives its principal and the reply prefix", () => {
  const c = readCredentials(file("alice.nk", seedFile("# rath-identity: client acme/alice")));
  assert.deepEqual(c.principal, { tenant: "acme", user: "alice" });
  assert.equal(c.role, "client");
  assert.equal(c.inboxPrefix, "_INBOX.acme.alice");
  assert.equal(c.seed, seed);
  const svc = readCredentials(file("admin.nk", seedFile("# rath-identity: admin rath/admin")));
  assert.deepEqual(svc.principal, { tenant: "rath", user: "admin" });
  assert.equal(svc.inboxPrefix, undefined, "a service keeps the default prefix");
});

test("hostile credentials files are refused, naming the file and the problem", () => {
  const missing = join(dir, "nope.nk");
  assert.throws(() => readCredentials(missing), (e: unknown) => e instanceof CredentialsError && e.missing && e.message.includes(missing));
  const cases: [string, string, RegExp][] = [
    ["garbage.nk", "not a credentials file at all\n", /no user nkey seed/],
    ["empty.nk", "", /no user nkey seed/],
    ["badseed.nk", seedFile("# rath-identity: client acme/alice").replace(seed, `SU${"A".repeat(56)}`), /seed/],
    ["twoseeds.nk", seedFile("# rath-identity: client acme/alice") + seed + "\n", /more than one/],
    ["noheader-unknown.nk", seedFile(""), /names no role/],
    ["badline.nk", seedFile("# rath-identity: client"), /want/],
    ["badrole.nk", seedFile("# rath-identity: wizard acme/alice"), /unknown role/],
    ["badname.nk", seedFile("# rath-identity: client Acme/al.ice"), /principal/],
    ["escalate.nk", seedFile("# rath-identity: client rath/ledger"), /cannot act as/],
    ["svc-as-tenant.nk", seedFile("# rath-identity: ledger acme/alice"), /cannot act as/],
    ["jwt-garbage.creds", `-----BEGIN NATS USER JWT-----\nnot.a.jwt\n------END NATS USER JWT------\n${seed}\n`, /does not decode/],
    ["big.nk", "#".repeat(70 << 10), /above/],
  ];
  for (const [name, text, want] of cases) {
    const p = file(name, text);
    assert.throws(() => readCredentials(p), (e: unknown) => e instanceof CredentialsError && !e.missing && e.message.includes(p) && want.test(e.message), name);
  }
});

test("a NATS user .creds file names its principal with a rath-principal tag", () => {
  const user = nkeys.createUser();
  const jwtOf = (claims: object) => `e30.${Buffer.from(JSON.stringify(claims)).toString("base64url")}.c2ln`;
  const credsFile = (jwt: string, s: string) => `-----BEGIN NATS USER JWT-----\n${jwt}\n------END NATS USER JWT------\n\n-----BEGIN USER NKEY SEED-----\n${s}\n------END USER NKEY SEED------\n`;
  const useed = new TextDecoder().decode(user.getSeed());
  const ok = readCredentials(file("ok.creds", credsFile(jwtOf({ sub: user.getPublicKey(), nats: { tags: ["rath-principal:acme/bob"] } }), useed)));
  assert.deepEqual(ok.principal, { tenant: "acme", user: "bob" });
  assert.equal(ok.inboxPrefix, "_INBOX.acme.bob");
  assert.ok(ok.jwtFile);
  const bad: [string, object, string, RegExp][] = [
    ["notag.creds", { sub: user.getPublicKey(), nats: { tags: [] } }, useed, /names no Rath principal/],
    ["expired.creds", { sub: user.getPublicKey(), exp: 1000, nats: { tags: ["rath-principal:acme/bob"] } }, useed, /expired/],
    ["otherseed.creds", { sub: user.getPublicKey(), nats: { tags: ["rath-principal:acme/bob"] } }, seed, /another user's seed/],
    ["client-as-rath.creds", { sub: user.getPublicKey(), nats: { tags: ["rath-principal:rath/client"] } }, useed, /service role/],
  ];
  for (const [name, claims, s, want] of bad) {
    const p = file(name, credsFile(jwtOf(claims), s));
    assert.throws(() => readCredentials(p), (e: unknown) => e instanceof CredentialsError && want.test(e.message), name);
  }
});

test("canonical JSON orders members by UTF-16 code units and writes numbers as ECMAScript does", () => {
  assert.equal(canonicalize({ b: 1, a: [true, null, "x"], "\u{1F600}": 0, "\uFFFF": 1 }), '{"a":[true,null,"x"],"b":1,"\u{1F600}":0,"\uFFFF":1}');
  assert.equal(canonicalize(JSON.parse('{"n":[1e21,1.0,0.1,-0,1.5e-7,100]}')), '{"n":[1e+21,1,0.1,0,1.5e-7,100]}');
  assert.equal(canonicalize("\u2028\t\u0001"), '"\u2028\\t\\u0001"');
  assert.throws(() => canonicalize("\ud800"), /lone/);
  assert.throws(() => chainHash({ x: "\udc00" }), /lone/);
});

test("a keyring checks single signatures and refuses forged, unknown and malformed ones", () => {
  const { publicKey, privateKey } = generateKeyPairSync("ed25519");
  const x = publicKey.export({ format: "jwk" }).x as string;
  const id = keyID(Buffer.from(x, "base64url"));
  const ring = Keyring.fromKeys({ current: id, keys: [{ id, public_key: x }] });
  const hash = "a".repeat(64);
  const sig = `${id}:${sign(null, Buffer.from(`rath.event.v1\ns-1\n7\n${hash}`), privateKey).toString("base64url")}`;
  ring.verify("s-1", 7, hash, sig);
  assert.throws(() => ring.verify("s-1", 8, hash, sig), SignatureError);
  assert.throws(() => ring.verify("s-2", 7, hash, sig), SignatureError);
  assert.throws(() => ring.verify("s-1", 7, hash, undefined), /not signed/);
  assert.throws(() => ring.verify("s-1", 7, hash, `0000000000000000:${sig.split(":")[1]}`), /unknown key/);
  assert.throws(() => ring.verify("s-1", 7, hash, `${id}:!!`), /not an ed25519 signature/);
  assert.throws(() => ring.verify("s-1", 7, hash, `${id}:a:b`), /not a single or a group/);
  assert.throws(() => ring.verify("s-1", 7, hash, `${id}:rec:0:nonce`), (e: unknown) => e instanceof SignatureError && e.detached);
  assert.throws(() => ring.verify("s-1", 7, hash, `${id}:${sig.split(":")[1]}:01:2:AAAAAAAAAAAAAAAAAAAAAA:`), /malformed group/);
  assert.throws(() => Keyring.fromKeys({ current: id, keys: [{ id: "ffffffffffffffff", public_key: x }] }), /ID/);
  const pinned = Keyring.fromPEM(publicKey.export({ format: "pem", type: "spki" }) as string);
  assert.deepEqual(pinned.ids(), [id]);
});

test("events.gen.ts is what the event catalog's schemas give (npm run gen)", async () => {
  const gen = (await import(pathToFileURL(join(pkg, "scripts", "gen-events.mjs")).href)) as { generate(): string };
  assert.equal(readFileSync(join(pkg, "src", "events.gen.ts"), "utf8"), gen.generate(), "a schema changed without npm run gen");
  assert.ok(eventTypes.includes("rath.session.started"));
  for (const t of eventTypes) assert.equal(schemaURNs[t], `urn:rath:schema:${t.slice("rath.".length)}.v1.json`);
});
