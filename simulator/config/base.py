"""The base of every configuration model, the number types they share, and how a
pydantic validation error becomes one :class:`~simulator.errors.ConfigError` line."""

from __future__ import annotations

import difflib
import re
import typing
from collections.abc import Iterable
from pathlib import Path
from typing import Annotated, Any, NoReturn

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..errors import ConfigError

__all__ = [
    "FiniteFloat",
    "Model",
    "NonNegFloat",
    "PositiveFloat",
    "Vec2Pos",
    "Vec3",
    "Vec3Pos",
    "did_you_mean",
    "raise_validation",
]

#: The most problems of one file an error lists (the others are counted).
MAX_PROBLEMS = 10

PositiveFloat = Annotated[float, Field(gt=0, allow_inf_nan=False)]
NonNegFloat = Annotated[float, Field(ge=0, allow_inf_nan=False)]
FiniteFloat = Annotated[float, Field(allow_inf_nan=False)]
Vec3 = Annotated[list[FiniteFloat], Field(min_length=3, max_length=3)]
Vec2Pos = Annotated[list[PositiveFloat], Field(min_length=2, max_length=2)]
Vec3Pos = Annotated[list[PositiveFloat], Field(min_length=3, max_length=3)]


class Model(BaseModel):
    """Base of every configuration section: unknown keys are errors, defaults validated."""

    model_config = ConfigDict(extra="forbid", validate_default=True, strict=True)


def _format_loc(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def _models() -> dict[str, type[Model]]:
    """Every config model by class name (the branch names pydantic puts in a union's error
    locations, and the model an error's ``title`` names)."""
    found, todo = {}, [Model]
    while todo:
        cls = todo.pop()
        found[cls.__name__] = cls
        todo.extend(cls.__subclasses__())
    return found


def _is_branch(part: int | str) -> bool:
    """A location part that names a union's branch or a validator, not a key: a model's
    class name, ``function-after[...]``, ``str``, ``list[float]``, ``literal['a']``."""
    return isinstance(part, str) and (
        part in _models()
        or part.startswith(("function-", "constrained-"))
        or part in ("str", "int", "float", "bool", "bytes", "none")
        or "[" in part
    )


def _models_in(annotation: Any) -> list[type[Model]]:
    """The config models a field's annotation holds (inside unions, lists, dicts)."""
    if isinstance(annotation, type) and issubclass(annotation, Model):
        return [annotation]
    return [m for arg in typing.get_args(annotation) for m in _models_in(arg)]


def _keys_at(title: str, loc: tuple[int | str, ...]) -> list[str]:
    """The keys the section holding ``loc``'s last key accepts, found by walking the model
    ``title`` names along ``loc`` (empty when the walk loses its way)."""
    models = _models()
    here = [models[title]] if title in models else []
    for part in loc[:-1]:
        if isinstance(part, int):
            continue
        if part in models:  # a union's branch: that model
            here = [models[part]]
            continue
        if _is_branch(part):
            continue
        inner = [m for cls in here if part in cls.model_fields
                 for m in _models_in(cls.model_fields[part].annotation)]  # fmt: skip
        if inner:
            here = inner
        elif any(part in cls.model_fields for cls in here):
            return []  # a key whose value is no model (a free mapping)
        # else: a mapping's own key (a material's name) or a validator: the same section
    return sorted({key for cls in here for key in cls.model_fields})


def did_you_mean(value: object, names: Iterable[str]) -> str:
    """``"did you mean 'x'?"`` naming the one of ``names`` closest in spelling to ``value``
    (:func:`difflib.get_close_matches`), or ``""`` when none is close."""
    close = difflib.get_close_matches(str(value), list(names), n=1)
    return f"did you mean {close[0]!r}?" if close else ""


def _telling(errors: list) -> list:
    """The errors that say what is wrong: a union that takes a name or a mapping (a
    material: a library name, or one inline) reports each branch, and the branch whose type
    the input is not (a mapping where a name may stand) tells nothing."""
    told = [
        e
        for e in errors
        if not (e["type"].endswith("_type") and isinstance(e.get("input"), dict) and e["loc"])
    ]
    return told or errors


def _problem(error: Any, title: str, prefix: str) -> tuple[str, str]:
    """One pydantic error as a dotted key and what is wrong there."""
    loc = tuple(p for p in error["loc"] if not _is_branch(p))
    key = _format_loc(loc)
    if prefix:
        key = f"{prefix}.{key}" if key else prefix
    kind = error["type"]
    msg = error["msg"].removeprefix("Value error, ")
    if kind == "extra_forbidden":
        keys = _keys_at(title, error["loc"])
        hint = did_you_mean(loc[-1], keys) if loc else ""
        if hint:
            msg = f"unknown key ({hint})"
        elif keys:
            msg = f"unknown key (misspelt?); this section accepts {', '.join(keys)}"
        else:
            msg = "unknown key (misspelt?); it is not one this section accepts"
    elif kind == "missing":
        msg = "required key is missing"
    if loc and "input" in error and kind not in ("missing", "extra_forbidden"):
        shown = repr(error["input"])
        if len(shown) > 60:
            shown = shown[:57] + "..."
        hint = ""
        if kind == "literal_error" and isinstance(error["input"], str):
            allowed = re.findall(r"'([^']*)'", str(error.get("ctx", {}).get("expected", "")))
            hint = did_you_mean(error["input"], allowed)
        msg = f"{msg} (got {shown}{', ' + hint if hint else ''})"
    return key, msg


def raise_validation(source: str | Path, err: ValidationError, prefix: str = "") -> NoReturn:
    """Raise the problems of ``err`` as one :class:`ConfigError` of ``source``, each key
    path prefixed by ``prefix``: the first one's key and message, then every other key's
    (``; also KEY: ...``), up to :data:`MAX_PROBLEMS` (the rest counted). A key a union
    rejects in each of its branches is one problem, told by its first branch."""
    problems: dict[str, str] = {}
    for error in _telling(err.errors(include_url=False)):
        key, msg = _problem(error, err.title, prefix)
        problems.setdefault(key, msg)
    (key, msg), *others = problems.items()
    listed = others[: MAX_PROBLEMS - 1]
    msg += "".join(f"; also {k or 'the file'}: {m}" for k, m in listed)
    if len(others) > len(listed):
        msg += f"; and {len(others) - len(listed)} more"
    raise ConfigError(source, key, msg) from None
