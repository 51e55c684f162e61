/**
 * The webhook endpoint operations against a local fake HTTP server on 127.0.0.1 (pure client
 * logic: the server side is tested with the server, and the Python client against it): each operation's request
 * (method, path, query, headers, body) and the decoding of its answer, the create's
 * Idempotency-Key kept over its retries, which writes are retried after what, and the errors of
 * the new 409 codes.
 */

import assert from "node:assert/strict";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { after, before, beforeEach, describe, test } from "node:test";
import {
  Client,
  ConflictError,
  ConnectionError,
  EndpointLimitError,
  IdempotencyKeyReusedError,
  NotFoundError,
  OPERATIONS,
  ServiceUnavailableError,
  ValidationError,
  type WebhookReplay,
} from "../src/index.js";

const KEY = `tw_live_${"k".repeat(43)}`;
const SECRET = "whsec_c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0";
const BASE = "/api/v1/developer/webhooks/endpoints";

function endpoint(changes: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    id: "whe_abc123",
    url: "https://hooks.example/tw",
    description: "Desk alerts",
    filters: { locales: ["en-US"], tickers: null, categories: null },
    status: "active",
    disabled_reason: null,
    disabled_at: null,
    failing_since: null,
    next_attempt_at: null,
    attempt: 0,
    delivered: 3,
    last_delivered_at: "2026-12-05T10:00:00.000Z",
    cursor: "c1~5d71cd8b84d9~0.10",
    created_at: "2026-12-01T09:00:00.000Z",
    secret_generation: 1,
    ...changes,
  };
}

interface Seen {
  method: string;
  url: string;
  headers: IncomingMessage["headers"];
  body: string;
}

type Answer = "drop" | { status: number; body?: unknown; headers?: Record<string, string> };

/** Answers each request with the next scripted answer; `"drop"` destroys the connection unanswered. */
class FakeApi {
  readonly seen: Seen[] = [];
  answers: Answer[] = [];
  private server: Server | null = null;
  url = "";

  async start(): Promise<void> {
    this.server = createServer((req, res) => void this.handle(req, res));
    await new Promise<void>((resolve) => this.server?.listen(0, "127.0.0.1", resolve));
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}/api/v1/developer`;
  }

  async stop(): Promise<void> {
    this.server?.closeAllConnections();
    await new Promise((resolve) => this.server?.close(resolve));
  }

  script(...answers: Answer[]): void {
    this.answers = answers;
    this.seen.length = 0;
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    this.seen.push({ method: req.method ?? "", url: req.url ?? "", headers: req.headers, body: Buffer.concat(chunks).toString("utf8") });
    const answer = this.answers.shift() ?? { status: 500, body: { error: { code: "INTERNAL", message: "unscripted" } } };
    if (answer === "drop") {
      req.socket.destroy();
      return;
    }
    const text = answer.body === undefined ? "" : JSON.stringify(answer.body);
    res.writeHead(answer.status, { ...(text ? { "Content-Type": "application/json" } : {}), ...answer.headers });
    res.end(text);
  }
}

function error(status: number, code: string, field?: string, headers: Record<string, string> = {}): Answer {
  return { status, body: { error: { code, message: "m", ...(field ? { field } : {}) } }, headers };
}

const fake = new FakeApi();
before(() => fake.start());
after(() => fake.stop());

function api(): Client {
  return new Client({ baseUrl: fake.url, apiKey: KEY, timeoutMs: 5_000, retry: { maxAttempts: 3, backoffBaseMs: 5, backoffCapMs: 10 } });
}

describe("webhook endpoint reads", () => {
  beforeEach(() => fake.script());

  test("list, get and attempts: GET with the key, typed answers with their meta", async () => {
    fake.script(
      { status: 200, body: { endpoints: [endpoint(), endpoint({ id: "whe_def456", status: "paused", description: "" })] } },
      { status: 200, body: endpoint({ status: "disabled", disabled_reason: "gone" }) },
      {
        status: 200,
        body: {
          attempts: [
            {
              webhook_id: "msg_test_1",
              type: "webhook.test",
              attempt: 1,
              attempted_at: "2026-12-05T10:00:00.000Z",
              outcome: "failed",
              status: 500,
              latency_ms: 12.5,
              error: "HTTP 500",
              response_excerpt: "oops",
              next_attempt_at: null,
            },
          ],
        },
      },
    );
    const client = api();
    const listed = await client.webhookEndpoints();
    const one = await client.webhookEndpoint("whe_abc123");
    const attempts = await client.webhookAttempts("whe_abc123", { limit: 5 });
    assert.deepEqual(
      fake.seen.map((s) => [s.method, s.url, s.body]),
      [
        ["GET", BASE, ""],
        ["GET", `${BASE}/whe_abc123`, ""],
        ["GET", `${BASE}/whe_abc123/attempts?limit=5`, ""],
      ],
    );
    assert.ok(fake.seen.every((s) => s.headers.authorization === `Bearer ${KEY}`));
    assert.deepEqual(listed.endpoints.map((e) => [e.id, e.status, e.description]), [
      ["whe_abc123", "active", "Desk alerts"],
      ["whe_def456", "paused", ""],
    ]);
    assert.equal(listed.meta.status, 200);
    assert.equal(one.status, "disabled");
    assert.equal(one.disabled_reason, "gone");
    assert.equal(attempts.attempts[0]?.type, "webhook.test");
    assert.equal(attempts.attempts[0]?.response_excerpt, "oops");
  });

  test("an endpoint id is one path segment", async () => {
    fake.script(error(404, "NOT_FOUND"));
    await assert.rejects(api().webhookEndpoint("whe_x/../../posts"), NotFoundError);
    assert.equal(fake.seen[0]?.url, `${BASE}/whe_x%2F..%2F..%2Fposts`);
  });
});

describe("create", () => {
  test("posts the given fields as JSON with an Idempotency-Key; the secret and Location come back", async () => {
    fake.script({ status: 201, body: { endpoint: endpoint(), secret: SECRET }, headers: { Location: `${BASE}/whe_abc123` } });
    const created = await api().createWebhookEndpoint({
      url: "https://hooks.example/tw",
      description: "Desk alerts",
      locales: ["en-US"],
      tickers: ["BTC", "ETH"],
      categories: undefined,
    });
    const [seen] = fake.seen;
    assert.equal(seen?.method, "POST");
    assert.equal(seen?.url, BASE);
    assert.equal(seen?.headers["content-type"], "application/json");
    assert.deepEqual(JSON.parse(seen?.body ?? ""), { url: "https://hooks.example/tw", description: "Desk alerts", locales: ["en-US"], tickers: ["BTC", "ETH"] });
    assert.match(String(seen?.headers["idempotency-key"]), /^tw-[0-9a-f]{32}$/);
    assert.equal(created.secret, SECRET);
    assert.equal(created.endpoint.id, "whe_abc123");
    assert.equal(created.meta.status, 201);
    assert.equal(created.meta.headers.get("location"), `${BASE}/whe_abc123`);
  });

  test("a create whose answer was lost is retried with the same key and body", async () => {
    fake.script("drop", error(503, "SERVICE_UNAVAILABLE", undefined, { "Retry-After": "0" }), { status: 201, body: { endpoint: endpoint(), secret: SECRET } });
    const created = await api().createWebhookEndpoint({ url: "https://hooks.example/tw" }, { idempotencyKey: "order-77" });
    assert.equal(created.secret, SECRET);
    assert.deepEqual(fake.seen.map((s) => s.headers["idempotency-key"]), ["order-77", "order-77", "order-77"]);
    assert.equal(new Set(fake.seen.map((s) => s.body)).size, 1);
  });

  test("two creates without a key get two keys", async () => {
    fake.script({ status: 201, body: { endpoint: endpoint(), secret: SECRET } }, { status: 201, body: { endpoint: endpoint(), secret: SECRET } });
    const client = api();
    await client.createWebhookEndpoint({ url: "https://hooks.example/a" });
    await client.createWebhookEndpoint({ url: "https://hooks.example/a" });
    assert.notEqual(fake.seen[0]?.headers["idempotency-key"], fake.seen[1]?.headers["idempotency-key"]);
  });

  test("a key the server would refuse is refused before sending", async () => {
    fake.script();
    for (const key of ["", "x".repeat(256), "café", "tab\there", " padded"]) {
      await assert.rejects(api().createWebhookEndpoint({ url: "https://hooks.example/a" }, { idempotencyKey: key }), RangeError, JSON.stringify(key));
    }
    assert.equal(fake.seen.length, 0);
  });

  test("IDEMPOTENCY_KEY_REUSED and ENDPOINT_LIMIT are their own ConflictErrors, not retried; a refused field is named", async () => {
    fake.script(error(409, "IDEMPOTENCY_KEY_REUSED"), error(409, "ENDPOINT_LIMIT"), error(400, "VALIDATION_FAILED", "colour"));
    const client = api();
    const reused = await client.createWebhookEndpoint({ url: "https://hooks.example/a" }, { idempotencyKey: "k1" }).catch((e: unknown) => e);
    assert.ok(reused instanceof IdempotencyKeyReusedError && reused instanceof ConflictError, String(reused));
    const limit = await client.createWebhookEndpoint({ url: "https://hooks.example/a" }).catch((e: unknown) => e);
    assert.ok(limit instanceof EndpointLimitError && limit.status === 409, String(limit));
    const invalid = await client.createWebhookEndpoint({ url: "https://hooks.example/a" }).catch((e: unknown) => e);
    assert.ok(invalid instanceof ValidationError && invalid.field === "colour", String(invalid));
    assert.equal(fake.seen.length, 3);
  });
});

describe("update, delete, pause, resume, rotate, replay, test", () => {
  test("update sends only the fields given, null as null", async () => {
    fake.script({ status: 200, body: endpoint({ description: "New" }) });
    const client = api();
    const updated = await client.updateWebhookEndpoint("whe_abc123", { description: "New", locales: null, tickers: ["BTC"] });
    assert.equal(fake.seen[0]?.method, "PATCH");
    assert.equal(fake.seen[0]?.url, `${BASE}/whe_abc123`);
    assert.equal(fake.seen[0]?.headers["content-type"], "application/json");
    assert.deepEqual(JSON.parse(fake.seen[0]?.body ?? ""), { description: "New", locales: null, tickers: ["BTC"] });
    assert.equal(updated.description, "New");
    await assert.rejects(client.updateWebhookEndpoint("whe_abc123", {}), TypeError);
    await assert.rejects(client.updateWebhookEndpoint("whe_abc123", { colour: "red" } as never), TypeError);
    assert.equal(fake.seen.length, 1);
  });

  test("delete resolves to the meta of its 204", async () => {
    fake.script({ status: 204, headers: { "X-RateLimit-Remaining": "41" } });
    const meta = await api().deleteWebhookEndpoint("whe_abc123");
    assert.deepEqual([fake.seen[0]?.method, fake.seen[0]?.url, fake.seen[0]?.body], ["DELETE", `${BASE}/whe_abc123`, ""]);
    assert.equal(meta.status, 204);
    assert.equal(meta.limits.rateRemaining, 41);
  });

  test("pause, resume, rotate-secret and test POST without a body", async () => {
    fake.script(
      { status: 200, body: endpoint({ status: "paused" }) },
      { status: 200, body: endpoint() },
      { status: 200, body: { endpoint: endpoint({ secret_generation: 2 }), secret: SECRET } },
      { status: 202, body: { webhook_id: "msg_test_2b" } },
    );
    const client = api();
    assert.equal((await client.pauseWebhookEndpoint("whe_abc123")).status, "paused");
    assert.equal((await client.resumeWebhookEndpoint("whe_abc123")).status, "active");
    const rotated = await client.rotateWebhookSecret("whe_abc123");
    const queued = await client.sendWebhookTest("whe_abc123");
    assert.deepEqual(
      fake.seen.map((s) => [s.method, s.url, s.body, s.headers["content-type"] ?? null]),
      ["pause", "resume", "rotate-secret", "test"].map((action) => ["POST", `${BASE}/whe_abc123/${action}`, "", null]),
    );
    assert.equal(rotated.secret, SECRET);
    assert.equal(rotated.endpoint.secret_generation, 2);
    assert.equal(queued.webhook_id, "msg_test_2b");
    assert.equal(queued.meta.status, 202);
  });

  test("replay takes exactly one of since or cursor", async () => {
    fake.script({ status: 202, body: endpoint() }, { status: 202, body: endpoint() }, { status: 202, body: endpoint() });
    const client = api();
    await client.replayWebhookEndpoint("whe_abc123", { since: new Date(Date.UTC(2026, 11, 5, 9, 30)) });
    await client.replayWebhookEndpoint("whe_abc123", { since: "2026-12-05T09:30:00Z" });
    const replayed = await client.replayWebhookEndpoint("whe_abc123", { cursor: "c1~5d71cd8b84d9~0.4" });
    for (const wrong of [{}, { since: "2026-12-05T09:30:00Z", cursor: "c1~x" }]) {
      await assert.rejects(client.replayWebhookEndpoint("whe_abc123", wrong as unknown as WebhookReplay), TypeError);
    }
    assert.deepEqual(fake.seen.map((s) => [s.method, s.url]), Array(3).fill(["POST", `${BASE}/whe_abc123/replay`]));
    assert.deepEqual(fake.seen.map((s) => JSON.parse(s.body)), [
      { since: "2026-12-05T09:30:00.000Z" },
      { since: "2026-12-05T09:30:00Z" },
      { cursor: "c1~5d71cd8b84d9~0.4" },
    ]);
    assert.equal(replayed.meta.status, 202);
  });
});

describe("retries of writes", () => {
  const once: [string, (c: Client) => Promise<unknown>][] = [
    ["rotate-secret", (c) => c.rotateWebhookSecret("whe_abc123")],
    ["test", (c) => c.sendWebhookTest("whe_abc123")],
    ["replay", (c) => c.replayWebhookEndpoint("whe_abc123", { cursor: "c1~x" })],
  ];
  for (const [name, call] of once) {
    test(`${name} is not retried after a lost answer, a 503 or a 500`, async () => {
      const client = api();
      for (const [answer, cls] of [
        ["drop", ConnectionError],
        [error(503, "SERVICE_UNAVAILABLE", undefined, { "Retry-After": "0" }), ServiceUnavailableError],
        [error(500, "INTERNAL"), Error],
      ] as const) {
        fake.script(answer);
        await assert.rejects(call(client), cls);
        assert.equal(fake.seen.length, 1);
      }
    });
  }

  test("a write is retried after a 429, which the server answers before acting", async () => {
    fake.script(error(429, "RATE_LIMITED", undefined, { "Retry-After": "0" }), { status: 202, body: { webhook_id: "msg_test_3" } });
    assert.equal((await api().sendWebhookTest("whe_abc123")).webhook_id, "msg_test_3");
    assert.equal(fake.seen.length, 2);
  });

  test("update, delete, pause and resume are retried after a lost answer", async () => {
    fake.script("drop", { status: 200, body: endpoint() }, "drop", { status: 204 }, "drop", { status: 200, body: endpoint() }, "drop", { status: 200, body: endpoint() });
    const client = api();
    await client.updateWebhookEndpoint("whe_abc123", { url: "https://hooks.example/b" });
    await client.deleteWebhookEndpoint("whe_abc123");
    await client.pauseWebhookEndpoint("whe_abc123");
    await client.resumeWebhookEndpoint("whe_abc123");
    assert.deepEqual(fake.seen.map((s) => s.method), ["PATCH", "PATCH", "DELETE", "DELETE", "POST", "POST", "POST", "POST"]);
  });
});

test("iterChanges passes each page's cursor on and ends after the page with has_more false", async () => {
  fake.script(
    { status: 200, body: { posts: [], cursor: "c1~e~0.2", has_more: true } },
    { status: 200, body: { posts: [], cursor: "c1~e~0.4", has_more: true } },
    { status: 200, body: { posts: [], cursor: "c1~e~0.5", has_more: false } },
  );
  const cursors: string[] = [];
  for await (const page of api().iterChanges({ cursor: "c1~e~0.0", categories: ["defi"] })) cursors.push(page.cursor);
  assert.deepEqual(cursors, ["c1~e~0.2", "c1~e~0.4", "c1~e~0.5"]);
  assert.deepEqual(fake.seen.map((s) => new URL(s.url, "http://x").searchParams.get("cursor")), ["c1~e~0.0", "c1~e~0.2", "c1~e~0.4"]);
  assert.ok(fake.seen.every((s) => s.url.startsWith("/api/v1/developer/changes?") && s.url.includes("categories=defi") && s.url.includes("limit=50")));
});

test("every operation the client maps is a method of Client", () => {
  const client = api();
  for (const [operation, method] of Object.entries(OPERATIONS)) {
    assert.equal(typeof client[method], "function", operation);
  }
});
