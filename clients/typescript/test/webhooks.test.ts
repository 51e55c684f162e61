/**
 * The webhook verifier (src/webhooks.ts) against the shared cases of clients/shared/vectors.json
 * (the Python suite's tests/clients/test_webhooks.py reads the same; their signatures are the
 * server's signer's), the spec's published test vector, and the reference library
 * (`standardwebhooks` from npm) in both directions.
 */

import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, test } from "node:test";
import { Webhook as Reference, WebhookVerificationError as ReferenceError } from "standardwebhooks";
import {
  WEBHOOK_ERROR_REASONS,
  Webhook,
  WebhookBodyNotBytesError,
  WebhookHeaderError,
  WebhookSecretError,
  WebhookSignatureError,
  WebhookTimestampError,
  WebhookVerificationError,
  type WebhookBody,
  type WebhookMessage,
} from "../src/index.js";
import { PACKAGE } from "./support/paths.js";

interface Case {
  name: string;
  secret: string;
  headers: Record<string, string>;
  body: string;
  now: number;
  pass_as?: "string" | "parsed";
  expect?: Record<string, string | number | null>;
  reason?: string;
  header?: string;
}
interface Vectors {
  webhooks: {
    spec: { secret: string; id: string; timestamp: number; body: string; signature: string };
    tolerance: number;
    cases: Case[];
  };
}

const { webhooks } = JSON.parse(readFileSync(join(PACKAGE, "..", "shared", "vectors.json"), "utf8")) as Vectors;
const spec = webhooks.spec;
/** A post.created message as the server writes it: compact JSON, UTF-8. */
const MESSAGE = Buffer.from(webhooks.cases.find((c) => c.expect?.["type"] === "post.created")!.body, "utf8");

function bodyOf(c: Case): WebhookBody {
  if (c.pass_as === "string") return c.body as unknown as WebhookBody;
  if (c.pass_as === "parsed") return JSON.parse(c.body) as WebhookBody;
  return Buffer.from(c.body, "utf8");
}

function fields(message: WebhookMessage): Record<string, string | number | null> {
  return {
    id: message.id,
    timestamp: message.timestamp,
    type: message.type,
    ts: message.ts,
    log_position: message.logPosition,
    cursor: message.cursor,
    post_title: message.post?.title ?? null,
  };
}

/** `f` with the clock the reference library reads (`Date.now`) set to `seconds`. */
function at<T>(seconds: number, f: () => T): T {
  const real = Date.now;
  Date.now = () => seconds * 1000;
  try {
    return f();
  } finally {
    Date.now = real;
  }
}

function refusal(f: () => unknown): WebhookVerificationError {
  try {
    f();
  } catch (e) {
    assert.ok(e instanceof WebhookVerificationError, String(e));
    return e;
  }
  assert.fail("accepted");
}

const secretText = (key: Uint8Array): string => `whsec_${Buffer.from(key).toString("base64")}`;
const nowSeconds = (): number => Math.floor(Date.now() / 1000);

function signed(key: Uint8Array, body: Uint8Array = MESSAGE, ageSeconds = 0, keys: Uint8Array[] = [key]): Record<string, string> {
  const timestamp = nowSeconds() - ageSeconds;
  return {
    "webhook-id": "msg_ts_1",
    "webhook-timestamp": String(timestamp),
    "webhook-signature": keys.map((k) => new Webhook(k).sign("msg_ts_1", timestamp, body)).join(" "),
  };
}

describe("webhooks: the shared cases", () => {
  for (const c of webhooks.cases) {
    test(c.name, () => {
      const webhook = new Webhook(c.secret, { toleranceMs: webhooks.tolerance * 1000 });
      if (c.expect) {
        const message = webhook.verify(bodyOf(c), c.headers, { nowMs: c.now * 1000 });
        const got = fields(message);
        assert.deepEqual(Object.fromEntries(Object.keys(c.expect).map((k) => [k, got[k]])), c.expect);
        assert.ok(Buffer.from(message.body).equals(Buffer.from(c.body, "utf8")));
        assert.deepEqual(message.payload, JSON.parse(c.body));
      } else {
        const error = refusal(() => webhook.verify(bodyOf(c), c.headers, { nowMs: c.now * 1000 }));
        assert.equal(error.reason, c.reason, error.message);
        if (c.header) assert.ok(error instanceof WebhookHeaderError && error.header === c.header);
      }
    });
  }

  test("the cases cover every reason", () => {
    assert.deepEqual(new Set(webhooks.cases.flatMap((c) => (c.reason ? [c.reason] : []))), new Set(WEBHOOK_ERROR_REASONS));
  });
});

describe("webhooks: the reference library", () => {
  // What it does not refuse that this verifier does: a fractional timestamp (it reads the integer
  // part) and a string body (it takes one). With jsonParse false a non-JSON body passes.
  const referenceAccepts = new Set(["invalid_header", "body_not_bytes", "invalid_payload"]);

  test("agrees with each shared case", () => {
    for (const c of webhooks.cases.filter((c) => !c.pass_as)) {
      const verify = () => at(c.now, () => new Reference(c.secret).verify(Buffer.from(c.body, "utf8"), c.headers, { jsonParse: false }));
      if (c.expect || referenceAccepts.has(c.reason!)) assert.doesNotThrow(verify, c.name);
      else assert.throws(verify, ReferenceError, c.name);
    }
  });

  test("the spec's vector is what each signer writes", () => {
    const body = Buffer.from(spec.body, "utf8");
    assert.equal(new Webhook(spec.secret).sign(spec.id, spec.timestamp, body), spec.signature);
    assert.equal(new Reference(spec.secret).sign(spec.id, new Date(spec.timestamp * 1000), spec.body), spec.signature);
  });

  test("what the reference signs is accepted", () => {
    const secret = secretText(randomBytes(32));
    const now = nowSeconds();
    const headers = {
      "webhook-id": "msg_ref_1",
      "webhook-timestamp": String(now),
      "webhook-signature": new Reference(secret).sign("msg_ref_1", new Date(now * 1000), MESSAGE),
    };
    const message = new Webhook(secret).verify(MESSAGE, headers);
    assert.equal(message.id, "msg_ref_1");
    assert.equal(message.timestamp, now);
    assert.equal(message.post?.title, (JSON.parse(MESSAGE.toString("utf8")) as { data: { title: string } }).data.title);
  });

  test("what this client signs the reference verifies, either secret during a rotation", () => {
    const [old, next] = [randomBytes(32), randomBytes(32)];
    const headers = signed(next, MESSAGE, 0, [old, next]);
    for (const key of [old, next]) {
      assert.deepEqual(new Reference(secretText(key)).verify(MESSAGE, headers), JSON.parse(MESSAGE.toString("utf8")));
      assert.equal(new Webhook(secretText(key)).verify(MESSAGE, headers).id, "msg_ts_1");
    }
    assert.equal(refusal(() => new Webhook(randomBytes(32)).verify(MESSAGE, headers)).reason, "bad_signature");
  });

  test("both refuse a changed byte, an old or a future timestamp and a re-serialized body", () => {
    const key = randomBytes(32);
    const changed = Buffer.from(MESSAGE.toString("utf8").replace('"importance":70', '"importance":71'), "utf8");
    const reserialized = Buffer.from(JSON.stringify(JSON.parse(MESSAGE.toString("utf8")), null, 2), "utf8");
    const cases: [string, Uint8Array, Record<string, string>, string][] = [
      ["a changed byte", changed, signed(key), "bad_signature"],
      ["an old timestamp", MESSAGE, signed(key, MESSAGE, 301), "timestamp_too_old"],
      ["a future timestamp", MESSAGE, signed(key, MESSAGE, -301), "timestamp_too_new"],
      ["a re-serialized body", reserialized, signed(key), "body_reserialized"],
    ];
    for (const [name, body, headers, reason] of cases) {
      assert.ok(name.endsWith("timestamp") || !Buffer.from(body).equals(MESSAGE), name);
      assert.equal(refusal(() => new Webhook(key).verify(body, headers)).reason, reason, name);
      assert.throws(() => new Reference(secretText(key)).verify(Buffer.from(body), headers), ReferenceError, name);
    }
  });
});

describe("webhooks: what the errors say, secrets and headers", () => {
  test("a re-serialized body is named as such; a changed value is not", () => {
    const key = randomBytes(32);
    const headers = signed(key);
    const reserialized = refusal(() => new Webhook(key).verify(Buffer.from(JSON.stringify(JSON.parse(MESSAGE.toString("utf8")), null, 1)), headers));
    assert.ok(reserialized instanceof WebhookSignatureError);
    assert.equal(reserialized.reason, "body_reserialized");
    assert.match(reserialized.message, /re-serialized.*exactly as received/);
    const changed = refusal(() => new Webhook(key).verify(Buffer.from(MESSAGE.toString("utf8").replace("BULLISH", "BEARISH")), headers));
    assert.equal(changed.reason, "bad_signature");
    assert.doesNotMatch(changed.message, /re-serialized/);
  });

  test("a string or a parsed body is refused, saying to pass the raw bytes", () => {
    const webhook = new Webhook(randomBytes(32));
    const text = refusal(() => webhook.verify(MESSAGE.toString("utf8") as unknown as Uint8Array, signed(randomBytes(32))));
    assert.ok(text instanceof WebhookBodyNotBytesError);
    assert.match(text.message, /is a string.*as bytes, before any parsing/);
    const parsed = refusal(() => webhook.verify(JSON.parse(MESSAGE.toString("utf8")) as Uint8Array, {}));
    assert.ok(parsed instanceof WebhookBodyNotBytesError);
    assert.match(parsed.message, /looks already parsed.*as bytes, before any parsing/);
  });

  test("an ArrayBuffer body, and the clocks on a timestamp error", () => {
    const key = randomBytes(32);
    const arrayBuffer = MESSAGE.buffer.slice(MESSAGE.byteOffset, MESSAGE.byteOffset + MESSAGE.length);
    assert.equal(new Webhook(key, { toleranceMs: 10_000 }).verify(arrayBuffer, signed(key, MESSAGE, 9)).id, "msg_ts_1");
    const error = refusal(() => new Webhook(key, { toleranceMs: 10_000 }).verify(MESSAGE, signed(key, MESSAGE, 11)));
    assert.ok(error instanceof WebhookTimestampError);
    assert.deepEqual([error.reason, error.now - error.timestamp, error.toleranceMs], ["timestamp_too_old", 11, 10_000]);
  });

  test("a secret in each form", () => {
    const key = randomBytes(32);
    const headers = signed(key);
    const text = Buffer.from(key).toString("base64");
    for (const secret of [secretText(key), text, text.replace(/=+$/, ""), key]) {
      assert.equal(new Webhook(secret).verify(MESSAGE, headers).id, "msg_ts_1");
    }
    for (const bad of ["whsec_not*base64", "", "whsec_"]) assert.throws(() => new Webhook(bad), WebhookSecretError, bad);
  });

  test("headers as fetch Headers or node:http's req.headers", () => {
    const [old, next] = [randomBytes(32), randomBytes(32)];
    const both = signed(next, MESSAGE, 0, [old, next]);
    const lines = both["webhook-signature"]!.split(" ");
    // fetch: two header lines, which Headers joins with ", ".
    const fetchHeaders = new Headers({ "Webhook-Id": both["webhook-id"]!, "Webhook-Timestamp": both["webhook-timestamp"]! });
    for (const line of lines) fetchHeaders.append("Webhook-Signature", line);
    assert.equal(new Webhook(old).verify(MESSAGE, fetchHeaders).id, "msg_ts_1");
    assert.equal(new Webhook(next).verify(MESSAGE, fetchHeaders).id, "msg_ts_1");
    // node:http: lower-case names, a repeated header as an array.
    const nodeHeaders = { "webhook-id": both["webhook-id"], "webhook-timestamp": both["webhook-timestamp"], "webhook-signature": lines, host: undefined };
    assert.equal(new Webhook(next).verify(MESSAGE, nodeHeaders).id, "msg_ts_1");
    const conflicting = refusal(() => new Webhook(next).verify(MESSAGE, { ...nodeHeaders, "Webhook-Id": "msg_other" }));
    assert.ok(conflicting instanceof WebhookHeaderError);
    assert.deepEqual([conflicting.reason, conflicting.header], ["invalid_header", "webhook-id"]);
  });
});

describe("webhooks: the README's receiver", () => {
  async function waitFor<T>(read: () => T | undefined, what: string): Promise<T> {
    for (let i = 0; i < 500; i++) {
      const value = read();
      if (value !== undefined) return value;
      await new Promise((resolveWait) => setTimeout(resolveWait, 20));
    }
    throw new Error(`no ${what} within 10 s`);
  }

  test("acts on a signed post and refuses a changed one", async () => {
    const readme = readFileSync(join(PACKAGE, "README.md"), "utf8");
    const code = /```js\n([\s\S]*?)```/.exec(readme.slice(readme.indexOf("\n## Receiving webhooks\n")))?.[1] ?? "";
    const listen = "}).listen(8080);";
    assert.ok(code.includes(listen), "the receiver listens on a port");
    // Inside the package, so that "tickerwire-client" resolves to it (dist, built by npm test).
    const file = join(PACKAGE, "build", "readme-receiver.mjs");
    writeFileSync(file, code.replace(listen, '}).listen(0, "127.0.0.1", function () { console.log(`port ${this.address().port}`); });'));
    const key = randomBytes(32);
    const child = spawn(process.execPath, [file], {
      env: { ...process.env, TICKERWIRE_WEBHOOK_SECRET: secretText(key) },
      stdio: ["ignore", "pipe", "inherit"],
    });
    try {
      let out = "";
      child.stdout.on("data", (chunk: Buffer) => (out += chunk.toString()));
      const port = await waitFor(() => /port (\d+)/.exec(out)?.[1], "port");
      const post = (body: Uint8Array) =>
        fetch(`http://127.0.0.1:${port}/`, { method: "POST", body: new Uint8Array(body), headers: signed(key) });
      const good = await post(MESSAGE);
      const changed = await post(Buffer.from(MESSAGE.toString("utf8").replace("70", "71"), "utf8"));
      assert.deepEqual([good.status, changed.status, await changed.text()], [204, 400, "bad_signature"]);
      const { cursor, data } = JSON.parse(MESSAGE.toString("utf8")) as { cursor: string; data: { title: string } };
      assert.equal(out.split("\n")[1], `msg_ts_1 ${cursor} ${data.title}`);
    } finally {
      child.kill();
      rmSync(file, { force: true });
    }
  });
});
