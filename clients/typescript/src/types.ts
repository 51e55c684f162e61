/**
 * The wire types, taken from the generated contract (src/generated/openapi.ts, written by
 * openapi-typescript from schemas/openapi.json) and named as the Python client names them.
 */

import type { components, operations } from "./generated/openapi.js";
import type { ResponseMeta } from "./meta.js";

type Schemas = components["schemas"];

export type PostLean = Schemas["PostLean"];
export type PostDetail = Schemas["PostDetail"];
export type PostPageBody = Schemas["PostPage"];
export type Category = Schemas["Category"];
export type CategoryTree = Schemas["CategoryTree"];
export type Token = Schemas["Token"];
export type TokenDetail = Schemas["TokenDetail"];
export type TokenList = Schemas["TokenList"];
export type Language = Schemas["Language"];
export type LanguageList = Schemas["LanguageList"];
export type SentimentPulse = Schemas["SentimentPulse"];
export type ChangesPageBody = Schemas["ChangesPage"];
export type ErrorBody = Schemas["Error"];
export type Sentiment = PostLean["sentiment"];
export type ErrorCode = Schemas["Error"]["error"]["code"];

/** A result with the meta of the response it came from (not enumerable: `JSON.stringify` gives the body). */
export type WithMeta<T> = T & { readonly meta: ResponseMeta };

export type PostPage = WithMeta<PostPageBody>;
export type ChangesPage = WithMeta<ChangesPageBody>;

type Query<Op extends keyof operations> = NonNullable<operations[Op]["parameters"]["query"]>;

/** A comma-separated parameter: one value or several. */
type Csv<Q> = {
  [K in keyof Q]: NonNullable<Q[K]> extends readonly (infer E)[] ? E | readonly E[] : Q[K];
};

/** A page cursor: a post id, as a number or as the string a page's `next_cursor`/`prev_cursor` gives. */
export type PageCursor = number | string;

type Cursors = { after?: PageCursor; before?: PageCursor };

/** The filters of `GET /posts` and `GET /search`: `category`, `ticker`, `hashtag`, `sentiment`, `importance_min`, `since`. */
export type PostFilter = Csv<Pick<Query<"listPosts">, "category" | "ticker" | "hashtag" | "sentiment" | "importance_min" | "since">>;

/** The parameters of `GET /posts`. */
export type PostsParams = PostFilter & Pick<Query<"listPosts">, "lang" | "limit"> & Cursors;

/** The parameters of `GET /search` besides `q`. */
export type SearchParams = PostFilter & Pick<Query<"searchPosts">, "lang" | "limit"> & Cursors;

/** The parameters of `GET /changes`. */
export type ChangesParams = Csv<Query<"listChanges">>;

/** Which way a walk over every page goes: `older` from the newest (or `before`), `newer` from `after`, oldest first. */
export type Direction = "older" | "newer";

// ------------------------------------------------------------------ webhook endpoints
//
// The shapes come from the generated contract or are written out here with their documentation
// (the bodies, the secret, a queued test); test/types.check.ts holds each written one to the
// generated schema of the same name.

/** The stream's filters of an endpoint: OR within one, AND between them; `null`: no restriction. */
export type WebhookFilters = Schemas["WebhookEndpoint"]["filters"];

/** One of the workspace's endpoints and the dispatcher's progress on it; never its secret. */
export type WebhookEndpoint = Omit<Schemas["WebhookEndpoint"], "description"> & {
  /** What the endpoint is for; `""` when none. */
  description: string;
};

/** The workspace's endpoints that are not removed, oldest first. */
export type WebhookEndpointList = { endpoints: WebhookEndpoint[] };

/** What an attempt delivered: a post, or a test event. */
export type WebhookAttemptType = "post.created" | "webhook.test";

/** One delivery attempt of one message. */
export type WebhookAttempt = Omit<Schemas["WebhookAttempt"], "type" | "response_excerpt"> & {
  type: WebhookAttemptType;
  /** At most the first 1024 bytes of the receiver's answer (UTF-8, with replacement); null when none came. */
  response_excerpt: string | null;
};

/** An endpoint's latest attempts, newest first. */
export type WebhookAttemptList = { attempts: WebhookAttempt[] };

/** A filter of a create or an update: at most 20 values (the stream's grammar); `null`: no restriction. */
export type WebhookFilterValue = readonly string[] | null;

/** The body of `createWebhookEndpoint`. */
export interface WebhookEndpointCreate {
  /** `http:` or `https:`, at most 2048 characters. */
  url: string;
  /** At most 200 characters (default `""`). */
  description?: string;
  locales?: WebhookFilterValue;
  tickers?: WebhookFilterValue;
  categories?: WebhookFilterValue;
}

/** The body of `updateWebhookEndpoint`: only the fields given change. */
export type WebhookEndpointUpdate = Partial<WebhookEndpointCreate>;

/** What `replayWebhookEndpoint` delivers again: everything after a time, or after a resume cursor. */
export type WebhookReplay =
  | { since: string | Date; cursor?: never }
  | { cursor: string; since?: never };

/** The answer of a create and of a rotation: the endpoint and its secret (`whsec_...`), shown this once. */
export interface WebhookEndpointSecret {
  endpoint: WebhookEndpoint;
  secret: string;
}

/** The answer of a test event: the `webhook-id` (`msg_test_...`) of the queued `webhook.test` message. */
export interface WebhookTestQueued {
  webhook_id: string;
}
