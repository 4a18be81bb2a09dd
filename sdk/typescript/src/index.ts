// @openrath/rath: the TypeScript client of a Rath runtime over NATS
// (docs/protocol.md), mirroring the Go client pkg/client.

export { connect, Client, newID, verifyReceipt } from "./client.js";
export type { Ack, BatchResult, CloudEvent, ConnectOptions, EventOptions, ForkRequest, MergeRequest, Overview, Queued, Range, Report, StateOptions, StoredEvent } from "./client.js";
export { readCredentials, parsePrincipal, serviceTenant } from "./creds.js";
export type { Credentials, Principal } from "./creds.js";
export { ChainError, Code, CredentialsError, isCode, RathError } from "./errors.js";
export type { ErrorCode } from "./errors.js";
export { canonicalize, chainHash } from "./jcs.js";
export { expandSig, isRecordRef, keyID, Keyring, SignatureError } from "./sign.js";
export type { Keys, LedgerKey, SigRecord } from "./sign.js";
export { watch } from "./watch.js";
export type { Warning, WarningReason, WatchOptions } from "./watch.js";
export * from "./events.gen.js";
