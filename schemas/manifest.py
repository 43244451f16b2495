"""The run manifest: per stage and per source, records in, out, dropped and dead-lettered by reason.

Stages report counts as small ``CountEvent`` tuples; the manifest is their sum. The invariant every
run must satisfy is, per stage and source, ``in == out + dropped + dead``; ``emitted`` counts the
records a stage passes on (more than ``out`` when one input fans out to several pages), and the next
stage's ``in`` must equal it.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from typing import Iterable, NamedTuple


class ManifestError(ValueError):
    """A run folder without a readable run manifest (``pipelines.io.read_run_manifest``)."""


class CountEvent(NamedTuple):
    stage: str
    source: str
    kind: str  # in | out | emitted | dropped | dead | counter | seconds | units
    reason: str
    value: float
    unit: str = ""  # the input unit the record came from (pipelines/refresh.py), when known


def _sorted_counts(counts: dict) -> dict:
    return {k: dict(sorted(v.items())) if isinstance(v, dict) else v for k, v in counts.items()}


@dataclass
class StageCounts:
    inputs: int = 0
    out: int = 0
    emitted: int = 0
    dropped: dict[str, int] = field(default_factory=dict)
    dead: dict[str, int] = field(default_factory=dict)
    counters: dict[str, int] = field(default_factory=dict)  # e.g. label rewrites, by kind
    seconds: float = 0.0
    units: int = 0  # input units the stage finished reading (the reader stage only)

    def add(self, kind: str, reason: str, value: float) -> None:
        if kind == "in":
            self.inputs += int(value)
        elif kind == "out":
            self.out += int(value)
        elif kind == "emitted":
            self.emitted += int(value)
        elif kind == "dropped":
            self.dropped[reason] = self.dropped.get(reason, 0) + int(value)
        elif kind == "dead":
            self.dead[reason] = self.dead.get(reason, 0) + int(value)
        elif kind == "counter":
            self.counters[reason] = self.counters.get(reason, 0) + int(value)
        elif kind == "seconds":
            self.seconds += value
        elif kind == "units":
            self.units += int(value)
        else:
            raise ValueError(f"unknown count kind {kind!r}")

    @property
    def n_dropped(self) -> int:
        return sum(self.dropped.values())

    @property
    def n_dead(self) -> int:
        return sum(self.dead.values())


@dataclass
class RunManifest:
    """Counts for one run. ``stage_order`` is the linear chain each record passes through."""

    run: dict = field(default_factory=dict)
    stage_order: list[str] = field(default_factory=list)
    # stage -> source -> counts
    stages: dict[str, dict[str, StageCounts]] = field(default_factory=dict)
    shards: list[dict] = field(default_factory=list)
    dead_letter_files: list[str] = field(default_factory=list)
    dropped_sample_files: list[str] = field(default_factory=list)

    @classmethod
    def from_events(cls, events: Iterable[CountEvent], stage_order: list[str], **kw) -> RunManifest:
        stages: dict[str, dict[str, StageCounts]] = defaultdict(dict)
        for ev in events:
            counts = stages[ev.stage].setdefault(ev.source, StageCounts())
            counts.add(ev.kind, ev.reason, ev.value)
        return cls(stage_order=list(stage_order), stages=dict(stages), **kw)

    def totals(self, stage: str) -> StageCounts:
        total = StageCounts()
        for counts in self.stages.get(stage, {}).values():
            total.inputs += counts.inputs
            total.out += counts.out
            total.emitted += counts.emitted
            total.seconds += counts.seconds
            total.units += counts.units
            for reason, n in counts.dropped.items():
                total.dropped[reason] = total.dropped.get(reason, 0) + n
            for reason, n in counts.dead.items():
                total.dead[reason] = total.dead.get(reason, 0) + n
            for name, n in counts.counters.items():
                total.counters[name] = total.counters.get(name, 0) + n
        return total

    @property
    def sources(self) -> list[str]:
        return sorted({s for per in self.stages.values() for s in per})

    @property
    def records_in(self) -> int:
        return self.totals(self.stage_order[0]).inputs if self.stage_order else 0

    @property
    def records_written(self) -> int:
        return sum(int(s["rows"]) for s in self.shards)

    @property
    def records_dead(self) -> int:
        return sum(self.totals(s).n_dead for s in self.stage_order)

    @property
    def records_dropped(self) -> int:
        return sum(self.totals(s).n_dropped for s in self.stage_order)

    def imbalances(self) -> list[str]:
        """Every way the counts fail to balance (empty when the run accounts for every record)."""
        problems = []
        for stage in self.stage_order:
            for source, c in sorted(self.stages.get(stage, {}).items()):
                if c.inputs != c.out + c.n_dropped + c.n_dead:
                    problems.append(
                        f"{stage}/{source}: in {c.inputs} != out {c.out} + dropped {c.n_dropped}"
                        f" + dead {c.n_dead}"
                    )
        for prev, nxt in zip(self.stage_order, self.stage_order[1:]):
            for source in self.sources:
                emitted = self.stages.get(prev, {}).get(source, StageCounts()).emitted
                taken = self.stages.get(nxt, {}).get(source, StageCounts()).inputs
                if emitted != taken:
                    problems.append(f"{source}: {prev} emitted {emitted} but {nxt} took {taken}")
        units = self.run.get("units") or {}
        if units and units.get("finished") != units.get("planned"):
            lost = units.get("missing") or []
            problems.append(
                f"{units.get('finished')} of {units.get('planned')} planned input units were read or carried; "
                f"never read: {', '.join(lost[:10])}{' ...' if len(lost) > 10 else ''} (lost by the runner: rerun)"
            )
        repeated = [i for s in self.shards for i in s.get("repeated_ids") or ()]
        if repeated:
            problems.append(f"ids held by more than one written record (two inputs name one page): "
                            f"{', '.join(repeated[:10])}{' ...' if len(repeated) > 10 else ''}")
        if self.stage_order:
            last = self.totals(self.stage_order[-1])
            if last.emitted != self.records_written:
                problems.append(
                    f"{self.stage_order[-1]} emitted {last.emitted} but shards hold {self.records_written}"
                )
        return problems

    @property
    def records_seen(self) -> int:
        """Every record the run held at some point: the reader's inputs plus what each stage added by fanning
        out (a PDF read as its pages, instruct's derived records): ``emitted - out`` summed over stages."""
        return self.records_in + sum(max(0, t.emitted - t.out) for t in map(self.totals, self.stage_order))

    def dead_letter_rate(self) -> float:
        """Dead letters over every record the run held (``records_seen``): pages and documents alike, not
        page-level dead letters over the documents read."""
        seen = self.records_seen
        return self.records_dead / seen if seen else 0.0

    def to_json(self) -> str:
        body = {
            "run": self.run,
            "stage_order": self.stage_order,
            "totals": {
                "in": self.records_in,
                "written": self.records_written,
                "dropped": self.records_dropped,
                "dead_lettered": self.records_dead,
            },
            # in stage order, reasons and counters sorted: the events arrive in whatever order the runner
            # delivers them, and the same run on another runner must write the same file
            "stages": {
                stage: {src: _sorted_counts(asdict(c)) for src, c in sorted(self.stages[stage].items())}
                for stage in [*[s for s in self.stage_order if s in self.stages],
                              *sorted(s for s in self.stages if s not in self.stage_order)]
            },
            "shards": self.shards,
            "dead_letter_files": self.dead_letter_files,
            "dropped_sample_files": self.dropped_sample_files,
            "balanced": not self.imbalances(),
        }
        return json.dumps(body, indent=2, sort_keys=False)

    @classmethod
    def from_json(cls, text: str | bytes, where: str = "manifest.json") -> RunManifest:
        """The manifest ``to_json`` wrote; ``ManifestError`` naming ``where`` for anything else."""
        try:
            body = json.loads(text)
            stages = {
                stage: {src: StageCounts(**c) for src, c in per.items()}
                for stage, per in body["stages"].items()
            }
            return cls(
                run=body["run"],
                stage_order=body["stage_order"],
                stages=stages,
                shards=body["shards"],
                dead_letter_files=body["dead_letter_files"],
                dropped_sample_files=body.get("dropped_sample_files", []),
            )
        except json.JSONDecodeError as exc:
            raise ManifestError(f"{where} is not JSON: {exc}") from exc
        except (KeyError, TypeError, AttributeError, UnicodeDecodeError) as exc:
            raise ManifestError(f"{where} is not a pagemill run manifest ({type(exc).__name__}: {exc})") from exc

    def summary_table(self) -> str:
        """Plain-text table: records per source and stage, then drops and dead letters by reason."""
        lines = []
        header = f"{'stage':<12} {'source':<24} {'in':>7} {'out':>7} {'emitted':>8} {'dropped':>8} {'dead':>6}"
        lines.append(header)
        lines.append("-" * len(header))
        for stage in self.stage_order:
            for source, c in sorted(self.stages.get(stage, {}).items()):
                lines.append(
                    f"{stage:<12} {source:<24} {c.inputs:>7} {c.out:>7} {c.emitted:>8}"
                    f" {c.n_dropped:>8} {c.n_dead:>6}"
                )
        reasons = []
        for stage in self.stage_order:
            for source, c in sorted(self.stages.get(stage, {}).items()):
                for reason, n in sorted(c.dropped.items()):
                    reasons.append(f"  dropped  {stage:<12} {source:<24} {reason:<28} {n:>6}")
                for reason, n in sorted(c.dead.items()):
                    reasons.append(f"  dead     {stage:<12} {source:<24} {reason:<28} {n:>6}")
        if reasons:
            lines.append("")
            lines.append("drops and dead letters by reason:")
            lines.extend(reasons)
        counters = [f"  {stage:<12} {name:<28} {n:>8}" for stage in self.stage_order
                    for name, n in sorted(self.totals(stage).counters.items())]
        if counters:
            lines.append("")
            lines.append("counters (all sources):")
            lines.extend(counters)
        lines.append("")
        units = self.run.get("units")
        lines.append(
            f"in {self.records_in}  written {self.records_written}  dropped {self.records_dropped}"
            f"  dead-lettered {self.records_dead}  shards {len(self.shards)}"
            + (f"  units {units['finished']}/{units['planned']}" if units else "")
            + f"  balanced {'yes' if not self.imbalances() else 'NO'}"
        )
        return "\n".join(lines)
