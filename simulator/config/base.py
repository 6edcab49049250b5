"""The base of every configuration model, the number types they share, and how a
pydantic validation error becomes one :class:`~simulator.errors.ConfigError` line."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, NoReturn

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
    "raise_validation",
]

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


def _model_names() -> set[str]:
    """The class names of every config model (the branch names pydantic puts in a
    union's error locations)."""
    names, todo = set(), [Model]
    while todo:
        cls = todo.pop()
        names.add(cls.__name__)
        todo.extend(cls.__subclasses__())
    return names


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


def raise_validation(source: str | Path, err: ValidationError, prefix: str = "") -> NoReturn:
    """Raise the first problem of ``err`` as a :class:`ConfigError` of ``source``, its key
    path prefixed by ``prefix``."""
    errors = _telling(err.errors(include_url=False))
    first = errors[0]
    # Unions and "after" validators add locations that read badly (the union's branch: a
    # model's class name); drop them.
    drop = {"function-after", "function-before", *_model_names()}
    loc = tuple(p for p in first["loc"] if p not in drop)
    key = _format_loc(loc)
    if prefix:
        key = f"{prefix}.{key}" if key else prefix
    msg = first["msg"].removeprefix("Value error, ")
    if first["type"] == "extra_forbidden":
        msg = "unknown key (misspelt?); it is not one this section accepts"
    elif first["type"] == "missing":
        msg = "required key is missing"
    if loc and "input" in first and first["type"] not in ("missing", "extra_forbidden"):
        shown = repr(first["input"])
        if len(shown) > 60:
            shown = shown[:57] + "..."
        msg = f"{msg} (got {shown})"
    if len(errors) > 1:
        msg += f" [and {len(errors) - 1} more problem(s)]"
    raise ConfigError(source, key, msg) from None
