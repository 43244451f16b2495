"""Post-training on the corpus shards (Jina-OCR-v1 section 5); see docs/training.md and docs/architecture.md.

``train`` runs the phases (``python -m model.train``, ``make train``). ``models`` builds or loads the VLM
and ``processing`` encodes samples; ``data`` streams, samples and packs the shards (``attention``:
attention kept inside each packed sample). Phases: ``sft`` (with ``optim``, ``regularizers`` and
``checkpoint``), ``grpo`` with its ``rewards``, ``merge`` (merge search), the FastMTP head
(``mtp_head``), its fitting (``mtp``) and speculative decoding (``decode``). ``eval`` scores a model on
the eval split with the unit tests and metrics of ``schemas``; ``errors`` names its failure modes.
"""
