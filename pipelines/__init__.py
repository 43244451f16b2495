"""The corpus DAG and the plain stage logic it wraps (docs/architecture.md, docs/stages.md).

``corpus`` builds and runs the Beam pipeline from ``config`` (``CorpusConfig``); ``sources`` reads each
corpus layout; ``render`` turns PDF pages and scans into page images; ``clean`` holds the cleaning
stages and their registry; ``write`` spills, plans and writes sharded Parquet; ``accounting`` turns
stage calls into envelopes and counts; ``transforms`` are the thin Beam DoFns over them; ``stage`` runs
one per-record stage over a shard (``python -m pipelines.stage NAME``); ``io`` reads and writes local,
``s3://``, ``gs://`` and ``hf://`` paths.
"""

from pipelines import quiet as _quiet  # noqa: E402,F401  (drops Beam's import-time apitools notice)
