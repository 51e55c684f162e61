/**
 * Against the real `tickerwire up`: every read sends the freshest consistency mark the client saw
 * as `X-Min-Log-Position` (a response's `X-Log-Position`; a pushed post's `log_position` + 1, the
 * repository's docs/api.md#log-positions), and the stream connects with the client's key, never
 * with one in the stream URL (docs/api.md#stream-key).
 */

import assert from "node:assert/strict";
import { after, describe, test } from "node:test";
import { AuthenticationError } from "../src/index.js";
import { openSocket } from "../src/socket.js";
import { Helper, client, freshIds, until, upState, within, workspace } from "./support/stack.js";

const helper = new Helper();
after(() => helper.close());

/** The global fetch, recording the `X-Min-Log-Position` of every request into `sent`. */
function recording(sent: (string | null)[]): typeof fetch {
  return (input, init) => {
    sent.push(new Headers(init?.headers).get("X-Min-Log-Position"));
    return fetch(input, init);
  };
}

interface Message {
  readonly type: string;
  readonly log_position?: string;
  readonly data?: { readonly id: number };
}

describe("X-Min-Log-Position", () => {
  test("a read sends the X-Log-Position of the read before it", async () => {
    const sent: (string | null)[] = [];
    const api = client({ apiKey: await workspace(helper, "ts_fresh_reads"), fetch: recording(sent) });
    const first = await api.tokens();
    assert.match(first.meta.logPosition ?? "", /^\d+:\d+/);
    await api.languages();
    assert.deepEqual(sent, [null, first.meta.logPosition]);
  });

  test("a pushed post raises it to the post's log_position + 1", { timeout: 60_000 }, async () => {
    const key = await workspace(helper, "ts_fresh_push");
    const sent: (string | null)[] = [];
    const api = client({ apiKey: key, fetch: recording(sent) });
    const stream = api.stream({ langs: ["en-US"] });
    await stream.connect();
    // A second connection, as a partner's own socket, shows the message's log_position as sent.
    const messages: Message[] = [];
    const url = `${upState().stream_url.split("?")[0]}?key=${encodeURIComponent(key)}&lang=en-US`;
    const raw = await openSocket(url, 10_000, { message: (text) => messages.push(JSON.parse(text) as Message), close: () => undefined }, "ws");
    try {
      await until("ready on the second connection", () => messages.some((m) => m.type === "ready"), 10_000);
      const [id] = freshIds(1) as [number];
      await helper.publish([{ id, langs: ["en-US"] }]);
      const taken = await within(stream.next(), 30_000);
      assert.equal(taken?.done === false ? taken.value.post.id : null, id);
      const pushed = () => messages.find((m) => m.type === "post.created" && m.data?.id === id);
      await until("the push on the second connection", () => pushed() !== undefined, 10_000);
      const [partition, offset] = (pushed()?.log_position ?? "").split(":") as [string, string];
      assert.equal(sent.length, 0, "no read yet: the mark comes from the push alone");
      assert.equal(api.minPosition.header(), `${partition}:${BigInt(offset) + 1n}`);
      const read = await api.post(id, { lang: "en-US" });
      assert.equal(read.id, id);
      assert.deepEqual(sent, [`${partition}:${BigInt(offset) + 1n}`]);
    } finally {
      raw.close(1000);
      await stream.close();
    }
  });
});

describe("the stream's key", () => {
  test("the client's key wins over a key in streamUrl, which is not sent", { timeout: 60_000 }, async () => {
    const up = upState();
    const stream = client({ streamUrl: `${up.stream_url.split("?")[0]}?key=tw_live_not_a_key` }).stream({ langs: ["en-US"] });
    await within(stream.connect(), 20_000);
    assert.equal(stream.stats.connects, 1, "connected with the client's key");
    await stream.close();
    // up.json's stream_url carries the demo key: a partner's own key is the one that streams.
    const stranger = client({ apiKey: "tw_live_not_a_key", streamUrl: up.stream_url }).stream({ langs: ["en-US"] });
    assert.match(up.stream_url, /[?&]key=/);
    await assert.rejects(stranger.next(), AuthenticationError);
  });
});
