/**
 * The error envelope (`{"error": {code, message, field?, retry_after_sec?}}`) as classes, one per
 * kind a program acts on. Known codes map to their own class; an unknown code still maps by
 * status (`ClientError` / `ServerError`), so a new code never breaks an `instanceof` written today.
 * The names follow the Python client's (`tickerwire_client.errors`); clients/shared/vectors.json
 * holds the mapping both clients are tested against.
 */

import { metaFromResponse, type ResponseMeta } from "./meta.js";

/** Base of every error this library throws. */
export class TickerwireError extends Error {
  override name = "TickerwireError";
}

/** The envelope's fields, as the server sent them (absent ones are null). */
export interface ErrorEnvelope {
  readonly code: string;
  readonly message: string;
  readonly field: string | null;
  readonly retryAfterSec: number | null;
}

/** A 4xx or 5xx answer. */
export class ApiError extends TickerwireError {
  override name = "ApiError";
  readonly status: number;
  readonly code: string;
  readonly field: string | null;
  /** How long the server asked to wait: `Retry-After` (preferred), else the envelope's `retry_after_sec`. */
  readonly retryAfterMs: number | null;
  readonly requestId: string | null;
  readonly headers: Headers;
  readonly meta: ResponseMeta;
  readonly envelope: ErrorEnvelope;

  constructor(meta: ResponseMeta, envelope: ErrorEnvelope) {
    super(`${meta.status} ${envelope.code}: ${envelope.message}${envelope.field ? ` (field ${envelope.field})` : ""}`);
    this.status = meta.status;
    this.code = envelope.code;
    this.field = envelope.field;
    this.envelope = envelope;
    this.meta = meta;
    this.headers = meta.headers;
    this.requestId = meta.requestId;
    this.retryAfterMs =
      meta.limits.retryAfterMs ?? (envelope.retryAfterSec !== null ? envelope.retryAfterSec * 1000 : null);
  }

  /** The envelope's message (the Error's `message` also names the status and code). */
  get serverMessage(): string {
    return this.envelope.message;
  }
}

/** A 4xx the library has no more specific class for. */
export class ClientError extends ApiError {
  override name = "ClientError";
}
/** A 5xx the library has no more specific class for. */
export class ServerError extends ApiError {
  override name = "ServerError";
}
/** 401: the key is missing, malformed, unknown or revoked. */
export class AuthenticationError extends ClientError {
  override name = "AuthenticationError";
}
/** 403: the key is valid but the workspace may not read now. */
export class PermissionDeniedError extends ClientError {
  override name = "PermissionDeniedError";
}
/** 403 WORKSPACE_SUSPENDED: an admin suspended the workspace. */
export class WorkspaceSuspendedError extends PermissionDeniedError {
  override name = "WorkspaceSuspendedError";
}
/** 403 BADGE_MISSING: no badge heartbeat for over 72 h (or never); the message says how to recover. */
export class BadgeMissingError extends PermissionDeniedError {
  override name = "BadgeMissingError";
}
/** 404. */
export class NotFoundError extends ClientError {
  override name = "NotFoundError";
}
/** 409: a well-formed request for a state that moved on (`INVALID_STATE`, `CURSOR_EPOCH_CHANGED`). */
export class ConflictError extends ClientError {
  override name = "ConflictError";
}
/** 409 CURSOR_EPOCH_CHANGED: the cursor belongs to an earlier log; gap-fill with `posts({ after })` once, then start without a cursor. */
export class CursorEpochChangedError extends ConflictError {
  override name = "CursorEpochChangedError";
}
/** 409 IDEMPOTENCY_KEY_REUSED: a create's `Idempotency-Key` was used in the last 24 hours with another body. */
export class IdempotencyKeyReusedError extends ConflictError {
  override name = "IdempotencyKeyReusedError";
}
/** 409 ENDPOINT_LIMIT: the workspace already has its maximum of endpoints (100) not deleted. */
export class EndpointLimitError extends ConflictError {
  override name = "EndpointLimitError";
}
/** 422 (or 400): `field` names the offending input when there is one. */
export class ValidationError extends ClientError {
  override name = "ValidationError";
}
/** 429: wait `retryAfterMs`. */
export class ThrottledError extends ClientError {
  override name = "ThrottledError";
}
/** 429 RATE_LIMITED: the workspace's per-minute limit; `limit`, `remaining`, `reset` from the headers. */
export class RateLimitError extends ThrottledError {
  override name = "RateLimitError";
  get limit(): number | null {
    return this.meta.limits.rateLimit;
  }
  get remaining(): number | null {
    return this.meta.limits.rateRemaining;
  }
  /** Unix seconds when the minute window resets. */
  get reset(): number | null {
    return this.meta.limits.rateReset;
  }
}
/** 429 QUOTA_EXHAUSTED: the daily quota, reset at UTC midnight; raised, not waited for. */
export class QuotaExhaustedError extends ThrottledError {
  override name = "QuotaExhaustedError";
  get limit(): number | null {
    return this.meta.limits.quotaLimit;
  }
  get remaining(): number | null {
    return this.meta.limits.quotaRemaining;
  }
  /** Unix seconds when the day's quota resets. */
  get reset(): number | null {
    return this.meta.limits.quotaReset;
  }
}
/** 429 at the stream's handshake: the workspace holds its maximum of concurrent connections. */
export class StreamLimitError extends ThrottledError {
  override name = "StreamLimitError";
}
/** 503. */
export class ServiceUnavailableError extends ServerError {
  override name = "ServiceUnavailableError";
}
/** 500. */
export class InternalServerError extends ServerError {
  override name = "InternalServerError";
}

/** The server could not be reached or the connection broke (after any retries). */
export class ConnectionError extends TickerwireError {
  override name = "ConnectionError";
}
/** A call took longer than its time budget (`timeoutMs` per attempt, `maxCallTimeMs` in all). */
export class RequestTimeoutError extends TickerwireError {
  override name = "RequestTimeoutError";
}
/** The caller's `AbortSignal` aborted the call; `cause` is the signal's reason. */
export class AbortedError extends TickerwireError {
  override name = "AbortedError";
}

type ApiErrorClass = new (meta: ResponseMeta, envelope: ErrorEnvelope) => ApiError;

const BY_CODE: Readonly<Record<string, ApiErrorClass>> = {
  NOT_AUTHENTICATED: AuthenticationError,
  WORKSPACE_SUSPENDED: WorkspaceSuspendedError,
  BADGE_MISSING: BadgeMissingError,
  NOT_FOUND: NotFoundError,
  INVALID_STATE: ConflictError,
  CURSOR_EPOCH_CHANGED: CursorEpochChangedError,
  IDEMPOTENCY_KEY_REUSED: IdempotencyKeyReusedError,
  ENDPOINT_LIMIT: EndpointLimitError,
  VALIDATION_FAILED: ValidationError,
  RATE_LIMITED: RateLimitError,
  QUOTA_EXHAUSTED: QuotaExhaustedError,
  STREAM_LIMIT_REACHED: StreamLimitError,
  SERVICE_UNAVAILABLE: ServiceUnavailableError,
  INTERNAL: InternalServerError,
};

const BY_STATUS: Readonly<Record<number, ApiErrorClass>> = {
  400: ValidationError,
  401: AuthenticationError,
  403: PermissionDeniedError,
  404: NotFoundError,
  409: ConflictError,
  422: ValidationError,
  429: ThrottledError,
  500: InternalServerError,
  503: ServiceUnavailableError,
};

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/** The envelope of a parsed body; tolerates a body that is not one. */
export function envelopeOf(status: number, body: unknown): ErrorEnvelope {
  const raw = isRecord(body) && isRecord(body["error"]) ? body["error"] : {};
  const code = raw["code"];
  const message = raw["message"];
  const field = raw["field"];
  const retry = raw["retry_after_sec"];
  return {
    code: typeof code === "string" && code ? code : `HTTP_${status}`,
    message: typeof message === "string" && message ? message : "no error envelope in the response",
    field: typeof field === "string" ? field : null,
    retryAfterSec: typeof retry === "number" ? retry : null,
  };
}

/** The class an answer maps to: by the envelope's code, else by status. */
export function errorClassFor(status: number, code: string): ApiErrorClass {
  return BY_CODE[code] ?? BY_STATUS[status] ?? (status >= 500 ? ServerError : ClientError);
}

/** The error of a 4xx/5xx answer from its meta and parsed body. */
export function errorFromResponse(meta: ResponseMeta, body: unknown): ApiError {
  const envelope = envelopeOf(meta.status, body);
  const Class = errorClassFor(meta.status, envelope.code);
  return new Class(meta, envelope);
}

/** The same from a status, headers and body (the stream's refused handshake). */
export function errorFromParts(status: number, headers: Headers, body: unknown): ApiError {
  return errorFromResponse(metaFromResponse(status, headers), body);
}
