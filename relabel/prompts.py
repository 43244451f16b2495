"""The judge rubric and the refinement prompt, each with a version that is part of the cache key, and the
parser of the judge's JSON verdict.

A judge answers JSON ``{"score": 0-5, "issues": [str, ...]}``. No server-side schema is asked for
(``response_format`` is ignored or unsupported by some servers): the answer's first JSON object that is a
verdict is taken (text, other brace pairs and other JSON objects around it are skipped), and
``Unparseable`` says why none was.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

# Bump a version when its text changes: cached answers of the old text are then not reused.
RELABEL_VERSION = "relabel-1"  # the record's own instruction is the prompt
JUDGE_VERSION = "judge-1"
REFINE_VERSION = "refine-1"

JUDGE_PROMPT = """You are checking a transcription of the page image against the image itself.
Rubric: 5 = every word, number, table cell and formula is right and in reading order; 4 = a few small
slips; 3 = several errors or a missing short passage; 2 = large parts missing or wrong; 1 = mostly wrong;
0 = unrelated to the page or empty.
Answer with JSON only, no other text: {{"score": <integer 0-5>, "issues": [<short strings>]}}

Transcription:
<<<
{label}
>>>"""

REFINE_PROMPT = """{instruction}

A draft transcription of this page follows. It may contain OCR errors, missing words or wrong reading
order. Write the corrected transcription of the whole page, in the same format, and nothing else.

Draft:
<<<
{draft}
>>>"""

_DECODER = json.JSONDecoder()
# At most this many "{" are tried as the start of a JSON object (each try reads up to the end of the answer).
MAX_OBJECT_STARTS = 1000


class Unparseable(ValueError):
    """A judge answer that is not a valid verdict; the message says why."""


@dataclass(frozen=True)
class Verdict:
    score: float
    issues: tuple[str, ...]


def judge_prompt(label: str, max_chars: int) -> str:
    return JUDGE_PROMPT.format(label=label[:max_chars])


def refine_prompt(instruction: str, draft: str, max_chars: int) -> str:
    return REFINE_PROMPT.format(instruction=instruction, draft=draft[:max_chars])


def _checked(doc: dict) -> Verdict:
    """``doc`` as a verdict: ``score`` a number in [0, 5], ``issues`` a list of strings (missing: none)."""
    score = doc.get("score")
    if isinstance(score, bool) or not isinstance(score, (int, float)) or not 0 <= score <= 5:
        raise Unparseable(f"score must be a number from 0 to 5, got {score!r}")
    issues = doc.get("issues", [])
    if not isinstance(issues, list) or not all(isinstance(i, str) for i in issues):
        raise Unparseable("issues must be a list of strings")
    return Verdict(float(score), tuple(issues))


def parse_verdict(text: str) -> Verdict:
    """The first verdict in ``text``: each ``{`` is tried as the start of a JSON object (``raw_decode``, so
    what follows the object does not matter); the first object that is a valid verdict (see ``_checked``) is
    it. Braces that start no JSON (``{Page 3}``) and objects that are not verdicts are skipped. None:
    ``Unparseable``, with why the first object that had a ``score`` was refused, if one had."""
    text = text or ""
    pos, objects, refused = 0, 0, ""
    for _ in range(MAX_OBJECT_STARTS):
        start = text.find("{", pos)
        if start < 0:
            break
        try:
            doc, end = _DECODER.raw_decode(text, start)
        except (json.JSONDecodeError, RecursionError):
            pos = start + 1
            continue
        objects += 1
        pos = end  # an object's own inner objects are not verdicts of their own
        if isinstance(doc, dict):
            try:
                return _checked(doc)
            except Unparseable as exc:
                refused = refused or (str(exc) if "score" in doc else "")
    if refused:
        raise Unparseable(refused)
    raise Unparseable(f"no JSON object in the answer is a verdict ({objects} other)" if objects
                      else "no JSON object in the answer")


__all__ = ["JUDGE_PROMPT", "JUDGE_VERSION", "REFINE_PROMPT", "REFINE_VERSION", "RELABEL_VERSION", "Unparseable",
           "Verdict", "judge_prompt", "parse_verdict", "refine_prompt"]
