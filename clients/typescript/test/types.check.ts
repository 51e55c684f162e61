/**
 * Type tests: compiled by `npm run typecheck` (tsc --strict), never run. Each `@ts-expect-error`
 * line must fail to compile; if one compiles, tsc reports the unused directive and `npm test` fails.
 */

import {
  Client,
  OPERATIONS,
  RateLimitError,
  ResumePoint,
  type ChangesPage,
  type ResponseMeta,
  type WebhookAttempt,
  type WebhookEndpoint,
  type WebhookEndpointCreate,
  type WebhookEndpointSecret,
  type WebhookEndpointUpdate,
  type WebhookTestQueued,
  type components,
  type PostLean,
  type PostPage,
  type StreamItem,
  type WithMeta,
  type SentimentPulse,
} from "../src/index.js";

declare const client: Client;

type Schemas = components["schemas"];
/** `Mine` names exactly the fields of the contract's schema, and takes every value it allows. */
type Matches<Mine, Theirs> = [Exclude<keyof Mine, keyof Theirs> | Exclude<keyof Theirs, keyof Mine>] extends [never]
  ? [Theirs] extends [Mine]
    ? true
    : false
  : false;
/** The shapes written out in src/types.ts agree with the generated schemas of the same name. */
export const contract: [true, true, true, true, true, true] = [
  true as Matches<WebhookEndpointCreate, Schemas["WebhookEndpointCreate"]>,
  true as Matches<WebhookEndpointUpdate, Schemas["WebhookEndpointUpdate"]>,
  true as Matches<WebhookEndpointSecret, Schemas["WebhookEndpointSecret"]>,
  true as Matches<WebhookTestQueued, Schemas["WebhookTestQueued"]>,
  true as Matches<WebhookEndpoint, Schemas["WebhookEndpoint"]>,
  true as Matches<WebhookAttempt, Schemas["WebhookAttempt"]>,
];

export async function webhookChecks(): Promise<void> {
  const created = await client.createWebhookEndpoint({ url: "https://h.example", locales: ["en-US"], tickers: null }, { idempotencyKey: "k" });
  const secret: string = created.secret;
  const id: string = created.endpoint.id;
  const status: 201 | number = created.meta.status;
  // @ts-expect-error a field the contract does not have
  await client.createWebhookEndpoint({ url: "https://h.example", colour: "red" });
  // @ts-expect-error url is required
  await client.createWebhookEndpoint({ description: "x" });
  // @ts-expect-error a filter is a list of strings
  await client.updateWebhookEndpoint(id, { tickers: "BTC" });
  // @ts-expect-error replay needs since or cursor
  await client.replayWebhookEndpoint(id, {});
  // @ts-expect-error not both
  await client.replayWebhookEndpoint(id, { since: "2026-12-05T09:30:00Z", cursor: "c1~x" });
  const replayed: WebhookEndpoint = await client.replayWebhookEndpoint(id, { since: new Date() });
  const deleted: ResponseMeta = await client.deleteWebhookEndpoint(id);
  const attempt = (await client.webhookAttempts(id, { limit: 5 })).attempts[0];
  const kind: "post.created" | "webhook.test" | undefined = attempt?.type;
  const excerpt: string | null | undefined = attempt?.response_excerpt;
  // @ts-expect-error an endpoint status the contract does not have
  const sleeping: WebhookEndpoint["status"] = "sleeping";
  const queued: string = (await client.sendWebhookTest(id)).webhook_id;
  const page: ChangesPage = await client.changes({ cursor: "c1~x", lang: ["en-US"], limit: 5 });
  const method: "sendWebhookTest" = OPERATIONS.sendWebhookTestEvent;
  void [secret, status, replayed, deleted, kind, excerpt, sleeping, queued, page, method];
}

export async function checks(): Promise<void> {
  const page: PostPage = await client.posts({ lang: "en-US", ticker: ["BTC", "ETH"], sentiment: "BULLISH", importance_min: 60 });
  const first: PostLean | undefined = page.posts[0];
  const cursor: string | null = page.next_cursor;
  const status: number = page.meta.status;

  // @ts-expect-error a misspelt filter
  await client.posts({ tickers: "BTC" });
  // @ts-expect-error a sentiment the contract does not have
  await client.posts({ sentiment: "VERY_BULLISH" });
  // @ts-expect-error importance_min is a number
  await client.search("etf", { importance_min: "60" });
  // @ts-expect-error search needs q
  await client.search();
  // @ts-expect-error a field the lean post does not have
  first?.body;
  // @ts-expect-error toArray needs its cap
  await client.iterPosts().toArray();
  // @ts-expect-error a direction that does not exist
  client.iterPosts({ direction: "sideways" });

  const pulse: WithMeta<SentimentPulse> = await client.sentimentPulse();
  const bullish: number = pulse.breakdown.BULLISH.count;
  // @ts-expect-error the pulse has no such sentiment
  pulse.breakdown.MOON;

  for await (const item of client.stream({ langs: ["en-US"] })) {
    const source: "stream" | "gap_fill" = item.source;
    // @ts-expect-error the sources are the Python client's words
    const live: StreamItem["source"] = "live";
    const saved: string = item.position.toJson();
    void [source, live, saved];
  }
  // @ts-expect-error an option the stream does not have
  client.stream({ lang: "en-US" });

  const error: unknown = null;
  if (error instanceof RateLimitError) {
    const wait: number | null = error.retryAfterMs;
    const left: number | null = error.remaining;
    void [wait, left];
  }
  // @ts-expect-error after ids are numbers
  new ResumePoint("c1~x", { "en-US": "12" });
  void [cursor, status, bullish];
}
