/**
 * A reporter for node's test runner, which run.ts adds beside the usual one: it writes each event
 * that says a test was queued or finished as one JSON line, so that run.ts can check that every
 * test a file declares ran to a result (run.ts's `unranTests`), even when the runner's own
 * summary does not say that some never started.
 */

interface EventData {
  readonly name?: string;
  readonly nesting?: number;
  readonly file?: string;
  readonly line?: number;
  readonly details?: { readonly type?: string };
}

/** One line of the reporter's file. */
export interface RecordedEvent {
  readonly type: "test:enqueue" | "test:pass" | "test:fail";
  readonly file: string | null;
  readonly name: string;
  readonly nesting: number;
  readonly line: number | null;
  /** `"suite"` for a `describe`. */
  readonly kind: string | null;
}

const KEPT = new Set(["test:enqueue", "test:pass", "test:fail"]);

export default async function* eventsReporter(source: AsyncIterable<{ type: string; data: EventData }>): AsyncGenerator<string> {
  for await (const event of source) {
    if (!KEPT.has(event.type)) continue;
    const { data } = event;
    const recorded: RecordedEvent = {
      type: event.type as RecordedEvent["type"],
      file: data.file ?? null,
      name: String(data.name ?? ""),
      nesting: data.nesting ?? 0,
      line: data.line ?? null,
      kind: data.details?.type ?? null,
    };
    yield `${JSON.stringify(recorded)}\n`;
  }
}
