/**
 * The stream's messages (schemas/asyncapi.json, components.schemas), written by hand;
 * test/wire.test.ts checks them against the AsyncAPI document field by field.
 */

import type { PostLean } from "./types.js";

/** A resume cursor: opaque, stored and sent back. */
export type Cursor = string;

export interface ReadyMessage {
  readonly type: "ready";
  readonly ts: string;
  readonly session_id: string;
  /** With `cursors=true` or `resume`: where this connection starts. */
  readonly cursor?: Cursor;
  /** With `resume`: whether the replay from the cursor is given. */
  readonly resumed?: boolean;
  /** With `resumed: false`: why. */
  readonly reason?: { readonly code: "CURSOR_EPOCH_CHANGED" | "CURSOR_NOT_ISSUED"; readonly message: string };
}

export interface PingMessage {
  readonly type: "ping";
  readonly ts: string;
}

export interface PostCreatedMessage {
  readonly type: "post.created";
  readonly ts: string;
  /** `<partition>:<offset>` of the posts-topic event that announced the post. */
  readonly log_position: string;
  readonly data: PostLean;
  /** With `cursors=true` or `resume`: the cursor just after this message. */
  readonly cursor?: Cursor;
}

export type StreamMessage = ReadyMessage | PingMessage | PostCreatedMessage;

/** Close codes the server uses (asyncapi.json, "Server close codes"). */
export const CloseCode = Object.freeze({
  GOING_AWAY: 1001,
  INTERNAL_ERROR: 1011,
  TRY_AGAIN_LATER: 1013,
  ACCESS_REVOKED: 4003,
  SLOW_CONSUMER: 4008,
} as const);
