"""Short samples: drop responses with fewer than 64 tokens (Jina-OCR-v1 section 4.1).

Tokens are counted with a Hugging Face ``tokenizer.json`` loaded by the ``tokenizers`` library,
without special tokens. The default is the project's byte-level BPE
(``assets/tokenizer/tokenizer.json``, trained by ``scripts/train_tokenizer.py``); point
``tokenizer_path`` at the model's own ``tokenizer.json`` (or a local folder holding one) to count
as the model does.

The bundled tokenizer was trained on Latin-script samples: it has no token for a CJK, Thai or Indic
character and writes each as its 2-4 UTF-8 bytes, so such a page would count ~3 tokens a character
(English ~0.26) and pass a floor that the same page in English fails. So the text is NFC-normalised
(NFD would count its combining marks apart) and, with ``cap_split_chars`` (on by default), a stretch
of tokens that split characters into bytes counts at most one token per character it covers, a
combining mark (a vowel sign, virama, tone mark) none: ``min(tokens, characters)``. That is about what
a multilingual tokenizer gives CJK (0.6-1 token a character) and still more than it gives Thai or
Devanagari, whose syllables it merges: an upper bound, never a count above the raw one. The exact
measure is the model's own tokenizer: set ``tokenizer_path`` to it and ``cap_split_chars: false``.

Findings go to ``record.quality["short"]``: ``token_count`` and, for responses longer than
``max_count_chars``, ``token_count_truncated: true`` (the count then covers only that prefix, which
is enough to decide; tokenising a 10 MB label whole takes seconds).
"""

from __future__ import annotations

import unicodedata
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from schemas.config import check_names, option
from schemas.deadletter import Dropped, RecordError
from schemas.page import TASKS, PageRecord, ProvenanceStep, params_hash

VERSION = "2"  # 2: NFC before counting; a character split into byte tokens counts at most one (cap_split_chars)
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
    cap_split_chars: bool = option(True, help="a run of characters the tokenizer splits into byte tokens (CJK, "
                                              "Thai, Indic with the bundled one) counts at most one token per "
                                              "character, combining marks none; false: the tokenizer's count")
    tasks: tuple[str, ...] = option(("parse_page",), help="tasks the floor applies to; element-level records "
                                                         "(a formula, a table, a KIE answer) are short by nature "
                                                         "and pass with quality.short.skipped")

    def __post_init__(self) -> None:
        check_names("tasks", self.tasks, TASKS)  # a misspelt task would hold no record to the floor


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
        try:  # ... a file that is not a tokenizer too (a git-lfs pointer): not one dead letter per record
            from tokenizers import Tokenizer

            self._tokenizer: Any = Tokenizer.from_file(str(self.path))  # again on each worker (__getstate__)
        except Exception as exc:
            raise ValueError(f"short: tokenizer_path {cfg.tokenizer_path!r}: {self.path} is not a tokenizer.json "
                             f"({type(exc).__name__}: {str(exc)[:200]})") from None

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
        """Tokens of ``text`` (NFC) as the tokenizer writes them, no cap."""
        return len(self.tokenizer.encode(unicodedata.normalize("NFC", text), add_special_tokens=False).ids)

    def _count(self, text: str) -> int:
        """Tokens of ``text`` (NFC already), split characters capped (``cap_split_chars``): tokens whose
        character spans overlap (the byte tokens of one character, or a token reaching into the next
        character's bytes) form a group; adjacent groups of two or more tokens form a run, which counts
        ``min(tokens, characters that are not combining marks)``, at least 1. Other tokens count 1."""
        encoding = self.tokenizer.encode(text, add_special_tokens=False)
        if not self.cfg.cap_split_chars or text.isascii():  # an ASCII character is one byte: never split
            return len(encoding.ids)
        total = 0
        run_tokens = run_start = run_end = 0  # the current run of split characters
        group_tokens, group_start, group_end = 0, 0, -1

        def close_group() -> None:
            nonlocal total, run_tokens, run_start, run_end
            if group_tokens > 1 and run_tokens and group_start == run_end:
                run_tokens, run_end = run_tokens + group_tokens, group_end  # the run goes on
                return
            close_run()
            if group_tokens > 1:
                run_tokens, run_start, run_end = group_tokens, group_start, group_end
            else:
                total += group_tokens

        def close_run() -> None:
            nonlocal total, run_tokens
            if run_tokens:
                chars = sum(1 for ch in text[run_start:run_end] if not unicodedata.category(ch).startswith("M"))
                total += min(run_tokens, max(1, chars))
                run_tokens = 0

        for start, end in encoding.offsets:
            if start < group_end:  # overlaps the group: a piece of the same character(s)
                group_tokens, group_end = group_tokens + 1, max(group_end, end)
            else:
                close_group()
                group_tokens, group_start, group_end = 1, start, end
        close_group()
        close_run()
        return total

    def count(self, text: str) -> tuple[int, bool]:
        """(token count, truncated) of ``text`` in NFC. Long texts are counted over a prefix when that
        settles the decision: pre-tokenisation splits the prefix as it splits the whole text except at
        the cut, so the whole text has at least ``prefix count - 1`` tokens (a capped run cut short
        has no more characters than the whole run, and at most one token more)."""
        text = unicodedata.normalize("NFC", text)
        if len(text) <= self.cfg.max_count_chars:
            return self._count(text), False
        prefix = self._count(text[: self.cfg.max_count_chars])
        if prefix - 1 >= self.cfg.min_tokens:
            return prefix, True
        return self._count(text), False

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
