/**
 * The request side of the webhook endpoint operations (`/webhooks/endpoints`): paths, bodies and
 * the create's `Idempotency-Key`, checked before anything is sent. Pure logic; `Client` sends them.
 */

import type { WebhookEndpointCreate, WebhookEndpointUpdate, WebhookReplay } from "./types.js";

export const WEBHOOK_ENDPOINTS = "/webhooks/endpoints";
/** The longest `Idempotency-Key` the server takes. */
export const MAX_IDEMPOTENCY_KEY = 255;

/** The path of one endpoint, or of one of its actions; the id is one path segment whatever it holds. */
export function endpointPath(id: string, action = ""): string {
  return `${WEBHOOK_ENDPOINTS}/${encodeURIComponent(id)}${action ? `/${action}` : ""}`;
}

/** `key` if the server takes it (1 to 255 printable ASCII characters, no outer spaces); else a `RangeError`, before sending. */
export function checkIdempotencyKey(key: string): string {
  if (key.length < 1 || key.length > MAX_IDEMPOTENCY_KEY || !/^[\x20-\x7e]+$/.test(key) || key.trim() !== key) {
    throw new RangeError("an Idempotency-Key is 1 to 255 printable ASCII characters, without outer spaces");
  }
  return key;
}

/** A key for one create, kept over its retries. */
export function newIdempotencyKey(): string {
  return `tw-${globalThis.crypto.randomUUID().replaceAll("-", "")}`;
}

const FIELDS = ["url", "description", "locales", "tickers", "categories"] as const;

/** The fields given (`undefined` left out, `null` kept: no restriction); a field the contract lacks is a `TypeError`. */
function fieldsOf(input: WebhookEndpointUpdate): Record<string, unknown> {
  const body: Record<string, unknown> = {};
  for (const [name, value] of Object.entries(input)) {
    if (!(FIELDS as readonly string[]).includes(name)) throw new TypeError(`${name} is not a field of a webhook endpoint`);
    if (value === undefined) continue;
    if (name !== "url" && name !== "description" && value !== null && !Array.isArray(value)) {
      throw new TypeError(`${name} is an array of strings or null`);
    }
    body[name] = Array.isArray(value) ? value.map(String) : value;
  }
  return body;
}

/** The body of a create. */
export function createBody(input: WebhookEndpointCreate): Record<string, unknown> {
  if (typeof input.url !== "string") throw new TypeError("url is required");
  return fieldsOf(input);
}

/** The body of an update: only the fields given; at least one. */
export function updateBody(changes: WebhookEndpointUpdate): Record<string, unknown> {
  const body = fieldsOf(changes);
  if (Object.keys(body).length === 0) throw new TypeError("nothing to change: give url, description, locales, tickers or categories");
  return body;
}

/** The body of a replay: exactly one of `since` (a `Date` is sent as its ISO form) or `cursor`. */
export function replayBody(from: WebhookReplay): { since: string } | { cursor: string } {
  const since = from.since;
  const cursor = from.cursor;
  if ((since === undefined) === (cursor === undefined)) throw new TypeError("replay needs exactly one of since or cursor");
  if (cursor !== undefined) return { cursor };
  if (since instanceof Date) {
    if (Number.isNaN(since.getTime())) throw new RangeError("since is an invalid Date");
    return { since: since.toISOString() };
  }
  return { since: String(since) };
}
