/**
 * How run.ts starts node's test runner, and the check it makes afterwards: that every test a file
 * declares ran to a result.
 *
 * Node's runner can end a file early and still exit 0 with a summary that counts only what ran.
 * With `--test-force-exit`, Node 22 ended test/vectors.test.ts before its `parsing` suite ran or
 * reported in 5 to 13 runs of 40 here (`# tests 48` instead of 51 once in CI), Node 20 in none.
 * No file needs that option (each ends by itself; run.ts bounds the whole run instead), so it is
 * not used. A child that exits 0 in the middle of a file is dropped the same way on every Node
 * (test/runner.test.ts does that). So the runner also writes its events through
 * events-reporter.ts, and `unranTests` compares them with the files.
 */

import { readFileSync } from "node:fs";
import { basename, dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import type { RecordedEvent } from "./events-reporter.js";

const here = dirname(fileURLToPath(import.meta.url)); // build/test/support

/** The runner's options: one file at a time, the usual report on stdout, the events to `eventsFile`. */
export function runnerArgs(eventsFile: string): string[] {
  return [
    "--test",
    "--test-concurrency=1",
    "--test-timeout=600000",
    `--test-reporter=${process.stdout.isTTY ? "spec" : "tap"}`,
    "--test-reporter-destination=stdout",
    `--test-reporter=${join(here, "events-reporter.js")}`,
    `--test-reporter-destination=${eventsFile}`,
  ];
}

/** The tests and suites a file declares at its top level (`describe(`, `test(`, `it(`, `suite(` at column 0). */
export function declaredTopLevel(file: string): number {
  return readFileSync(file, "utf8").match(/^(?:describe|test|it|suite)(?:\.\w+)?\(/gm)?.length ?? 0;
}

/**
 * What did not run, one line a file, from the events file of a run of `files` (empty: all ran).
 * A file must report a result for at least as many top-level tests and suites as it declares
 * (`countDeclared`: false when a name pattern left some out), and every test it queued must
 * have passed or failed.
 */
export function unranTests(files: readonly string[], eventsText: string, countDeclared = true): string[] {
  const events = eventsText
    .split("\n")
    .filter((line) => line.trim() !== "")
    .map((line) => JSON.parse(line) as RecordedEvent);
  const problems: string[] = [];
  for (const file of files.map((f) => resolve(f))) {
    const own = events.filter((e) => e.file !== null && resolve(e.file) === file && e.name !== file && e.name !== e.file);
    const key = (e: RecordedEvent): string => `${e.nesting}\u0000${e.line}\u0000${e.name}`;
    const open = new Map<string, { name: string; count: number }>();
    for (const e of own) {
      const entry = open.get(key(e)) ?? { name: e.name, count: 0 };
      entry.count += e.type === "test:enqueue" ? 1 : -1;
      open.set(key(e), entry);
    }
    const unfinished = [...open.values()].filter((e) => e.count > 0).map((e) => JSON.stringify(e.name));
    const results = own.filter((e) => e.nesting === 0 && e.type !== "test:enqueue").length;
    const declared = countDeclared ? declaredTopLevel(file) : 0;
    if (own.length === 0) problems.push(`${basename(file)}: no test of it reported anything`);
    else if (results < declared) {
      problems.push(`${basename(file)}: declares ${declared} top-level tests and suites, ${results} reported a result`);
    }
    if (unfinished.length > 0) {
      problems.push(`${basename(file)}: queued but never finished: ${unfinished.slice(0, 5).join(", ")}${unfinished.length > 5 ? ", ..." : ""}`);
    }
  }
  return problems;
}
