"""The base of every olmOCR-Bench unit test (``schemas.unit_tests``): the fields all types share,
their validation on construction, and the matching helpers the test types use.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from schemas.text import normalize_text

TEST_TYPES = ("baseline", "present", "absent", "order", "table", "math", "format", "footnote")
CHECKED_VALUES = ("verified", "rejected")

# rapidfuzz scores are floats in [0, 100]; a cutoff this far below the threshold lets rapidfuzz stop
# early without ever turning an exact-threshold match into a miss.
CUTOFF_SLACK = 1e-6


def match_threshold(max_diffs: int, length: int) -> float:
    """The similarity a fuzzy match of a ``length``-character target needs: 1 - max_diffs / length."""
    return 1.0 - max_diffs / (length if length > 0 else 1)


def shorten(text: str, n: int = 40) -> str:
    """``text`` cut to ``n`` characters (with "...") for explanations."""
    return text if len(text) <= n else text[:n] + "..."


@dataclass(kw_only=True)
class UnitTest:
    """Fields every test has; ``check`` is implemented by each type."""

    TYPES: ClassVar[tuple[str, ...]] = ()

    pdf: str
    page: int
    id: str
    type: str
    max_diffs: int = 0
    checked: str | None = None
    url: str | None = None

    def __post_init__(self) -> None:
        self._str("pdf")
        self._str("id")
        if not isinstance(self.type, str) or self.type not in self.TYPES:
            raise ValueError(
                f"field 'type' must be one of {list(self.TYPES)} for {type(self).__name__}, got {self.type!r}")
        self._int("page", minimum=1)
        self._int("max_diffs", minimum=0)
        if self.checked is not None and self.checked not in CHECKED_VALUES:
            raise ValueError(f"field 'checked' must be one of {list(CHECKED_VALUES)} or null, got {self.checked!r}")
        self._str("url", optional=True, allow_empty=True)

    def check(self, markdown: str) -> tuple[bool, str]:
        """Run the test on one candidate transcription: (passed, why)."""
        raise NotImplementedError

    # validation helpers -----------------------------------------------------------------------
    def _str(self, name: str, *, optional: bool = False, allow_empty: bool = False) -> None:
        """A string; ``optional``: or null; ``allow_empty``: or "" or null, both meaning unset (olmOCR
        reads a null table relation as unset: its ``normalize_text(None)`` is None, which is falsy)."""
        value = getattr(self, name)
        if value is None and (optional or allow_empty):
            return
        if not isinstance(value, str):
            kind = type(value).__name__
            raise ValueError(f"field {name!r} must be a string, got {kind}")  # noqa: TRY004
        if not allow_empty and not value.strip():
            raise ValueError(f"field {name!r} must not be empty")

    def _int(self, name: str, *, minimum: int, optional: bool = False) -> None:
        value = getattr(self, name)
        if value is None and optional:
            return
        if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
            raise ValueError(f"field {name!r} must be an integer >= {minimum}, got {value!r}")

    def _bool(self, name: str) -> None:
        if not isinstance(getattr(self, name), bool):
            value = getattr(self, name)
            raise ValueError(f"field {name!r} must be true or false, got {value!r}")  # noqa: TRY004

    def _normalized_field(self, name: str) -> str:
        """Validate a required text field and return its normalised form (must keep content)."""
        self._str(name)
        value = normalize_text(getattr(self, name))
        if not value.strip():
            raise ValueError(f"field {name!r} is empty after normalisation: {getattr(self, name)!r}")
        return value
