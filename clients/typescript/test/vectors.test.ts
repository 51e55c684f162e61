/**
 * The rules this client shares with the Python client, from clients/shared/vectors.json (the
 * Python suite's tests/clients/test_shared_vectors.py reads the same file), and the pure parsing.
 */

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, test } from "node:test";
import {
  Client,
  DEFAULT_RETRY,
  ResumePoint,
  errorFromParts,
  limitsFromHeaders,
  retryAfterMs,
  retryDelayMs,
  retryPolicy,
  Backoff,
  streamUrlWithKey,
} from "../src/index.js";
import { PACKAGE } from "./support/paths.js";

interface Vectors {
  errors: { status: number; code: string; typescript: string }[];
  retry_after: {
    headers: { value: string; seconds: number | null }[];
    precedence: { header: string | null; retry_after_sec: number | null; seconds: number | null }[];
  };
  retry_delay: {
    policy: { max_attempts: number; max_total_wait: number };
    cases: { attempt: number; retry_after: number | null; waited: number; delay?: number | null; delay_at_most?: number }[];
  };
  retry_statuses: { typescript: number[] };
  resume_points: {
    cases: { cursor: string | null; after: Record<string, number>; json: string }[];
    reads: { json: string; cursor: string | null; after: Record<string, number> }[];
  };
  stream_key: { cases: { stream_url: string; api_key: string; sent_keys: string[]; kept: Record<string, string> }[] };
  min_log_position: { cases: { seen: ({ response: string } | { push: string })[]; sent: string | null }[] };
}

const vectors = JSON.parse(readFileSync(join(PACKAGE, "..", "shared", "vectors.json"), "utf8")) as Vectors;

describe("shared vectors", () => {
  for (const c of vectors.errors) {
    test(`${c.status} ${c.code} is a ${c.typescript}`, () => {
      const error = errorFromParts(c.status, new Headers(), { error: { code: c.code, message: "m" } });
      assert.equal(error.constructor.name, c.typescript);
      assert.equal(error.status, c.status);
      assert.equal(error.code, c.code);
    });
  }

  test("Retry-After", () => {
    for (const c of vectors.retry_after.headers) {
      assert.equal(retryAfterMs(new Headers({ "Retry-After": c.value })), c.seconds === null ? null : c.seconds * 1000, c.value);
    }
    for (const c of vectors.retry_after.precedence) {
      const headers = new Headers(c.header === null ? {} : { "Retry-After": c.header });
      const envelope = { code: "RATE_LIMITED", message: "m", ...(c.retry_after_sec === null ? {} : { retry_after_sec: c.retry_after_sec }) };
      assert.equal(errorFromParts(429, headers, { error: envelope }).retryAfterMs, c.seconds === null ? null : c.seconds * 1000);
    }
  });

  test("retry waits: never shortened, raised past the budget", () => {
    const policy = retryPolicy({ maxAttempts: vectors.retry_delay.policy.max_attempts, maxTotalWaitMs: vectors.retry_delay.policy.max_total_wait * 1000 });
    for (const c of vectors.retry_delay.cases) {
      const delay = retryDelayMs(policy, c.attempt, c.retry_after === null ? null : c.retry_after * 1000, c.waited * 1000);
      if (c.delay_at_most !== undefined) assert.ok(delay !== null && delay >= 0 && delay <= c.delay_at_most * 1000, JSON.stringify(c));
      else assert.equal(delay, c.delay === null || c.delay === undefined ? null : c.delay * 1000, JSON.stringify(c));
    }
  });

  test("retry statuses", () => {
    assert.deepEqual([...DEFAULT_RETRY.retryStatuses], vectors.retry_statuses.typescript);
  });

  test("ResumePoint JSON is the Python client's, byte for byte", () => {
    for (const c of vectors.resume_points.cases) {
      const point = new ResumePoint(c.cursor, c.after);
      assert.equal(point.toJson(), c.json);
      assert.deepEqual(ResumePoint.fromJson(c.json), point);
    }
    for (const c of vectors.resume_points.reads) {
      assert.deepEqual(ResumePoint.fromJson(c.json), new ResumePoint(c.cursor, c.after));
    }
    assert.throws(() => ResumePoint.fromJson('{"after": {"en-US": "x"}}'), TypeError);
  });

  test("the stream's key: the client's wins over one in the URL, which is not sent", () => {
    for (const c of vectors.stream_key.cases) {
      const url = streamUrlWithKey(c.stream_url, c.api_key);
      assert.deepEqual(url.searchParams.getAll("key"), c.sent_keys, c.stream_url);
      assert.deepEqual(Object.fromEntries([...url.searchParams].filter(([name]) => name !== "key")), c.kept, c.stream_url);
    }
  });

  test("X-Min-Log-Position: the freshest mark seen, a push counting as its offset + 1", async () => {
    for (const c of vectors.min_log_position.cases) {
      // A fetch of our own: each read answers with `mark` as its X-Log-Position and records what was sent.
      const sent: (string | null)[] = [];
      let mark = "";
      const answer: typeof fetch = async (_url, init) => {
        sent.push(new Headers(init?.headers).get("X-Min-Log-Position"));
        return new Response('{"languages": []}', { status: 200, headers: { "X-Log-Position": mark } });
      };
      const api = new Client({ baseUrl: "http://127.0.0.1:9/api/v1/developer", apiKey: "tw_live_k", fetch: answer });
      for (const seen of c.seen) {
        if ("push" in seen) api.minPosition.sawPush(seen.push);
        else {
          mark = seen.response;
          await api.languages();
        }
      }
      mark = "";
      await api.languages();
      assert.equal(sent[sent.length - 1], c.sent, JSON.stringify(c));
    }
  });
});

describe("parsing", () => {
  test("the limit headers and the RateLimit fields", () => {
    const limits = limitsFromHeaders(
      new Headers({
        "X-RateLimit-Limit": "60",
        "X-RateLimit-Remaining": "0",
        "X-RateLimit-Reset": "1767625260",
        "X-Quota-Limit": "5000",
        "X-Quota-Remaining": "4990",
        "X-Quota-Reset": "1767657600",
        "Retry-After": "41",
        RateLimit: '"minute";r=0;t=41, "day";r=4990;t=36000',
        "RateLimit-Policy": '"minute";q=60;w=60, "day";q=5000;w=86400',
      }),
    );
    assert.deepEqual(limits, {
      rateLimit: 60,
      rateRemaining: 0,
      rateReset: 1767625260,
      quotaLimit: 5000,
      quotaRemaining: 4990,
      quotaReset: 1767657600,
      retryAfterMs: 41_000,
      policies: {
        minute: { remaining: 0, resetSeconds: 41, quota: 60, windowSeconds: 60 },
        day: { remaining: 4990, resetSeconds: 36000, quota: 5000, windowSeconds: 86400 },
      },
    });
    assert.deepEqual(limitsFromHeaders(new Headers({ "X-RateLimit-Limit": "lots", RateLimit: "garbage;;" })).rateLimit, null);
  });

  test("an envelope that is not one still maps by status", () => {
    const error = errorFromParts(502, new Headers({ "X-Request-Id": "req-1" }), "<html>");
    assert.equal(error.constructor.name, "ServerError");
    assert.equal(error.code, "HTTP_502");
    assert.equal(error.requestId, "req-1");
  });

  test("the stream's back-off: equal jitter, capped, reset", () => {
    const backoff = new Backoff(500, 4_000, () => 1);
    assert.deepEqual([backoff.next(), backoff.next(), backoff.next(), backoff.next(), backoff.next()], [500, 1000, 2000, 4000, 4000]);
    backoff.reset();
    assert.equal(new Backoff(500, 4_000, () => 0).next(), 250, "never zero");
  });
});
