/**
 * A test file that test/runner.test.ts runs with node's test runner (not a test of the client).
 * With FIXTURE_EXIT_EARLY=1 its first suite ends the process with code 0 before the second suite
 * starts: the runner then exits 0 counting only the first suite's tests, as when a suite is dropped.
 */

import { describe, test } from "node:test";

describe("first", () => {
  test("runs", () => {});
  test("ends the process with code 0 (with FIXTURE_EXIT_EARLY=1)", () => {
    if (process.env["FIXTURE_EXIT_EARLY"] === "1") setTimeout(() => process.exit(0), 0);
  });
});

describe("second", () => {
  test("starts after a pause", async () => {
    await new Promise((resolveWait) => setTimeout(resolveWait, 50));
  });
});
