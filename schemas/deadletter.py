"""Dead letters: records a stage could not process, with the record named and the reason given."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

import pyarrow as pa

from schemas.page import escaped, stable_id

DEAD_LETTER_SCHEMA = pa.schema(
    [
        ("id", pa.string()),
        ("source", pa.string()),
        ("source_id", pa.string()),
        ("stage", pa.string()),
        ("reason", pa.string()),
        ("error_class", pa.string()),
        ("message", pa.string()),
        # the refresh key of the input unit the record came from ("" when none): an incremental refresh
        # carries a reused unit's dead letters over by this column (pipelines/refresh.py)
        ("unit", pa.string()),
    ]
)


@dataclass(frozen=True)
class DeadLetter:
    """A record that failed a stage. ``reason`` is a short slug (manifest key); ``message`` the detail;
    ``unit`` the refresh key of the record's input unit (``pipelines.refresh``), "" when it has none.
    A lone surrogate in any field (a file name that is not UTF-8, an id from JSON's ``"\\udc80"``) is kept
    as its backslash escape (``schemas.page.escaped``): the letter names the record and can be written."""

    source: str
    source_id: str
    stage: str
    reason: str
    error_class: str
    message: str
    unit: str = ""

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, str):
                object.__setattr__(self, f.name, escaped(value))

    @property
    def id(self) -> str:
        """Stable hex id of (stage, source, source id, reason): places the letter in the sharded output."""
        return stable_id(self.stage, self.source, self.source_id, self.reason)

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
