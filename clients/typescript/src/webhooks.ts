/**
 * Verifying the webhooks Tickerwire sends (docs/webhooks.md#verifying), the Standard Webhooks way;
 * the twin of the Python client's `tickerwire_client.webhooks`.
 *
 * Each request carries `webhook-id`, `webhook-timestamp` (unix seconds) and `webhook-signature`:
 * `v1,<base64 HMAC-SHA256(secret, "{id}.{timestamp}.{body}")>`, once per secret that signs (two,
 * space-separated, while a secret is rotated). `new Webhook(secret).verify(body, headers)` checks
 * the signature over the exact bytes received and the timestamp's tolerance and returns the
 * message; every refusal is a `WebhookVerificationError` whose `reason` a program can branch on.
 *
 * The body must be bytes (`Uint8Array`, so a `Buffer`, or an `ArrayBuffer`). A string is refused,
 * unlike the reference library's `verify`: in a Node server a string body is most often
 * `JSON.stringify(req.body)` after a JSON middleware parsed it, which is not the body that was
 * signed, and decoding then re-encoding bytes is not always the identity either. Raw bytes are
 * always at hand (collecting `req`'s chunks, `express.raw()`, `await request.arrayBuffer()`);
 * whoever holds the exact text can say so with `Buffer.from(text, "utf8")`.
 */

import { createHmac, timingSafeEqual } from "node:crypto";
import { TickerwireError } from "./errors.js";
import type { PostLean } from "./types.js";
import type { Cursor } from "./wire.js";

/** The prefix of a secret as Tickerwire shows it (`whsec_` and the base64 of its bytes). */
export const WEBHOOK_SECRET_PREFIX = "whsec_";
/** How far `webhook-timestamp` may lie from the receiver's clock, either way (Standard Webhooks' default: 5 minutes). */
export const DEFAULT_WEBHOOK_TOLERANCE_MS = 300_000;

/** Every `WebhookVerificationError.reason`, the same strings as the Python client's. */
export const WEBHOOK_ERROR_REASONS = [
  "body_not_bytes",
  "missing_header",
  "invalid_header",
  "timestamp_too_old",
  "timestamp_too_new",
  "bad_signature",
  "body_reserialized",
  "invalid_payload",
] as const;
export type WebhookErrorReason = (typeof WEBHOOK_ERROR_REASONS)[number];

const RAW_BYTES_HINT =
  "pass the request body exactly as received, as bytes, before any parsing " +
  "(node:http: Buffer.concat of the request's chunks; Express: express.raw({ type: \"*/*\" }); " +
  "fetch-style handlers: new Uint8Array(await request.arrayBuffer()))";

/** The secret given to `Webhook` is not a `whsec_` secret, base64, or is empty. */
export class WebhookSecretError extends TickerwireError {
  override name = "WebhookSecretError";
}

/** A request that must not be acted on; `reason` says why. */
export class WebhookVerificationError extends TickerwireError {
  override name = "WebhookVerificationError";
  readonly reason: WebhookErrorReason;
  constructor(reason: WebhookErrorReason, message: string) {
    super(message);
    this.reason = reason;
  }
}
/** The body given was a string or an already parsed object, not the raw bytes (`body_not_bytes`). */
export class WebhookBodyNotBytesError extends WebhookVerificationError {
  override name = "WebhookBodyNotBytesError";
}
/** `header` is absent (`missing_header`) or not what the spec allows (`invalid_header`). */
export class WebhookHeaderError extends WebhookVerificationError {
  override name = "WebhookHeaderError";
  readonly header: string;
  constructor(reason: "missing_header" | "invalid_header", header: string, message: string) {
    super(reason, message);
    this.header = header;
  }
}
/**
 * `webhook-timestamp` lies more than the tolerance before (`timestamp_too_old`) or after
 * (`timestamp_too_new`) the clock: a replayed request, or a clock that is off. `timestamp` and
 * `now` are unix seconds.
 */
export class WebhookTimestampError extends WebhookVerificationError {
  override name = "WebhookTimestampError";
  readonly timestamp: number;
  readonly now: number;
  readonly toleranceMs: number;
  constructor(reason: "timestamp_too_old" | "timestamp_too_new", timestamp: number, now: number, toleranceMs: number) {
    super(
      reason,
      `webhook-timestamp ${timestamp} is ${Math.abs(now - timestamp)} s ${reason === "timestamp_too_old" ? "before" : "after"} ` +
        `this machine's clock (${now}), beyond the tolerance of ${toleranceMs / 1000} s: a replayed request, or a clock that is off`,
    );
    this.timestamp = timestamp;
    this.now = now;
    this.toleranceMs = toleranceMs;
  }
}
/**
 * No `v1` signature of `webhook-signature` matches the body with this secret (`bad_signature`),
 * or none does and the body looks parsed and re-serialized (`body_reserialized`).
 */
export class WebhookSignatureError extends WebhookVerificationError {
  override name = "WebhookSignatureError";
}
/** The signature is good but the body is not UTF-8 JSON (`invalid_payload`). */
export class WebhookPayloadError extends WebhookVerificationError {
  override name = "WebhookPayloadError";
}

/** One verified request. `id` is the same on every redelivery of a message: act on each once. */
export interface WebhookMessage {
  /** `webhook-id`. */
  readonly id: string;
  /** `webhook-timestamp`: unix seconds of this attempt. */
  readonly timestamp: number;
  readonly sentAt: Date;
  /** The body, exactly the bytes verified. */
  readonly body: Uint8Array;
  /** The body's JSON (`null` for an empty body). */
  readonly payload: unknown;
  /** `"post.created"`; this and the fields below are `null` where the payload has none. */
  readonly type: string | null;
  readonly ts: string | null;
  /** The payload's `log_position`. */
  readonly logPosition: string | null;
  /** The resume cursor just after this message. */
  readonly cursor: Cursor | null;
  readonly data: Readonly<Record<string, unknown>> | null;
  /** The post of a `post.created` message (its `data`, the lean shape); `null` for another type. */
  readonly post: PostLean | null;
}

/** What `verify` reads headers from: a fetch `Headers`, or node:http's `req.headers` (any name case). */
export type WebhookHeaders = Headers | Readonly<Record<string, string | readonly string[] | undefined>>;
/** The raw request body: a `Uint8Array` (a `Buffer` is one) or an `ArrayBuffer`. */
export type WebhookBody = Uint8Array | ArrayBuffer;

export interface WebhookOptions {
  /** How far `webhook-timestamp` may lie from the clock, either way; default 5 minutes. */
  readonly toleranceMs?: number;
}
export interface VerifyOptions {
  /** The time to check the timestamp against, in ms since the epoch; default `Date.now()`. */
  readonly nowMs?: number;
}

/** Verifies requests signed with one endpoint's secret. */
export class Webhook {
  readonly toleranceMs: number;
  readonly #key: Buffer;

  /**
   * `secret`: as shown at registration (`whsec_<base64>`), the base64 alone, or the key's raw
   * bytes.
   */
  constructor(secret: string | Uint8Array, options: WebhookOptions = {}) {
    this.#key = secretBytes(secret);
    this.toleranceMs = options.toleranceMs ?? DEFAULT_WEBHOOK_TOLERANCE_MS;
    if (!(this.toleranceMs >= 0)) throw new RangeError("toleranceMs is a number of milliseconds, 0 or more");
  }

  /** The `v1,<base64>` signature of `body` (for a receiver's own tests). */
  sign(webhookId: string, timestamp: number, body: Uint8Array): string {
    return `v1,${this.#digest(webhookId, timestamp, body).toString("base64")}`;
  }

  /**
   * The verified message; a `WebhookVerificationError` (a subclass, with `reason`) when the
   * request must not be acted on.
   */
  verify(body: WebhookBody, headers: WebhookHeaders, options: VerifyOptions = {}): WebhookMessage {
    const raw = rawBody(body);
    const read = headerReader(headers);
    const webhookId = required(read, "webhook-id");
    const timestampText = required(read, "webhook-timestamp");
    const signatures = required(read, "webhook-signature");
    if (!/^[0-9]{1,15}$/.test(timestampText)) {
      throw new WebhookHeaderError(
        "invalid_header",
        "webhook-timestamp",
        `webhook-timestamp must be whole unix seconds, got ${JSON.stringify(timestampText.slice(0, 40))}`,
      );
    }
    const timestamp = Number(timestampText);
    this.#checkTime(timestamp, Math.floor((options.nowMs ?? Date.now()) / 1000));
    const expected = this.#digest(webhookId, timestamp, raw);
    if (!v1Signatures(signatures).some((candidate) => candidate.length === expected.length && timingSafeEqual(candidate, expected))) {
      throw signatureError(raw);
    }
    return message(webhookId, timestamp, raw);
  }

  #digest(webhookId: string, timestamp: number, body: Uint8Array): Buffer {
    return createHmac("sha256", this.#key).update(`${webhookId}.${timestamp}.`).update(body).digest();
  }

  #checkTime(timestamp: number, now: number): void {
    if ((now - timestamp) * 1000 > this.toleranceMs) throw new WebhookTimestampError("timestamp_too_old", timestamp, now, this.toleranceMs);
    if ((timestamp - now) * 1000 > this.toleranceMs) throw new WebhookTimestampError("timestamp_too_new", timestamp, now, this.toleranceMs);
  }
}

function secretBytes(secret: string | Uint8Array): Buffer {
  let key: Buffer;
  if (secret instanceof Uint8Array) key = Buffer.from(secret);
  else if (typeof secret === "string") {
    const text = secret.trim().replace(/^whsec_/, "").replace(/=+$/, "");
    if (!/^[A-Za-z0-9+/]*$/.test(text) || text.length % 4 === 1) {
      throw new WebhookSecretError("a webhook secret is whsec_ followed by base64, as shown when the endpoint was registered");
    }
    key = Buffer.from(text, "base64");
  } else throw new WebhookSecretError(`a webhook secret is a string (whsec_...) or bytes, not ${typeof secret}`);
  if (key.length === 0) throw new WebhookSecretError("the webhook secret is empty");
  return key;
}

function rawBody(body: unknown): Uint8Array {
  if (body instanceof Uint8Array) return body;
  if (body instanceof ArrayBuffer) return new Uint8Array(body);
  if (typeof body === "string") {
    throw new WebhookBodyNotBytesError(
      "body_not_bytes",
      "the body is a string, not the raw bytes: a decoded or re-serialized body (JSON.stringify of a parsed one) " +
        `is not what was signed; ${RAW_BYTES_HINT}`,
    );
  }
  const kind = body === null ? "null" : Array.isArray(body) ? "array" : typeof body;
  throw new WebhookBodyNotBytesError(
    "body_not_bytes",
    `the body is ${kind === "object" || kind === "array" ? `an ${kind}: it looks already parsed, and a parsed body serialized again is not the bytes that were signed` : `a ${kind}`}; ${RAW_BYTES_HINT}`,
  );
}

/** The values of one header (every line of it, trimmed), by lower-case name. */
function headerReader(headers: WebhookHeaders): (name: string) => string[] {
  if (typeof (headers as { get?: unknown }).get === "function") {
    const fetchHeaders = headers as Headers;
    return (name) => {
      const value = fetchHeaders.get(name);
      return value === null ? [] : [value.trim()];
    };
  }
  const byName = new Map<string, string[]>();
  for (const [name, value] of Object.entries(headers as Readonly<Record<string, string | readonly string[] | undefined>>)) {
    if (value === undefined) continue;
    const values = byName.get(name.toLowerCase()) ?? [];
    values.push(...(typeof value === "string" ? [value] : value).map((v) => String(v).trim()));
    byName.set(name.toLowerCase(), values);
  }
  return (name) => byName.get(name) ?? [];
}

function required(read: (name: string) => string[], name: string): string {
  const found = read(name).filter((v) => v !== "");
  if (found.length === 0) throw new WebhookHeaderError("missing_header", name, `the request has no ${name} header: is it a Tickerwire webhook?`);
  if (name === "webhook-signature") return found.join(" ");
  if (new Set(found).size > 1) throw new WebhookHeaderError("invalid_header", name, `the request has ${found.length} different ${name} headers`);
  return found[0] as string;
}

/**
 * The decoded `v1` signatures of `webhook-signature` (other versions and garbage skipped). The
 * `split(",", 2)` also drops the comma that `Headers` and node:http put between repeated lines.
 */
function v1Signatures(header: string): Buffer[] {
  const out: Buffer[] = [];
  for (const entry of header.split(/\s+/)) {
    const [version, encoded] = entry.split(",", 2);
    if (version !== "v1" || encoded === undefined || !/^[A-Za-z0-9+/]+={0,2}$/.test(encoded)) continue;
    out.push(Buffer.from(encoded, "base64"));
  }
  return out;
}

/**
 * Whether `body` is JSON but not in the compact form the server sends (no whitespace between
 * tokens, non-ASCII as UTF-8): what a framework or `JSON.stringify(value, null, 2)` writes after parsing.
 */
export function looksReserialized(body: Uint8Array): boolean {
  let parsed: unknown;
  try {
    parsed = JSON.parse(new TextDecoder("utf-8", { fatal: true, ignoreBOM: true }).decode(body));
  } catch {
    return false;
  }
  return !Buffer.from(JSON.stringify(parsed), "utf8").equals(body);
}

function signatureError(body: Uint8Array): WebhookSignatureError {
  if (looksReserialized(body)) {
    return new WebhookSignatureError(
      "body_reserialized",
      "no signature matches, and the body looks parsed and re-serialized: it is JSON but not in the compact form the " +
        "server sends (whitespace between tokens, escaped non-ASCII, reordered or reformatted values); the signature " +
        `covers the exact bytes sent, so ${RAW_BYTES_HINT}. If these are the bytes received, check the secret`,
    );
  }
  return new WebhookSignatureError(
    "bad_signature",
    "no signature matches: the body was changed, or the secret is not this endpoint's (after a rotation, the new one)",
  );
}

function isRecord(value: unknown): value is Readonly<Record<string, unknown>> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

function message(id: string, timestamp: number, body: Uint8Array): WebhookMessage {
  let payload: unknown = null;
  if (body.length > 0) {
    try {
      payload = JSON.parse(new TextDecoder("utf-8", { fatal: true, ignoreBOM: true }).decode(body));
    } catch (e) {
      throw new WebhookPayloadError("invalid_payload", `the signature is good but the body is not UTF-8 JSON: ${String(e)}`);
    }
  }
  const fields = isRecord(payload) ? payload : {};
  const text = (name: string): string | null => {
    const value = fields[name];
    return typeof value === "string" ? value : null;
  };
  const data = isRecord(fields["data"]) ? fields["data"] : null;
  const type = text("type");
  return {
    id,
    timestamp,
    sentAt: new Date(timestamp * 1000),
    body,
    payload,
    type,
    ts: text("ts"),
    logPosition: text("log_position"),
    cursor: text("cursor"),
    data,
    post: type === "post.created" && data !== null ? (data as unknown as PostLean) : null,
  };
}
