"""VLM relabel, audit and preference pairs over an OpenAI-compatible endpoint (Jina-OCR-v1 4.1-4.2).

``client`` (AsyncOpenAI with the project's retry rules), ``cache`` (SQLite answers), ``prompts``,
``runner`` (the stage base: per record and in batches), ``stages`` (relabel, audit, preference) and
``serve`` (``python -m relabel.serve``: a local ``transformers serve``). Imports ``schemas`` only;
``pipelines/relabel_stages.py`` registers the stages with the repeat-loop detector handed in.
See docs/relabel.md.
"""
