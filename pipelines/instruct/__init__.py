"""Instruction coverage (Jina-OCR-v1 4.3): response conventions, prompts, derived task records.

``conventions`` (deterministic rewrites of a record's response), ``dynamic`` (per-image prompts),
``tasks`` (element crops, KIE, VQA) and ``stage`` (the ``instruct`` per-record stage that applies
them in the corpus DAG; registered in ``pipelines.clean.registry``). Prompts live in
``schemas.prompts``, page geometry in ``schemas.layout``.
"""
