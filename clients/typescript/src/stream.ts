/**
 * `ResumingStream`: every new post once, across reconnects and restarts, with the server's
 * resume cursors (the repository's docs/resume.md). The Python client's `ResumingStream`, with
 * the same words: items come from the `"stream"` (replayed or live) or, only after the server
 * refused a cursor, from the `"gap_fill"` (`GET /posts?after=`).
 *
 * - Opts in with `cursors=true` (or `resume=<cursor>` when it has a position) and reconnects
 *   after any close, error or `silenceTimeoutMs` without a message (the server pings every 30 s),
 *   with a capped, jittered back-off; a handshake refused with 429 waits its `Retry-After`.
 * - A close that means "stop" (4003: key revoked, workspace suspended, badge missing) and a
 *   handshake refused with 401, 403, 404 or 422 end the iteration with the typed error.
 * - `ready.resumed: false` is loud: `onRefused` (else a `console.warn`), `stats.refused`, then the
 *   documented fall-back (`GET /posts?after=<last id>` per locale), its items `"gap_fill"`.
 * - Messages wait in a buffer of `bufferSize` posts: when the loop is slower than the stream
 *   and the buffer is full, the socket is dropped and, once the loop has taken what was
 *   buffered, resumed from the last post taken. Memory is bounded and nothing is lost.
 * - A `CursorStore` keeps the position of the last post the loop finished (the loop asking for
 *   the next item finishes the one before) and the starting cursor: a restarted process resumes there.
 */

import {
  ApiError,
  AuthenticationError,
  BadgeMissingError,
  PermissionDeniedError,
  TickerwireError,
  WorkspaceSuspendedError,
  type ErrorEnvelope,
} from "./errors.js";
import type { Client } from "./http.js";
import { metaFromResponse } from "./meta.js";
import { ResumePoint, type CursorStore } from "./position.js";
import { Backoff } from "./retry.js";
import { openSocket, type OpenSocket, type WebSocketChoice } from "./socket.js";
import type { PostLean } from "./types.js";
import { CloseCode, type ReadyMessage, type StreamMessage } from "./wire.js";

/** The fall-back after a refused cursor reads at most this many pages per locale (the Python client's). */
export const MAX_FILL_PAGES = 200;

/** Where an item came from: the stream (replayed or live: exactly once) or the fall-back gap-fill. */
export type ItemSource = "stream" | "gap_fill";

export interface StreamItem {
  readonly post: PostLean;
  readonly source: ItemSource;
  /** The position after this item; saved to the store once the loop asks for the next one. */
  readonly position: ResumePoint;
}

/** The server refused the resume cursor (`ready.resumed: false`). */
export interface CursorRefusal {
  /** The server's reason code, e.g. `CURSOR_EPOCH_CHANGED`. */
  readonly code: string;
  readonly message: string;
  /** The cursor the connection went on live from (kept once the fall-back's items are taken). */
  readonly cursor: string;
  /** Posts the fall-back gap-fill read (`GET /posts?after=`), handed over as `"gap_fill"` items. */
  readonly filled: number;
}

export interface StreamOptions {
  /** Where to start: a `ResumePoint`, or a cursor. Default: the store's position, else the newest post. */
  readonly resumeFrom?: ResumePoint | string | null;
  /** Keeps the position between runs (`FileCursorStore`, `MemoryCursorStore` or your own). */
  readonly store?: CursorStore;
  /** Locales (the stream's `lang` filter; default every locale the API answers in). */
  readonly langs?: readonly string[];
  readonly tickers?: string | readonly string[];
  readonly categories?: string | readonly string[];
  /** Reconnect after this long without any message, pings included (60,000 ms). */
  readonly silenceTimeoutMs?: number;
  /** Reconnect back-off: equal jitter from `backoffBaseMs` (500) doubling up to `backoffCapMs` (30,000). */
  readonly backoffBaseMs?: number;
  readonly backoffCapMs?: number;
  /** The handshake and the `ready` message must come within this (10,000 ms). */
  readonly connectTimeoutMs?: number;
  /** Posts held for a slow loop before the socket is dropped (1,000). */
  readonly bufferSize?: number;
  /** Called when the server refuses the cursor, before the fall-back's items (default: `console.warn`). */
  readonly onRefused?: (refusal: CursorRefusal) => void;
  /** Ends the iteration (as `close()`). */
  readonly signal?: AbortSignal;
  /** `auto` (default): the global `WebSocket` where there is one, else `ws`. */
  readonly webSocket?: WebSocketChoice;
}

export interface StreamStats {
  connects: number;
  /** Connections that resumed from a cursor (the server replayed what was missed). */
  resumed: number;
  /** Cursors the server refused (`resumed: false`): the fall-back gap-fill ran. */
  refused: number;
  reconnectsAfterSilence: number;
  connectFailures: number;
  /** Sockets dropped because the loop was slower than the stream and the buffer was full. */
  slowConsumerDrops: number;
  gapFillPosts: number;
  messages: number;
  /** Close codes seen, by code. */
  closes: Record<number, number>;
}

type Entry =
  | { readonly kind: "post"; readonly post: PostLean; readonly cursor: string | null }
  | { readonly kind: "end"; readonly why: string; readonly delayMs: number; readonly error: TickerwireError | null };

const REVOKED: Readonly<Record<string, typeof PermissionDeniedError | typeof AuthenticationError>> = {
  NOT_AUTHENTICATED: AuthenticationError,
  WORKSPACE_SUSPENDED: WorkspaceSuspendedError,
  BADGE_MISSING: BadgeMissingError,
};

/** The typed error of a 4003 close (access changed while connected). */
function revokedError(reason: string): ApiError {
  const Class = REVOKED[reason] ?? PermissionDeniedError;
  const status = Class === AuthenticationError ? 401 : 403;
  const envelope: ErrorEnvelope = {
    code: reason || "ACCESS_REVOKED",
    message: "the stream was closed: access changed while connected",
    field: null,
    retryAfterSec: null,
  };
  return new Class(metaFromResponse(status, new Headers()), envelope);
}

/** Handshake refusals that reconnecting cannot cure: the key, the workspace or the options are wrong. */
const STOP_STATUSES = new Set([401, 403, 404, 422]);

function csv(value: string | readonly string[] | undefined): string | null {
  if (value === undefined) return null;
  const joined = typeof value === "string" ? value : value.join(",");
  return joined === "" ? null : joined;
}

/** A locale code in the case BCP 47 recommends (`de-de` is `de-DE`), as the API answers. */
export function bcp47Case(tag: string): string {
  const [first = "", ...rest] = tag.split("-");
  return [
    first.toLowerCase(),
    ...rest.map((part) =>
      part.length === 2 ? part.toUpperCase() : part.length === 4 && /^[a-z]+$/i.test(part) ? part[0]!.toUpperCase() + part.slice(1).toLowerCase() : part.toLowerCase(),
    ),
  ].join("-");
}

/**
 * `streamUrl` with `apiKey` as its one `key` (the repository's docs/api.md#stream-key): the key
 * given to the client wins over a `key` in the URL (such as `up.json`'s `stream_url` carries),
 * which is not sent. The Python client's rule; clients/shared/vectors.json holds it for both.
 */
export function streamUrlWithKey(streamUrl: string, apiKey: string): URL {
  const url = new URL(streamUrl);
  url.searchParams.delete("key");
  url.searchParams.set("key", apiKey);
  return url;
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

export class ResumingStream implements AsyncIterableIterator<StreamItem> {
  /** The position after the last item the loop took. */
  position: ResumePoint;
  readonly stats: StreamStats = {
    connects: 0,
    resumed: 0,
    refused: 0,
    reconnectsAfterSilence: 0,
    connectFailures: 0,
    slowConsumerDrops: 0,
    gapFillPosts: 0,
    messages: 0,
    closes: {},
  };
  private readonly langs: readonly string[] | null;
  private readonly backoff: Backoff;
  private readonly bufferSize: number;
  private readonly silenceTimeoutMs: number;
  private readonly connectTimeoutMs: number;
  private started = false;
  private closed = false;
  private socket: OpenSocket | null = null;
  /** Bumped whenever a socket is given up: events of an older one are ignored. */
  private generation = 0;
  private buffer: Entry[] = [];
  private bufferedPosts = 0;
  private wake: (() => void) | null = null;
  private readyWaiter: { resolve(m: StreamMessage): void; reject(e: Error): void } | null = null;
  private watchdog: ReturnType<typeof setTimeout> | null = null;
  private filled: PostLean[] = [];
  private afterFill: string | null = null;
  private overlap = new Set<string>();
  private finished: StreamItem | null = null;
  private pendingDelayMs = 0;

  constructor(
    private readonly client: Client,
    private readonly options: StreamOptions = {},
  ) {
    const from = options.resumeFrom;
    this.position = from instanceof ResumePoint ? from : new ResumePoint(typeof from === "string" ? from : null);
    this.langs = options.langs ? [...new Set(options.langs.map(bcp47Case))] : null;
    this.backoff = new Backoff(options.backoffBaseMs ?? 500, options.backoffCapMs ?? 30_000);
    this.bufferSize = Math.max(1, options.bufferSize ?? 1000);
    this.silenceTimeoutMs = options.silenceTimeoutMs ?? 60_000;
    this.connectTimeoutMs = options.connectTimeoutMs ?? 10_000;
    options.signal?.addEventListener("abort", () => void this.close(), { once: true });
  }

  [Symbol.asyncIterator](): this {
    return this;
  }

  /** Ends the iteration and the connection (the item in hand is not saved: it comes again after a restart). */
  async return(): Promise<IteratorResult<StreamItem, undefined>> {
    await this.close();
    return { done: true, value: undefined };
  }

  /**
   * Connects now (else the first `next()` does), retrying as `next()` would: from here on
   * nothing is missed, and `position` holds the cursor of this point.
   */
  async connect(): Promise<void> {
    await this.start();
    while (this.socket === null && !this.closed) {
      const entry = this.buffer[0];
      if (entry?.kind === "end" && entry.error !== null) {
        this.closed = true;
        throw entry.error;
      }
      if (this.pendingDelayMs > 0) {
        const delay = this.pendingDelayMs;
        this.pendingDelayMs = 0;
        await this.sleepUnlessClosed(delay);
      }
      await this.open();
    }
  }

  /** Drops the connection and resumes from the last post taken (e.g. after a network change). */
  reconnect(): void {
    if (this.socket !== null) this.end("a reconnect was asked for", 0);
  }

  async close(): Promise<void> {
    this.closed = true;
    this.drop();
    this.notify();
  }

  async next(): Promise<IteratorResult<StreamItem, undefined>> {
    if (this.finished !== null) {
      const done = this.finished;
      this.finished = null;
      await this.options.store?.save(done.position);
    }
    await this.start();
    for (;;) {
      if (this.closed) return { done: true, value: undefined };
      const fill = this.filled.shift();
      if (fill !== undefined) return this.take(fill, "gap_fill", null);
      if (this.afterFill !== null) {
        this.position = this.position.withCursor(this.afterFill);
        this.afterFill = null;
        await this.options.store?.save(this.position);
      }
      const entry = this.buffer.shift();
      if (entry?.kind === "post") {
        this.bufferedPosts -= 1;
        const key = `${entry.post.id}/${entry.post.lang}`;
        if (this.overlap.delete(key)) {
          if (entry.cursor !== null) this.position = this.position.withCursor(entry.cursor);
          continue;
        }
        return this.take(entry.post, "stream", entry.cursor);
      }
      if (entry?.kind === "end") {
        this.drop();
        if (entry.error !== null) {
          this.closed = true;
          throw entry.error;
        }
        this.pendingDelayMs = entry.delayMs;
        continue;
      }
      if (this.socket === null) {
        if (this.pendingDelayMs > 0) {
          const delay = this.pendingDelayMs;
          this.pendingDelayMs = 0;
          await this.sleepUnlessClosed(delay);
          continue;
        }
        await this.open();
        continue;
      }
      await new Promise<void>((resolve) => {
        this.wake = resolve;
      });
    }
  }

  private async start(): Promise<void> {
    if (this.started) return;
    this.started = true;
    if (this.options.resumeFrom == null && this.options.store) {
      this.position = (await this.options.store.load()) ?? this.position;
    }
  }

  private take(post: PostLean, source: "stream" | "gap_fill", cursor: string | null): IteratorResult<StreamItem, undefined> {
    this.position = this.position.taking(post.id, post.lang, cursor);
    const item: StreamItem = Object.freeze({ post, source, position: this.position });
    this.finished = item;
    return { done: false, value: item };
  }

  private async sleepUnlessClosed(ms: number): Promise<void> {
    await Promise.race([sleep(ms), new Promise<void>((resolve) => (this.wake = resolve))]);
    this.wake = null;
  }

  private notify(): void {
    const wake = this.wake;
    this.wake = null;
    wake?.();
  }

  private drop(): void {
    this.generation += 1;
    const waiter = this.readyWaiter;
    this.readyWaiter = null;
    waiter?.reject(new Error("the connection was given up before ready"));
    if (this.watchdog !== null) clearTimeout(this.watchdog);
    this.watchdog = null;
    const socket = this.socket;
    this.socket = null;
    socket?.close(1000);
  }

  private end(why: string, delayMs: number, error: TickerwireError | null = null): void {
    this.buffer.push({ kind: "end", why, delayMs, error });
    this.drop();
    this.notify();
  }

  private armWatchdog(generation: number): void {
    if (this.watchdog !== null) clearTimeout(this.watchdog);
    this.watchdog = setTimeout(() => {
      if (generation !== this.generation) return;
      this.stats.reconnectsAfterSilence += 1;
      this.end(`no message for ${this.silenceTimeoutMs} ms`, this.backoff.next());
    }, this.silenceTimeoutMs);
  }

  private url(): string {
    const url = streamUrlWithKey(this.client.streamUrl, this.client.apiKey);
    if (this.position.cursor !== null) url.searchParams.set("resume", this.position.cursor);
    else url.searchParams.set("cursors", "true");
    if (this.langs) url.searchParams.set("lang", this.langs.join(","));
    const tickers = csv(this.options.tickers);
    if (tickers !== null) url.searchParams.set("tickers", tickers);
    const categories = csv(this.options.categories);
    if (categories !== null) url.searchParams.set("categories", categories);
    return url.toString();
  }

  private onMessage(generation: number, text: string): void {
    if (generation !== this.generation) return;
    this.armWatchdog(generation);
    this.stats.messages += 1;
    let message: StreamMessage;
    try {
      message = JSON.parse(text) as StreamMessage;
    } catch {
      return;
    }
    if (this.readyWaiter !== null) {
      const waiter = this.readyWaiter;
      this.readyWaiter = null;
      waiter.resolve(message);
      return;
    }
    if (message.type !== "post.created") return;
    this.client.minPosition.sawPush(message.log_position);
    if (this.bufferedPosts >= this.bufferSize) {
      // The loop is slower than the stream: drop the socket; resume from the last post taken
      // once the loop has taken what is buffered (the server replays the rest).
      this.stats.slowConsumerDrops += 1;
      this.end("the buffer is full (the loop is slower than the stream)", 0);
      return;
    }
    this.bufferedPosts += 1;
    this.buffer.push({ kind: "post", post: message.data, cursor: message.cursor ?? null });
    this.notify();
  }

  private onClose(generation: number, code: number, reason: string): void {
    if (generation !== this.generation) return;
    this.stats.closes[code] = (this.stats.closes[code] ?? 0) + 1;
    if (this.readyWaiter !== null) {
      const waiter = this.readyWaiter;
      this.readyWaiter = null;
      waiter.reject(code === CloseCode.ACCESS_REVOKED ? revokedError(reason) : new Error(`closed before ready: ${code} ${reason}`));
    }
    if (code === CloseCode.ACCESS_REVOKED) this.end(`closed ${code} ${reason}`, 0, revokedError(reason));
    else this.end(`closed ${code} ${reason}`, this.backoff.next());
  }

  private async open(): Promise<void> {
    const generation = ++this.generation;
    const ready = new Promise<StreamMessage>((resolve, reject) => {
      this.readyWaiter = { resolve, reject };
    });
    ready.catch(() => undefined);
    let timer: ReturnType<typeof setTimeout> | undefined;
    try {
      this.socket = await openSocket(
        this.url(),
        this.connectTimeoutMs,
        {
          message: (text) => this.onMessage(generation, text),
          close: (code, reason) => this.onClose(generation, code, reason),
        },
        this.options.webSocket ?? "auto",
      );
      if (generation !== this.generation || this.closed) {
        this.socket?.close(1000);
        this.socket = null;
        return;
      }
      this.armWatchdog(generation);
      const first = await Promise.race([
        ready,
        new Promise<never>((_, reject) => {
          timer = setTimeout(() => reject(new Error(`no ready within ${this.connectTimeoutMs} ms`)), this.connectTimeoutMs);
        }),
      ]);
      if (first.type !== "ready" || typeof first.cursor !== "string") {
        throw new Error(`expected ready with a cursor, got ${first.type}`);
      }
      await this.ready({ ...first, cursor: first.cursor });
    } catch (error) {
      this.readyWaiter = null;
      this.drop();
      this.buffer = [];
      this.bufferedPosts = 0;
      this.stats.connectFailures += 1;
      if (error instanceof ApiError && STOP_STATUSES.has(error.status)) {
        this.buffer.push({ kind: "end", why: error.message, delayMs: 0, error });
        return;
      }
      if (error instanceof AuthenticationError || error instanceof PermissionDeniedError) {
        this.buffer.push({ kind: "end", why: error.message, delayMs: 0, error });
        return;
      }
      this.pendingDelayMs = (error instanceof ApiError ? error.retryAfterMs : null) ?? this.backoff.next();
    } finally {
      clearTimeout(timer);
    }
  }

  private async ready(ready: ReadyMessage & { cursor: string }): Promise<void> {
    this.stats.connects += 1;
    this.backoff.reset();
    if (this.position.cursor === null) {
      this.position = this.position.withCursor(ready.cursor);
      await this.options.store?.save(this.position);
    } else if (ready.resumed === false) {
      await this.refused(ready);
    } else {
      this.stats.resumed += 1;
    }
  }

  /** The server refused the cursor: the documented gap-fill from the last ids, then the new cursor. */
  private async refused(ready: ReadyMessage & { cursor: string }): Promise<void> {
    this.stats.refused += 1;
    const code = ready.reason?.code ?? "";
    const message = ready.reason?.message ?? "";
    const langs = this.langs ?? (await this.client.languages()).languages.map((l) => l.code);
    const filled: PostLean[] = [];
    const ticker = csv(this.options.tickers) ?? undefined;
    const category = csv(this.options.categories) ?? undefined;
    for (const lang of langs) {
      let after: number | string | undefined = this.position.after[lang];
      for (let page = 0; after !== undefined && page < MAX_FILL_PAGES; page++) {
        const result = await this.client.posts({ lang, after, limit: 50, ticker, category });
        filled.push(...result.posts);
        if (result.posts.length === 0 || result.prev_cursor === null) break;
        after = result.prev_cursor;
      }
    }
    filled.sort((a, b) => (a.published_at < b.published_at ? -1 : a.published_at > b.published_at ? 1 : a.id - b.id));
    this.stats.gapFillPosts += filled.length;
    this.filled = filled;
    this.overlap = new Set(filled.map((p) => `${p.id}/${p.lang}`));
    this.afterFill = ready.cursor;
    const refusal: CursorRefusal = Object.freeze({ code, message, cursor: ready.cursor, filled: filled.length });
    if (this.options.onRefused) this.options.onRefused(refusal);
    else
      console.warn(
        `tickerwire: the stream refused the resume cursor (${code}: ${message}); filled the gap with GET /posts?after= ` +
          `(${filled.length} posts; posts already handled may come again, a late translation may be missed)`,
      );
  }
}
