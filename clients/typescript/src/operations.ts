/**
 * Which method of `Client` performs each operation of the contract, by `operationId`. The
 * repository's tests/unit/test_client_operations.py holds both clients to it (every operation of
 * schemas/openapi.json has a method here and in the Python client's `OPERATIONS`); `satisfies`
 * makes the compiler check that every method named exists.
 */

import type { Client } from "./http.js";

export const OPERATIONS = {
  listPosts: "posts",
  getPost: "post",
  listCategories: "categories",
  getCategory: "category",
  listTokens: "tokens",
  getToken: "token",
  getSentimentPulse: "sentimentPulse",
  listLanguages: "languages",
  searchPosts: "search",
  listChanges: "changes",
  listWebhookEndpoints: "webhookEndpoints",
  getWebhookEndpoint: "webhookEndpoint",
  listWebhookAttempts: "webhookAttempts",
  createWebhookEndpoint: "createWebhookEndpoint",
  updateWebhookEndpoint: "updateWebhookEndpoint",
  deleteWebhookEndpoint: "deleteWebhookEndpoint",
  pauseWebhookEndpoint: "pauseWebhookEndpoint",
  resumeWebhookEndpoint: "resumeWebhookEndpoint",
  rotateWebhookEndpointSecret: "rotateWebhookSecret",
  replayWebhookEndpoint: "replayWebhookEndpoint",
  sendWebhookTestEvent: "sendWebhookTest",
} as const satisfies Readonly<Record<string, keyof Client>>;

/** An `operationId` this client performs. */
export type OperationId = keyof typeof OPERATIONS;
