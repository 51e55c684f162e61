/**
 * The resuming stream against the real stream process: resume cursors across 200 random
 * reconnects, a SIGKILL and a SIGSTOP of the stream process, a slow loop, a refused cursor, the
 * stop-close codes and refused handshakes, the connection limit, a client restarted from its file
 * cursor store, and positions handed between the Python client and this one.
 */

import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtempSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { after, describe, test } from "node:test";
import {
  AuthenticationError,
  FileCursorStore,
  MemoryCursorStore,
  ResumePoint,
  ValidationError,
  WorkspaceSuspendedError,
  type CursorRefusal,
  type ResumingStream,
  type StreamItem,
} from "../src/index.js";
import { Helper, LANGS, PACKAGE, STATE_DIR, client, freshIds, sleep, streamPid, until, within, workspace, type PostSpec } from "./support/stack.js";

const helper = new Helper();
after(() => helper.close());

const key = (id: number, lang: string): string => `${id}/${lang}`;

/**
 * Takes items from `stream` into `seen` (counting repeats) until `done()`, the stream ends or
 * `timeoutMs` passed (then the stream is closed: the test's assertions say what was missing).
 */
async function consume(
  stream: ResumingStream,
  seen: Map<string, number>,
  done: () => boolean,
  onItem?: (item: StreamItem) => Promise<void> | void,
  timeoutMs = 45_000,
): Promise<StreamItem[]> {
  const items: StreamItem[] = [];
  if (done()) return items;
  const timer = setTimeout(() => void stream.close(), timeoutMs);
  try {
    for await (const item of stream) {
      const k = key(item.post.id, item.post.lang);
      seen.set(k, (seen.get(k) ?? 0) + 1);
      items.push(item);
      await onItem?.(item);
      if (done()) break;
    }
  } finally {
    clearTimeout(timer);
  }
  return items;
}

function mine(seen: Map<string, number>, ids: readonly number[]): Map<string, number> {
  const wanted = new Set(ids);
  return new Map([...seen].filter(([k]) => wanted.has(Number(k.split("/")[0]))));
}

function assertExactlyOnce(seen: Map<string, number>, expected: Set<string>): void {
  const missed = [...expected].filter((k) => !seen.has(k));
  const doubled = [...seen].filter(([, n]) => n > 1).map(([k]) => k);
  const extra = [...seen.keys()].filter((k) => !expected.has(k));
  assert.deepEqual({ missed, doubled, extra }, { missed: [], doubled: [], extra: [] });
}

async function headPoint(): Promise<ResumePoint> {
  return new ResumePoint((await client().changes()).cursor);
}

describe("the resuming stream", () => {
  test("posts come with their cursor and source; the position is the Python client's format", { timeout: 100_000 }, async () => {
    const ids = freshIds(3);
    const store = new MemoryCursorStore();
    const stream = client().stream({ langs: ["en-US", "de-DE"], store });
    await stream.connect();
    assert.match(stream.position.cursor ?? "", /^c1~/);
    assert.equal((await store.load())?.cursor, stream.position.cursor, "the start is saved");
    await helper.publish(ids.map((id) => ({ id, langs: ["en-US", "de-DE", "fr-FR"] })));
    const seen = new Map<string, number>();
    const items = await consume(stream, seen, () => mine(seen, ids).size === 6);
    await stream.close();
    assert.deepEqual(new Set(items.map((i) => i.source)), new Set(["stream"]));
    assert.equal(mine(seen, ids).size, 6, "fr-FR is filtered out by the server");
    const last = items[items.length - 1] as StreamItem;
    assert.equal(last.position.after[last.post.lang], last.post.id);
    assert.match(last.position.toJson(), /^\{"after": \{"de-DE": \d+, "en-US": \d+\}, "cursor": "c1~[^"]+"\}$/);
    assert.equal(stream.stats.connects, 1);
    assert.deepEqual((await store.load())?.toJson(), items[items.length - 2]?.position.toJson(), "the item in hand is not saved yet");
  });

  test("200 random reconnects while posts, late translations, backdated posts and edits are published: 0 missed, 0 duplicates", { timeout: 170_000 }, async () => {
    const ids = freshIds(1000);
    let next = 0;
    const random = mulberry32(37);
    const langsOf = new Map<number, string[]>();
    const versions = new Map<number, number>();
    const stream = client().stream({ langs: [...LANGS], resumeFrom: await headPoint(), backoffBaseMs: 20, backoffCapMs: 200 });
    const seen = new Map<string, number>();
    let published = false;
    let reconnects = 0;
    let stopped = false;
    const started = Date.now();
    const publisher = (async () => {
      for (let cycle = 0; cycle < 200; cycle++) {
        const batch: PostSpec[] = [];
        for (let n = Math.floor(random() * 4); n > 0; n--) {
          const grow = [...langsOf].filter(([, langs]) => langs.length < LANGS.length).map(([id]) => id);
          const kind = random();
          let id: number;
          if (kind < 0.35 && grow.length) {
            id = grow[Math.floor(random() * grow.length)] as number;
            const langs = langsOf.get(id) as string[];
            langs.push(LANGS.find((l) => !langs.includes(l)) as string);
          } else if (kind < 0.5 && langsOf.size) {
            id = [...langsOf.keys()][Math.floor(random() * langsOf.size)] as number;
          } else {
            id = ids[next++] as number;
            langsOf.set(id, [...LANGS].sort(() => random() - 0.5).slice(0, 1 + Math.floor(random() * 2)));
          }
          versions.set(id, (versions.get(id) ?? 0) + 1);
          const langs = langsOf.get(id) as string[];
          batch.push({
            id,
            version: versions.get(id) as number,
            langs,
            status: langs.length < LANGS.length ? "partial" : "published",
            age_s: [0, 0, 30, 86_400 * random()][Math.floor(random() * 4)] as number,
          });
        }
        if (batch.length) await helper.publish(batch);
        await sleep(random() * 40);
      }
      published = true;
    })();
    const expected = (): Set<string> => new Set([...langsOf].flatMap(([id, langs]) => langs.map((l) => key(id, l))));
    const disconnector = (async () => {
      while (reconnects < 200 && !stopped) {
        await sleep(5 + random() * 60);
        if (stream.stats.connects > reconnects) {
          stream.reconnect();
          reconnects += 1;
        }
      }
    })();
    const done = (): boolean => published && reconnects >= 200 && [...expected()].every((k) => seen.has(k));
    const consumer = consume(stream, seen, done, undefined, 120_000);
    const watchdog = setInterval(() => {
      if (done()) void stream.close();
    }, 100);
    await within(Promise.all([publisher, disconnector, consumer]), 120_000);
    clearInterval(watchdog);
    stopped = true;
    await stream.close();
    assert.ok(reconnects >= 200, `${reconnects} reconnects`);
    assert.ok(expected().size > 200, `${expected().size} announcements`);
    assertExactlyOnce(mine(seen, ids), expected());
    assert.ok(stream.stats.resumed >= 200);
    console.log(`# 200 reconnects: ${expected().size} announcements, ${stream.stats.connects} connects, ${((Date.now() - started) / 1000).toFixed(1)} s`);
  });

  test("a SIGKILL of the stream process: resumed, nothing missed or repeated", { timeout: 100_000 }, async () => {
    const ids = freshIds(40);
    const stream = client().stream({ langs: ["en-US"], resumeFrom: await headPoint(), backoffBaseMs: 100, backoffCapMs: 1_000 });
    const seen = new Map<string, number>();
    const expected = new Set(ids.map((id) => key(id, "en-US")));
    const consumer = consume(stream, seen, () => [...expected].every((k) => seen.has(k)));
    const before = streamPid();
    for (const [i, id] of ids.entries()) {
      await helper.publish([{ id, langs: ["en-US"] }]);
      if (i === 15) process.kill(before, "SIGKILL");
      await sleep(50);
    }
    await within(consumer, 60_000);
    await stream.close();
    assertExactlyOnce(mine(seen, ids), expected);
    assert.ok(stream.stats.connects >= 2 && stream.stats.resumed >= 1, JSON.stringify(stream.stats));
    await until("up restarted the stream process", () => streamPid() !== before);
  });

  test("a silent socket (the stream process stopped) is noticed by the ping watchdog and resumed", { timeout: 100_000 }, async () => {
    const ids = freshIds(10);
    const stream = client().stream({ langs: ["en-US"], resumeFrom: await headPoint(), silenceTimeoutMs: 2_500, connectTimeoutMs: 1_500, backoffBaseMs: 100, backoffCapMs: 500 });
    await stream.connect();
    const seen = new Map<string, number>();
    const expected = new Set(ids.map((id) => key(id, "en-US")));
    const consumer = consume(stream, seen, () => [...expected].every((k) => seen.has(k)));
    await helper.publish(ids.slice(0, 5).map((id) => ({ id, langs: ["en-US"] })));
    await until("the first posts", () => seen.size >= 5);
    const pid = streamPid();
    process.kill(pid, "SIGSTOP");
    try {
      await sleep(1_500);
      assert.equal(stream.stats.reconnectsAfterSilence, 0, "pings every second keep a healthy socket");
      await helper.publish(ids.slice(5).map((id) => ({ id, langs: ["en-US"] })));
      await until("the watchdog", () => stream.stats.reconnectsAfterSilence >= 1, 10_000);
    } finally {
      process.kill(pid, "SIGCONT");
    }
    await within(consumer, 30_000);
    await stream.close();
    assertExactlyOnce(mine(seen, ids), expected);
  });

  test("a loop slower than the stream: the buffer stays bounded, the socket is dropped and resumed, nothing lost", { timeout: 100_000 }, async () => {
    const ids = freshIds(60);
    const stream = client().stream({ langs: ["en-US"], resumeFrom: await headPoint(), bufferSize: 4 });
    await stream.connect();
    await helper.publish(ids.map((id) => ({ id, langs: ["en-US"] })));
    const seen = new Map<string, number>();
    const expected = new Set(ids.map((id) => key(id, "en-US")));
    await consume(stream, seen, () => [...expected].every((k) => seen.has(k)), () => sleep(30));
    await stream.close();
    assertExactlyOnce(mine(seen, ids), expected);
    assert.ok(stream.stats.slowConsumerDrops >= 1, JSON.stringify(stream.stats));
  });

  test("a refused cursor is loud: the typed event, a count, the gap-fill from the last ids", { timeout: 100_000 }, async () => {
    const ids = freshIds(6);
    const head = await headPoint();
    await helper.publish(ids.slice(0, 2).map((id) => ({ id, langs: ["en-US"] })));
    await until("the first posts", async () => (await client().posts({ lang: "en-US", limit: 5 })).posts.some((p) => p.id === ids[1]));
    const foreign = (head.cursor ?? "").replace(/^c1~[0-9a-z]+/, "c1~0000deadbeef");
    const refusals: CursorRefusal[] = [];
    const stream = client().stream({
      langs: ["en-US"],
      resumeFrom: new ResumePoint(foreign, { "en-US": ids[0] as number }),
      onRefused: (r) => refusals.push(r),
    });
    await stream.connect();
    await helper.publish(ids.slice(2).map((id) => ({ id, langs: ["en-US"] })));
    const seen = new Map<string, number>();
    const items = await consume(stream, seen, () => ids.slice(1).every((id) => seen.has(key(id, "en-US"))));
    await stream.close();
    assert.equal(refusals.length, 1);
    assert.equal(refusals[0]?.code, "CURSOR_EPOCH_CHANGED");
    assert.ok(refusals[0]?.message);
    assert.equal(stream.stats.refused, 1);
    const fill = items.filter((i) => i.source === "gap_fill").map((i) => i.post.id);
    assert.ok(fill.includes(ids[1] as number), `the fill brings the post after the saved id: ${fill}`);
    assert.ok(!fill.includes(ids[0] as number));
    assert.ok(items.some((i) => i.source === "stream"));
    assertExactlyOnce(mine(seen, ids.slice(1)), new Set(ids.slice(1).map((id) => key(id, "en-US"))));
    assert.notEqual(stream.position.cursor, foreign, "the new cursor is kept");
  });

  test("refused handshakes and the stop-close end the iteration with the typed error", { timeout: 100_000 }, async () => {
    const bad = client({ apiKey: "tw_live_not_a_key" }).stream({ langs: ["en-US"] });
    await assert.rejects(bad.next(), AuthenticationError);
    const invalid = client().stream({ resumeFrom: "not-a-cursor" });
    const error = await invalid.next().catch((e: unknown) => e);
    assert.ok(error instanceof ValidationError, String(error));
    assert.equal(error.field, "resume");
    assert.deepEqual(await invalid.next(), { done: true, value: undefined }, "ended");

    const keyOf = await workspace(helper, "ts_stop");
    const stream = client({ apiKey: keyOf }).stream({ langs: ["en-US"] });
    await stream.connect();
    await helper.cli("workspace", "suspend", "ts_stop");
    const revoked = (await within(stream.next().catch((e: unknown) => e), 20_000)) ?? "no error within 20 s";
    assert.ok(revoked instanceof WorkspaceSuspendedError, String(revoked));
    assert.equal(revoked.status, 403);
    assert.equal(stream.stats.closes[4003], 1);
    assert.equal(stream.stats.connectFailures, 0, "ended by the close, not by a refused reconnect");
  });

  test("a handshake refused for the connection limit waits, then connects", { timeout: 100_000 }, async () => {
    const keyOf = await workspace(helper, "ts_limit", ["--stream-connections", "1"]);
    const api = client({ apiKey: keyOf });
    const first = api.stream({ langs: ["en-US"] });
    await first.connect();
    const second = api.stream({ langs: ["en-US"], backoffBaseMs: 200, backoffCapMs: 1_000 });
    const connecting = second.connect();
    await until("a refused handshake", () => second.stats.connectFailures >= 1, 10_000);
    assert.equal(second.stats.connects, 0);
    await first.close();
    await within(connecting, 30_000);
    assert.equal(second.stats.connects, 1);
    await second.close();
  });

  test("a client process killed and restarted from its file cursor store misses nothing", { timeout: 100_000 }, async () => {
    const ids = freshIds(40);
    const dir = mkdtempSync(join(STATE_DIR, "follow-"));
    const storePath = join(dir, "position.json");
    const seen = new Map<string, number>();
    let kills = 0;
    const run = (): { stop: () => Promise<void> } => {
      const child = spawn(process.execPath, [join(PACKAGE, "build", "test", "support", "follow.js"), storePath], {
        env: { ...process.env, TICKERWIRE_STATE_DIR: STATE_DIR },
        stdio: ["ignore", "pipe", "inherit"],
      });
      createInterface({ input: child.stdout }).on("line", (line) => {
        const item = JSON.parse(line) as { id: number; lang: string };
        seen.set(key(item.id, item.lang), (seen.get(key(item.id, item.lang)) ?? 0) + 1);
      });
      const exited = new Promise<void>((r) => child.on("exit", () => r()));
      return {
        stop: async () => {
          child.kill("SIGKILL");
          await exited;
        },
      };
    };
    let follower = run();
    const expected = new Set(ids.flatMap((id) => [key(id, "en-US"), key(id, "de-DE")]));
    try {
      await until("the first start saved its position", () => {
        try {
          return readFileSync(storePath, "utf8").includes("c1~");
        } catch {
          return false;
        }
      });
      for (const [i, id] of ids.entries()) {
        await helper.publish([{ id, langs: ["en-US", "de-DE"] }]);
        await sleep(40);
        if (i % 10 === 9) {
          await follower.stop();
          kills += 1;
          follower = run();
        }
      }
      await until("every post", () => [...expected].every((k) => seen.has(k)), 30_000);
    } finally {
      await follower.stop();
    }
    const got = mine(seen, ids);
    const missed = [...expected].filter((k) => !got.has(k));
    const repeats = [...got.values()].reduce((sum, n) => sum + n - 1, 0);
    assert.deepEqual(missed, []);
    assert.ok(repeats <= kills, `${repeats} repeats over ${kills} kills: at most the item in hand at each kill`);
    const saved = ResumePoint.fromJson(readFileSync(storePath, "utf8"));
    assert.equal(saved.toJson(), readFileSync(storePath, "utf8"));
    assert.ok(ids.includes(saved.after["en-US"] as number));
    void FileCursorStore;
  });

  test("a position saved by the Python client resumes here, and the reverse", { timeout: 100_000 }, async () => {
    const ids = freshIds(10);
    const head = await headPoint();
    await helper.publish(ids.map((id) => ({ id, langs: ["en-US", "de-DE"] })));
    const expected = ids.flatMap((id) => [key(id, "en-US"), key(id, "de-DE")]);
    // Python takes the first 7 from the head cursor, hands over its position.
    const py = await helper.request({ op: "python_resume", resume: head.toJson(), langs: ["en-US", "de-DE"], count: 7 });
    const pyItems = (py["items"] as { id: number; lang: string }[]).map((i) => key(i.id, i.lang));
    const pyJson = py["position"] as string;
    assert.equal(ResumePoint.fromJson(pyJson).toJson(), pyJson, "byte for byte the Python client's format");
    const seen = new Map<string, number>(pyItems.map((k) => [k, 1]));
    const dir = mkdtempSync(join(STATE_DIR, "interop-"));
    const store = new FileCursorStore(join(dir, "position.json"));
    const ts = client().stream({ langs: ["en-US", "de-DE"], resumeFrom: ResumePoint.fromJson(pyJson), store });
    await consume(ts, seen, () => mine(seen, ids).size === expected.length);
    await ts.close();
    assertExactlyOnce(mine(seen, ids), new Set(expected));

    // The reverse: this client takes 5 more announcements; Python resumes from its file store.
    const more = freshIds(6);
    const ts2 = client().stream({ langs: ["en-US", "de-DE"], resumeFrom: await headPoint(), store });
    await ts2.connect();
    await helper.publish(more.map((id) => ({ id, langs: ["en-US", "de-DE"] })));
    const taken = new Map<string, number>();
    const items = await consume(ts2, taken, () => taken.size === 5);
    await ts2.close();
    const savedText = readFileSync(join(dir, "position.json"), "utf8");
    assert.equal(savedText, items[3]?.position.toJson(), "the store holds the last item the loop finished");
    const rest = await helper.request({ op: "python_resume", resume: savedText, langs: ["en-US", "de-DE"], count: 12 - 4 });
    const all = new Map<string, number>();
    for (const item of items.slice(0, 4)) all.set(key(item.post.id, item.post.lang), 1);
    for (const i of rest["items"] as { id: number; lang: string }[]) all.set(key(i.id, i.lang), (all.get(key(i.id, i.lang)) ?? 0) + 1);
    assertExactlyOnce(mine(all, more), new Set(more.flatMap((id) => [key(id, "en-US"), key(id, "de-DE")])));
  });
});

/** A small seeded generator, so a failing run can be repeated. */
function mulberry32(seed: number): () => number {
  let a = seed;
  return () => {
    a = (a + 0x6d2b79f5) | 0;
    let t = Math.imul(a ^ (a >>> 15), 1 | a);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
