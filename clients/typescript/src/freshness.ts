/**
 * Monotonic reads: the freshest consistency mark a client has seen, sent as
 * `X-Min-Log-Position` with every read (the repository's docs/api.md#min-log-position), so no
 * later read answers from older data, whichever server or database replica serves it. The
 * Python client's `AsyncClient.min_position`.
 *
 * It takes `X-Log-Position` values (per partition, the next offset to apply). A pushed post's
 * `log_position` is the record's own offset, so a push raises the mark to that offset + 1: the
 * first mark that reflects the post (docs/api.md#log-positions). Offsets are kept as `bigint`:
 * the API allows 18 digits, past `Number.MAX_SAFE_INTEGER`.
 */

const PAIR = /^(\d{1,9}):(\d{1,18})$/;

/** `"partition:offset"` as numbers, or null when it is not one. */
function pair(text: string): [number, bigint] | null {
  const match = PAIR.exec(text.trim());
  return match ? [Number(match[1]), BigInt(match[2] as string)] : null;
}

export class MinLogPosition {
  private readonly offsets = new Map<number, bigint>();

  /** A response's `X-Log-Position` (`"0:1523,1:1490"`); a malformed one is ignored whole, never half-read. */
  sawLogPosition(header: string | null | undefined): void {
    if (!header) return;
    const pairs = header.split(",").map(pair);
    if (pairs.some((p) => p === null)) return;
    for (const [partition, offset] of pairs as [number, bigint][]) this.raise(partition, offset);
  }

  /** A pushed post's `log_position` (`"2:1611"`): reads from now on reflect that post (`2:1612`). */
  sawPush(logPosition: string | null | undefined): void {
    const mark = logPosition ? pair(logPosition) : null;
    if (mark !== null) this.raise(mark[0], mark[1] + 1n);
  }

  /** The `X-Min-Log-Position` to send (ascending by partition), or null while nothing above 0 was seen. */
  header(): string | null {
    if (this.offsets.size === 0) return null;
    return [...this.offsets]
      .sort(([a], [b]) => a - b)
      .map(([partition, offset]) => `${partition}:${offset}`)
      .join(",");
  }

  private raise(partition: number, offset: bigint): void {
    if (offset > (this.offsets.get(partition) ?? 0n)) this.offsets.set(partition, offset);
  }
}
