/**
 * One WebSocket connection, on the runtime's global `WebSocket` where there is one (Node 22+,
 * Deno, Bun) and on `ws` where there is none (Node 20). A refused handshake becomes its typed
 * error: `ws` hands over the refusal's status, headers and envelope; the web-standard
 * `WebSocket` shows none of them, so the refusal is asked for again with a plain GET, which
 * shows every refusal but the connection limit (a slot is only asked for by an upgrade).
 */

import { ConnectionError, RequestTimeoutError, errorFromParts, type ApiError } from "./errors.js";

/** Which WebSocket implementation the stream uses: the global one where present, else `ws` (`auto`). */
export type WebSocketChoice = "auto" | "global" | "ws";

export interface SocketHandlers {
  message(text: string): void;
  close(code: number, reason: string): void;
}

export interface OpenSocket {
  readonly implementation: "global" | "ws";
  close(code?: number, reason?: string): void;
}

/** The plain-GET twin of a refused upgrade: its envelope says why, except for the connection limit. */
async function refusalByGet(url: string, timeoutMs: number): Promise<ApiError | null> {
  const http = url.replace(/^ws/, "http");
  try {
    const response = await fetch(http, { signal: AbortSignal.timeout(timeoutMs) });
    if (response.status === 426 || response.status < 400) return null; // the gates let it through
    const text = await response.text();
    let body: unknown = null;
    try {
      body = JSON.parse(text);
    } catch {
      body = null;
    }
    return errorFromParts(response.status, response.headers, body);
  } catch {
    return null;
  }
}

function decode(data: unknown): string {
  if (typeof data === "string") return data;
  if (data instanceof ArrayBuffer) return new TextDecoder().decode(data);
  if (ArrayBuffer.isView(data)) return new TextDecoder().decode(data);
  if (Array.isArray(data)) return Buffer.concat(data as Buffer[]).toString("utf8");
  return String(data);
}

function openGlobal(url: string, timeoutMs: number, handlers: SocketHandlers): Promise<OpenSocket> {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(url);
    let opened = false;
    const timer = setTimeout(() => {
      ws.close();
      reject(new RequestTimeoutError(`no WebSocket handshake within ${timeoutMs} ms`));
    }, timeoutMs);
    const socket: OpenSocket = { implementation: "global", close: (code, reason) => ws.close(code ?? 1000, reason) };
    ws.addEventListener("open", () => {
      opened = true;
      clearTimeout(timer);
      resolve(socket);
    });
    ws.addEventListener("message", (event) => handlers.message(decode(event.data)));
    // A refused handshake fires "error" (and, in some runtimes, "close"): settle once, on the first.
    let refused = false;
    const refuse = (detail: string): void => {
      if (opened || refused) return;
      refused = true;
      clearTimeout(timer);
      void refusalByGet(url, timeoutMs).then((error) =>
        reject(error ?? new ConnectionError(`the stream refused the handshake (${detail})`)),
      );
    };
    ws.addEventListener("error", () => refuse("error"));
    ws.addEventListener("close", (event) => {
      if (opened) handlers.close(event.code, event.reason);
      else refuse(`close ${event.code}`);
    });
  });
}

async function openWs(url: string, timeoutMs: number, handlers: SocketHandlers): Promise<OpenSocket> {
  const { WebSocket: Ws } = await import("ws");
  return new Promise((resolve, reject) => {
    const ws = new Ws(url, { handshakeTimeout: timeoutMs, maxPayload: 4 * 1024 * 1024 });
    let opened = false;
    const socket: OpenSocket = { implementation: "ws", close: (code, reason) => ws.close(code ?? 1000, reason) };
    ws.on("open", () => {
      opened = true;
      resolve(socket);
    });
    ws.on("unexpected-response", (_request, response) => {
      const chunks: Buffer[] = [];
      response.on("data", (chunk: Buffer) => chunks.push(chunk));
      response.on("end", () => {
        const headers = new Headers();
        for (const [name, value] of Object.entries(response.headers)) {
          if (typeof value === "string") headers.set(name, value);
          else if (Array.isArray(value)) headers.set(name, value.join(", "));
        }
        let body: unknown = null;
        try {
          body = JSON.parse(Buffer.concat(chunks).toString("utf8"));
        } catch {
          body = null;
        }
        reject(errorFromParts(response.statusCode ?? 0, headers, body));
        ws.terminate();
      });
    });
    ws.on("message", (data) => handlers.message(decode(data)));
    ws.on("error", (error) => {
      if (!opened) reject(error.message.includes("timed out") ? new RequestTimeoutError(error.message, { cause: error }) : new ConnectionError(`the stream could not be reached: ${error.message}`, { cause: error }));
    });
    ws.on("close", (code, reason) => {
      if (opened) handlers.close(code, reason.toString("utf8"));
    });
  });
}

/** Opens `url`; resolves once upgraded, rejects with the refusal's `ApiError` or a `ConnectionError`. */
export function openSocket(url: string, timeoutMs: number, handlers: SocketHandlers, choice: WebSocketChoice): Promise<OpenSocket> {
  const useGlobal = choice === "global" || (choice === "auto" && typeof globalThis.WebSocket === "function");
  return useGlobal ? openGlobal(url, timeoutMs, handlers) : openWs(url, timeoutMs, handlers);
}
