export { Client, PostWalk, defaultStreamUrl, type CallOptions, type ClientOptions, type SendOptions } from "./http.js";
export { OPERATIONS, type OperationId } from "./operations.js";
export { MAX_IDEMPOTENCY_KEY, checkIdempotencyKey } from "./webhook-calls.js";
export { ResumingStream, MAX_FILL_PAGES, bcp47Case, streamUrlWithKey, type CursorRefusal, type ItemSource, type StreamItem, type StreamOptions, type StreamStats } from "./stream.js";
export { MinLogPosition } from "./freshness.js";
export { ResumePoint, FileCursorStore, MemoryCursorStore, type CursorStore } from "./position.js";
export * from "./errors.js";
export { limitsFromHeaders, metaFromResponse, parseStructuredList, retryAfterMs, type Limits, type RateLimitPolicy, type ResponseMeta } from "./meta.js";
export { Backoff, DEFAULT_RETRY, fullJitterMs, retryDelayMs, retryPolicy, type RetryPolicy } from "./retry.js";
export type { WebSocketChoice } from "./socket.js";
export { CloseCode, type Cursor, type PingMessage, type PostCreatedMessage, type ReadyMessage, type StreamMessage } from "./wire.js";
export {
  DEFAULT_WEBHOOK_TOLERANCE_MS,
  WEBHOOK_ERROR_REASONS,
  WEBHOOK_SECRET_PREFIX,
  Webhook,
  WebhookBodyNotBytesError,
  WebhookHeaderError,
  WebhookPayloadError,
  WebhookSecretError,
  WebhookSignatureError,
  WebhookTimestampError,
  WebhookVerificationError,
  looksReserialized,
  type VerifyOptions,
  type WebhookBody,
  type WebhookErrorReason,
  type WebhookHeaders,
  type WebhookMessage,
  type WebhookOptions,
} from "./webhooks.js";
export type * from "./types.js";
export type { components, operations, paths } from "./generated/openapi.js";
