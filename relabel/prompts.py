"""The judge rubric and the refinement prompt, each with a version that is part of the cache key, and the
parser of the judge's JSON verdict.

A judge answers JSON ``{"score": 0-5, "issues": [str, ...]}``. No server-side schema is asked for
(``response_format`` is ignored or unsupported by some servers): the answer's first JSON object is
parsed and checked here, and ``Unparseable`` says why it was refused.
"""

from __future__ import annotations

import json
import re
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

_OBJECT = re.compile(r"\{.*\}", re.DOTALL)


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


def parse_verdict(text: str) -> Verdict:
    """The verdict in ``text``: its outermost ``{...}`` as JSON, ``score`` a number in [0, 5], ``issues``
    a list of strings (missing: none)."""
    match = _OBJECT.search(text or "")
    if match is None:
        raise Unparseable("no JSON object in the answer")
    try:
        doc = json.loads(match.group(0))
    except json.JSONDecodeError as exc:
        raise Unparseable(f"invalid JSON: {exc.msg} at {exc.pos}") from None
    if not isinstance(doc, dict):
        raise Unparseable("the JSON is not an object")
    score = doc.get("score")
    if isinstance(score, bool) or not isinstance(score, (int, float)) or not 0 <= score <= 5:
        raise Unparseable(f"score must be a number from 0 to 5, got {score!r}")
    issues = doc.get("issues", [])
    if not isinstance(issues, list) or not all(isinstance(i, str) for i in issues):
        raise Unparseable("issues must be a list of strings")
    return Verdict(float(score), tuple(issues))


__all__ = ["JUDGE_PROMPT", "JUDGE_VERSION", "REFINE_PROMPT", "REFINE_VERSION", "RELABEL_VERSION", "Unparseable",
           "Verdict", "judge_prompt", "parse_verdict", "refine_prompt"]
