"""The record of a webhook endpoint as the dispatcher delivers to it: a typed record of its
row (its filter an :class:`AnnouncementFilter`), and the secrets that sign for it now
(docs/webhooks.md#secret-rotation)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, Mapping

from ..common.http.signing import derive_secret
from ..readmodel.deliveries import webhook_disabled
from ..readmodel.filters import AnnouncementFilter


@dataclass(frozen=True, slots=True)
class Endpoint:
    id: str
    version: int
    workspace_id: str
    url: str
    #: Which announcements it receives (stored as validated when it was registered).
    filter: AnnouncementFilter
    #: active or paused (removed endpoints are not read).
    status: str
    secret_generation: int
    rotated_at: datetime | None
    start_cursor: str | None
    replay_from: str | None
    replay_seq: int
    #: The dispatcher disabled it (410, failing too long, a cursor it cannot walk) at a version
    #: no later than this one.
    disabled: bool

    @classmethod
    def of(cls, row: Mapping[str, Any]) -> "Endpoint":
        def filt(value: Any) -> tuple[str, ...] | None:
            return None if value is None else tuple(value)

        return cls(
            row["id"],
            row["version"],
            row["workspace_id"],
            row["url"],
            AnnouncementFilter(filt(row["locales"]), filt(row["tickers"]), filt(row["categories"])),
            row["status"],
            row["secret_generation"],
            row["rotated_at"],
            row["start_cursor"],
            row["replay_from"],
            row["replay_seq"],
            webhook_disabled(row),
        )

    @property
    def deliverable(self) -> bool:
        return self.status == "active" and not self.disabled

    def secrets(self, signing_key: bytes, rotation_window_s: float, now: datetime | None = None) -> list[bytes]:
        """The secrets that sign a message now: the current generation's and, within the rotation
        window after a rotation, the previous generation's."""
        current = [derive_secret(signing_key, self.id, self.secret_generation)]
        now = now or datetime.now(timezone.utc)
        if (
            self.secret_generation > 1
            and self.rotated_at is not None
            and now < self.rotated_at + timedelta(seconds=rotation_window_s)
        ):
            current.append(derive_secret(signing_key, self.id, self.secret_generation - 1))
        return current
