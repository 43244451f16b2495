"""Saving and loading failure-mode classifiers without executing code from the file: skops with a fixed trust list.

``load_model`` passes ``TRUSTED_TYPES`` (written here, never read from the file) to ``skops.io.load``;
a file naming any other type that skops does not trust by default (``builtins.eval``, ``os.system``, a
class of some other package) raises ``UntrustedModelError`` before anything in it is constructed.
Linear heads and fitted embedders are plain ``np.savez`` arrays read with ``allow_pickle=False``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

# Types the calibrated linear and gradient-boosted classifiers of classifiers.train are made of,
# beyond what skops trusts by default (scikit-learn estimators, numpy arrays, builtins containers).
TRUSTED_TYPES: tuple[str, ...] = (
    "sklearn.calibration._CalibratedClassifier",
    "sklearn.calibration._SigmoidCalibration",
    "sklearn.ensemble._hist_gradient_boosting.predictor.TreePredictor",
)


class UntrustedModelError(ValueError):
    """A saved classifier names types outside the loader's trust list."""


def save_model(model: Any, path: str | Path) -> Path:
    import skops.io as sio

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    sio.dump(model, path)
    return path


def load_model(path: str | Path) -> Any:
    """The classifier saved at ``path``; refuses a file naming any type outside ``TRUSTED_TYPES``."""
    import skops.io as sio

    untrusted = [t for t in sio.get_untrusted_types(file=path) if t not in TRUSTED_TYPES]
    if untrusted:
        raise UntrustedModelError(f"{path}: refusing to load: untrusted types {untrusted}")
    try:
        return sio.load(path, trusted=list(TRUSTED_TYPES))
    except sio.exceptions.UntrustedTypesFoundException as exc:
        raise UntrustedModelError(f"{path}: refusing to load: {exc}") from exc
