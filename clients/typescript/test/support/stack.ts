/** The tests' view of the running `tickerwire up` (test/run.ts started it) and its Python helper. */

import { spawn, type ChildProcessWithoutNullStreams } from "node:child_process";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { Client, type ClientOptions } from "../../src/index.js";
import { PACKAGE as PACKAGE_DIR } from "./paths.js";

export interface UpState {
  readonly base_url: string;
  readonly stream_url: string;
  readonly api_key: string;
  readonly pids: { readonly up: number; readonly children: { readonly [name: string]: number } };
}

export { PACKAGE } from "./paths.js";
export const STATE_DIR = process.env["TICKERWIRE_STATE_DIR"] ?? "";
export const PYTHON = process.env["TICKERWIRE_TEST_PYTHON"] ?? "";

if (!STATE_DIR || !PYTHON) {
  throw new Error("run the tests with `npm test` (test/run.ts starts the tickerwire up they use)");
}

export function upState(): UpState {
  return JSON.parse(readFileSync(join(STATE_DIR, "up.json"), "utf8")) as UpState;
}

/** The stream process's pid (up restarts it after a kill and writes the new one). */
export function streamPid(): number {
  const pid = upState().pids.children.stream;
  if (pid === undefined) throw new Error("up.json names no stream child");
  return pid;
}

export function client(overrides: Partial<ClientOptions> = {}): Client {
  const up = upState();
  return new Client({ baseUrl: up.base_url, apiKey: up.api_key, streamUrl: up.stream_url.split("?")[0], ...overrides });
}

export interface PostSpec {
  readonly id: number;
  readonly version?: number;
  readonly langs: readonly string[];
  readonly status?: "published" | "partial";
  readonly age_s?: number;
  readonly tickers?: readonly string[];
}

interface Answer {
  readonly ok: boolean;
  readonly error?: string;
  readonly stdout?: string;
  readonly stderr?: string;
  readonly [key: string]: unknown;
}

/** The Python helper (test/support/stack_helper.py): publishes, runs admin commands, runs the Python client. */
export class Helper {
  private readonly proc: ChildProcessWithoutNullStreams;
  private readonly answers: ((line: string) => void)[] = [];
  private chain: Promise<unknown> = Promise.resolve();
  private exited: string | undefined;
  readonly ready: Promise<void>;

  constructor() {
    this.proc = spawn(PYTHON, [join(PACKAGE_DIR, "test", "support", "stack_helper.py")], {
      env: { ...process.env, TICKERWIRE_STATE_DIR: STATE_DIR },
    });
    this.proc.stderr.on("data", (chunk: Buffer) => process.stderr.write(`# helper: ${chunk.toString()}`));
    createInterface({ input: this.proc.stdout }).on("line", (line) => this.answers.shift()?.(line));
    this.ready = new Promise((r) => this.answers.push(() => r()));
    // A helper that dies (an import error, a crash) fails every waiting and later request at once,
    // naming why, instead of leaving the tests to time out.
    this.proc.stdin.on("error", () => undefined);
    this.proc.on("exit", (code, signal) => {
      this.exited = `the Python helper exited (${signal ?? `code ${code}`}); its stderr is above`;
      const failed = JSON.stringify({ ok: false, error: this.exited });
      for (const answer of this.answers.splice(0)) answer(failed);
    });
  }

  request(body: object): Promise<Answer> {
    const next = this.chain.then(async () => {
      await this.ready;
      if (this.exited) throw new Error(this.exited);
      const line = new Promise<string>((r) => this.answers.push(r));
      this.proc.stdin.write(`${JSON.stringify(body)}\n`);
      const answer = JSON.parse(await line) as Answer;
      if (!answer.ok) throw new Error(`helper ${JSON.stringify(body).slice(0, 200)}: ${answer.error ?? answer.stderr ?? ""}`);
      return answer;
    });
    this.chain = next.catch(() => undefined);
    return next;
  }

  async publish(posts: readonly PostSpec[]): Promise<void> {
    await this.request({ op: "posts", posts });
  }

  /** `tickerwire <args>`; its stdout. */
  async cli(...args: string[]): Promise<string> {
    return String((await this.request({ op: "cli", args })).stdout ?? "");
  }

  close(): void {
    this.proc.stdin.end();
    this.proc.kill("SIGTERM");
  }
}

/** Post ids no other test uses (a counter in the state directory: the test files run one at a time). */
export function freshIds(count: number): number[] {
  const file = join(STATE_DIR, "ts-test-ids");
  const first = existsSync(file) ? Number(readFileSync(file, "utf8")) : 1_000_000;
  writeFileSync(file, String(first + count));
  return Array.from({ length: count }, (_, i) => first + i);
}

export const LANGS = ["en-US", "de-DE", "fr-FR"] as const;

export function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

/** `promise`, or after `ms` undefined (the timer is cleared either way, so it keeps no process alive). */
export async function within<T>(promise: Promise<T>, ms: number): Promise<T | undefined> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  try {
    return await Promise.race([promise, new Promise<undefined>((r) => (timer = setTimeout(() => r(undefined), ms)))]);
  } finally {
    clearTimeout(timer);
  }
}

/** Until `check()` is true, or throws naming `what` after `timeoutMs`. */
export async function until(what: string, check: () => boolean | Promise<boolean>, timeoutMs = 30_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(50);
  }
}

/** A second workspace with its own key, badge heartbeat and limits (the demo one stays untouched). */
export async function workspace(helper: Helper, id: string, flags: string[] = [], badge = true): Promise<string> {
  await helper.cli("workspace", "create", id, ...flags);
  const key = (await helper.cli("key", "issue", id)).trim().split(/\s+/).pop() ?? "";
  if (badge) {
    const embed = `bdg_${id.replace(/[^A-Za-z0-9]/g, "")}`;
    await helper.cli("embed", embed, id);
    await helper.cli("heartbeat", embed, id);
    await helper.cli("sweep");
  }
  return key;
}
