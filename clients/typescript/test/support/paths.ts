import { dirname, resolve } from "node:path";
import { fileURLToPath } from "node:url";

/** clients/typescript (the tests run from build/test). */
export const PACKAGE = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");
export const REPOSITORY = resolve(PACKAGE, "..", "..");
