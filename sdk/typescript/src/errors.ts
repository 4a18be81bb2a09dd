// Errors of the Rath client: the ledger's refusals with their codes
// (docs/protocol.md, "Error codes"), and unusable credentials files.

/** The codes the ledger answers in the Rath-Error header and the error body. */
export const Code = {
  Malformed: "malformed",
  UnknownType: "unknown_type",
  Schema: "schema",
  InvalidSession: "invalid_session",
  NotFound: "session_not_found",
  BlobNotFound: "blob_not_found",
  Exists: "session_exists",
  Closed: "session_closed",
  Stale: "stale_sequence",
  BadTransition: "bad_transition",
  UseOperation: "use_operation",
  OutOfRange: "out_of_range",
  NothingToMerge: "nothing_to_merge",
  TooLarge: "too_large",
  DuplicateID: "duplicate_id",
  UnknownApproval: "unknown_approval",
  ApprovalSettled: "approval_settled",
  ApprovalExpired: "approval_expired",
  NotApprover: "not_approver",
  Conflict: "conflict",
  Unavailable: "unavailable",
  QuotaExceeded: "quota_exceeded",
  Damaged: "damaged",
} as const;

/** One of the ledger's error codes (or another the ledger may add later). */
export type ErrorCode = (typeof Code)[keyof typeof Code] | (string & {});

/**
 * RathError is a refusal by the ledger: its code (branch on it) and its
 * message (what to fix), with the operation that was refused.
 */
export class RathError extends Error {
  /** The ledger's error code, such as "stale_sequence". */
  readonly code: ErrorCode;
  /** The ledger's message, without the operation. */
  readonly detail: string;

  constructor(code: ErrorCode, detail: string, op?: string) {
    super(op ? `${op}: ${code}: ${detail}` : `${code}: ${detail}`);
    this.name = "RathError";
    this.code = code;
    this.detail = detail;
  }

  /** transient reports whether the same request may succeed later. */
  get transient(): boolean {
    return this.code === Code.Conflict || this.code === Code.Unavailable;
  }
}

/** isCode reports whether err is a RathError with the given code. */
export function isCode(err: unknown, code: ErrorCode): boolean {
  return err instanceof RathError && err.code === code;
}

/**
 * CredentialsError is a credentials file that does not exist (missing) or
 * holds no usable identity, named by its path.
 */
export class CredentialsError extends Error {
  /** The file's path. */
  readonly path: string;
  /** True when the file does not exist. */
  readonly missing: boolean;

  constructor(path: string, message: string, missing = false) {
    super(missing ? `no credentials file ${path}: ${message}` : `unusable credentials file ${path}: ${message}`);
    this.name = "CredentialsError";
    this.path = path;
    this.missing = missing;
  }
}

/**
 * ChainError is a log that breaks the hash chain: the ledger's log is
 * evidence, so a watch stops on it instead of skipping (docs/protocol.md,
 * "Catch up, then follow", step 4).
 */
export class ChainError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "ChainError";
  }
}
