/**
 * run.ts's check that every declared test ran (support/runner.ts): node's runner is run, with
 * run.ts's options, on a file that ends before its second suite starts, and on the same file
 * run to the end.
 */

import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import { runnerArgs, unranTests } from "./support/runner.js";

const FIXTURE = join(dirname(fileURLToPath(import.meta.url)), "support", "early-exit.fixture.js");

function runFixture(exitEarly: boolean): { status: number | null; stdout: string; problems: string[] } {
  const dir = mkdtempSync(join(tmpdir(), "tw-runner-"));
  try {
    const events = join(dir, "events.jsonl");
    const env: NodeJS.ProcessEnv = { ...process.env, FIXTURE_EXIT_EARLY: exitEarly ? "1" : "0" };
    delete env["NODE_TEST_CONTEXT"]; // a runner of its own, not a part of this one
    const run = spawnSync(process.execPath, [...runnerArgs(events), FIXTURE], { env, encoding: "utf8", timeout: 60_000 });
    return { status: run.status, stdout: run.stdout, problems: unranTests([FIXTURE], readFileSync(events, "utf8")) };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

test("a file that ends before its second suite starts fails the check, whatever the runner's status", () => {
  const run = runFixture(true);
  assert.doesNotMatch(run.stdout, /^# tests 3$/m, "the runner did not run the whole file");
  assert.equal(run.problems.length, 2, run.problems.join("\n"));
  assert.match(run.problems[0]!, /declares 2 top-level tests and suites, 1 reported a result/);
  assert.match(run.problems[1]!, /queued but never finished: .*"second"/);
});

test("the same file run to the end passes it", () => {
  const run = runFixture(false);
  assert.equal(run.status, 0, run.stdout);
  assert.match(run.stdout, /^# tests 3$/m);
  assert.deepEqual(run.problems, []);
});
