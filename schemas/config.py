"""One loader for every typed config in pagemill: pipeline, stages, source options, training phases.

A config is a frozen dataclass with defaults in code; each field says what it is for through
``option(default, help=...)``. ``load(Config, mapping, "path")`` builds one from parsed YAML (or a
``--set`` override) and checks it the same way everywhere:

- an unknown key fails with its full path and the known keys listed
  (``clean.stages[1].min_tokns: unknown key; known keys: min_tokens, tokenizer_path``);
- every value is checked against the field's annotation (``int``, ``float``, ``str``, ``bool``,
  ``Literal``, ``Optional``, ``tuple[...]``, ``dict[...]``, nested config dataclasses), YAML lists
  become tuples, and a wrong type names the path, the expected type and the value;
- ``describe(Config)`` lists the fields with their types, defaults and help, for ``--help``.
- ``check_names(what, names, known)`` is a config's ``__post_init__`` check of a list of names (a stage's
  ``tasks`` against ``schemas.page.TASKS``): an unknown one fails naming it and the known ones.
- a ``float`` must be finite: ``.nan`` or ``.inf`` fails by path (``rate > nan`` is never true, so a NaN
  limit would switch its check off).
- ``read_yaml(path)`` / ``parse_yaml(text, where)`` are the one way config YAML is read (files and ``--set``
  values): YAML 1.2 floats (``1e-4`` is a float, not a string), a key given twice in one mapping fails
  (``grpo: key given twice (lines 1 and 5)``), and a syntax error is a ``ConfigError`` naming the file (or the
  ``--set`` item) and the line, not a PyYAML traceback.

Plain dataclasses and this one module rather than pydantic or msgspec: configs stay ordinary
frozen dataclasses that Beam pickles and that stage code already takes, no dependency is added,
and the error names the path and the known keys in one line, which neither library prints for
stdlib dataclasses without wrapping its errors.
"""

from __future__ import annotations

import collections.abc as abc
import dataclasses
import enum
import math
import re
import types
import typing
from pathlib import Path
from typing import Any, Iterable, Literal, Mapping, TypeVar, Union

import yaml

T = TypeVar("T")
HELP = "help"


class ConfigError(ValueError):
    """A config value that cannot be used; the message starts with the value's path."""


class DuplicateKeyError(yaml.YAMLError):
    """A mapping key given twice in a config."""


class ConfigLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` for configs: YAML 1.2 floats (``1e-4``, ``5E3``: PyYAML's YAML 1.1 resolver reads a
    float without a dot as a string) and a key given twice in one mapping is an error (PyYAML keeps the last
    silently, dropping a whole earlier section)."""

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, int] = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *base` keys may be overridden
                    continue
                key = self.construct_object(key_node, deep=True)
                line = key_node.start_mark.line + 1
                try:
                    if key in seen:
                        raise DuplicateKeyError(f"{key}: key given twice (lines {seen[key]} and {line})")
                    seen[key] = line
                except TypeError:  # an unhashable key: the base constructor reports it
                    continue
        return super().construct_mapping(node, deep=deep)


_FLOAT_TAG = "tag:yaml.org,2002:float"
# YAML 1.1's float forms (a dot, sexagesimal, .inf/.nan) plus YAML 1.2's: no dot needed before an exponent,
# and the exponent's sign is optional (1e-4, 1E4, 1.0e4).
_FLOAT_RE = re.compile(r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
    |[-+]?[0-9][0-9_]*[eE][-+]?[0-9]+
    |[-+]?\.[0-9][0-9_]*(?:[eE][-+]?[0-9]+)?
    |[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+\.[0-9_]*
    |[-+]?\.(?:inf|Inf|INF)
    |\.(?:nan|NaN|NAN))$""", re.X)
ConfigLoader.yaml_implicit_resolvers = {  # a copy: yaml.SafeLoader itself is left as it is
    first: [(tag, regexp) for tag, regexp in resolvers if tag != _FLOAT_TAG]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()}
ConfigLoader.add_implicit_resolver(_FLOAT_TAG, _FLOAT_RE, list("-+0123456789."))


def parse_yaml(text: str, where: str) -> Any:
    """``text`` parsed with ``ConfigLoader``; a syntax error or a duplicate key is a one-line ``ConfigError``
    starting with ``where`` (a file name, ``--set 'k=[1,'``) and the line."""
    try:
        return yaml.load(text, Loader=ConfigLoader)  # noqa: S506 - a SafeLoader subclass
    except DuplicateKeyError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{where}: {_yaml_problem(exc)}") from None


def read_yaml(path: str | Path) -> Any:
    """The YAML file ``path`` parsed by ``parse_yaml`` (None when it is empty); errors name the file."""
    return parse_yaml(Path(path).read_text(encoding="utf-8"), str(path))


def _yaml_problem(exc: yaml.YAMLError) -> str:
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    context = getattr(exc, "context", None)
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
    return f"{where}{problem}{f' ({context})' if context else ''}".replace("\t", "\\t")


def option(default: Any = dataclasses.MISSING, *, help: str, default_factory: Any = dataclasses.MISSING,
           **kwargs) -> Any:
    """A dataclass field with its help text next to it (shown by ``describe`` and ``--help``)."""
    if isinstance(default, (list, dict, set)):
        value = default
        default_factory, default = (lambda: type(value)(value)), dataclasses.MISSING
    return dataclasses.field(default=default, default_factory=default_factory,
                             metadata={HELP: help}, **kwargs)


def is_config(cls: Any) -> bool:
    return isinstance(cls, type) and dataclasses.is_dataclass(cls)


def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def load(cls: type[T], values: Mapping[str, Any] | None, path: str = "config") -> T:
    """Build ``cls`` from ``values``: unknown keys, missing required keys and wrong types fail by path."""
    if values is None:
        values = {}
    if isinstance(values, cls):
        return values
    if not isinstance(values, Mapping):
        raise ConfigError(f"{path}: expected a mapping of {cls.__name__} keys, got {_show(values)}")
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    for key in values:
        if key not in fields:
            raise ConfigError(f"{_join(path, key)}: unknown key; known keys: {', '.join(sorted(fields))}")
    hints = _hints(cls)
    kwargs = {}
    for name, f in fields.items():
        if name in values:
            kwargs[name] = convert(values[name], hints[name], _join(path, name))
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise ConfigError(f"{_join(path, name)}: required key is missing ({field_help(f)})")
    try:
        return cls(**kwargs)
    except ConfigError:
        raise
    except (TypeError, ValueError) as exc:  # a config's own __post_init__ check
        raise ConfigError(f"{path}: {exc}") from exc


def check_names(what: str, names: Iterable[Any], known: Iterable[str]) -> None:
    """ValueError naming each of ``names`` not in ``known``, and the known ones: a config's ``__post_init__`` check
    of a list of names (task names against ``schemas.page.TASKS``, element classes), so a misspelt one fails at
    start-up instead of matching nothing (``load`` prefixes the config's path)."""
    known = tuple(known)
    unknown = [n for n in dict.fromkeys(names) if n not in known]
    if unknown:
        raise ValueError(f"unknown {what} {unknown}; known: {', '.join(known)}")


def convert(value: Any, tp: Any, path: str) -> Any:
    """``value`` checked against (and, for lists and nested configs, converted to) the type ``tp``."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is Any or tp is object:
        return value
    if origin in (Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in (a for a in args if a is not type(None)):
            try:
                return convert(value, arg, path)
            except ConfigError as exc:
                errors.append(str(exc))
        raise ConfigError(errors[0] if len(errors) == 1 else f"{path}: expected {_name(tp)}, got {_show(value)}")
    if origin is Literal:
        if value in args:
            return value
        raise ConfigError(f"{path}: expected one of {', '.join(map(repr, args))}, got {_show(value)}")
    if is_config(tp):
        return load(tp, value, path)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        try:
            return tp(value)
        except ValueError:
            choices = ", ".join(repr(m.value) for m in tp)
            raise ConfigError(f"{path}: expected one of {choices}, got {_show(value)}") from None
    if origin in (tuple, list, abc.Sequence, abc.Iterable) or tp in (tuple, list):
        if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
            raise ConfigError(f"{path}: expected a list, got {_show(value)}")
        if origin is tuple and args and args[-1] is not Ellipsis:
            if len(args) != len(value):
                raise ConfigError(f"{path}: expected a list of {len(args)} items, got {len(value)}")
            items = [convert(v, a, f"{path}[{i}]") for i, (v, a) in enumerate(zip(value, args))]
        else:
            item = args[0] if args else Any
            items = [convert(v, item, f"{path}[{i}]") for i, v in enumerate(value)]
        return list(items) if origin is list or tp is list else tuple(items)
    if origin in (dict, abc.Mapping, abc.MutableMapping) or tp in (dict, Mapping):
        if not isinstance(value, Mapping):
            raise ConfigError(f"{path}: expected a mapping, got {_show(value)}")
        key_type, value_type = args if args else (Any, Any)
        return {convert(k, key_type, f"{path}.<key>"): convert(v, value_type, _join(path, k))
                for k, v in value.items()}
    if tp is bool:
        if isinstance(value, bool):
            return value
    elif tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            try:
                number = float(value)
            except OverflowError:  # an int past the largest float
                number = math.inf
            if not math.isfinite(number):  # a NaN limit compares False both ways: it would switch its check off
                raise ConfigError(f"{path}: expected a finite float, got {_show(value)}")
            return number
    elif tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif tp is str:
        if isinstance(value, str):
            return value
    elif tp is Path:
        if isinstance(value, (str, Path)):
            return Path(value)
    elif isinstance(tp, type):
        if isinstance(value, tp):
            return value
    else:
        return value  # an annotation this loader does not interpret (a TypeVar, a Protocol)
    raise ConfigError(f"{path}: expected {_name(tp)}, got {_show(value)}")


def parse_sets(sets: Iterable[str]) -> dict[str, Any]:
    """``["a.b=3", "c=[x, y]"]`` -> ``{"a": {"b": 3}, "c": ["x", "y"]}``; values are read as YAML (``parse_yaml``:
    ``1e-4`` is a float, a syntax error names the item)."""
    out: dict[str, Any] = {}
    for item in sets:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"--set {item!r}: expected key=value")
        node = out
        parts = key.split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"--set {item!r}: {part} is set to a value and used as a section")
        node[parts[-1]] = parse_yaml(raw, f"--set {item!r}") if raw.strip() else ""
    return out


def merge(base: Mapping[str, Any], patch: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` with ``patch`` applied recursively (mappings merge, anything else replaces)."""
    out = dict(base)
    for key, value in patch.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out


def field_help(f: dataclasses.Field) -> str:
    return f.metadata.get(HELP, "")


def bounded_arg(kind: type, low: float | None = None, high: float | None = None, what: str = "a number"):
    """An argparse ``type``: ``kind(text)`` in ``[low, high]`` (None: unbounded), else a usage error,
    ``'x' is not <what>`` / ``-1 is not <what>``, where ``what`` says the range (``"a port, 0-65535"``)."""
    import argparse

    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None
        if (low is not None and value < low) or (high is not None and value > high) or value != value:
            raise argparse.ArgumentTypeError(f"{text} is not {what}")
        return value

    parse.__name__ = what  # argparse names the type in its own messages
    return parse


def describe(cls: type, prefix: str = "") -> list[str]:
    """One line per field (nested configs expanded): ``key (type, default value): help``."""
    lines = []
    hints = _hints(cls)
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        key = f"{prefix}{f.name}"
        tp = hints[f.name]
        if is_config(tp):
            lines.append(f"{key}: {field_help(f) or tp.__name__}")
            lines.extend(describe(tp, key + "."))
            continue
        lines.append(f"{key} ({_name(tp)}, default {_default(f)}): {field_help(f)}".rstrip(": "))
    return lines


def to_dict(config: Any) -> dict[str, Any]:
    """A config as plain YAML-ready values (tuples as lists), the inverse of ``load``."""
    def plain(v):
        if isinstance(v, (list, tuple)):
            return [plain(x) for x in v]
        if isinstance(v, dict):
            return {k: plain(x) for k, x in v.items()}
        if isinstance(v, enum.Enum):
            return v.value
        if isinstance(v, Path):
            return str(v)
        return v
    return plain(dataclasses.asdict(config))


def _default(f: dataclasses.Field) -> str:
    if f.default is not dataclasses.MISSING:
        return repr(f.default)
    if f.default_factory is not dataclasses.MISSING:
        value = f.default_factory()
        return repr(to_dict(value) if is_config(type(value)) else value)
    return "required"


def _join(path: str, key: Any) -> str:
    return f"{path}.{key}" if path else str(key)


def _name(tp: Any) -> str:
    if isinstance(tp, type) and typing.get_origin(tp) is None:
        return tp.__name__
    return str(tp).replace("typing.", "")


def _show(value: Any) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text[:80]}{'...' if len(text) > 80 else ''}"
