"""Short samples: drop responses with fewer than 64 tokens (Jina-OCR-v1 section 4.1).

Tokens are counted with a Hugging Face ``tokenizer.json`` loaded by the ``tokenizers`` library,
without special tokens. The default is the project's byte-level BPE
(``assets/tokenizer/tokenizer.json``, trained by ``scripts/train_tokenizer.py``); point
``tokenizer_path`` at the model's own ``tokenizer.json`` (or a local folder holding one) to count
as the model does.

Findings go to ``record.quality["short"]``: ``token_count`` and, for responses longer than
``max_count_chars``, ``token_count_truncated: true`` (the count then covers only that prefix, which
is enough to decide; tokenising a 10 MB label whole takes seconds).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from schemas.config import option
from schemas.deadletter import Dropped, RecordError
from schemas.page import PageRecord, ProvenanceStep, params_hash

VERSION = "1"
REPO = Path(__file__).resolve().parents[2]
DEFAULT_TOKENIZER = "assets/tokenizer/tokenizer.json"


@dataclass(frozen=True)
class ShortConfig:
    """How short is too short, counted with which tokenizer."""

    min_tokens: int = option(64, help="keep responses with at least this many tokens (64, the Jina recipe)")
    tokenizer_path: str = option(DEFAULT_TOKENIZER, help="a tokenizer.json or a folder holding one; relative "
                                                          "paths resolve against the repository root")
    max_count_chars: int = option(65_536, help="longer responses are counted over this prefix only (the "
                                               "decision stays exact, see ShortStage.count)")
    tasks: tuple[str, ...] = option(("parse_page",), help="tasks the floor applies to; element-level records "
                                                         "(a formula, a table, a KIE answer) are short by nature "
                                                         "and pass with quality.short.skipped")


def resolve_tokenizer_path(path: str) -> Path:
    """The ``tokenizer.json`` that ``path`` names (file, or folder containing it); ValueError if none."""
    candidate = Path(path).expanduser()
    if not candidate.is_absolute():
        candidate = REPO / candidate
    if candidate.is_dir():
        candidate = candidate / "tokenizer.json"
    if not candidate.is_file():
        raise ValueError(f"short: tokenizer_path {path!r}: no tokenizer.json at {candidate}")
    return candidate


class ShortStage:
    """Drops records whose response has fewer than ``min_tokens`` tokens (reason ``short_response``)."""

    name = "short"

    def __init__(self, cfg: ShortConfig = ShortConfig()):
        if cfg.min_tokens < 1:
            raise ValueError(f"short: min_tokens must be >= 1, got {cfg.min_tokens}")
        if cfg.max_count_chars < 1:
            raise ValueError(f"short: max_count_chars must be >= 1, got {cfg.max_count_chars}")
        self.cfg = cfg
        self.path = resolve_tokenizer_path(cfg.tokenizer_path)  # fail at start-up, not per record
        self._provenance = ProvenanceStep(f"clean:{self.name}", VERSION, params_hash(asdict(cfg)))
        self._tokenizer: Any = None  # loaded on first use, per worker

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_tokenizer"] = None
        return state

    @property
    def tokenizer(self) -> Any:
        if self._tokenizer is None:
            from tokenizers import Tokenizer

            # resolved again on the worker, whose checkout may live elsewhere than the driver's
            self._tokenizer = Tokenizer.from_file(str(resolve_tokenizer_path(self.cfg.tokenizer_path)))
        return self._tokenizer

    def _encode_len(self, text: str) -> int:
        return len(self.tokenizer.encode(text, add_special_tokens=False).ids)

    def count(self, text: str) -> tuple[int, bool]:
        """(token count, truncated). Long texts are counted over a prefix when that settles the
        decision: pre-tokenisation splits the prefix as it splits the whole text except at the
        cut, so the whole text has at least ``prefix count - 1`` tokens."""
        if len(text) <= self.cfg.max_count_chars:
            return self._encode_len(text), False
        prefix = self._encode_len(text[: self.cfg.max_count_chars])
        if prefix - 1 >= self.cfg.min_tokens:
            return prefix, True
        return self._encode_len(text), False

    def __call__(self, record: PageRecord) -> list[PageRecord]:
        text = record.response
        if not isinstance(text, str):
            raise RecordError("bad_response", f"response must be a string, got {type(text).__name__}")
        if not text.strip():
            # Blank pages and unlabelled files are legitimate inputs, not errors: a drop.
            raise Dropped("empty_response")
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:  # lone surrogates from a lossy decode upstream
            raise RecordError("non_utf8_response", f"response is not valid Unicode: {exc}") from exc
        if record.task not in self.cfg.tasks:
            record.quality[self.name] = {"skipped": f"task {record.task}"}
            record.provenance.append(self._provenance)
            return [record]
        n_tokens, truncated = self.count(text)
        finding: dict[str, Any] = {"token_count": n_tokens}
        if truncated:
            finding["token_count_truncated"] = True
        record.quality[self.name] = finding
        if n_tokens < self.cfg.min_tokens:
            raise Dropped("short_response")
        record.provenance.append(self._provenance)
        return [record]
