"""Training data settings and samples: ``DataConfig`` (the ``data`` block of an SFT phase) and records -> ``Sample``s.

Jina-OCR-v1 sections 5.1 (alignment SFT) and 5.2 (robustness SFT). The data flow, by module:
`model.records` streams corpus rows and assigns the held-out split; `model.sampler` draws them
domain-balanced and resumably; here ``SampleSource`` turns records into ``Sample``s (chat template,
image patches, response target) and skips bad ones with a reason (``corrupt_image``,
``image_too_large``, ``too_long``, ``missing_response``, ``missing_instruction``, ``bad_unit_tests``,
``bad_metadata``): counted in ``.skipped`` (their unit tests in ``.skipped_tests``) and logged once per
record (the first ``LOGGED_SKIPS`` per reason), never fatal. Evaluation reads the eval split with no
sample-token cap (``uncapped``): a long page is scored, not skipped.
Robustness SFT degrades page images with ``synth.augment.degrade`` at ``degrade_prob``.
`model.batches` packs samples into model batches and drives it all as a resumable ``BatchStream``.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace

import numpy as np

from model.processing import Encoded, PageProcessor
from model.records import RECORD_COLUMNS, assigned_split, iter_records, open_parquet
from pipelines.instruct.conventions import BOX_CONVENTIONS, record_convention
from schemas.config import ConfigError, option

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DataConfig:
    """The ``data`` block of an SFT phase; defaults in code, overridden from the phase's YAML.

    With ``domain_rates`` given, a present domain that is not listed gets the rate of key ``"*"``,
    else 0, and is logged; ``degrade_domains`` limits degradation (5.2 degrades historical scans).
    """

    path: str = option("out/corpus", help="corpus folder, shard file, glob or URI (make train: the run's corpus)")
    eval_fraction: float = option(0.1, help="share of train rows held out as the eval split (by id hash)")
    max_length: int = option(2048, help="L_train: tokens in one packed row")
    max_sample_tokens: int = option(1536, help="longer samples are skipped as too_long")
    pack: bool = option(True, help="several samples per row (alignment SFT); false: one per row (robustness)")
    domain_rates: dict[str, float] = option({}, help="domain -> relative sampling rate (empty: uniform)")
    upweight: dict[str, float] = option({}, help="domain -> factor multiplying its rate (5.2)")
    task_rates: dict[str, float] = option({}, help="task -> relative rate within a domain (empty: by rows; "
                                                   "'*': tasks not listed)")
    convention_rates: dict[str, float] = option({}, help="response convention -> relative rate within a "
                                                         "(domain, task) (empty: by rows; '*': others)")
    pages: dict[str, float] = option({}, help="page-id list file (one id a line: classifiers.retrieve's <mode>.ids) "
                                              "-> how many times a listed page counts in its stream (4.1 retrieval)")
    degrade_prob: float = option(0.0, help="share of training pages degraded by synth.augment.degrade")
    degrade_domains: tuple[str, ...] = option((), help="degrade only pages of these domains (empty: all)")
    shift_prob: float = option(0.4, help="probability of the 5.1 response position-ID shift per sample")
    position_cap: int = option(32768, help="position ids are capped at this minus one (5.1)")
    seed: int = option(0, help="sampling, degradation and shift RNGs (make train: the run's seed unless set)")
    max_pixels: int = option(64_000_000, help="decoded image cap; larger images are skipped")

    def __post_init__(self) -> None:
        for name in ("eval_fraction", "degrade_prob", "shift_prob"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {value}")
        if not 0 < self.max_sample_tokens <= self.max_length:
            raise ValueError(f"need 0 < max_sample_tokens ({self.max_sample_tokens}) <= "
                             f"max_length ({self.max_length}), or no sample could fit a row")
        if self.position_cap <= 0:
            raise ValueError(f"position_cap must be positive, got {self.position_cap}")
        for name in ("domain_rates", "upweight", "task_rates", "convention_rates", "pages"):
            bad = {k: v for k, v in getattr(self, name).items() if not float(v) >= 0}
            if bad:
                raise ValueError(f"{name} must be >= 0, got {bad}")
        object.__setattr__(self, "degrade_domains", tuple(self.degrade_domains))


def page_factors(cfg: DataConfig) -> dict[str, int]:
    """Page id -> repeat count from ``cfg.pages`` (the largest when lists overlap; at least 1)."""
    from pathlib import Path

    out: dict[str, int] = {}
    for path, factor in cfg.pages.items():
        if not Path(path).is_file():
            raise FileNotFoundError(f"data: pages list {path!r} does not exist")
        for line in Path(path).read_text().splitlines():
            if line.strip():
                out[line.strip()] = max(out.get(line.strip(), 1), max(1, round(float(factor))))
    return out


@dataclass
class Sample:
    """One encoded training sample and the record fields the trainers and rewards need."""

    encoded: Encoded
    id: str
    source: str
    domain: str
    response: str
    unit_tests: list[str]
    instruction: str
    convention: str = "markdown"  # the response convention (metadata["instruct"]): what its unit tests read
    task: str = "parse_page"  # the record's task (model.eval and model.errors report by it)

    @property
    def length(self) -> int:
        return self.encoded.length


LOGGED_SKIPS = 20  # skipped records logged by id per reason; the rest are only counted
NO_TOKEN_CAP = 1 << 30  # max_length / max_sample_tokens that no sample reaches (evaluation, GRPO prompts)


def uncapped(cfg: DataConfig) -> DataConfig:
    """``cfg`` without a sample-token cap: what evaluation reads (the longest pages are the ones a
    ``too_long`` skip would drop from the score) and GRPO prompts are drawn from."""
    return replace(cfg, max_length=NO_TOKEN_CAP, max_sample_tokens=NO_TOKEN_CAP)


def _label_problem(record: dict) -> tuple[str, str] | None:
    """``(reason, detail)`` when a record cannot be trained or scored on: no response or instruction text
    (a null response would train on nothing and score as a perfect page), unit tests that do not parse
    (they would stop model.eval and the GRPO rewards), metadata that is not a JSON object."""
    from schemas.unit_tests import unit_test_from_json

    for field in ("response", "instruction"):
        if not isinstance(record.get(field), str) or not record[field].strip():
            return f"missing_{field}", f"{field} is {type(record.get(field)).__name__}, not text"
    for i, line in enumerate(record.get("unit_tests") or []):
        try:
            unit_test_from_json(line, f"unit_tests[{i}]")
        except (ValueError, TypeError) as exc:
            return "bad_unit_tests", str(exc)[:300]
    try:
        record_convention(record.get("metadata"))
    except (ValueError, TypeError, AttributeError) as exc:
        return "bad_metadata", f"metadata: {exc}"[:300]
    return None


class SampleSource:
    """Records -> Samples for one split; bad records are skipped with a reason, never fatal.

    Iterating yields the split's samples in file order (``records`` overrides where they come
    from); ``encode`` does one record, degrading its image when an RNG is given (training only).
    """

    def __init__(self, processor: PageProcessor, cfg: DataConfig = DataConfig(), split: str = "train",
                 records: Iterable[dict] | None = None):
        self.processor, self.cfg, self.split = processor, cfg, split
        self.records = records
        self.skipped: Counter = Counter()
        self.skipped_tests: Counter = Counter()  # reason -> unit tests of the records skipped for it
        self._logged: dict[str, set[str]] = {}  # reason -> the record ids logged, at most LOGGED_SKIPS each

    def _skip(self, record_id: str, reason: str, detail: str, tests: int = 0) -> None:
        self.skipped[reason] += 1
        self.skipped_tests[reason] += tests
        logged = self._logged.setdefault(reason, set())
        if record_id in logged or len(logged) > LOGGED_SKIPS:
            return
        if len(logged) == LOGGED_SKIPS:  # a corpus of bad records must not grow the log (or this set)
            logged.add("")
            log.warning("data: more records skipped as %s; counted in .skipped, not logged", reason)
            return
        logged.add(record_id)
        log.warning("data: skipping record %s: %s (%s)", record_id, reason, detail)

    def _degrade(self, record: dict, rng: np.random.Generator | None) -> bool:
        cfg = self.cfg
        if rng is None or cfg.degrade_prob <= 0:
            return False
        if cfg.degrade_domains and record.get("domain") not in cfg.degrade_domains:
            return False
        return bool(rng.random() < cfg.degrade_prob)

    def encode(self, record: dict, rng: np.random.Generator | None = None) -> Sample | None:
        from schemas.deadletter import RecordError
        from schemas.images import open_image  # the project's one guarded image opener

        rid = str(record.get("id"))
        unit_tests = record.get("unit_tests")
        tests = len(unit_tests) if isinstance(unit_tests, list | tuple) else 0
        problem = _label_problem(record)
        if problem is not None:
            self._skip(rid, *problem, tests)
            return None
        try:
            image = open_image(record.get("image") or b"", self.cfg.max_pixels)
            try:
                image = image.convert("RGB")  # truncated payloads fail only when pixels are read
            except Exception as exc:
                raise RecordError("corrupt_image", f"cannot decode image: {exc}") from exc
        except RecordError as exc:
            self._skip(rid, exc.reason, str(exc), tests)
            return None
        if self._degrade(record, rng):
            from synth.augment import AugmentConfig, degrade, without_geometry

            # a label with boxes (instruct's box conventions) holds positions: no op may move the pixels
            boxes = record_convention(record.get("metadata")) in BOX_CONVENTIONS
            image, _ = degrade(image, rng, without_geometry(AugmentConfig()) if boxes else AugmentConfig())
        encoded = self.processor.encode(record["instruction"], image, record["response"])
        if encoded.length > self.cfg.max_sample_tokens:
            self._skip(rid, "too_long", f"{encoded.length} tokens > max_sample_tokens {self.cfg.max_sample_tokens}",
                       tests)
            return None
        return Sample(encoded, rid, record.get("source", ""), record.get("domain", ""), record["response"],
                      list(record.get("unit_tests") or []), record["instruction"],
                      record_convention(record.get("metadata")), record.get("task") or "parse_page")

    def __iter__(self) -> Iterator[Sample]:
        records = self.records if self.records is not None else \
            iter_records(self.cfg.path, self.split, RECORD_COLUMNS, self.cfg.eval_fraction)
        for record in records:
            sample = self.encode(record)
            if sample is not None:
                yield sample


def eval_samples(cfg: DataConfig, processor: PageProcessor, limit: int | None = None,
                 sources: list[SampleSource] | None = None) -> Iterator[Sample]:
    """The eval split's samples in file order (deterministic, never degraded), at most ``limit``. The
    ``SampleSource`` reading them is appended to ``sources`` when given (its ``skipped`` and
    ``skipped_tests`` count what it skipped)."""
    source = SampleSource(processor, cfg, "eval")
    if sources is not None:
        sources.append(source)
    for i, sample in enumerate(source):
        if limit is not None and i >= limit:
            return
        yield sample


# -- the mixture: domain -> task -> convention -> source levels (Jina-OCR-v1 4.3, 5.1) -----------------

MIX_COLUMNS = ("id", "domain", "source", "split", "task", "language", "metadata")
StreamKey = tuple[str, str, str, str]  # (domain, task, convention, source)


def stream_key(row: dict) -> StreamKey:
    """(domain, task, convention, source) of an index row (``MIX_COLUMNS``; older shards may lack some)."""
    return (row["domain"], row.get("task") or "parse_page", record_convention(row.get("metadata")), row["source"])


Chunks = dict[tuple[int, int], int]  # (file, row group) -> rows


def index_streams(files: list[str], split: str, eval_fraction: float,
                  languages: dict[StreamKey, dict[str, int]] | None = None,
                  listed: set[str] | None = None) -> dict[StreamKey, Chunks]:
    """Rows per (file, row group) of each stream in ``split``, from the light ``MIX_COLUMNS`` only;
    with ``languages``, also the rows per language of each stream (the mixture report); with ``listed``
    (ids), the ids of it found in the split are removed from it (what remains is never sampled)."""
    found: dict[StreamKey, dict[tuple[int, int], int]] = {}
    for f_idx, uri in enumerate(files):
        pf = open_parquet(uri)
        columns = [c for c in MIX_COLUMNS if c in pf.schema_arrow.names]
        for rg in range(pf.metadata.num_row_groups):
            for r in pf.read_row_group(rg, columns=columns).to_pylist():
                if assigned_split(r["id"], r.get("split") or "train", eval_fraction) == split:
                    if listed:
                        listed.discard(r["id"])
                    chunks = found.setdefault(stream_key(r), {})
                    chunks[(f_idx, rg)] = chunks.get((f_idx, rg), 0) + 1
                    if languages is not None:
                        langs = languages.setdefault(stream_key(r), {})
                        langs[r.get("language") or "und"] = langs.get(r.get("language") or "und", 0) + 1
    return found


def domain_probabilities(present: list[str], rates: dict[str, float],
                         upweight: dict[str, float]) -> dict[str, float]:
    """Normalized domain rates: configured (or uniform) rate x upweight, over the domains present."""
    for name, given in (("domain_rates", rates), ("upweight", upweight)):
        absent = sorted(set(given) - set(present) - {"*"})
        if absent:
            log.warning("data: %s names domains with no rows in this split: %s", name, absent)
    if rates:
        unlisted = [d for d in present if d not in rates]
        if unlisted:
            log.warning("data: domains without a configured rate get %s: %s", rates.get("*", 0.0), unlisted)
    raw = {d: (rates.get(d, rates.get("*", 0.0)) if rates else 1.0) * upweight.get(d, 1.0) for d in present}
    raw = {d: r for d, r in raw.items() if r > 0}
    total = sum(raw.values())
    if total <= 0:
        raise ValueError(f"data: every domain present ({present}) has rate 0")
    return {d: r / total for d, r in raw.items()}


def level_shares(rows: dict[str, int], rates: dict[str, float]) -> dict[str, float]:
    """Shares of one level's values present (value -> rows): configured rates (unlisted: key ``"*"``,
    else 0), or proportional to rows when none are configured. Empty when every rate is 0."""
    raw = {v: (rates.get(v, rates.get("*", 0.0)) if rates else float(n)) for v, n in rows.items()}
    raw = {v: r for v, r in raw.items() if r > 0}
    total = sum(raw.values())
    return {v: r / total for v, r in sorted(raw.items())} if total > 0 else {}


class Mixture:
    """The sampler's levels over the streams present (rows per ``StreamKey``): a domain by
    ``domain_probabilities``, then a task and a convention by ``level_shares`` within it, then a
    source uniformly. ``probabilities`` is each stream's target share; ``draw`` picks one."""

    def __init__(self, rows: dict[StreamKey, int], domain_rates: dict[str, float] | None = None,
                 upweight: dict[str, float] | None = None, task_rates: dict[str, float] | None = None,
                 convention_rates: dict[str, float] | None = None):
        self.domains = domain_probabilities(sorted({k[0] for k in rows}), domain_rates or {}, upweight or {})
        self.tasks: dict[str, dict[str, float]] = {}
        self.conventions: dict[tuple[str, str], dict[str, float]] = {}
        self.sources: dict[tuple[str, str, str], list[str]] = {}
        for d in self.domains:
            by_task: dict[str, int] = {}
            for (dd, t, _, _), n in rows.items():
                if dd == d:
                    by_task[t] = by_task.get(t, 0) + n
            self.tasks[d] = level_shares(by_task, task_rates or {})
            for t in self.tasks[d]:
                by_conv: dict[str, int] = {}
                for (dd, tt, c, _), n in rows.items():
                    if (dd, tt) == (d, t):
                        by_conv[c] = by_conv.get(c, 0) + n
                self.conventions[(d, t)] = level_shares(by_conv, convention_rates or {})
                for c in self.conventions[(d, t)]:
                    self.sources[(d, t, c)] = sorted(k[3] for k in rows if k[:3] == (d, t, c))
            kept = {t: p for t, p in self.tasks[d].items() if self.conventions[(d, t)]}  # a task whose
            total = sum(kept.values())  # conventions all have rate 0 is not drawn
            self.tasks[d] = {t: p / total for t, p in kept.items()} if total else {}
        self.domains = {d: p for d, p in self.domains.items() if self.tasks[d]}
        total = sum(self.domains.values())
        if not total:
            raise ValueError("data: the configured rates leave no stream to sample")
        self.domains = {d: p / total for d, p in self.domains.items()}

    def probabilities(self) -> dict[StreamKey, float]:
        out: dict[StreamKey, float] = {}
        for d, pd in self.domains.items():
            for t, pt in self.tasks[d].items():
                for c, pc in self.conventions[(d, t)].items():
                    sources = self.sources[(d, t, c)]
                    for s in sources:
                        out[(d, t, c, s)] = pd * pt * pc / len(sources)
        return out

    def draw(self, rng: np.random.Generator) -> StreamKey:
        def pick(shares: dict[str, float]) -> str:
            names = list(shares)
            return names[int(rng.choice(len(names), p=np.array([shares[n] for n in names])))]

        d = pick(self.domains)
        t = pick(self.tasks[d])
        c = pick(self.conventions[(d, t)])
        sources = self.sources[(d, t, c)]
        return (d, t, c, sources[int(rng.integers(len(sources)))])


# -- the mixture report: python -m model.data --report ---------------------------------------------

LEVELS = ("domain", "task", "convention", "language")


def mixture_report(cfg: DataConfig, draws: int = 10_000, split: str = "train") -> dict:
    """Target vs realised shares per domain, task, convention and language over ``draws`` draws of
    the sampler's levels (``Mixture.draw`` with the sampler's seed; a stream's row is drawn by its
    rows' languages, as a stream visits every row once per epoch). Reads the light columns only."""
    from model.records import shard_files

    languages: dict[StreamKey, dict[str, int]] = {}
    found = index_streams(shard_files(cfg.path), split, cfg.eval_fraction, languages)
    if not found:
        raise ValueError(f"data: split {split!r} of {cfg.path} has no rows")
    rows = {k: sum(c.values()) for k, c in found.items()}
    mixture = Mixture(rows, cfg.domain_rates, cfg.upweight, cfg.task_rates, cfg.convention_rates)
    target: dict[str, Counter] = {level: Counter() for level in LEVELS}
    for key, p in mixture.probabilities().items():
        for level, value in zip(LEVELS[:3], (key[0], key[1], key[2])):
            target[level][value] += p
        n = sum(languages[key].values())
        for lang, k in languages[key].items():
            target["language"][lang] += p * k / n
    rng = np.random.default_rng(cfg.seed)
    realised: dict[str, Counter] = {level: Counter() for level in LEVELS}
    for _ in range(draws):
        key = mixture.draw(rng)
        langs = languages[key]
        names = sorted(langs)
        counts = np.array([langs[n] for n in names], dtype=float)
        lang = names[int(rng.choice(len(names), p=counts / counts.sum()))]
        for level, value in zip(LEVELS, (key[0], key[1], key[2], lang)):
            realised[level][value] += 1
    row_counts: dict[str, Counter] = {level: Counter() for level in LEVELS}
    for key, n in rows.items():
        for level, value in zip(LEVELS[:3], key[:3]):
            row_counts[level][value] += n
    for langs in languages.values():
        row_counts["language"].update(langs)
    levels = {level: {v: {"rows": row_counts[level][v], "target": round(target[level][v], 6),
                          "realised": round(realised[level][v] / draws, 6)}
                      for v in sorted(set(row_counts[level]) | set(realised[level]))}
              for level in LEVELS}
    return {"path": str(cfg.path), "split": split, "draws": draws, "rows": sum(rows.values()), "levels": levels}


def format_report(report: dict) -> str:
    lines = [f"mixture of {report['path']} ({report['split']}: {report['rows']} rows), {report['draws']} draws",
             f"{'level':<11} {'value':<28} {'rows':>7} {'target':>8} {'realised':>9}"]
    for level, values in report["levels"].items():
        for value, r in values.items():
            lines.append(f"{level:<11} {value[:28]:<28} {r['rows']:>7} {r['target']:>8.3f} {r['realised']:>9.3f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    import argparse

    from schemas.config import load, merge, parse_sets

    parser = argparse.ArgumentParser(prog="python -m model.data", description="The training mixture: target "
                                     "vs realised shares per domain, task, response convention and language.")
    parser.add_argument("--report", action="store_true", help="print the mixture report (the only action)")
    parser.add_argument("--path", default=None, help="corpus folder, shard or glob (default: data.path)")
    parser.add_argument("--split", default="train")
    parser.add_argument("--draws", type=int, default=10_000)
    parser.add_argument("--json", default=None, help="also write the report here as JSON")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a DataConfig field, e.g. --set task_rates={parse_page: 3, vqa: 1}")
    args = parser.parse_args(argv)
    if not args.report:
        parser.error("nothing to do: pass --report")
    values = merge({}, parse_sets(args.set))
    if args.path:
        values["path"] = args.path
    try:
        cfg = load(DataConfig, values, "data")
        report = mixture_report(cfg, args.draws, args.split)
    except (ConfigError, ValueError) as exc:
        parser.error(str(exc))
    print(format_report(report))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(report, f, indent=1, sort_keys=True)
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
