"""Robustness degradations for page images (Jina-OCR-v1 section 5.2; issue 5 item 6).

"On historical scans we apply photometric and geometric corruptions with probability 0.25, covering
small skews, orthogonal rotations, 2x downscaling, salt-and-pepper noise, and the morphological
erosion and dilation that mimic faded print and ink bleed." We add JPEG recompression.

Two entry points:

* ``degrade(image, rng, cfg, ops=None) -> (image, applied)`` always degrades: it draws between one
  and ``cfg.max_ops`` operations (weighted, without replacement; ``ops`` forces a list instead),
  applies them in a fixed canonical order (geometry first, then morphology, noise, compression) and
  returns the new image plus one dict per applied operation with its exact parameters.
* ``AugmentStage(cfg)`` is the per-record corpus stage (``stage(record) -> [record]``). Whether a
  record is degraded, and how, is decided by an RNG seeded from ``cfg.seed`` and the record ``id``
  alone, so reruns give identical bytes whatever the order, sharding or worker. A selected record
  gets its image re-encoded as PNG (8-bit grey when achromatic, as ``pipelines/render.py`` does;
  JPEG artefacts are kept losslessly), ``image_sha256``/``width``/``height`` updated,
  ``quality["augment"] = {"applied": [...]}`` and a ``ProvenanceStep("synth:augment", VERSION,
  params_hash({"config": ..., "applied": ...}))``. Records not selected pass through untouched.
  Undecodable images raise ``RecordError("corrupt_image", ...)``.

Operations (names used in ``applied[i]["op"]`` and ``AugmentConfig.weights``):

``skew``       small rotation by an angle in ``±skew_degrees`` (``A.Rotate``), canvas size kept,
               uncovered corners filled white (``fill``).
``rotate90``   orthogonal rotation by 90, 180 or 270 degrees clockwise (``cv2.rotate``); 90/270 swap
               width and height. The label does not change (the text is the same), so rotated pages
               teach the model to read pages scanned sideways or upside down rather than to report
               the orientation; keep the weight at 0 for tasks whose answer depends on layout
               direction.
``downscale``  2x downscaling. ``downscale_mode="shrink"`` (default) really halves the resolution
               (``cv2.resize``, area interpolation): the model sees fewer pixels, and fewer image
               tokens, per glyph, which is what low-resolution scans look like to a native-resolution
               VLM; ``width``/``height`` halve. ``"down_up"`` (``A.Downscale``) goes down and back up
               to the original size: same geometry, lost detail (blur). Images whose short side would
               fall under ``min_side`` are left at their size (the op is skipped and not recorded).
``salt_pepper`` impulse noise: a fraction ``amount`` of pixels set to black or white
               (``A.SaltAndPepper``; on grey pages the noise stays grey).
``erode``      grey-level erosion (``cv2.erode``, a min filter) with a square kernel of
               ``morph_kernel`` pixels: dark strokes on a light page grow, as ink bleeds (the image
               gets darker on average).
``dilate``     grey-level dilation (``cv2.dilate``, a max filter): dark strokes thin and break, as
               faded print (the image gets lighter). The kernel is capped at 1 + half the page's
               typical stroke width (``stroke_width``; ``kernel`` records the size used), so strokes
               thin but stay: a 2 px stroke (a shrunk page's) takes a 2 px kernel at most, a 1 px
               stroke none (the op is skipped and not recorded). ``erode`` and ``dilate`` never both
               apply.
``jpeg``       JPEG recompression at a quality in ``jpeg_quality`` (``A.ImageCompression``).

The stage moves the record's ``elements`` with the pixels (``degraded_elements``): each box is mapped
through the geometric ops (``map_points``) and becomes the bounding box of its corners, clipped to the
new image, so boxes stay in pixels of the record's own image.

Grey input (PNG mode ``L`` or RGB with R == G == B) is processed as one channel, so the output is
grey too; colour input is processed as RGB.
"""

from __future__ import annotations

import hashlib
import io
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

import albumentations as A
import cv2
import numpy as np
from PIL import Image

from schemas.config import option
from schemas.deadletter import RecordError
from schemas.images import grey_if_achromatic
from schemas.layout import Element, element
from schemas.page import PageRecord, ProvenanceStep, params_hash

VERSION = "3"  # 2: element boxes move with the pixels; 3: dilate's kernel capped by the stroke width
STAGE = "synth:augment"
OPS = ("skew", "rotate90", "downscale", "erode", "dilate", "salt_pepper", "jpeg")  # application order
GEOMETRIC_OPS = ("skew", "rotate90", "downscale")  # the ones that move or resize what is on the page
DEFAULT_WEIGHTS: dict[str, float] = {
    "skew": 1.0,
    "rotate90": 0.5,
    "downscale": 1.0,
    "erode": 0.75,
    "dilate": 0.75,
    "salt_pepper": 1.0,
    "jpeg": 1.0,
}

ImageLike = Image.Image | np.ndarray


@dataclass(frozen=True)
class AugmentConfig:
    """Degradation settings; defaults follow Jina-OCR-v1 section 5.2."""

    probability: float = option(0.25, help="share of records the stage degrades")
    seed: int = option(0, help="mixed with the record id into each record's RNG (change it to draw a "
                               "different degraded set)")
    max_ops: int = option(2, help="at most this many operations per degraded image (at least one)")
    weights: dict[str, float] = option(DEFAULT_WEIGHTS, help="op name -> relative weight of being picked "
                                                             "(0 disables an op; missing names get 0)")
    skew_degrees: float = option(3.0, help="skew angles are uniform in [-skew_degrees, skew_degrees]")
    rotations: tuple[int, ...] = option((90, 180, 270), help="the orthogonal angles to pick from, clockwise")
    downscale_mode: str = option("shrink", help="shrink (halve width and height) or down_up (down and back "
                                                "up, size kept)")
    downscale_factor: float = option(0.5, help="downscaling factor, in (0, 1)")
    min_side: int = option(64, help="no downscaling below this short side")
    salt_pepper_amount: tuple[float, float] = option((0.002, 0.02), help="fraction of pixels hit, uniform in "
                                                                          "this range")
    morph_kernel: tuple[int, ...] = option((2, 3), help="square kernel sizes for erosion and dilation")
    jpeg_quality: tuple[int, int] = option((30, 75), help="JPEG quality range, inclusive")
    fill: int = option(255, help="grey value of the canvas a skew uncovers (255: white paper)")
    max_pixels: int = option(64_000_000, help="decoded image cap (decompression bombs)")

    def __post_init__(self) -> None:
        if not 0.0 <= self.probability <= 1.0:
            raise ValueError(f"augment: probability must be in [0, 1], got {self.probability}")
        if self.max_ops < 1:
            raise ValueError(f"augment: max_ops must be >= 1, got {self.max_ops}")
        unknown = sorted(set(self.weights) - set(OPS))
        if unknown:
            raise ValueError(f"augment: unknown ops in weights: {unknown}; known: {list(OPS)}")
        if any(w < 0 for w in self.weights.values()) or not any(w > 0 for w in self.weights.values()):
            raise ValueError("augment: weights must be >= 0 with at least one > 0")
        if self.downscale_mode not in ("shrink", "down_up"):
            raise ValueError(f"augment: downscale_mode must be shrink or down_up, got {self.downscale_mode!r}")
        if not 0.0 < self.downscale_factor < 1.0:
            raise ValueError(f"augment: downscale_factor must be in (0, 1), got {self.downscale_factor}")
        if not self.rotations or any(r not in (90, 180, 270) for r in self.rotations):
            raise ValueError(f"augment: rotations must be a non-empty subset of 90/180/270, got {self.rotations}")
        if not self.morph_kernel or any(k < 1 for k in self.morph_kernel):
            raise ValueError(f"augment: morph_kernel sizes must be >= 1, got {self.morph_kernel}")
        lo, hi = self.jpeg_quality
        if not 1 <= lo <= hi <= 100:
            raise ValueError(f"augment: jpeg_quality must satisfy 1 <= lo <= hi <= 100, got {self.jpeg_quality}")
        lo_a, hi_a = self.salt_pepper_amount
        if not 0.0 <= lo_a <= hi_a <= 1.0:
            raise ValueError(f"augment: salt_pepper_amount must be within [0, 1], got {self.salt_pepper_amount}")
        # YAML gives lists; store tuples so the config stays immutable and JSON-stable
        for name in ("rotations", "salt_pepper_amount", "morph_kernel", "jpeg_quality"):
            object.__setattr__(self, name, tuple(getattr(self, name)))


def record_rng(record_id: str, seed: int = 0) -> np.random.Generator:
    """The RNG of one record: a function of ``seed`` and ``record_id`` only."""
    digest = hashlib.sha256(f"{STAGE}\x1f{seed}\x1f{record_id}".encode()).digest()
    return np.random.default_rng(int.from_bytes(digest[:16], "little"))


def _as_rng(rng: np.random.Generator | int | None) -> np.random.Generator:
    return rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)


def _to_array(image: ImageLike) -> np.ndarray:
    """uint8 HxW (grey) or HxWx3 (colour); achromatic RGB collapses to grey."""
    if isinstance(image, Image.Image):
        if image.mode in ("L", "1", "I", "I;16", "LA"):
            arr = np.asarray(image.convert("L"))
        else:
            arr = np.asarray(image.convert("RGB"))
    else:
        arr = np.asarray(image)
        if arr.dtype != np.uint8:
            raise TypeError(f"augment: expected a uint8 array, got {arr.dtype}")
        if arr.ndim == 3 and arr.shape[2] == 1:
            arr = arr[:, :, 0]
        elif arr.ndim == 3 and arr.shape[2] == 4:
            arr = arr[:, :, :3]
        if arr.ndim not in (2, 3) or (arr.ndim == 3 and arr.shape[2] != 3):
            raise ValueError(f"augment: expected HxW or HxWx3 image, got shape {arr.shape}")
    if arr.ndim == 3:
        grey = grey_if_achromatic(arr)
        if grey is not None:
            arr = grey
    return np.ascontiguousarray(arr)


def without_geometry(cfg: AugmentConfig) -> AugmentConfig:
    """``cfg`` drawing only the ops that leave every pixel where it was (``GEOMETRIC_OPS`` weighted 0): for
    a page whose label gives positions (boxes) that nothing maps along with the image."""
    return replace(cfg, weights={op: (0.0 if op in GEOMETRIC_OPS else w) for op, w in cfg.weights.items()})


def _albu(transform: A.BasicTransform, image: np.ndarray, seed: int) -> np.ndarray:
    """Apply one albumentations transform with its own seed (always applied)."""
    out = A.Compose([transform], p=1.0, seed=seed)(image=image)["image"]
    return np.ascontiguousarray(out)


def choose_ops(rng: np.random.Generator, cfg: AugmentConfig) -> list[str]:
    """One to ``cfg.max_ops`` op names, weighted without replacement, in canonical order."""
    names = [op for op in OPS if cfg.weights.get(op, 0.0) > 0]
    weights = np.array([cfg.weights[op] for op in names], dtype=float)
    count = int(rng.integers(1, min(cfg.max_ops, len(names)) + 1))
    picked: list[str] = []
    for _ in range(count):
        if weights.sum() <= 0:
            break
        i = int(rng.choice(len(names), p=weights / weights.sum()))
        picked.append(names[i])
        weights[i] = 0.0
        if names[i] in ("erode", "dilate"):  # opposites: never both
            other = "dilate" if names[i] == "erode" else "erode"
            if other in names:
                weights[names.index(other)] = 0.0
    return [op for op in OPS if op in picked]


def _apply(op: str, arr: np.ndarray, rng: np.random.Generator,
           cfg: AugmentConfig) -> tuple[np.ndarray, dict[str, Any] | None]:
    """One operation; its parameters are drawn here from ``rng`` so ``applied`` records them exactly."""
    seed = int(rng.integers(0, 2**31 - 1))  # albumentations' own draws (noise positions)
    fill: float | tuple[float, ...] = cfg.fill if arr.ndim == 2 else (cfg.fill,) * 3
    if op == "skew":
        angle = round(float(rng.uniform(-cfg.skew_degrees, cfg.skew_degrees)), 3)
        t = A.Rotate(limit=(angle, angle), interpolation=cv2.INTER_LINEAR, border_mode=cv2.BORDER_CONSTANT,
                     fill=fill, crop_border=False, p=1.0)
        return _albu(t, arr, seed), {"op": op, "degrees": angle}
    if op == "rotate90":
        degrees = int(rng.choice(cfg.rotations))
        code = {90: cv2.ROTATE_90_CLOCKWISE, 180: cv2.ROTATE_180, 270: cv2.ROTATE_90_COUNTERCLOCKWISE}[degrees]
        return np.ascontiguousarray(cv2.rotate(arr, code)), {"op": op, "degrees_clockwise": degrees}
    if op == "downscale":
        h, w = arr.shape[:2]
        if min(h, w) * cfg.downscale_factor < cfg.min_side:
            return arr, None
        if cfg.downscale_mode == "shrink":
            size = (max(1, round(w * cfg.downscale_factor)), max(1, round(h * cfg.downscale_factor)))
            out = cv2.resize(arr, size, interpolation=cv2.INTER_AREA)
        else:
            t = A.Downscale(scale_range=(cfg.downscale_factor, cfg.downscale_factor),
                            interpolation_pair={"downscale": cv2.INTER_AREA, "upscale": cv2.INTER_LINEAR}, p=1.0)
            out = _albu(t, arr, seed)
        return np.ascontiguousarray(out), {"op": op, "mode": cfg.downscale_mode, "factor": cfg.downscale_factor}
    if op in ("erode", "dilate"):
        k = int(rng.choice(cfg.morph_kernel))
        if op == "dilate":
            # A k x k max filter takes k - 1 px off every stroke: keep about half of the thinnest common
            # stroke (strokes of 1-2 px, as after a shrink, would vanish), and skip when nothing can go.
            k = min(k, 1 + stroke_width(arr) // 2)
            if k < 2:
                return arr, None
        kernel = np.ones((k, k), np.uint8)
        out = cv2.erode(arr, kernel) if op == "erode" else cv2.dilate(arr, kernel)
        return np.ascontiguousarray(out), {"op": op, "kernel": k}
    if op == "salt_pepper":
        amount = round(float(rng.uniform(*cfg.salt_pepper_amount)), 5)
        t = A.SaltAndPepper(amount=(amount, amount), salt_vs_pepper=(0.5, 0.5), p=1.0)
        return _albu(t, arr, seed), {"op": op, "amount": amount, "seed": seed}
    if op == "jpeg":
        quality = int(rng.integers(cfg.jpeg_quality[0], cfg.jpeg_quality[1] + 1))
        t = A.ImageCompression(compression_type="jpeg", quality_range=(quality, quality), p=1.0)
        return _albu(t, arr, seed), {"op": op, "quality": quality}
    raise ValueError(f"augment: unknown op {op!r}; known: {list(OPS)}")


def stroke_width(arr: np.ndarray) -> int:
    """The page's typical dark stroke width in pixels: the median length of the horizontal runs of ink
    (pixels darker than halfway between the page's darkest and lightest grey) on every other row; 0 without
    ink. Vertical strokes dominate text, so this is about a stem's width."""
    grey = arr if arr.ndim == 2 else arr.mean(axis=2)
    lo, hi = int(grey.min()), int(grey.max())
    if hi - lo < 32:
        return 0
    ink = grey[::2] < (lo + hi) / 2
    padded = np.zeros((ink.shape[0], ink.shape[1] + 2), np.int8)
    padded[:, 1:-1] = ink
    edges = np.diff(padded, axis=1)
    starts, ends = np.nonzero(edges == 1)[1], np.nonzero(edges == -1)[1]
    if not len(starts):
        return 0
    return int(np.median(ends - starts))


def degrade(image: ImageLike, rng: np.random.Generator | int | None = None, cfg: AugmentConfig = AugmentConfig(),
            ops: Sequence[str] | None = None) -> tuple[Image.Image, list[dict[str, Any]]]:
    """Degrade one page image; always applies at least one op unless a forced op is a no-op.

    ``rng``: a numpy ``Generator`` or an int seed (same seed, same image, same result). ``ops``:
    apply exactly these (in canonical order) instead of drawing them. Returns a PIL image (mode
    ``L`` for grey input, ``RGB`` otherwise) and the applied ops with their parameters.
    """
    gen = _as_rng(rng)
    arr = _to_array(image)
    if ops is None:
        chosen = choose_ops(gen, cfg)
    else:
        unknown = [op for op in ops if op not in OPS]
        if unknown:
            raise ValueError(f"augment: unknown ops {unknown}; known: {list(OPS)}")
        chosen = [op for op in OPS if op in ops]
    applied: list[dict[str, Any]] = []
    for op in chosen:
        arr, params = _apply(op, arr, gen, cfg)
        if params is not None:
            applied.append(params)
    arr = _to_array(arr)  # an RGB page may have become achromatic (it never becomes colour)
    return Image.fromarray(arr, mode="L" if arr.ndim == 2 else "RGB"), applied


def map_points(points: np.ndarray, applied: Sequence[dict[str, Any]],
               size: tuple[int, int]) -> tuple[np.ndarray, tuple[int, int]]:
    """Where points (N x 2, ``x, y`` in pixels of an image of ``size`` = (width, height)) land after the
    ``applied`` ops of ``degrade``, and the new size: the geometry of ``skew`` (albumentations' rotation
    about the image centre, canvas kept), ``rotate90`` and a ``shrink`` downscale; the other ops move
    nothing."""
    pts = np.asarray(points, dtype=np.float64).reshape(-1, 2).copy()
    w, h = size
    for params in applied:
        op = params["op"]
        if op == "skew":
            matrix = cv2.getRotationMatrix2D((w / 2, h / 2), params["degrees"], 1.0)
            pts = pts @ matrix[:, :2].T + matrix[:, 2]
        elif op == "rotate90":
            x, y = pts[:, 0].copy(), pts[:, 1].copy()
            degrees = params["degrees_clockwise"]
            if degrees == 90:
                pts[:, 0], pts[:, 1], (w, h) = h - y, x, (h, w)
            elif degrees == 180:
                pts[:, 0], pts[:, 1] = w - x, h - y
            else:  # 270 clockwise
                pts[:, 0], pts[:, 1], (w, h) = y, w - x, (h, w)
        elif op == "downscale" and params["mode"] == "shrink":
            nw, nh = max(1, round(w * params["factor"])), max(1, round(h * params["factor"]))
            pts[:, 0] *= nw / w
            pts[:, 1] *= nh / h
            w, h = nw, nh
    return pts, (w, h)


def degraded_elements(elements: Sequence[Element], applied: Sequence[dict[str, Any]],
                      size: tuple[int, int]) -> list[Element]:
    """The page's elements on the degraded image: each box's four corners through ``map_points``, their
    bounding box clipped to the new image. An element left with no area (turned off the canvas) is
    dropped, and the reading order renumbered."""
    if not elements:
        return []
    corners = np.array([[(e.x0, e.y0), (e.x1, e.y0), (e.x0, e.y1), (e.x1, e.y1)] for e in elements], np.float64)
    mapped, (w, h) = map_points(corners.reshape(-1, 2), applied, size)
    mapped = mapped.reshape(-1, 4, 2)
    lo = np.clip(mapped.min(axis=1), 0, (w, h))
    hi = np.clip(mapped.max(axis=1), 0, (w, h))
    out: list[Element] = []
    for e, (x0, y0), (x1, y1) in zip(elements, lo, hi):
        if x1 > x0 and y1 > y0:
            out.append(element(e.cls, (x0, y0, x1, y1), len(out), e.text))
    return out


def encode_png(image: Image.Image, compress_level: int = 1) -> bytes:
    """PNG bytes; grey images as 8-bit grey PNG (render's convention)."""
    buf = io.BytesIO()
    image.save(buf, format="PNG", compress_level=compress_level)
    return buf.getvalue()


def decode(data: bytes, max_pixels: int) -> Image.Image:
    """Decode record image bytes (PNG/WebP/JPEG) fully; ``RecordError`` on garbage or oversize."""
    # the project's one guarded opener (pixel cap checked before decoding)
    from schemas.images import open_image

    image = open_image(data, max_pixels)
    try:
        image.load()
    except Exception as exc:  # truncated payloads fail only when pixels are read
        raise RecordError("corrupt_image", f"cannot decode image: {exc}") from exc
    return image


class AugmentStage:
    """Per-record stage: degrade ``cfg.probability`` of the records, chosen by id (see module doc)."""

    name = "augment"

    def __init__(self, cfg: AugmentConfig = AugmentConfig()):
        self.cfg = cfg
        self._config = asdict(cfg)

    def selected(self, record_id: str) -> bool:
        """Whether the record with this id is degraded (the first draw of its RNG)."""
        return bool(record_rng(record_id, self.cfg.seed).random() < self.cfg.probability)

    def __call__(self, record: PageRecord) -> list[PageRecord]:
        rng = record_rng(record.id, self.cfg.seed)
        if not rng.random() < self.cfg.probability:
            return [record]
        image = decode(record.image, self.cfg.max_pixels)
        out, applied = degrade(image, rng, self.cfg)
        if not applied:  # e.g. only a downscale on an image already too small: nothing changed
            return [record]
        data = encode_png(out)
        record.elements = degraded_elements(record.elements, applied, image.size)
        record.image = data
        record.image_sha256 = hashlib.sha256(data).hexdigest()
        record.width, record.height = out.size
        record.quality[self.name] = {"applied": applied}
        record.provenance.append(
            ProvenanceStep(STAGE, VERSION, params_hash({"config": self._config, "applied": applied}))
        )
        return [record]
