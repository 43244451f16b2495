"""The trainer: Jina-OCR-v1's post-training recipe on pagemill's corpus shards (`make train`, `model.train`).

Reading order: `train` (the phases and `TrainRunConfig`, one typed block per phase) -> `sft` with its
data path `records` -> `sampler` -> `data` -> `batches`, and `optim`, `regularizers`, `checkpoint` ->
`grpo` with `rewards` -> `merge` -> `errors` -> `mtp_head` (the FastMTP draft head), `mtp` (fitting it),
`decode` (speculative decoding) and `speculate` (its command line). `models` and `processing` build and
encode the model; `eval` scores it. Every config loads through `schemas.config`.
"""
