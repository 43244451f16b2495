"""The relabel, audit and preference stages (Jina-OCR-v1 4.1-4.2): typed configs and per-record logic.

- ``RelabelStage``: asks the model for a new label with the record's own instruction. ``compare``
  (default) records the candidate and its normalised edit distance to the label in
  ``quality["relabel"]``; ``replace`` swaps the response and keeps the old one there. Candidates that
  are empty, truncated (``finish_reason`` "length") or end in a degeneration loop are rejected with
  that reason and never become labels (``on_reject``: keep the record as it was, or drop it); under
  ``replace`` so is a candidate that fails one of the record's unit tests (``fails_unit_tests``).
- ``AuditStage``: a judge scores (image, label) on the rubric of ``relabel.prompts`` and answers JSON;
  a malformed answer is asked again once with another seed, then the record is dead-lettered
  ``audit_unparseable``. Below ``threshold``: ``flag`` (``quality["audit"]["low"]``) or ``drop``
  (reason ``audit_low``).
- ``PreferenceStage``: on degraded pages (``synth.augment`` degradations, or configured sources and
  domains), a draft (the label or a model answer), a teacher refinement, and a judge score for each;
  when the scores differ by at least ``margin`` the stage also emits a ``preference`` record (chosen =
  the better one, ``rejected`` the other, both scores).

Each is a ``RequestStage`` (``relabel.runner``): a per-record call for ``python -m pipelines.stage`` and
a batch call the Beam wrapper uses. The loop detector is handed in by the caller
(``pipelines/relabel_stages.py`` passes ``pipelines.clean.repeats``), since ``relabel`` may not import
``pipelines``; without one, loops are not checked.
"""

from __future__ import annotations

import asyncio
from dataclasses import asdict, dataclass, replace
from typing import Any, Literal

from relabel.client import Answer, ChatRequest, ClientConfig
from relabel.prompts import (
    JUDGE_VERSION,
    REFINE_VERSION,
    RELABEL_VERSION,
    Unparseable,
    Verdict,
    judge_prompt,
    parse_verdict,
    refine_prompt,
)
from relabel.runner import Asker, LoopDetector, RequestStage, selected
from schemas.config import check_names, option
from schemas.deadletter import Dropped, RecordError
from schemas.edit_distance import normalized_edit_distance
from schemas.page import TASKS, PageRecord, ProvenanceStep, params_hash, stable_id
from schemas.unit_tests import passing_tests

VERSION = "2"  # 2: a replacement that fails one of the record's unit tests is rejected


@dataclass(frozen=True)
class RelabelConfig:
    """Which records get a new label from the model, and what happens to it."""

    client: ClientConfig = option(ClientConfig(), help="the endpoint (keys of relabel.client.ClientConfig)")
    cache_path: str = option("", help="the SQLite answer cache; empty: <run output>/_relabel/cache.sqlite")
    mode: Literal["compare", "replace"] = option("compare", help="compare: record the candidate and its distance; "
                                                                 "replace: swap the label, keep the old one")
    sources: tuple[str, ...] = option((), help="relabel only these sources (empty: every source)")
    domains: tuple[str, ...] = option((), help="relabel only these domains (empty: every domain)")
    tasks: tuple[str, ...] = option(("parse_page",), help="relabel only these tasks (empty: every task)")
    max_tokens: int = option(4096, help="longest label asked for; an answer that hits it is rejected as truncated")
    temperature: float = option(0.0, help="sampling temperature (0: greedy)")
    seed: int = option(0, help="sampling seed sent with each request")
    on_reject: Literal["keep", "drop"] = option("keep", help="a rejected candidate: keep the record as it was "
                                                             "(noted in quality), or drop it (relabel_<reason>)")

    def __post_init__(self):
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {self.max_tokens}")
        check_names("tasks", self.tasks, TASKS)  # a misspelt task would relabel nothing


@dataclass(frozen=True)
class AuditConfig:
    """Which records a judge scores, and what a low score does."""

    client: ClientConfig = option(ClientConfig(), help="the endpoint (keys of relabel.client.ClientConfig)")
    cache_path: str = option("", help="the SQLite answer cache; empty: <run output>/_relabel/cache.sqlite")
    sources: tuple[str, ...] = option((), help="audit only these sources (empty: every source)")
    domains: tuple[str, ...] = option((), help="audit only these domains (empty: every domain)")
    tasks: tuple[str, ...] = option((), help="audit only these tasks (empty: every task)")
    threshold: float = option(3.0, help="scores below this are low")
    action: Literal["flag", "drop"] = option("flag", help="a low score: flag it in quality, or drop (audit_low)")
    unparseable: Literal["dead_letter", "flag"] = option(
        "dead_letter", help="a verdict still malformed after one retry: dead-letter (audit_unparseable), or keep "
                            "the record flagged (for servers that cannot write JSON, e.g. a random tiny model)")
    max_tokens: int = option(256, help="longest verdict asked for")
    max_label_chars: int = option(16_000, help="labels are cut to this many characters in the judge prompt")
    seed: int = option(0, help="seed of the first ask; the retry uses seed + 1")

    def __post_init__(self):
        check_names("tasks", self.tasks, TASKS)  # a misspelt task would audit nothing


@dataclass(frozen=True)
class PreferenceConfig:
    """Which pages get a teacher refinement and a judged pair, and how clear a winner must be."""

    client: ClientConfig = option(ClientConfig(), help="the endpoint (keys of relabel.client.ClientConfig)")
    cache_path: str = option("", help="the SQLite answer cache; empty: <run output>/_relabel/cache.sqlite")
    degraded: bool = option(True, help="work on pages synth.augment degraded (quality.augment.applied)")
    sources: tuple[str, ...] = option((), help="also work on every page of these sources")
    domains: tuple[str, ...] = option((), help="also work on every page of these domains")
    draft: Literal["label", "model"] = option("label", help="the draft: the record's label, or a model answer")
    margin: float = option(1.0, help="keep a pair when the judge scores differ by at least this (0-5 scale)")
    max_tokens: int = option(4096, help="longest draft or refinement asked for")
    judge_max_tokens: int = option(256, help="longest verdict asked for")
    max_label_chars: int = option(16_000, help="drafts and labels are cut to this many characters in prompts")
    temperature: float = option(0.0, help="sampling temperature of the draft and the refinement")
    seed: int = option(0, help="sampling seed")

    def __post_init__(self):
        if self.margin <= 0:
            raise ValueError(f"margin must be > 0, got {self.margin}")


def rejection(answer: Answer, loop_detector: LoopDetector | None) -> str | None:
    """Why a model answer cannot be a label (``empty``, ``truncated``, ``finish_<reason>``, ``loop_<kind>``), or
    None. Only an answer that stopped by itself is whole: ``length`` is ``truncated``, any other reason but
    ``stop`` (``content_filter``: content left out) is ``finish_<reason>``; a server that sends none is believed."""
    if not answer.text.strip():
        return "empty"
    if answer.finish_reason == "length":
        return "truncated"
    if answer.finish_reason not in ("", "stop", "None"):
        return f"finish_{answer.finish_reason}"
    if loop_detector is not None:
        kind = loop_detector(answer.text)
        if kind:
            return f"loop_{kind}"
    return None


async def judge(ask: Asker, record: PageRecord, label: str, max_tokens: int, max_chars: int, seed: int,
                role: str) -> tuple[Verdict | None, str]:
    """The verdict on ``label`` (asked once more with ``seed + 1`` when malformed), or None and why not."""
    why = ""
    for attempt in range(2):
        request = ChatRequest(judge_prompt(label, max_chars), record.image, max_tokens, 0.0, seed + attempt,
                              f"{record.id}:{role}:{attempt}")
        answer = await ask(request, JUDGE_VERSION)
        try:
            return parse_verdict(answer.text), ""
        except Unparseable as exc:
            why = f"{exc}; answer begins {answer.text[:120]!r}"
    return None, why


class _ConfiguredStage(RequestStage):
    """A request stage built from its config (``config_type``; the defaults when None), with its provenance step."""

    config_type: type = object

    def __init__(self, cfg: Any = None, loop_detector: LoopDetector | None = None, check: bool = True):
        self.cfg = self.config_type() if cfg is None else cfg
        self._provenance = ProvenanceStep(f"relabel:{self.name}", VERSION, params_hash(_hashed(self.cfg)))
        super().__init__(self.cfg.client, self.cfg.cache_path, loop_detector, check)


class RelabelStage(_ConfiguredStage):
    """Ask the model for a new label of each selected record (compare or replace; see the module doc)."""

    name = "relabel"

    config_type = RelabelConfig
    cfg: RelabelConfig

    def wants(self, record: PageRecord) -> bool:
        return selected(record, self.cfg.sources, self.cfg.domains, self.cfg.tasks)

    async def handle(self, record: PageRecord, ask: Asker) -> list[PageRecord]:
        request = ChatRequest(record.instruction, record.image, self.cfg.max_tokens, self.cfg.temperature,
                              self.cfg.seed, f"{record.id}:relabel")
        answer = await ask(request, RELABEL_VERSION)
        reason = rejection(answer, self.loop_detector)
        if reason is None and self.cfg.mode == "replace" and record.unit_tests:
            # the record's tests were checked on its label (verifiable truth, e.g. a synthetic page's): a
            # replacement must pass them all, or the record would carry tests its own label fails
            # in a thread: a math test renders with Playwright's sync API, which refuses to run in this event loop
            passed = await asyncio.to_thread(passing_tests, record.unit_tests, answer.text, self.katex_cache)
            failed = len(record.unit_tests) - len(passed)
            reason = "fails_unit_tests" if failed else None
        finding: dict[str, Any] = {"model": self.client.model, "prompt_version": RELABEL_VERSION,
                                   "mode": self.cfg.mode, "finish_reason": answer.finish_reason}
        if reason is not None:
            finding.update(rejected=reason, candidate_chars=len(answer.text))
            record.quality[self.name] = finding
            if self.cfg.on_reject == "drop":
                raise Dropped(f"relabel_{reason}")
            return [record]
        distance = normalized_edit_distance(record.response, answer.text)
        finding.update(rejected=None, distance=round(distance, 6))
        if self.cfg.mode == "replace":
            finding["previous"] = record.response
            record.response = answer.text
        else:
            finding["candidate"] = answer.text
        record.quality[self.name] = finding
        record.provenance.append(self._provenance)
        return [record]


class AuditStage(_ConfiguredStage):
    """A judge scores each selected (image, label) pair 0-5 and flags or drops low ones (see the module doc)."""

    name = "audit"

    config_type = AuditConfig
    cfg: AuditConfig

    def wants(self, record: PageRecord) -> bool:
        return selected(record, self.cfg.sources, self.cfg.domains, self.cfg.tasks)

    async def handle(self, record: PageRecord, ask: Asker) -> list[PageRecord]:
        verdict, why = await judge(ask, record, record.response, self.cfg.max_tokens, self.cfg.max_label_chars,
                                   self.cfg.seed, "audit")
        finding: dict[str, Any] = {"model": self.client.model, "prompt_version": JUDGE_VERSION}
        if verdict is None:
            if self.cfg.unparseable == "dead_letter":
                raise RecordError("audit_unparseable", f"judge answer not a verdict after a retry: {why}")
            finding.update(unparseable=True, why=why)
            record.quality[self.name] = finding
            record.provenance.append(self._provenance)
            return [record]
        low = verdict.score < self.cfg.threshold
        finding.update(score=verdict.score, issues=list(verdict.issues), low=low)
        record.quality[self.name] = finding
        if low and self.cfg.action == "drop":
            raise Dropped("audit_low")
        record.provenance.append(self._provenance)
        return [record]


class PreferenceStage(_ConfiguredStage):
    """Draft, teacher refinement and judge on degraded pages; clear winners become ``preference`` records."""

    name = "preference"

    config_type = PreferenceConfig
    cfg: PreferenceConfig

    def wants(self, record: PageRecord) -> bool:
        if record.task == "preference":
            return False
        augment = record.quality.get("augment")
        degraded = self.cfg.degraded and isinstance(augment, dict) and bool(augment.get("applied"))
        return degraded or record.source in self.cfg.sources or record.domain in self.cfg.domains

    async def _answer(self, ask: Asker, record: PageRecord, text: str, version: str, role: str) -> Answer:
        request = ChatRequest(text, record.image, self.cfg.max_tokens, self.cfg.temperature, self.cfg.seed,
                              f"{record.id}:{role}")
        return await ask(request, version)

    async def handle(self, record: PageRecord, ask: Asker) -> list[PageRecord]:
        finding: dict[str, Any] = {"model": self.client.model, "draft": self.cfg.draft, "pair": False}
        record.quality[self.name] = finding
        draft = record.response
        if self.cfg.draft == "model":
            answer = await self._answer(ask, record, record.instruction, RELABEL_VERSION, "draft")
            reason = rejection(answer, self.loop_detector)
            if reason is not None:
                finding["rejected"] = f"draft_{reason}"
                return [record]
            draft = answer.text
        if not draft.strip():
            finding["rejected"] = "draft_empty"
            return [record]
        refined = await self._answer(ask, record, refine_prompt(record.instruction, draft, self.cfg.max_label_chars),
                                     REFINE_VERSION, "refine")
        reason = rejection(refined, self.loop_detector)
        if reason is not None:
            finding["rejected"] = f"refined_{reason}"
            return [record]
        scores = []
        for role, text in (("judge_draft", draft), ("judge_refined", refined.text)):
            verdict, why = await judge(ask, record, text, self.cfg.judge_max_tokens, self.cfg.max_label_chars,
                                       self.cfg.seed, role)
            if verdict is None:
                finding.update(rejected=f"{role}_unparseable", why=why)
                return [record]
            scores.append(verdict.score)
        draft_score, refined_score = scores
        margin = refined_score - draft_score
        finding.update(draft_score=draft_score, refined_score=refined_score, margin=margin)
        if abs(margin) < self.cfg.margin:
            return [record]
        finding["pair"] = True
        chosen, rejected = (refined.text, draft) if margin > 0 else (draft, refined.text)
        pair = replace(
            record, id=stable_id(record.id, "preference"), task="preference", response=chosen, rejected=rejected,
            chosen_score=max(scores), rejected_score=min(scores), unit_tests=[],
            quality={self.name: {"source_record": record.id, "margin": abs(margin),
                                 "chosen": "refined" if margin > 0 else "draft"}},
            provenance=[*record.provenance, self._provenance], metadata=dict(record.metadata))
        record.provenance.append(self._provenance)
        return [record, pair]


def _hashed(cfg: Any) -> dict[str, Any]:
    """The config's fields that change outputs (not the endpoint, the cache or concurrency)."""
    return {k: v for k, v in asdict(cfg).items() if k not in ("client", "cache_path")}


__all__ = ["AuditConfig", "AuditStage", "PreferenceConfig", "PreferenceStage", "RelabelConfig", "RelabelStage",
           "judge", "rejection"]
