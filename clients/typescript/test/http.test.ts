/**
 * Every endpoint against the real API, each result with its meta; pagination both ways with the
 * required cap; AbortSignal; and every error class from a real answer (401, 403, 404, 409,
 * 422, 429 rate limit and daily quota, a timeout, a refused connection, an abort).
 */

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import {
  AbortedError,
  AuthenticationError,
  BadgeMissingError,
  ConflictError,
  ConnectionError,
  CursorEpochChangedError,
  NotFoundError,
  QuotaExhaustedError,
  RateLimitError,
  RequestTimeoutError,
  ValidationError,
  WorkspaceSuspendedError,
  type PostLean,
} from "../src/index.js";
import { Helper, LANGS, client, freshIds, sleep, until, upState, workspace } from "./support/stack.js";

const helper = new Helper();
after(() => helper.close());

describe("every endpoint", () => {
  const api = client();

  test("posts, post, search: pages keep their meta", async () => {
    const page = await api.posts({ lang: "de-DE", limit: 5 });
    assert.equal(page.posts.length, 5);
    assert.equal(page.meta.status, 200);
    assert.ok(page.meta.requestId, "X-Request-Id");
    assert.equal(page.meta.limits.rateLimit, 60);
    assert.ok(page.meta.limits.policies["minute"]?.remaining !== null);
    assert.equal(page.meta.limits.policies["day"]?.quota, page.meta.limits.quotaLimit);
    assert.ok(page.meta.logPosition?.match(/^\d+:\d+/));
    assert.equal(JSON.stringify(page).includes('"meta"'), false, "meta is not part of the body");
    const first = page.posts[0] as PostLean;
    assert.equal(first.lang, "de-DE");
    const detail = await api.post(first.id, { lang: "de-DE" });
    assert.equal(detail.id, first.id);
    assert.equal(detail.meta.status, 200);
    const bySlug = await api.post(first.slug, { lang: "de-DE" });
    assert.equal(bySlug.id, first.id);
    const word = first.title.split(/\s+/).find((w) => w.length > 4) ?? first.title;
    const hits = await api.search(word, { lang: "de-DE", limit: 3 });
    assert.ok(Array.isArray(hits.posts));
    assert.equal(hits.meta.status, 200);
  });

  test("categories, category, tokens, token, sentiment pulse, languages, changes", async () => {
    const tree = await api.categories({ lang: "fr-FR" });
    assert.ok(tree.meta.status === 200);
    const slug = JSON.stringify(tree).match(/"slug":"([^"]+)"/)?.[1];
    assert.ok(slug);
    assert.equal((await api.category(slug, { lang: "fr-FR" })).slug, slug);
    const tokens = await api.tokens();
    assert.equal(tokens.tokens.length, 50);
    const ticker = tokens.tokens[0]?.ticker ?? "";
    assert.equal((await api.token(ticker)).ticker, ticker);
    const pulse = await api.sentimentPulse();
    assert.equal(pulse.window, "24h");
    assert.ok(pulse.breakdown.BULLISH.count >= 0);
    const languages = await api.languages();
    assert.deepEqual(
      LANGS.filter((code) => languages.languages.some((l) => l.code === code)),
      [...LANGS],
    );
    const head = await api.changes({ lang: ["en-US", "de-DE"] });
    assert.match(head.cursor, /^c1~/);
    assert.equal(head.has_more, false);
    assert.equal(head.meta.status, 200);
  });

  test("every page, both directions, with the required cap", async () => {
    const older = await api.iterPosts({ lang: "en-US", limit: 7 }).toArray({ max: 1000 });
    const all = await api.iterPosts({ lang: "en-US", limit: 50 }).toArray({ max: 1000 });
    assert.ok(older.length > 40, `${older.length} of the demo's 60 posts are in en-US`);
    assert.deepEqual(older.map((p) => p.id), all.map((p) => p.id), "the page size changes nothing");
    assert.equal(new Set(older.map((p) => p.id)).size, older.length);
    const sorted = [...older].sort((a, b) => (a.published_at > b.published_at ? -1 : a.published_at < b.published_at ? 1 : b.id - a.id));
    assert.deepEqual(older.map((p) => p.id), sorted.map((p) => p.id), "newest first");
    const capped = await api.iterPosts({ lang: "en-US", limit: 7 }).toArray({ max: 10 });
    assert.deepEqual(capped.map((p) => p.id), older.slice(0, 10).map((p) => p.id));
    const oldest = older[older.length - 1] as PostLean;
    const newer = await api.iterPosts({ lang: "en-US", limit: 7, direction: "newer", after: oldest.id }).toArray({ max: 1000 });
    assert.deepEqual(newer.map((p) => p.id), older.slice(0, -1).reverse().map((p) => p.id), "oldest first");
    let pages = 0;
    for await (const page of api.iterPosts({ lang: "en-US", limit: 25 }).pages()) {
      pages += 1;
      assert.equal(page.meta.status, 200);
    }
    assert.equal(pages, Math.ceil(older.length / 25));
  });

  test("webhook endpoints, one endpoint, its attempts: the workspace's own only", async () => {
    const key = await workspace(helper, "ts_hooks");
    const other = await workspace(helper, "ts_hooks_other");
    await helper.cli("webhooks", "register", "--workspace", "ts_hooks", "--url", "http://127.0.0.1:9/a", "--locales", "en-US", "--id", "whe_tsreads01");
    await helper.cli("webhooks", "register", "--workspace", "ts_hooks_other", "--url", "http://127.0.0.1:9/b", "--id", "whe_tsreads02");
    const own = client({ apiKey: key });
    await until("the endpoint is listed", async () => (await own.webhookEndpoints()).endpoints.length === 1);
    const listed = await own.webhookEndpoints();
    assert.deepEqual(listed.endpoints.map((e) => e.id), ["whe_tsreads01"]);
    assert.equal(listed.meta.status, 200);
    const one = await own.webhookEndpoint("whe_tsreads01");
    assert.equal(one.url, "http://127.0.0.1:9/a");
    assert.deepEqual(one.filters, { locales: ["en-US"], tickers: null, categories: null });
    assert.ok(["active", "disabled"].includes(one.status));
    const attempts = await own.webhookAttempts("whe_tsreads01", { limit: 5 });
    assert.ok(Array.isArray(attempts.attempts) && attempts.attempts.length <= 5);
    assert.equal(attempts.meta.status, 200);
    const foreign = await own.webhookEndpoint("whe_tsreads02").catch((e: unknown) => e);
    assert.ok(foreign instanceof NotFoundError, String(foreign));
    const limit = await own.webhookAttempts("whe_tsreads01", { limit: 101 }).catch((e: unknown) => e);
    assert.ok(limit instanceof ValidationError && limit.field === "limit", String(limit));
    await until("the other endpoint is listed", async () => (await client({ apiKey: other }).webhookEndpoints()).endpoints.length === 1);
    assert.deepEqual((await client({ apiKey: other }).webhookEndpoints()).endpoints.map((e) => e.id), ["whe_tsreads02"]);
  });

  test("iterChanges walks every announcement after a cursor, page by page", async () => {
    const head = await api.changes({ lang: ["en-US", "de-DE"] });
    const ids = freshIds(4);
    await helper.publish(ids.map((id) => ({ id, langs: ["en-US", "de-DE", "fr-FR"] })));
    const expected = ids.flatMap((id) => ["en-US", "de-DE"].map((lang) => `${id} ${lang}`)).sort();
    let walked: string[] = [];
    let pages = 0;
    await until("the posts are walked", async () => {
      walked = [];
      pages = 0;
      for await (const page of api.iterChanges({ cursor: head.cursor, lang: ["en-US", "de-DE"], limit: 3 })) {
        pages += 1;
        walked.push(...page.posts.map((p) => `${p.id} ${p.lang}`));
      }
      return walked.length >= expected.length;
    });
    assert.deepEqual([...walked].sort(), expected, "each once, fr-FR filtered out");
    assert.ok(pages >= 3);
  });

  test("an AbortSignal aborts a call", async () => {
    const controller = new AbortController();
    controller.abort(new Error("not needed"));
    await assert.rejects(api.languages({ signal: controller.signal }), AbortedError);
    const late = new AbortController();
    const call = api.tokens({ signal: late.signal });
    late.abort();
    await assert.rejects(call, AbortedError);
  });
});

describe("every error class from a real answer", () => {
  const api = client({ retry: { maxAttempts: 1 } });

  test("401 NOT_AUTHENTICATED", async () => {
    const error = await client({ apiKey: "tw_live_not_a_key" }).languages().catch((e: unknown) => e);
    assert.ok(error instanceof AuthenticationError, String(error));
    assert.equal(error.status, 401);
    assert.equal(error.code, "NOT_AUTHENTICATED");
    assert.ok(error.requestId);
    assert.ok(error.headers.get("content-type")?.includes("json"));
  });

  test("404 NOT_FOUND, 422 VALIDATION_FAILED with its field, 409 CURSOR_EPOCH_CHANGED", async () => {
    const missing = await api.post(987_654_321).catch((e: unknown) => e);
    assert.ok(missing instanceof NotFoundError, String(missing));
    assert.equal(missing.code, "NOT_FOUND");
    const invalid = await api.posts({ limit: 500 }).catch((e: unknown) => e);
    assert.ok(invalid instanceof ValidationError, String(invalid));
    assert.equal(invalid.status, 422);
    assert.equal(invalid.field, "limit");
    const sentiment = await api.posts({ sentiment: "BULLISH", ticker: ["BTC", "ETH"], since: "yesterday" }).catch((e: unknown) => e);
    assert.ok(sentiment instanceof ValidationError);
    assert.equal(sentiment.field, "since");
    const head = await api.changes();
    const foreign = head.cursor.replace(/^c1~[0-9a-z]+/, "c1~0000deadbeef");
    const conflict = await api.changes({ cursor: foreign }).catch((e: unknown) => e);
    assert.ok(conflict instanceof ConflictError && conflict instanceof CursorEpochChangedError, String(conflict));
    assert.equal(conflict.code, "CURSOR_EPOCH_CHANGED");
    assert.equal(conflict.field, "cursor");
  });

  test("403 BADGE_MISSING and WORKSPACE_SUSPENDED", async () => {
    const key = await workspace(helper, "ts_nobadge", [], false);
    const badge = await client({ apiKey: key }).languages().catch((e: unknown) => e);
    assert.ok(badge instanceof BadgeMissingError, String(badge));
    assert.equal(badge.status, 403);
    const good = await workspace(helper, "ts_suspend");
    const suspended = client({ apiKey: good, retry: { maxAttempts: 1 } });
    await suspended.languages();
    await helper.cli("workspace", "suspend", "ts_suspend");
    let error: unknown;
    for (let i = 0; i < 100 && !(error instanceof WorkspaceSuspendedError); i++) {
      error = await suspended.languages().then(() => null, (e: unknown) => e);
      await sleep(100);
    }
    assert.ok(error instanceof WorkspaceSuspendedError, String(error));
    assert.equal(error.code, "WORKSPACE_SUSPENDED");
  });

  test("429 RATE_LIMITED: the limit headers on the error; a wait past the budget is raised, not shortened", async () => {
    const key = await workspace(helper, "ts_ratelimit", ["--rate-limit", "3"]);
    const limited = client({ apiKey: key, retry: { maxTotalWaitMs: 0 } });
    let error: unknown;
    const started = Date.now();
    for (let i = 0; i < 10 && !(error instanceof RateLimitError); i++) {
      error = await limited.languages().then(() => null, (e: unknown) => e);
    }
    assert.ok(error instanceof RateLimitError, String(error));
    assert.ok(Date.now() - started < 5_000, "no silent wait");
    assert.equal(error.status, 429);
    assert.equal(error.limit, 3);
    assert.equal(error.remaining, 0);
    assert.ok(error.reset !== null && error.reset > Date.now() / 1000 - 1);
    assert.ok(error.retryAfterMs !== null && error.retryAfterMs > 0 && error.retryAfterMs <= 60_000);
    assert.equal(error.meta.limits.policies["minute"]?.remaining, 0);
    assert.equal(error.envelope.retryAfterSec, error.retryAfterMs / 1000);
  });

  test("429 QUOTA_EXHAUSTED is raised at once with the default policy, not waited for", async () => {
    const key = await workspace(helper, "ts_quota", ["--daily-quota", "2"]);
    const quota = client({ apiKey: key });
    await quota.languages();
    await quota.languages();
    const started = Date.now();
    const error = await quota.languages().catch((e: unknown) => e);
    assert.ok(error instanceof QuotaExhaustedError, String(error));
    assert.ok(Date.now() - started < 2_000, `raised after ${Date.now() - started} ms`);
    assert.equal(error.limit, 2);
    assert.equal(error.remaining, 0);
    assert.ok(error.retryAfterMs !== null && error.retryAfterMs > 30_000 || new Date().getUTCHours() === 23);
  });

  test("a refused connection, a timeout against a frozen API", async () => {
    const closed = client({ baseUrl: "http://127.0.0.1:9/api/v1/developer", retry: { maxAttempts: 2, backoffBaseMs: 10 } });
    await assert.rejects(closed.languages(), ConnectionError);
    const apiPid = upState().pids.children.api ?? 0;
    process.kill(apiPid, "SIGSTOP");
    try {
      const frozen = client({ timeoutMs: 500, retry: { maxAttempts: 2, backoffBaseMs: 10, maxCallTimeMs: 2_000 } });
      const started = Date.now();
      await assert.rejects(frozen.languages(), RequestTimeoutError);
      assert.ok(Date.now() - started < 2_500);
    } finally {
      process.kill(apiPid, "SIGCONT");
    }
  });
});

