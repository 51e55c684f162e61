/**
 * `npm test`'s runner: starts one real `tickerwire up` from the repository (embedded PostgreSQL
 * and broker, a small demo dataset, no trickle) on free ports in a state directory of its own,
 * runs every test file with node's test runner against it, and stops it. The tests find it
 * through TICKERWIRE_STATE_DIR (its up.json) and TICKERWIRE_TEST_PYTHON (the repository's venv).
 * The run fails when a test a file declares never ran to a result, even if node's runner exited 0
 * (support/runner.ts says why).
 */

import { spawn } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { runnerArgs, unranTests } from "./support/runner.js";

const here = dirname(fileURLToPath(import.meta.url)); // build/test
const pkg = resolve(here, "..", "..");
const repo = resolve(pkg, "..", "..");

function freePort(): Promise<number> {
  return new Promise((resolvePort, reject) => {
    const server = createServer();
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const address = server.address();
      server.close(() => resolvePort(typeof address === "object" && address ? address.port : 0));
    });
  });
}

async function main(): Promise<number> {
  const venv = process.env["TICKERWIRE_VENV"] ?? join(repo, ".venv");
  const tickerwire = join(venv, "bin", "tickerwire");
  const python = join(venv, "bin", "python");
  if (!existsSync(tickerwire)) {
    console.error(
      `no ${tickerwire}: the tests run against a real \`tickerwire up\`; create the repository's venv first ` +
        "(python3 -m venv .venv && .venv/bin/pip install -e '.[test]') or set TICKERWIRE_VENV",
    );
    return 2;
  }
  const state = mkdtempSync(join(tmpdir(), "tw-ts-"));
  const ports = await Promise.all([0, 1, 2, 3, 4].map(() => freePort()));
  const started = Date.now();
  const up = spawn(
    tickerwire,
    [
      "up",
      "--state-dir", state,
      "--api-port", String(ports[0]),
      "--stream-port", String(ports[1]),
      "--api-admin-port", String(ports[2]),
      "--stream-admin-port", String(ports[3]),
      "--projector-admin-port", String(ports[4]),
      "--posts", "60",
      "--tokens", "50",
      "--no-trickle",
    ],
    {
      env: { ...process.env, TICKERWIRE_STREAM_PING_INTERVAL_S: "1" },
      stdio: ["ignore", "pipe", "pipe"],
    },
  );
  let output = "";
  up.stdout.on("data", (chunk: Buffer) => (output += chunk.toString()));
  up.stderr.on("data", (chunk: Buffer) => (output += chunk.toString()));
  const exited = new Promise<number>((resolveExit) => up.on("exit", (code) => resolveExit(code ?? 1)));
  const isUp = await Promise.race([
    (async () => {
      while (!output.includes("Tickerwire is up.")) {
        if (up.exitCode !== null) return false;
        await new Promise((r) => setTimeout(r, 200));
      }
      return true;
    })(),
    exited.then(() => false),
    new Promise<boolean>((r) => setTimeout(() => r(false), 180_000).unref()),
  ]);
  if (!isUp) {
    console.error(`tickerwire up did not start:\n${output}`);
    up.kill("SIGTERM");
    return 2;
  }
  console.log(`# tickerwire up in ${((Date.now() - started) / 1000).toFixed(1)} s (state ${state})`);
  const files = readdirSync(here)
    .filter((name) => name.endsWith(".test.js"))
    .sort()
    .map((name) => join(here, name));
  // Arguments: parts of file names to run (default all), and options for node's test runner
  // (e.g. --test-name-pattern=SIGKILL).
  const only = process.argv.slice(2).filter((a) => !a.startsWith("--"));
  const flags = process.argv.slice(2).filter((a) => a.startsWith("--"));
  const chosen = only.length ? files.filter((f) => only.some((o) => f.includes(o))) : files;
  const events = join(state, "test-events.jsonl");
  const tests = spawn(process.execPath, [...runnerArgs(events), ...flags, ...chosen], {
    env: { ...process.env, TICKERWIRE_STATE_DIR: state, TICKERWIRE_TEST_PYTHON: python },
    stdio: "inherit",
  });
  // The bound `--test-force-exit` gave (a file that never ends), for the whole run: its files take
  // about 2 minutes together here.
  const bound = setTimeout(() => {
    console.error("# FAILED: the test runner was still running after 20 minutes: stopped");
    tests.kill("SIGKILL");
  }, 20 * 60_000);
  let code = await new Promise<number>((r) => tests.on("exit", (c) => r(c ?? 1)));
  clearTimeout(bound);
  console.log(`# tests done ${((Date.now() - started) / 1000).toFixed(1)} s after up started`);
  // A name pattern leaves tests out on purpose: then only what started must have finished.
  const filtered = flags.some((f) => f.startsWith("--test-name-pattern") || f.startsWith("--test-skip-pattern") || f === "--test-only");
  const unran = unranTests(chosen, existsSync(events) ? readFileSync(events, "utf8") : "", !filtered);
  if (unran.length > 0) {
    console.error(`# FAILED: tests that never ran, though the runner exited ${code}:\n${unran.map((line) => `#   ${line}`).join("\n")}`);
    code = code || 1;
  } else {
    console.log(`# every test of the ${chosen.length} files ran to a result`);
  }
  up.kill("SIGTERM");
  await Promise.race([exited, new Promise((r) => setTimeout(r, 20_000).unref())]);
  if (up.exitCode === null) up.kill("SIGKILL");
  console.log(`# up stopped ${((Date.now() - started) / 1000).toFixed(1)} s after it started`);
  rmSync(state, { recursive: true, force: true });
  return code;
}

process.exitCode = await main();
