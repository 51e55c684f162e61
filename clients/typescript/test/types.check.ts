/**
 * Type tests: compiled by `npm run typecheck` (tsc --strict), never run. Each `@ts-expect-error`
 * line must fail to compile; if one compiles, tsc reports the unused directive and `npm test` fails.
 */

import {
  Client,
  RateLimitError,
  ResumePoint,
  type PostLean,
  type PostPage,
  type StreamItem,
  type WithMeta,
  type SentimentPulse,
} from "../src/index.js";

declare const client: Client;

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
