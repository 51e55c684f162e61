/**
 * The HTTP client: one method per operation (`OPERATIONS` in operations.ts) on the web-standard `fetch`, an `AbortSignal` on
 * every call, bounded `Retry-After`-aware retries, typed errors, and every page in either direction.
 */

import {
  AbortedError,
  ApiError,
  ConnectionError,
  RequestTimeoutError,
  TickerwireError,
  errorFromResponse,
} from "./errors.js";
import { MinLogPosition } from "./freshness.js";
import { metaFromResponse, type ResponseMeta } from "./meta.js";
import { ResumingStream, type StreamOptions } from "./stream.js";
import { DEFAULT_RETRY, retryDelayMs, type RetryPolicy } from "./retry.js";
import type {
  CategoryTree,
  Category,
  ChangesPage,
  ChangesParams,
  Direction,
  LanguageList,
  PostDetail,
  PostLean,
  PostPage,
  PostsParams,
  SearchParams,
  SentimentPulse,
  TokenDetail,
  TokenList,
  WebhookAttemptList,
  WebhookEndpoint,
  WebhookEndpointCreate,
  WebhookEndpointList,
  WebhookEndpointSecret,
  WebhookEndpointUpdate,
  WebhookReplay,
  WebhookTestQueued,
  WithMeta,
} from "./types.js";
import { WEBHOOK_ENDPOINTS, checkIdempotencyKey, createBody, endpointPath, newIdempotencyKey, replayBody, updateBody } from "./webhook-calls.js";

export interface ClientOptions {
  /** `{base_url}`, e.g. `http://127.0.0.1:8080/api/v1/developer`. */
  readonly baseUrl: string;
  readonly apiKey: string;
  /** `{ws_url}/stream` (default: the base URL with `ws:`/`wss:`, on the same host and port). */
  readonly streamUrl?: string;
  /** Overrides of `DEFAULT_RETRY`. */
  readonly retry?: Partial<RetryPolicy>;
  /** One attempt's time limit, cut to what is left of `retry.maxCallTimeMs` (15,000 ms). */
  readonly timeoutMs?: number;
  /** A `fetch` of your own (default: the global one). */
  readonly fetch?: typeof fetch;
}

/** What a request sends besides its query: a JSON body, headers, and whether sending it twice acts twice. */
export interface SendOptions {
  readonly body?: unknown;
  readonly headers?: Readonly<Record<string, string>>;
  /** false: retried only after a 429 (default true). */
  readonly idempotent?: boolean;
}

/** Per call: an `AbortSignal` and overrides of the client's retry policy. */
export interface CallOptions {
  readonly signal?: AbortSignal;
  readonly retry?: Partial<RetryPolicy>;
}

type QueryValue = string | number | boolean | readonly (string | number)[] | null | undefined;

function queryString(params: Readonly<Record<string, QueryValue>>): string {
  const search = new URLSearchParams();
  for (const [name, value] of Object.entries(params)) {
    if (value === undefined || value === null) continue;
    search.set(name, Array.isArray(value) ? value.join(",") : String(value));
  }
  const text = search.toString();
  return text ? `?${text}` : "";
}

function withMeta<T extends object>(body: T, meta: ResponseMeta): WithMeta<T> {
  Object.defineProperty(body, "meta", { value: meta, enumerable: false });
  return body as WithMeta<T>;
}

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal.aborted) return reject(signal.reason);
    const timer = setTimeout(() => {
      signal.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    const onAbort = (): void => {
      clearTimeout(timer);
      reject(signal.reason);
    };
    signal.addEventListener("abort", onAbort, { once: true });
  });
}

/** The default stream URL of a base URL: same host, `ws(s):`, `/stream` under the base path. */
export function defaultStreamUrl(baseUrl: string): string {
  const url = new URL(baseUrl);
  url.protocol = url.protocol === "https:" ? "wss:" : "ws:";
  url.pathname = `${url.pathname.replace(/\/+$/, "")}/stream`;
  url.search = "";
  return url.toString();
}

export class Client {
  readonly baseUrl: string;
  readonly streamUrl: string;
  readonly apiKey: string;
  readonly retry: RetryPolicy;
  readonly timeoutMs: number;
  /**
   * The freshest consistency mark seen (responses' `X-Log-Position`, pushed posts'
   * `log_position` + 1), sent as `X-Min-Log-Position` with every read: no later read answers
   * from older data, whichever server or database replica serves it.
   */
  readonly minPosition = new MinLogPosition();
  private readonly fetchImpl: typeof fetch;

  constructor(options: ClientOptions) {
    this.baseUrl = options.baseUrl.replace(/\/+$/, "");
    this.apiKey = options.apiKey;
    this.streamUrl = options.streamUrl ?? defaultStreamUrl(this.baseUrl);
    this.retry = Object.freeze({ ...DEFAULT_RETRY, ...options.retry });
    this.timeoutMs = options.timeoutMs ?? 15_000;
    this.fetchImpl = options.fetch ?? globalThis.fetch.bind(globalThis);
  }

  /** `GET /posts`: one page, newest first. */
  posts(params: PostsParams = {}, options: CallOptions = {}): Promise<PostPage> {
    return this.get<PostPage>("/posts", params, options);
  }

  /** `GET /posts/{id_or_slug}`. */
  post(idOrSlug: number | string, params: { lang?: string } = {}, options: CallOptions = {}): Promise<WithMeta<PostDetail>> {
    return this.get(`/posts/${encodeURIComponent(String(idOrSlug))}`, params, options);
  }

  /** `GET /categories`. */
  categories(params: { lang?: string } = {}, options: CallOptions = {}): Promise<WithMeta<CategoryTree>> {
    return this.get("/categories", params, options);
  }

  /** `GET /categories/{slug}`. */
  category(slug: string, params: { lang?: string } = {}, options: CallOptions = {}): Promise<WithMeta<Category>> {
    return this.get(`/categories/${encodeURIComponent(slug)}`, params, options);
  }

  /** `GET /tokens`: every token in one response. */
  tokens(options: CallOptions = {}): Promise<WithMeta<TokenList>> {
    return this.get("/tokens", {}, options);
  }

  /** `GET /tokens/{ticker}`. */
  token(ticker: string, options: CallOptions = {}): Promise<WithMeta<TokenDetail>> {
    return this.get(`/tokens/${encodeURIComponent(ticker)}`, {}, options);
  }

  /** `GET /sentiment-pulse`. */
  sentimentPulse(options: CallOptions = {}): Promise<WithMeta<SentimentPulse>> {
    return this.get("/sentiment-pulse", {}, options);
  }

  /** `GET /languages`. */
  languages(options: CallOptions = {}): Promise<WithMeta<LanguageList>> {
    return this.get("/languages", {}, options);
  }

  /** `GET /search?q=`: one page of hits, best first. */
  search(q: string, params: SearchParams = {}, options: CallOptions = {}): Promise<PostPage> {
    return this.get<PostPage>("/search", { ...params, q }, options);
  }

  /** `GET /changes`: the announcements after a resume cursor (docs/resume.md), one page. */
  changes(params: ChangesParams = {}, options: CallOptions = {}): Promise<ChangesPage> {
    return this.get<ChangesPage>("/changes", params, options);
  }

  /**
   * Every page of `GET /changes` from `params.cursor` (none: the current head), each page's cursor
   * passed to the next, until `has_more` is false; that last page (perhaps empty) is yielded too,
   * so its `cursor` is where to poll from later. Save `page.cursor` after handling a page's posts:
   * resuming from it misses nothing and repeats nothing.
   */
  async *iterChanges(params: ChangesParams = {}, options: CallOptions = {}): AsyncGenerator<ChangesPage, void, undefined> {
    let cursor = params.cursor;
    for (;;) {
      const page = await this.changes({ limit: 50, ...params, cursor }, options);
      yield page;
      if (!page.has_more) return;
      cursor = page.cursor;
    }
  }

  /** `GET /webhooks/endpoints`: the workspace's endpoints that are not removed, oldest first. */
  webhookEndpoints(options: CallOptions = {}): Promise<WithMeta<WebhookEndpointList>> {
    return this.get(WEBHOOK_ENDPOINTS, {}, options);
  }

  /** `GET /webhooks/endpoints/{id}`: a `NotFoundError` for an unknown, removed or foreign id. */
  webhookEndpoint(id: string, options: CallOptions = {}): Promise<WithMeta<WebhookEndpoint>> {
    return this.get(endpointPath(id), {}, options);
  }

  /** `GET /webhooks/endpoints/{id}/attempts`: the latest attempts, newest first (`limit` 1 to 100). */
  webhookAttempts(id: string, params: { limit?: number } = {}, options: CallOptions = {}): Promise<WithMeta<WebhookAttemptList>> {
    return this.get(endpointPath(id, "attempts"), params, options);
  }

  /**
   * `POST /webhooks/endpoints`: a new endpoint and its secret, shown this once. Every create
   * carries an `Idempotency-Key`: `idempotencyKey`, or one made for this call, so a create whose
   * answer was lost is retried safely (the server answers the same 201, secret included). Pass
   * your own, saved before the call, to be safe across a restart of your process too.
   * `IdempotencyKeyReusedError`: the key came with another body within 24 hours;
   * `EndpointLimitError`: the workspace has 100 endpoints.
   */
  async createWebhookEndpoint(
    body: WebhookEndpointCreate,
    options: CallOptions & { readonly idempotencyKey?: string } = {},
  ): Promise<WithMeta<WebhookEndpointSecret>> {
    const key = options.idempotencyKey === undefined ? newIdempotencyKey() : checkIdempotencyKey(options.idempotencyKey);
    return this.send("POST", WEBHOOK_ENDPOINTS, {}, options, { body: createBody(body), headers: { "Idempotency-Key": key } });
  }

  /** `PATCH /webhooks/endpoints/{id}`: only the fields given change (a filter set to `null`: no restriction). */
  async updateWebhookEndpoint(id: string, changes: WebhookEndpointUpdate, options: CallOptions = {}): Promise<WithMeta<WebhookEndpoint>> {
    return this.send("PATCH", endpointPath(id), {}, options, { body: updateBody(changes) });
  }

  /**
   * `DELETE /webhooks/endpoints/{id}`: the meta of the 204. Retried after a lost answer like a
   * read, so a `NotFoundError` after a retry can mean the first attempt removed it.
   */
  async deleteWebhookEndpoint(id: string, options: CallOptions = {}): Promise<ResponseMeta> {
    return (await this.send<WithMeta<object>>("DELETE", endpointPath(id), {}, options)).meta;
  }

  /** `POST /webhooks/endpoints/{id}/pause`: deliveries stop; the position is kept. */
  pauseWebhookEndpoint(id: string, options: CallOptions = {}): Promise<WithMeta<WebhookEndpoint>> {
    return this.send("POST", endpointPath(id, "pause"), {}, options);
  }

  /** `POST /webhooks/endpoints/{id}/resume`: a paused or disabled endpoint delivers again from its cursor. */
  resumeWebhookEndpoint(id: string, options: CallOptions = {}): Promise<WithMeta<WebhookEndpoint>> {
    return this.send("POST", endpointPath(id, "resume"), {}, options);
  }

  /**
   * `POST /webhooks/endpoints/{id}/rotate-secret`: the new secret, shown this once (both sign for
   * 24 hours). Not retried after a lost answer: a second rotation would replace it.
   */
  rotateWebhookSecret(id: string, options: CallOptions = {}): Promise<WithMeta<WebhookEndpointSecret>> {
    return this.send("POST", endpointPath(id, "rotate-secret"), {}, options, { idempotent: false });
  }

  /** `POST /webhooks/endpoints/{id}/replay` (202): deliver again everything after `since` (a time) or `cursor`, exactly one. */
  async replayWebhookEndpoint(id: string, from: WebhookReplay, options: CallOptions = {}): Promise<WithMeta<WebhookEndpoint>> {
    return this.send("POST", endpointPath(id, "replay"), {}, options, { body: replayBody(from), idempotent: false });
  }

  /** `POST /webhooks/endpoints/{id}/test` (202): a signed `webhook.test` message is queued; its `webhook_id` names it among the attempts. */
  sendWebhookTest(id: string, options: CallOptions = {}): Promise<WithMeta<WebhookTestQueued>> {
    return this.send("POST", endpointPath(id, "test"), {}, options, { idempotent: false });
  }

  /**
   * Every post of `GET /posts`, page by page: `direction: "older"` (default) starts at the newest
   * post (or `before`) and goes back to the oldest; `"newer"` starts right after `after` and
   * yields oldest first up to the newest. `for await` the posts, `.pages()` for the pages (each
   * with its meta), `.toArray({ max })` to collect at most `max` posts.
   */
  iterPosts(params: PostsParams & { direction?: Direction } = {}, options: CallOptions = {}): PostWalk {
    const { direction = "older", ...rest } = params;
    return new PostWalk((p) => this.posts(p, options), rest, direction);
  }

  /** Every hit of `GET /search`, page by page (as `iterPosts`). */
  iterSearch(q: string, params: SearchParams & { direction?: Direction } = {}, options: CallOptions = {}): PostWalk {
    const { direction = "older", ...rest } = params;
    return new PostWalk((p) => this.search(q, p, options), rest, direction);
  }

  /**
   * The stream with resume cursors: `for await (const item of client.stream({ store }))`. Every
   * new post once across reconnects, and across restarts with a `FileCursorStore`.
   */
  stream(options: StreamOptions = {}): ResumingStream {
    return new ResumingStream(this, options);
  }

  /** One GET with the retry policy; the body with its meta, or the typed error. */
  get<T extends object>(path: string, params: object, options: CallOptions = {}): Promise<T> {
    return this.send<T>("GET", path, params, options);
  }

  /**
   * One request with the retry policy; the body with its meta (a 204's meta alone: `{}` with
   * `meta`), or the typed error. `body` goes as compact JSON. A request that is not `idempotent`
   * (it would act twice if sent twice) is retried only after a 429, which the server answers
   * before acting: never after a network error, a timeout or another status, since the first
   * attempt may have been carried out.
   */
  async send<T extends object>(method: string, path: string, params: object, options: CallOptions = {}, request: SendOptions = {}): Promise<T> {
    const policy: RetryPolicy = options.retry ? { ...this.retry, ...options.retry } : this.retry;
    const url = `${this.baseUrl}${path}${queryString(params as Record<string, QueryValue>)}`;
    const idempotent = request.idempotent ?? true;
    const started = Date.now();
    const callDeadline = started + policy.maxCallTimeMs;
    let waited = 0;
    for (let attempt = 1; ; attempt++) {
      let failure: TickerwireError;
      let retryAfter: number | null = null;
      let retryable: boolean;
      try {
        const { meta, body } = await this.attempt(method, url, request, Math.min(this.timeoutMs, callDeadline - Date.now()), options.signal);
        if (meta.status < 400) return withMeta((body ?? {}) as T, meta);
        const error = errorFromResponse(meta, body);
        failure = error;
        retryAfter = error.retryAfterMs;
        retryable = policy.retryStatuses.includes(meta.status) && (idempotent || meta.status === 429);
      } catch (error) {
        if (error instanceof AbortedError || !(error instanceof TickerwireError)) throw error;
        failure = error;
        retryable = policy.retryConnectionErrors && idempotent;
      }
      const delay = retryable ? retryDelayMs(policy, attempt, retryAfter, waited) : null;
      if (delay === null || Date.now() + delay >= callDeadline) throw failure;
      waited += delay;
      const signal = options.signal ?? new AbortController().signal;
      try {
        await sleep(delay, signal);
      } catch (reason) {
        throw new AbortedError("the call was aborted while waiting to retry", { cause: reason });
      }
    }
  }

  private async attempt(
    method: string,
    url: string,
    request: SendOptions,
    timeoutMs: number,
    signal: AbortSignal | undefined,
  ): Promise<{ meta: ResponseMeta; body: unknown }> {
    if (signal?.aborted) throw new AbortedError("the call was aborted", { cause: signal.reason });
    const timeout = AbortSignal.timeout(Math.max(timeoutMs, 1));
    const combined = signal ? AbortSignal.any([signal, timeout]) : timeout;
    try {
      const headers: Record<string, string> = { ...request.headers, Authorization: `Bearer ${this.apiKey}`, Accept: "application/json" };
      const mark = this.minPosition.header();
      if (mark !== null) headers["X-Min-Log-Position"] = mark;
      let body: string | undefined;
      if (request.body !== undefined) {
        body = JSON.stringify(request.body);
        headers["Content-Type"] = "application/json";
      }
      const response = await this.fetchImpl(url, { method, headers, body, signal: combined });
      const text = await response.text();
      const meta = metaFromResponse(response.status, response.headers);
      this.minPosition.sawLogPosition(meta.logPosition);
      let decoded: unknown = null;
      if (text) {
        try {
          decoded = JSON.parse(text);
        } catch {
          if (response.status < 400) throw new ConnectionError(`${response.status} with a body that is not JSON`);
        }
      }
      return { meta, body: decoded };
    } catch (error) {
      if (error instanceof TickerwireError) throw error;
      if (signal?.aborted) throw new AbortedError("the call was aborted", { cause: signal.reason });
      if (timeout.aborted) throw new RequestTimeoutError(`no answer within ${timeoutMs} ms: ${url}`, { cause: error });
      throw new ConnectionError(`the server could not be reached: ${String((error as Error).cause ?? error)}`, { cause: error });
    }
  }
}

/** A walk over every page of a list: `for await` the posts, `.pages()` the pages, `.toArray({ max })`. */
export class PostWalk implements AsyncIterable<PostLean> {
  constructor(
    private readonly read: (params: PostsParams) => Promise<PostPage>,
    private readonly params: PostsParams,
    readonly direction: Direction,
  ) {}

  /** Every page, each with its `meta`; in `newer` walks the posts of each page are oldest first. */
  async *pages(): AsyncGenerator<PostPage, void, undefined> {
    const params: PostsParams = { ...this.params };
    if (this.direction === "newer") delete params.before;
    else delete params.after;
    for (;;) {
      const page = await this.read(params);
      if (this.direction === "newer") page.posts.reverse();
      if (page.posts.length > 0) yield page;
      const next = this.direction === "newer" ? page.prev_cursor : page.next_cursor;
      if (next === null || page.posts.length === 0) return;
      if (this.direction === "newer") params.after = next;
      else params.before = next;
    }
  }

  async *[Symbol.asyncIterator](): AsyncGenerator<PostLean, void, undefined> {
    for await (const page of this.pages()) yield* page.posts;
  }

  /** At most `max` posts (the walk stops reading pages there): the cap is required. */
  async toArray(options: { readonly max: number }): Promise<PostLean[]> {
    if (!Number.isSafeInteger(options.max) || options.max < 0) throw new RangeError("max is a non-negative integer");
    const out: PostLean[] = [];
    if (options.max === 0) return out;
    for await (const post of this) {
      out.push(post);
      if (out.length >= options.max) break;
    }
    return out;
  }
}

export { ApiError };
