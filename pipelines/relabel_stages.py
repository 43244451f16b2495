"""The relabel, audit and preference stages as the DAG and ``python -m pipelines.stage`` build them.

The logic lives in ``relabel/stages.py``; ``relabel`` sits below ``pipelines`` in the layering, so the
repeat-loop detector of ``pipelines/clean/repeats.py`` (which rejects looping labels) is handed in here.
Registered in ``pipelines/clean/registry.py`` as ``relabel``, ``audit`` and ``preference``; the corpus
DAG runs them through ``pipelines.transforms.ApplyBatchStage`` (batches of records, one event loop per
worker) because each has ``run_batch``.
"""

from __future__ import annotations

import os

from pipelines.clean.repeats import RepeatsConfig, find_loop
from relabel import stages
from relabel.cache import MODEL_DIGEST_ENV
from relabel.client import MODEL_ENV
from relabel.prompts import JUDGE_VERSION, REFINE_VERSION, RELABEL_VERSION
from relabel.stages import AuditConfig, PreferenceConfig, RelabelConfig
from schemas.math_unit_tests import katex_key

_LOOPS = RepeatsConfig()

# The refresh fingerprint's code version of these stages (pipelines.refresh): the stage logic's and the
# prompts' versions, so a new prompt asks again.
VERSION = f"{stages.VERSION}:{RELABEL_VERSION}:{JUDGE_VERSION}:{REFINE_VERSION}"


def resolved_inputs(spec: dict) -> list[str]:
    """What a relabel stage's answers depend on beyond its config: the endpoint and model as the run
    resolves them (``relabel.client``: the config's, else ``$OPENAI_BASE_URL`` / ``$PAGEMILL_RELABEL_MODEL``);
    under ``relabel.serve`` the model and the served checkpoint's content digest it exports instead of the URL
    (a retrained checkpoint at the same path asks again; a new port at every start does not). A model the
    server names only at run time (neither set) is not known here; docs/refresh.md says so."""
    client = spec.get("client") or {}
    model = client.get("model") or os.environ.get(MODEL_ENV, "")
    digest = os.environ.get(MODEL_DIGEST_ENV, "")
    if digest:  # relabel.serve: the weights themselves; its URL has a new port at every start
        return [model, digest]
    return [client.get("base_url") or os.environ.get("OPENAI_BASE_URL", ""), model]


def loop_kind(text: str) -> str | None:
    """The kind of degeneration loop ending ``text`` (``pipelines.clean.repeats``), or None."""
    loop = find_loop(text, _LOOPS)
    return loop.kind if loop is not None else None


def relabel_inputs(spec: dict) -> list[str]:
    """``resolved_inputs``, and under ``mode: replace`` the installed KaTeX (``katex_key``): a replacement must
    pass the record's ``math`` tests."""
    return resolved_inputs(spec) + ([katex_key()] if spec.get("mode") == "replace" else [])


class RelabelStage(stages.RelabelStage):
    __doc__ = stages.RelabelStage.__doc__
    resolved_inputs = staticmethod(relabel_inputs)

    def __init__(self, cfg: RelabelConfig = RelabelConfig()):
        super().__init__(cfg, loop_kind)


class AuditStage(stages.AuditStage):
    __doc__ = stages.AuditStage.__doc__
    resolved_inputs = staticmethod(resolved_inputs)

    def __init__(self, cfg: AuditConfig = AuditConfig()):
        super().__init__(cfg, loop_kind)


class PreferenceStage(stages.PreferenceStage):
    __doc__ = stages.PreferenceStage.__doc__
    resolved_inputs = staticmethod(resolved_inputs)

    def __init__(self, cfg: PreferenceConfig = PreferenceConfig()):
        super().__init__(cfg, loop_kind)
