// Fails when src/generated/openapi.ts is not what openapi-typescript writes from
// schemas/openapi.json today (run `npm run generate` after changing the contract).
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const pkg = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const checkedIn = join(pkg, "src", "generated", "openapi.ts");
const dir = mkdtempSync(join(tmpdir(), "tw-openapi-"));
try {
  const fresh = join(dir, "openapi.ts");
  execFileSync(
    process.execPath,
    [join(pkg, "node_modules", "openapi-typescript", "bin", "cli.js"), join(pkg, "..", "..", "schemas", "openapi.json"), "-o", fresh],
    { stdio: ["ignore", "ignore", "inherit"] },
  );
  if (readFileSync(fresh, "utf8") !== readFileSync(checkedIn, "utf8")) {
    console.error("src/generated/openapi.ts is out of date with schemas/openapi.json: run `npm run generate`");
    process.exitCode = 1;
  } else {
    console.log("src/generated/openapi.ts matches schemas/openapi.json");
  }
} finally {
  rmSync(dir, { recursive: true, force: true });
}
