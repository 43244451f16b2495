"""Degeneration loops in OCR labels (Jina-OCR-v1 section 4.1): the per-record stage and its CLI.

``RepeatsStage`` runs ``find_loop`` (``pipelines/clean/repeats_detect.py``, which says how loops
are found; thresholds in ``RepeatsConfig``, ``pipelines/clean/repeats_config.py``) on each
record's response, writes ``record.quality["repeats"]`` and drops loops with reason
``repeat_loop_<kind>``. CLI over JSON lines (``--help`` lists every threshold)::

    python -m pipelines.clean.repeats [--input FILE.jsonl] [--output FILE.jsonl] [--tail-chars 1024 ...]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from dataclasses import asdict
from typing import IO, Any, Callable, Iterable, Iterator

from pipelines.clean.repeats_config import NO_LOOP, Bands, Kind, Loop, RepeatsConfig
from pipelines.clean.repeats_detect import find_loop
from pipelines.clean.repeats_gapped import normalize, normalize_index
from schemas.deadletter import Dropped, RecordError
from schemas.page import PageRecord, ProvenanceStep, params_hash

# 2: near-exact loops (kind "near"); 3: their numbers follow the regular-numbers rule; 4: CJK words are
# characters in the near pass's slot test, min_length counts wide characters 3, form rows (blanks with short
# labels) follow the empty rule and form_min_chars, emoji and symbol units are text
VERSION = "4"
__all__ = ["NO_LOOP", "VERSION", "Bands", "Kind", "Loop", "RepeatsConfig", "RepeatsStage", "find_loop", "main",
           "normalize", "normalize_index", "scan_lines"]


# --------------------------------------------------------------------------- stage


class RepeatsStage:
    """Per-record stage: finds a loop in ``record.response``, records it in ``quality["repeats"]``
    (``loop``, ``kind``, ``period``, ``copies``, ``span``) and drops the record with reason
    ``repeat_loop_<kind>``, or keeps it flagged when ``cfg.drop`` is false. An empty response has
    no loop; one that is not a string is a ``RecordError`` (``bad_response``)."""

    name = "repeats"

    def __init__(self, cfg: RepeatsConfig = RepeatsConfig()) -> None:
        self.cfg = cfg
        self._provenance = ProvenanceStep(f"clean:{self.name}", VERSION, params_hash(asdict(cfg)))

    def __call__(self, record: PageRecord) -> list[PageRecord]:
        text = "" if record.response is None else record.response
        if not isinstance(text, str):
            raise RecordError("bad_response", f"response must be a string, got {type(text).__name__}")
        loop = find_loop(text, self.cfg)
        record.quality[self.name] = loop.to_dict() if loop else dict(NO_LOOP)
        if loop is not None and self.cfg.drop:
            raise Dropped(f"repeat_loop_{loop.kind}")
        record.provenance.append(self._provenance)
        return [record]


# --------------------------------------------------------------------------- CLI


def _bands(value: str) -> Bands:
    try:
        bands = tuple((int(a), int(b)) for a, b in (part.split(":") for part in value.split(",")))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected MAX_PERIOD:COPIES[,...], got {value!r}") from None
    return bands


def _bool(value: str) -> bool:
    if value.lower() in ("1", "true", "yes", "on"):
        return True
    if value.lower() in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {value!r}")


def _shown(value: Any) -> str:
    if isinstance(value, tuple):
        return ",".join(f"{a}:{b}" for a, b in value)
    return str(value).lower() if isinstance(value, bool) else str(value)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m pipelines.clean.repeats",
        description="Find degeneration loops at the end of OCR labels (exact, truncated, gapped "
                    "and near-exact repeats in the last --tail-chars characters). Reads JSON lines with "
                    "`id` and `text`; writes one JSON line per input line: `id`, `loop` (bool), `kind` "
                    "(exact/truncated/gapped/near/null), `period`, `copies`, `span` ([start, end) in "
                    "characters). A bad line (not JSON, not an object, no `id` or `text`, `text` "
                    "not a string, not UTF-8) gives `id` (null if unknown) and `error` naming the "
                    "line number and the reason instead; blank lines are skipped.",
        epilog="Bands are MAX_PERIOD:COPIES pairs, ascending, e.g. --min-copies 2:64,8:16,32:6.",
    )
    parser.add_argument("--input", metavar="FILE.jsonl", help="input JSON lines (default: stdin)")
    parser.add_argument("--output", metavar="FILE.jsonl", help="output JSON lines (default: stdout)")
    converters: dict[str, Callable[[str], Any]] = {"int": int, "float": float, "bool": _bool, "Bands": _bands}
    for f in dataclasses.fields(RepeatsConfig):
        if f.name == "drop":
            continue
        parser.add_argument("--" + f.name.replace("_", "-"), dest=f.name, type=converters[str(f.type)],
                            default=f.default, metavar=str(f.type).upper(),
                            help=f"{f.metadata['help']} (default: {_shown(f.default)})".replace("%", "%%"))
    return parser


def scan_lines(lines: Iterable[bytes | str], cfg: RepeatsConfig) -> Iterator[dict[str, Any]]:
    """One result object per input line (blank lines skipped); never raises on bad input."""
    for number, raw in enumerate(lines, start=1):
        if isinstance(raw, bytes):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                yield {"id": None, "error": f"line {number}: not UTF-8 ({exc.reason} at byte {exc.start})"}
                continue
        else:
            line = raw
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except ValueError as exc:
            yield {"id": None, "error": f"line {number}: not JSON ({exc})"}
            continue
        if not isinstance(item, dict):
            yield {"id": None, "error": f"line {number}: not a JSON object"}
            continue
        ident = item.get("id")
        missing = [k for k in ("id", "text") if k not in item]
        if missing:
            yield {"id": ident, "error": f"line {number}: missing {' and '.join(missing)}"}
            continue
        if not isinstance(item["text"], str):
            yield {"id": ident, "error": f"line {number}: text is {type(item['text']).__name__}, not a string"}
            continue
        loop = find_loop(item["text"], cfg)
        yield {"id": ident, **(loop.to_dict() if loop else NO_LOOP)}


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    options = {f.name: getattr(args, f.name) for f in dataclasses.fields(RepeatsConfig) if f.name != "drop"}
    try:
        cfg = RepeatsConfig(**options)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    source: IO[bytes] = open(args.input, "rb") if args.input else sys.stdin.buffer
    sink: IO[str] = open(args.output, "w", encoding="utf-8") if args.output else sys.stdout
    try:
        for result in scan_lines(source, cfg):
            # ASCII escapes keep ids with lone surrogates writable
            sink.write(json.dumps(result, ensure_ascii=True) + "\n")
    finally:
        if args.input:
            source.close()
        if args.output:
            sink.close()
        else:
            sink.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
