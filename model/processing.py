"""Turn (instruction, page image, response) into model inputs for Qwen2-VL-style VLMs.

Qwen2.5-VL and GLM-4V (dense and MoE) share one image path: the page is cut into 14-pixel patches,
``image_grid_thw`` gives the patch grid, and the prompt holds one image token per merged patch
group. `PageProcessor` does exactly that with the model's own tokenizer and image processor and the
chat template stored with the checkpoint. It exists because transformers' ``Qwen2_5_VLProcessor``
and ``Glm4vProcessor`` refuse to build without torchvision (their video half), which this CPU
machine cannot install beside torch 2.13.0; on a machine that has it, the stock processor of a
released checkpoint produces the same ids (the chat template and image-token expansion are the
checkpoint's own).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from PIL import Image

PROCESSOR_FILE = "pagemill_processor.json"

# Chat template used by the tiny models: Qwen's ChatML with the image placed before the text.
CHATML_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n"
    "{% if m['content'] is string %}{{ m['content'] }}{% else %}"
    "{% for c in m['content'] %}{% if c['type'] == 'image' %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% else %}{{ c['text'] }}{% endif %}{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


@dataclass(frozen=True)
class ProcessorSpec:
    """Token names and the end-of-turn marker that the family's chat template uses."""

    image_token: str = "<|image_pad|>"
    end_of_turn: str = "<|im_end|>"


@dataclass
class Encoded:
    """One sample as tensors; ``prompt_len`` tokens of prompt, the rest is the response."""

    input_ids: torch.Tensor  # (L,) long
    pixel_values: torch.Tensor  # (patches, C*T*P*P)
    image_grid_thw: torch.Tensor  # (1, 3)
    mm_token_type_ids: torch.Tensor  # (L,) 0 text, 1 image
    prompt_len: int

    @property
    def length(self) -> int:
        return int(self.input_ids.shape[0])


class PageProcessor:
    """Chat template + image patches + image-token expansion for one checkpoint."""

    def __init__(self, tokenizer, image_processor, chat_template: str, spec: ProcessorSpec | None = None):
        self.tokenizer = tokenizer
        self.image_processor = image_processor
        self.chat_template = chat_template
        self.spec = spec or ProcessorSpec()
        self.image_token_id = tokenizer.convert_tokens_to_ids(self.spec.image_token)
        self.eos_token_id = tokenizer.convert_tokens_to_ids(self.spec.end_of_turn)
        self.merge = int(getattr(image_processor, "merge_size", 2))

    # -- persistence -----------------------------------------------------------------------
    def save_pretrained(self, path: str | Path) -> None:
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        self.tokenizer.save_pretrained(path)
        self.image_processor.save_pretrained(path)
        (path / PROCESSOR_FILE).write_text(
            json.dumps({"chat_template": self.chat_template, "image_token": self.spec.image_token,
                        "end_of_turn": self.spec.end_of_turn}, indent=2))

    @classmethod
    def from_pretrained(cls, path: str | Path) -> "PageProcessor":
        from transformers import AutoImageProcessor, AutoTokenizer

        path = Path(path)
        meta_file = path / PROCESSOR_FILE
        tokenizer = AutoTokenizer.from_pretrained(path)
        image_processor = AutoImageProcessor.from_pretrained(path, backend="pil") if _accepts_backend() \
            else AutoImageProcessor.from_pretrained(path)
        if meta_file.exists():
            meta = json.loads(meta_file.read_text())
            spec = ProcessorSpec(meta["image_token"], meta["end_of_turn"])
            template = meta["chat_template"]
        else:  # a released checkpoint: its own chat template, Qwen/GLM token names
            template = getattr(tokenizer, "chat_template", None) or _read_template(path)
            spec = ProcessorSpec("<|image|>", "<|user|>") if "<|image|>" in tokenizer.get_vocab() \
                else ProcessorSpec()
        return cls(tokenizer, image_processor, template, spec)

    # -- encoding --------------------------------------------------------------------------
    def prompt_text(self, instruction: str) -> str:
        messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": instruction}]}]
        return self.tokenizer.apply_chat_template(messages, chat_template=self.chat_template,
                                                  tokenize=False, add_generation_prompt=True)

    def text_ids(self, text: str) -> list[int]:
        """Token ids of page text as text: a special token's spelling in it (``<|im_end|>``, ``<|image_pad|>``
        on a page about chat templates) stays characters, never the control token it names."""
        return self.tokenizer(text, add_special_tokens=False, split_special_tokens=True)["input_ids"]

    def prompt_ids(self, instruction: str) -> list[int]:
        """The chat prompt's ids: the template's own markers as special tokens, the instruction as text
        (``text_ids``). The template is rendered around a placeholder, which is then tokenized apart."""
        marker = "\x00instruction\x00"
        prompt = self.prompt_text(marker)
        before, sep, after = prompt.partition(marker)
        if not sep:  # a template that rewrites the text: the instruction inside it as given
            return self.tokenizer(self.prompt_text(instruction), add_special_tokens=False)["input_ids"]
        special = self.tokenizer(before, add_special_tokens=False)["input_ids"]
        return special + self.text_ids(instruction) + self.tokenizer(after, add_special_tokens=False)["input_ids"]

    def image_inputs(self, image: Image.Image) -> tuple[torch.Tensor, torch.Tensor]:
        out = self.image_processor(images=[image.convert("RGB")], return_tensors="pt")
        return out["pixel_values"], out["image_grid_thw"]

    def encode(self, instruction: str, image: Image.Image, response: str | None = None) -> Encoded:
        """Prompt (with the image tokens expanded) and, when given, the response ending in end-of-turn."""
        pixel_values, grid = self.image_inputs(image)
        n_image_tokens = int(grid[0].prod()) // (self.merge ** 2)
        prompt_ids = self.prompt_ids(instruction)
        expanded: list[int] = []
        for tok in prompt_ids:
            expanded.extend([self.image_token_id] * n_image_tokens if tok == self.image_token_id else [tok])
        ids = list(expanded)
        if response is not None:
            ids += self.text_ids(response) + [self.eos_token_id]
        input_ids = torch.tensor(ids, dtype=torch.long)
        mm = (input_ids == self.image_token_id).long()
        return Encoded(input_ids, pixel_values, grid, mm, prompt_len=len(expanded))

    def decode(self, ids) -> str:
        ids = [int(i) for i in ids if int(i) != self.eos_token_id]
        return self.tokenizer.decode(ids, skip_special_tokens=True)


def _accepts_backend() -> bool:
    return False


def _read_template(path: Path) -> str:
    for name in ("chat_template.jinja", "chat_template.json"):
        f = path / name
        if f.exists():
            text = f.read_text()
            return json.loads(text)["chat_template"] if name.endswith(".json") else text
    return CHATML_TEMPLATE


def image_kwargs(pixel_values: torch.Tensor | None, image_grid_thw: torch.Tensor | None, device) -> dict:
    """``pixel_values``/``image_grid_thw`` model kwargs; none on a text-only prompt (an Encoded without
    image has zero grid rows), since generate() runs the vision tower on any pixel_values key."""
    if image_grid_thw is None or image_grid_thw.numel() == 0:
        return {}
    return {"pixel_values": pixel_values.to(device), "image_grid_thw": image_grid_thw.to(device)}


def to_pil(image_bytes: bytes) -> Image.Image:
    import io

    return Image.open(io.BytesIO(image_bytes)).convert("RGB")


__all__ = ["PageProcessor", "ProcessorSpec", "Encoded", "CHATML_TEMPLATE", "image_kwargs", "to_pil", "np"]
