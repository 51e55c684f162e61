/**
 * Where a stream resumes, and where that is kept between runs.
 *
 * `ResumePoint` is the Python client's (`tickerwire_client.ResumePoint`): the cursor of the last
 * post taken and, per locale, the id of the last post taken there (used only when the server
 * refuses the cursor). `toJson()` writes exactly what Python's `ResumePoint.to_json()` writes, so
 * a position saved by one client resumes in the other.
 */

import { mkdir, readFile, rename, writeFile } from "node:fs/promises";
import { dirname } from "node:path";

export class ResumePoint {
  readonly cursor: string | null;
  readonly after: Readonly<Record<string, number>>;

  constructor(cursor: string | null = null, after: Readonly<Record<string, number>> = {}) {
    this.cursor = cursor;
    this.after = Object.freeze({ ...after });
    Object.freeze(this);
  }

  /** Python's `json.dumps({"cursor": ..., "after": ...}, sort_keys=True)`, byte for byte. */
  toJson(): string {
    const after = Object.keys(this.after)
      .sort(byCodePoint)
      .map((lang) => `${pyString(lang)}: ${String(this.after[lang])}`)
      .join(", ");
    return `{"after": {${after}}, "cursor": ${this.cursor === null ? "null" : pyString(this.cursor)}}`;
  }

  static fromJson(text: string): ResumePoint {
    const raw: unknown = JSON.parse(text);
    if (typeof raw !== "object" || raw === null || Array.isArray(raw)) {
      throw new TypeError("a resume point is a JSON object");
    }
    const { cursor, after } = raw as { cursor?: unknown; after?: unknown };
    if (cursor !== undefined && cursor !== null && typeof cursor !== "string") {
      throw new TypeError("a resume point's cursor is a string or null");
    }
    const ids: Record<string, number> = {};
    if (after !== undefined && after !== null) {
      if (typeof after !== "object" || Array.isArray(after)) throw new TypeError("a resume point's after is an object");
      for (const [lang, id] of Object.entries(after)) {
        const value = typeof id === "number" ? id : typeof id === "string" ? Number(id) : Number.NaN;
        if (!Number.isSafeInteger(value)) throw new TypeError(`a resume point's after.${lang} is not an integer`);
        ids[lang] = value;
      }
    }
    return new ResumePoint(cursor ?? null, ids);
  }

  /** This point after taking post `id` in `lang`, with `cursor` when the message carried one. */
  taking(id: number, lang: string, cursor: string | null): ResumePoint {
    return new ResumePoint(cursor ?? this.cursor, { ...this.after, [lang]: id });
  }

  withCursor(cursor: string): ResumePoint {
    return new ResumePoint(cursor, this.after);
  }
}

function byCodePoint(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

/** A JSON string as Python's `json.dumps` writes it (`ensure_ascii`: non-ASCII as \uXXXX). */
function pyString(value: string): string {
  return JSON.stringify(value).replace(/[\u007f-\uffff]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`);
}

/** Keeps a stream's position between runs: the stream saves the position of each post the loop finished. */
export interface CursorStore {
  /** The saved position, or null when nothing was saved yet. */
  load(): Promise<ResumePoint | null>;
  save(point: ResumePoint): Promise<void>;
}

/** A position kept in memory (for one process: reconnects, not restarts). */
export class MemoryCursorStore implements CursorStore {
  point: ResumePoint | null;
  constructor(initial: ResumePoint | null = null) {
    this.point = initial;
  }
  async load(): Promise<ResumePoint | null> {
    return this.point;
  }
  async save(point: ResumePoint): Promise<void> {
    this.point = point;
  }
}

/**
 * A position kept in a file, as `ResumePoint.toJson()` (the Python client's format): written to a
 * temporary file beside it, then renamed over it, so a crash leaves the old position or the new
 * one, never half of one.
 */
export class FileCursorStore implements CursorStore {
  constructor(readonly path: string) {}

  async load(): Promise<ResumePoint | null> {
    let text: string;
    try {
      text = await readFile(this.path, "utf8");
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === "ENOENT") return null;
      throw error;
    }
    return ResumePoint.fromJson(text);
  }

  async save(point: ResumePoint): Promise<void> {
    const tmp = `${this.path}.${process.pid}.tmp`;
    await mkdir(dirname(this.path), { recursive: true });
    await writeFile(tmp, point.toJson(), { encoding: "utf8", mode: 0o600 });
    await rename(tmp, this.path);
  }
}
