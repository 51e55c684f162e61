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
