"""Dead letters: records a stage could not process, with the record named and the reason given."""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass

import pyarrow as pa

DEAD_LETTER_SCHEMA = pa.schema(
    [
        ("id", pa.string()),
        ("source", pa.string()),
        ("source_id", pa.string()),
        ("stage", pa.string()),
        ("reason", pa.string()),
        ("error_class", pa.string()),
        ("message", pa.string()),
    ]
)


@dataclass(frozen=True)
class DeadLetter:
    """A record that failed a stage. ``reason`` is a short slug (manifest key); ``message`` the detail."""

    source: str
    source_id: str
    stage: str
    reason: str
    error_class: str
    message: str

    @property
    def id(self) -> str:
        """Stable hex id of (stage, source, source id, reason): places the letter in the sharded output."""
        key = "\x1f".join((self.stage, self.source, self.source_id, self.reason))
        return hashlib.sha256(key.encode("utf-8")).hexdigest()[:32]

    def to_row(self) -> dict[str, str]:
        return {"id": self.id, **asdict(self)}

    def __str__(self) -> str:
        return f"{self.source}:{self.source_id} failed at {self.stage} ({self.reason}): {self.message}"


class RecordError(Exception):
    """Raised by stage logic for bad input; ``reason`` becomes the dead-letter and manifest key."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason


class Dropped(Exception):
    """Raised by stage logic to drop a record on purpose (a filter decision, not an error)."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason
