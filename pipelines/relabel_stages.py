"""The relabel, audit and preference stages as the DAG and ``python -m pipelines.stage`` build them.

The logic lives in ``relabel/stages.py``; ``relabel`` sits below ``pipelines`` in the layering, so the
repeat-loop detector of ``pipelines/clean/repeats.py`` (which rejects looping labels) is handed in here.
Registered in ``pipelines/clean/registry.py`` as ``relabel``, ``audit`` and ``preference``; the corpus
DAG runs them through ``pipelines.transforms.ApplyBatchStage`` (batches of records, one event loop per
worker) because each has ``run_batch``.
"""

from __future__ import annotations

from pipelines.clean.repeats import RepeatsConfig, find_loop
from relabel import stages
from relabel.stages import AuditConfig, PreferenceConfig, RelabelConfig

_LOOPS = RepeatsConfig()


def loop_kind(text: str) -> str | None:
    """The kind of degeneration loop ending ``text`` (``pipelines.clean.repeats``), or None."""
    loop = find_loop(text, _LOOPS)
    return loop.kind if loop is not None else None


class RelabelStage(stages.RelabelStage):
    __doc__ = stages.RelabelStage.__doc__

    def __init__(self, cfg: RelabelConfig = RelabelConfig()):
        super().__init__(cfg, loop_kind)


class AuditStage(stages.AuditStage):
    __doc__ = stages.AuditStage.__doc__

    def __init__(self, cfg: AuditConfig = AuditConfig()):
        super().__init__(cfg, loop_kind)


class PreferenceStage(stages.PreferenceStage):
    __doc__ = stages.PreferenceStage.__doc__

    def __init__(self, cfg: PreferenceConfig = PreferenceConfig()):
        super().__init__(cfg, loop_kind)
