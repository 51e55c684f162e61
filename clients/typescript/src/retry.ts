/**
 * When a read is tried again, and how long the stream waits before reconnecting. Pure logic;
 * the rules both clients share are the test vectors in clients/shared/vectors.json.
 */

/** When an HTTP read is tried again. Every field has a default (`DEFAULT_RETRY`). */
export interface RetryPolicy {
  /** Tries in all, the first included (4). `1` never retries. */
  readonly maxAttempts: number;
  /**
   * The most a call waits between its tries, in all (30,000 ms). A `Retry-After` that would
   * push the total past it is not shortened: the error is thrown at once (a daily quota with
   * hours to wait is raised, not slept on).
   */
  readonly maxTotalWaitMs: number;
  /** No call takes longer than this from its start, whatever the server does (30,000 ms). */
  readonly maxCallTimeMs: number;
  /** Statuses retried: 429 and the 5xx a retry can cure (429, 500, 502, 503, 504). */
  readonly retryStatuses: readonly number[];
  /** Retry network errors and per-attempt timeouts (true). */
  readonly retryConnectionErrors: boolean;
  /** Back-off without a `Retry-After`: full jitter in [0, min(cap, base * 2^(attempt-1))]. */
  readonly backoffBaseMs: number;
  readonly backoffCapMs: number;
}

export const DEFAULT_RETRY: RetryPolicy = Object.freeze({
  maxAttempts: 4,
  maxTotalWaitMs: 30_000,
  maxCallTimeMs: 30_000,
  retryStatuses: Object.freeze([429, 500, 502, 503, 504]),
  retryConnectionErrors: true,
  backoffBaseMs: 250,
  backoffCapMs: 5_000,
});

/** A policy with `overrides` applied to the defaults. */
export function retryPolicy(overrides: Partial<RetryPolicy> = {}): RetryPolicy {
  return Object.freeze({ ...DEFAULT_RETRY, ...overrides });
}

/**
 * Milliseconds to wait before try `attempt + 1` (`attempt` counts from 1), or null to give up:
 * after `maxAttempts` tries, or when the wait would take the total waited past `maxTotalWaitMs`.
 */
export function retryDelayMs(
  policy: RetryPolicy,
  attempt: number,
  retryAfterMs: number | null,
  waitedMs: number,
  random: () => number = Math.random,
): number | null {
  if (attempt >= policy.maxAttempts) return null;
  const wait = retryAfterMs ?? fullJitterMs(attempt, policy.backoffBaseMs, policy.backoffCapMs, random);
  if (waitedMs + wait > policy.maxTotalWaitMs) return null;
  return wait;
}

/** Capped exponential back-off with full jitter: uniform in [0, min(cap, base * 2^(attempt-1))]. */
export function fullJitterMs(attempt: number, baseMs: number, capMs: number, random: () => number = Math.random): number {
  const ceiling = Math.min(capMs, baseMs * 2 ** Math.max(attempt - 1, 0));
  return random() * ceiling;
}

/** Reconnect delays for the stream: capped, "equal jitter" (never zero), reset after a healthy connection. */
export class Backoff {
  private attempt = 0;
  constructor(
    readonly baseMs: number,
    readonly capMs: number,
    private readonly random: () => number = Math.random,
  ) {}

  next(): number {
    this.attempt += 1;
    const ceiling = Math.min(this.capMs, this.baseMs * 2 ** (this.attempt - 1));
    return ceiling / 2 + this.random() * (ceiling / 2);
  }

  reset(): void {
    this.attempt = 0;
  }
}
