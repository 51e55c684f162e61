/**
 * What a response says besides its body: the limit headers, the request id and the
 * consistency mark. Pure parsing: a header the server does not send is `null`, never an error.
 */

/** One policy of the `RateLimit` / `RateLimit-Policy` headers (draft-ietf-httpapi-ratelimit-headers). */
export interface RateLimitPolicy {
  /** Requests left in the current window (`r`), when `RateLimit` names the policy. */
  readonly remaining: number | null;
  /** Seconds until the window resets (`t`), when `RateLimit` names the policy. */
  readonly resetSeconds: number | null;
  /** Requests allowed per window (`q`), when `RateLimit-Policy` names the policy. */
  readonly quota: number | null;
  /** The window in seconds (`w`), when `RateLimit-Policy` names the policy. */
  readonly windowSeconds: number | null;
}

/** The rate-limit and quota headers of one response; resets are Unix seconds. */
export interface Limits {
  readonly rateLimit: number | null;
  readonly rateRemaining: number | null;
  readonly rateReset: number | null;
  readonly quotaLimit: number | null;
  readonly quotaRemaining: number | null;
  readonly quotaReset: number | null;
  /** `Retry-After` in milliseconds (delta-seconds form; an HTTP date counts as absent). */
  readonly retryAfterMs: number | null;
  /** The `RateLimit` and `RateLimit-Policy` fields by policy name (`minute`, `day`). */
  readonly policies: Readonly<Record<string, RateLimitPolicy>>;
}

/** Status, request id, limits, consistency mark and raw headers of one HTTP response. */
export interface ResponseMeta {
  readonly status: number;
  /** `X-Request-Id`: quote it when asking the operator about a response. */
  readonly requestId: string | null;
  readonly limits: Limits;
  /** `X-Log-Position` as sent (`"0:1523,1:1490"`): the projector position this read reflects. */
  readonly logPosition: string | null;
  readonly etag: string | null;
  readonly headers: Headers;
}

function int(headers: Headers, name: string): number | null {
  const value = headers.get(name);
  if (value === null || !/^\s*-?\d+\s*$/.test(value)) return null;
  return Number.parseInt(value, 10);
}

/** `Retry-After` in milliseconds, or null when absent or not delta-seconds. */
export function retryAfterMs(headers: Headers): number | null {
  const value = headers.get("Retry-After");
  if (value === null) return null;
  const trimmed = value.trim();
  if (!/^\d+(\.\d+)?$/.test(trimmed)) return null;
  return Math.round(Number.parseFloat(trimmed) * 1000);
}

/**
 * A Structured Field list of parameterised tokens or strings (`"minute";r=59;t=41, "day";r=1;t=9`)
 * as `{name: {param: integer}}`; anything unreadable is left out, never half-read.
 */
export function parseStructuredList(value: string | null): Record<string, Record<string, number>> {
  const out: Record<string, Record<string, number>> = {};
  if (value === null) return out;
  for (const member of value.split(",")) {
    const [head, ...params] = member.trim().split(";");
    const name = head?.trim().replace(/^"(.*)"$/, "$1");
    if (!name) continue;
    const entry: Record<string, number> = {};
    for (const param of params) {
      const match = /^\s*([a-z][a-z0-9_*.-]*)=(\d+)\s*$/.exec(param);
      if (match?.[1] !== undefined && match[2] !== undefined) entry[match[1]] = Number.parseInt(match[2], 10);
    }
    out[name] = entry;
  }
  return out;
}

function policies(headers: Headers): Record<string, RateLimitPolicy> {
  const left = parseStructuredList(headers.get("RateLimit"));
  const declared = parseStructuredList(headers.get("RateLimit-Policy"));
  const out: Record<string, RateLimitPolicy> = {};
  for (const name of new Set([...Object.keys(left), ...Object.keys(declared)])) {
    out[name] = {
      remaining: left[name]?.["r"] ?? null,
      resetSeconds: left[name]?.["t"] ?? null,
      quota: declared[name]?.["q"] ?? null,
      windowSeconds: declared[name]?.["w"] ?? null,
    };
  }
  return out;
}

export function limitsFromHeaders(headers: Headers): Limits {
  return {
    rateLimit: int(headers, "X-RateLimit-Limit"),
    rateRemaining: int(headers, "X-RateLimit-Remaining"),
    rateReset: int(headers, "X-RateLimit-Reset"),
    quotaLimit: int(headers, "X-Quota-Limit"),
    quotaRemaining: int(headers, "X-Quota-Remaining"),
    quotaReset: int(headers, "X-Quota-Reset"),
    retryAfterMs: retryAfterMs(headers),
    policies: policies(headers),
  };
}

export function metaFromResponse(status: number, headers: Headers): ResponseMeta {
  return {
    status,
    requestId: headers.get("X-Request-Id"),
    limits: limitsFromHeaders(headers),
    logPosition: headers.get("X-Log-Position"),
    etag: headers.get("ETag"),
    headers,
  };
}
