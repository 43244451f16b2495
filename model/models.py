"""Load a VLM checkpoint from a local path, or build a tiny one from config for CPU work.

Real checkpoints (Qwen2.5-VL, GLM-4V, ... any `AutoModelForImageTextToText` whose image path is
Qwen2-VL-style patches) load from a local folder; nothing here reaches a hub. The tiny models are
the same transformers classes with a few million parameters and the project's tokenizer
(`assets/tokenizer/tokenizer.json` plus the chat-template special tokens):

- ``tiny``: `Qwen2_5_VLForConditionalGeneration`, dense decoder.
- ``tiny-moe``: `Glm4vMoeForConditionalGeneration`, decoder with routed plus shared experts, top-k,
  so the MoE regularizers of Jina-OCR-v1 5.4 have a router to act on.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from model.processing import CHATML_TEMPLATE, PageProcessor, ProcessorSpec

TOKENIZER_FILE = Path(__file__).resolve().parent.parent / "assets" / "tokenizer" / "tokenizer.json"
CHAT_TOKENS = ["<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>", "<|image_pad|>",
               "<|video_pad|>"]
TINY_KINDS = ("tiny", "tiny-moe")


class ModelLoadError(ValueError):
    """A checkpoint that cannot be used: missing, unreadable, or its tokenizer does not fit."""


@dataclass
class Loaded:
    model: nn.Module
    processor: PageProcessor
    source: str  # "tiny", "tiny-moe" or the checkpoint path


def tiny_tokenizer():
    from transformers import PreTrainedTokenizerFast

    tok = PreTrainedTokenizerFast(tokenizer_file=str(TOKENIZER_FILE))
    tok.add_special_tokens({"additional_special_tokens": CHAT_TOKENS})
    tok.eos_token = "<|im_end|>"
    tok.pad_token = "<|endoftext|>"
    return tok


def tiny_image_processor(max_side: int = 336, white_zero: bool = False):
    """``white_zero``: normalise pixels so white paper is 0 (mean 1, std 0.5) instead of CLIP's mean/std,
    under which every blank patch is the same large vector and a from-scratch tower's features barely
    differ between patches (issue 22's sweep)."""
    from transformers import Qwen2VLImageProcessorPil

    norm = {"image_mean": [1.0, 1.0, 1.0], "image_std": [0.5, 0.5, 0.5]} if white_zero else {}
    # Pages keep their aspect ratio; at most (max_side/28)^2 image tokens after the 2x2 merge.
    return Qwen2VLImageProcessorPil(min_pixels=56 * 56, max_pixels=max_side * max_side, patch_size=14,
                                    merge_size=2, temporal_patch_size=2, **norm)


def tiny_processor(max_side: int = 336, white_zero: bool = False) -> PageProcessor:
    return PageProcessor(tiny_tokenizer(), tiny_image_processor(max_side, white_zero), CHATML_TEMPLATE,
                         ProcessorSpec())


def tiny_config(kind: str = "tiny", vocab_size: int | None = None, hidden: int = 128, layers: int = 4,
                vision_hidden: int = 64, vision_depth: int = 2, rope_theta: float = 1e6,
                mrope_section: tuple[int, int, int] | list[int] | None = None):
    """Config for a few-million-parameter model of the given kind, sized for the project tokenizer.

    ``rope_theta``: with a head of 32 dims, M-RoPE gives height and width the lowest of 16 frequencies;
    at 1e6 a step of one image token turns width by under 2e-4 rad, so the decoder cannot tell image
    columns apart (issue 22's sweep: no reading at all); 100 makes them distinguishable.

    ``mrope_section``: how the head_dim/2 frequencies, highest first, split over (time, height, width);
    default 2/8, 3/8, 3/8 of them, as Qwen2-VL's 16/24/24. An image's tokens share one time index, so its
    section is wasted on the page, and width, the axis a line of text runs along, gets the lowest frequencies."""
    from transformers import Glm4vMoeConfig, Qwen2_5_VLConfig

    tok = tiny_tokenizer()
    ids = tok.convert_tokens_to_ids
    vocab = vocab_size or len(tok)
    heads = 4
    head_dim = hidden // heads
    # M-RoPE sections split head_dim/2 rotary frequencies over (time, height, width).
    half = head_dim // 2
    mrope = list(mrope_section) if mrope_section else [half - 2 * (half * 3 // 8), half * 3 // 8, half * 3 // 8]
    if len(mrope) != 3 or sum(mrope) != half or min(mrope) < 1:
        raise ModelLoadError(f"mrope_section {mrope} must be 3 positive counts summing to head_dim/2 = {half}")
    rope = {"rope_type": "default", "rope_theta": rope_theta, "mrope_section": mrope}
    special = dict(bos_token_id=ids("<|im_start|>"), eos_token_id=ids("<|im_end|>"),
                   pad_token_id=ids("<|endoftext|>"))
    if kind == "tiny":
        return Qwen2_5_VLConfig(
            text_config=dict(vocab_size=vocab, hidden_size=hidden, intermediate_size=hidden * 3,
                             num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=2,
                             rope_parameters=rope, max_position_embeddings=32768, **special),
            vision_config=dict(depth=vision_depth, hidden_size=vision_hidden, intermediate_size=vision_hidden * 2,
                               num_heads=4, out_hidden_size=hidden, patch_size=14, spatial_merge_size=2,
                               temporal_patch_size=2, fullatt_block_indexes=[1], window_size=56),
            image_token_id=ids("<|image_pad|>"), video_token_id=ids("<|video_pad|>"),
            vision_start_token_id=ids("<|vision_start|>"), vision_end_token_id=ids("<|vision_end|>"),
            tie_word_embeddings=False, **special)
    if kind == "tiny-moe":
        rope_glm = {"rope_type": "default", "rope_theta": rope_theta, "mrope_section": mrope,
                    "partial_rotary_factor": 1.0}
        return Glm4vMoeConfig(
            text_config=dict(vocab_size=vocab, hidden_size=hidden, intermediate_size=hidden * 3,
                             num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=2,
                             head_dim=head_dim, rope_parameters=rope_glm, max_position_embeddings=32768,
                             moe_intermediate_size=hidden, n_routed_experts=8, n_shared_experts=1,
                             num_experts_per_tok=2, first_k_dense_replace=1, n_group=1, topk_group=1,
                             norm_topk_prob=True, **special),
            vision_config=dict(depth=vision_depth, hidden_size=vision_hidden, intermediate_size=vision_hidden * 2,
                               num_heads=4, out_hidden_size=hidden, patch_size=14, spatial_merge_size=2,
                               temporal_patch_size=2, image_size=336),
            image_token_id=ids("<|image_pad|>"), video_token_id=ids("<|video_pad|>"),
            image_start_token_id=ids("<|vision_start|>"), image_end_token_id=ids("<|vision_end|>"),
            video_start_token_id=ids("<|vision_start|>"), video_end_token_id=ids("<|vision_end|>"),
            tie_word_embeddings=False, **special)
    raise ModelLoadError(f"unknown tiny model kind {kind!r}; expected one of {TINY_KINDS}")


VISION_TOKEN_FIELDS = ("image_token_id", "video_token_id", "vision_start_token_id", "vision_end_token_id",
                       "image_start_token_id", "image_end_token_id", "video_start_token_id", "video_end_token_id")


def vision_token_ids(model: nn.Module) -> list[int]:
    """The ids of the model's image and video placeholder and delimiter tokens (its config's)."""
    found = {getattr(model.config, f, None) for f in VISION_TOKEN_FIELDS}
    return sorted(i for i in found if isinstance(i, int))


def suppress_vision_tokens(model: nn.Module) -> None:
    """Never generate an image or video token: a completion is text, and a sampled ``<|image_pad|>`` makes
    the teacher-forced pass over prompt + completion (GRPO's log-probabilities, MTP fitting) count one image
    token more than there are image features. Set in the generation config, so every ``generate`` call (and
    ``model.decode``, which reads it) leaves them out; saved with the checkpoint."""
    suppressed = set(model.generation_config.suppress_tokens or ()) | set(vision_token_ids(model))
    model.generation_config.suppress_tokens = sorted(suppressed)


def without_suppressed(model: nn.Module, logits: torch.Tensor) -> torch.Tensor:
    """``logits`` with the tokens ``generate`` never picks (the generation config's ``suppress_tokens``) at -inf:
    what greedy decoding and sampling choose from, for code that reads the logits itself."""
    ids = model.generation_config.suppress_tokens
    if not ids:
        return logits
    return logits.index_fill(-1, torch.tensor(sorted(ids), dtype=torch.long, device=logits.device), float("-inf"))


def build_tiny(kind: str = "tiny", seed: int = 0, white_zero: bool = False, **sizes) -> Loaded:
    from transformers import AutoModelForImageTextToText

    torch.manual_seed(seed)
    model = AutoModelForImageTextToText.from_config(tiny_config(kind, **sizes))
    suppress_vision_tokens(model)
    return Loaded(model.float(), tiny_processor(white_zero=white_zero), kind)


def load(source: str, dtype: torch.dtype | None = None) -> Loaded:
    """``tiny``/``tiny-moe`` (fresh weights) or a local checkpoint folder (model + processor files)."""
    path = Path(source)
    if source in TINY_KINDS:
        if path.is_dir():  # which one was meant? a saved checkpoint must not be replaced by fresh weights unnoticed
            raise ModelLoadError(f"{source!r} names both the built-in {source} model and a folder here: pass "
                                 f"./{source} for the folder")
        return build_tiny(source)
    if not path.is_dir():
        raise ModelLoadError(f"checkpoint {source!r} is not a local folder (nothing is fetched from a hub)")
    if not (path / "config.json").exists():
        raise ModelLoadError(f"checkpoint {source!r} has no config.json")
    from transformers import AutoModelForImageTextToText

    try:
        processor = PageProcessor.from_pretrained(path)
        model = AutoModelForImageTextToText.from_pretrained(path, dtype=dtype or torch.float32)
    except (OSError, ValueError, KeyError) as exc:  # a missing or unreadable file, an unknown architecture
        raise ModelLoadError(f"checkpoint {source!r} cannot be loaded: {type(exc).__name__}: "
                             f"{str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ''}") from exc
    check_tokenizer(model, processor, source)
    suppress_vision_tokens(model)
    return Loaded(model, processor, str(path))


def load_or_exit(parser, source: str) -> Loaded:
    """``load(source)`` for a command line: a checkpoint that cannot load is one line naming it and exit 2."""
    try:
        return load(source)
    except ModelLoadError as exc:
        parser.exit(2, f"{parser.prog}: {exc}\n")


def check_tokenizer(model: nn.Module, processor: PageProcessor, source: str) -> None:
    """Fail before training when the tokenizer cannot drive this model's embeddings."""
    rows = model.get_input_embeddings().weight.shape[0]
    n = len(processor.tokenizer)
    if n > rows:
        raise ModelLoadError(f"{source}: tokenizer has {n} tokens but the model embeds only {rows}")
    image_id = getattr(model.config, "image_token_id", None)
    if image_id is not None and image_id != processor.image_token_id:
        raise ModelLoadError(f"{source}: model image_token_id {image_id} != tokenizer's "
                             f"{processor.spec.image_token} id {processor.image_token_id}")


def save(loaded_model: nn.Module, processor: PageProcessor, path: str | Path) -> None:
    loaded_model.save_pretrained(path)
    processor.save_pretrained(path)


def text_model(model: nn.Module) -> nn.Module:
    """The decoder stack (embeddings, layers, final norm, rotary embedding)."""
    return model.model.language_model


def vision_tower(model: nn.Module) -> nn.Module:
    return model.model.visual


def projector(model: nn.Module) -> nn.Module:
    """The merger that maps vision features into the decoder's width."""
    return model.model.visual.merger


def rope_index(model: nn.Module, input_ids: torch.Tensor, mm_token_type_ids: torch.Tensor,
               image_grid_thw: torch.Tensor) -> torch.Tensor:
    """(3, B, L) M-RoPE positions for unpadded rows, as the model computes them itself."""
    pos, _ = model.model.get_rope_index(input_ids, mm_token_type_ids=mm_token_type_ids,
                                        image_grid_thw=image_grid_thw)
    return pos


def n_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
