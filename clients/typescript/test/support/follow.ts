/**
 * The README's quick start as a process of its own, for the restart test: follows the stream
 * with a file cursor store and prints one JSON line per post. Arguments: the store's path.
 */
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { Client, FileCursorStore } from "../../src/index.js";

const up = JSON.parse(readFileSync(join(process.env["TICKERWIRE_STATE_DIR"] ?? ".tickerwire", "up.json"), "utf8"));
const client = new Client({ baseUrl: up.base_url, apiKey: up.api_key, streamUrl: up.stream_url });
const store = new FileCursorStore(process.argv[2] ?? "position.json");
for await (const item of client.stream({ langs: ["en-US", "de-DE"], store })) {
  process.stdout.write(`${JSON.stringify({ id: item.post.id, lang: item.post.lang, source: item.source })}\n`);
}
