"""The results document's one schema (pydantic; docs/run.md, "Results file"): versions 1
and 2 read into the flat rows every reader uses, any defect one ``ResultsError`` line
naming the file, the row and the field."""

from __future__ import annotations

import os
from collections.abc import Collection
from dataclasses import MISSING, fields
from typing import Annotated, Any, Literal, Union, get_type_hints

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, ValidationError, create_model

from perfsuite.results.kinds import (
    DTYPES,
    KIND_ONLY,
    KINDS,
    METRICS,
    PHASES,
    READS,
    STATUSES,
    STEP_PHASES,
    TIMERS,
    TRAIN_PHASES,
    ResultsError,
    Row,
    cell_key,
    describe_cell,
    flat_row,
    to_disk_row,
)

# Measured quantities: times and sizes by their names' units, counts, a run's wall time.
MEASURED_FIELDS = {f.name for f in fields(Row) if f.name.endswith(("_ms", "_bytes"))}
MEASURED_FIELDS |= {"collectives", "wall_s"}
# A measured quantity: a NaN, an infinity or a negative is a corrupt file, never a number
# to compare or bold as best (json.loads accepts NaN and Infinity).
Measured = Annotated[float, Field(ge=0, allow_inf_nan=False)]
Count = Annotated[int, Field(ge=0)]
Size = Annotated[int, Field(ge=1)]


class _Strict(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")


# The schema's constraints on ``Row``'s fields; every other field keeps ``Row``'s type.
_CONSTRAINED: dict[str, Any] = {
    "method": Annotated[str, Field(min_length=1)],
    "tokens": Size,
    "vocab": Size,
    "hidden": Size,
    "dtype": Literal[DTYPES],
    "beta": Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)],
    "status": Literal[STATUSES],
    "softcap": Annotated[float, Field(gt=0, allow_inf_nan=False)] | None,
    "timer": Literal[TIMERS],
}
_STEP_WORKLOAD = Annotated[str, Field(pattern=r"^step\(")]
_TRAIN_STATUS = Literal[(*STATUSES, "diverged")]
_AS_MEASURED = {float | None: Measured | None, int | None: Count | None,
                list[float]: list[Measured]}  # fmt: skip
_ROW_TYPES = get_type_hints(Row)


def _model(name: str, names: Collection[str]) -> type[_Strict]:
    """A strict model of these ``Row`` fields, in ``Row``'s order, with its defaults."""
    specs: dict[str, Any] = {}
    for f in fields(Row):
        if f.name in names:
            hint = _CONSTRAINED.get(f.name) or _ROW_TYPES[f.name]
            hint = _AS_MEASURED[hint] if f.name in MEASURED_FIELDS else hint
            default = f.default_factory() if f.default_factory is not MISSING else f.default
            specs[f.name] = (hint, ... if default is MISSING else default)
    return create_model(name, __base__=_Strict, **specs)


# What every kind of cell records (``Row``'s fields, less the kind's own); errors against
# the reference may be inf or NaN (a wrong method says so).
_Cell = _model("_Cell", {f.name for f in fields(Row)} - {*KIND_ONLY, "kind", "phase"})
_NoMetrics, TpMetrics, StepMetrics = (_model(k, METRICS[k]) for k in ("loss", "tp", "step"))


class TrainMetrics(_Strict):
    """Per-step records, the held-out evaluation, the parity with eager, the run's wall time."""

    steps: list[dict[str, Any]] = []
    heldout: dict[str, Any] | None = None
    parity: dict[str, Any] | None = None
    wall_s: Measured | None = None


def _row(kind: str, phases: tuple[str, ...], metrics: type[_Strict], **own: Any) -> type[_Strict]:
    """A kind's row: the common cell, its kind and phases, its ``own`` fields, its metrics."""
    return create_model(
        f"{kind.title()}Row",
        __base__=_Cell,
        kind=(Literal[kind], ...),
        phase=(Literal[phases], ...),
        **own,
        metrics=(metrics, metrics()),
    )


_ROWS = {
    "loss": _row("loss", PHASES, _NoMetrics),
    # The loss across ``tp`` ranks, the classifier sharded over V.
    "tp": _row("tp", PHASES, TpMetrics, tp=(Size, ...)),
    "step": _row("step", STEP_PHASES, StepMetrics, workload=(_STEP_WORKLOAD, ...)),
    # A training run whose loss went non-finite is its own outcome, as much a failure.
    "train": _row("train", TRAIN_PHASES, TrainMetrics, status=(_TRAIN_STATUS, ...)),
}
AnyRow = Annotated[
    Union[tuple(Annotated[model, Tag(kind)] for kind, model in _ROWS.items())],  # noqa: UP007
    Discriminator("kind"),
]


class Device(BaseModel):
    model_config = ConfigDict(strict=True, extra="allow")
    kind: str | None = None
    name: str | None = None


class Env(BaseModel):
    """Provenance, once per document; its sections are each command's own, so only the
    ones readers rely on are typed."""

    model_config = ConfigDict(strict=True, extra="allow")
    created: str | None = None
    device: Device | None = None
    git: dict[str, Any] | None = None
    plan: dict[str, Any] | None = None
    partial: bool | None = None


class Document(_Strict):
    schema_version: Literal[READS]  # type: ignore[valid-type]
    env: Env
    rows: list[AnyRow]


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _field(loc: tuple[Any, ...], flat: bool = False) -> str:
    parts = [str(p) for p in loc if not isinstance(p, int)]
    if flat and parts[:1] == ["metrics"]:
        parts = parts[1:]  # the row keeps them at the top: name the field as the file does
    return ".".join(parts) + "".join(f"[{p}]" for p in loc if isinstance(p, int))


def _expected(error: dict[str, Any], field: str) -> str:
    """What the field should have been, for "FIELD is VALUE, not ...", as a user reads it."""
    kind_of, value, ctx = error["type"], error.get("input"), error.get("ctx") or {}
    number = isinstance(value, int | float) and not isinstance(value, bool)
    if field == "tp":
        return "a TP size (an integer >= 1)"
    if field.split("[")[0].rpartition(".")[2] in MEASURED_FIELDS:
        if kind_of in ("int_type", "int_from_float") and number and value >= 0:
            return "an integer"  # bytes and counts (a NaN fails ``value >= 0``)
        if kind_of in _NUMBER_ERRORS:
            return "a finite number >= 0"
    if kind_of in _BOUNDS:
        bound = next(iter(ctx.values()), "?")
        if isinstance(bound, float) and bound.is_integer():
            bound = int(bound)
        return f"{_BOUNDS[kind_of]} {bound}"
    if kind_of == "literal_error":
        return f"one of {ctx.get('expected', '?')}"
    return _PLAIN.get(kind_of) or error["msg"][:1].lower() + error["msg"][1:]


_BOUNDS = {"greater_than_equal": ">=", "greater_than": ">", "less_than_equal": "<=",
           "less_than": "<"}  # fmt: skip
_NUMBER_ERRORS = ("int_type", "int_parsing", "int_from_float", "float_type", "float_parsing",
                  "finite_number", "greater_than_equal")  # fmt: skip
_PLAIN = {
    **dict.fromkeys(("int_type", "int_parsing", "int_from_float"), "an integer"),
    **dict.fromkeys(("float_type", "float_parsing", "finite_number"), "a finite number"),
    **dict.fromkeys(("dict_type", "model_type", "model_attributes_type"), "an object"),
    "string_pattern_mismatch": "a step(...) workload",
    "string_type": "a string",
    "string_too_short": "a name",
    "bool_type": "true or false",
    "list_type": "a list",
}


def _message(error: dict[str, Any], path: str, rows: list[Any], flat: list[bool]) -> str:
    """``PATH: row I: FIELD is VALUE, not WHAT`` (or ``PATH: row I lacks FIELD``)."""
    loc = tuple(error["loc"])
    if loc[:1] != ("rows",) or len(loc) < 2:
        where = _field(loc) or "the document"
        if error["type"] == "missing":
            return f"{path}: lacks {where}"
        return f"{path}: {where} is {_shown(error.get('input'))}, not {_expected(error, where)}"
    index = loc[1]
    row = rows[index] if isinstance(index, int) and index < len(rows) else None
    kind = row.get("kind") if isinstance(row, dict) else None
    rest = loc[3:] if len(loc) > 2 and loc[2] in KINDS else loc[2:]
    if error["type"] == "union_tag_not_found":
        return f"{path}: row {index} lacks kind (every version 2 row says its kind)"
    if error["type"] == "union_tag_invalid":
        return f"{path}: row {index}: kind is {_shown(kind)}, not one of {', '.join(KINDS)}"
    if error["type"] == "model_attributes_type" and not rest:
        return f"{path}: row {index} is {_shown(row)}, not an object"
    field = _field(rest, flat[index])
    if error["type"] == "missing":
        return f"{path}: row {index} lacks {field}"
    if error["type"] == "extra_forbidden":
        return f"{path}: row {index}: {field} is not a field of a {kind} row"
    value = _shown(error.get("input"))
    return f"{path}: row {index}: {field} is {value}, not {_expected(error, field)}"


def v1_kind(row: dict[str, Any]) -> str:
    """A version 1 row's kind, by its fields: a ``step(...)`` workload, a TP size."""
    if str(row.get("workload") or "").startswith("step("):
        return "step"
    return "loss" if row.get("tp") is None else "tp"


def validate(document: Any, path: str | os.PathLike[str], *, empty: bool = False) -> dict[str, Any]:
    """``document`` (parsed JSON) checked against the schema and returned in memory form:
    flat rows, each with its kind. ``ResultsError`` (one line) names what is wrong; a
    document without rows too, unless ``empty`` (a sweep stopped before its first cell)."""
    if not isinstance(document, dict):
        raise ResultsError(f"{path}: expected a JSON object, found {type(document).__name__}")
    version = document.get("schema_version")
    if version not in READS or isinstance(version, bool):
        if "schema_version" not in document and isinstance(document.get("schema"), str):
            raise ResultsError(f"{path}: not a results file (a {document['schema']} document)")
        raise ResultsError(
            f"{path}: schema_version {version!r}, this perfsuite reads "
            f"{' and '.join(map(str, READS))}"
        )
    for key, kind in (("env", dict), ("rows", list)):
        if not isinstance(document.get(key), kind):
            raise ResultsError(f"{path}: missing or malformed {key!r}")
    rows = document["rows"]
    v1 = version == 1
    if v1:  # version 1 rows never said their kind: their fields do
        rows = [{**r, "kind": v1_kind(r)} if isinstance(r, dict) else r for r in rows]
    # Flat rows (version 1; a version 2 document dumped as it is in memory: its kind, but
    # no metrics) are laid out as version 2 writes them, so one set of models checks all.
    was_flat = [isinstance(r, dict) and (v1 or "kind" in r and "metrics" not in r) for r in rows]
    checked = [to_disk_row(r) if f else r for r, f in zip(rows, was_flat, strict=True)]
    try:
        Document.model_validate({**document, "rows": checked})
    except ValidationError as err:
        raise ResultsError(_message(err.errors()[0], str(path), checked, was_flat)) from None
    if not rows and not empty:  # a well-formed file, of nothing
        raise ResultsError(f"{path}: holds no rows (no cell was written to it)")
    flat = [flat_row(r) for r in rows]
    seen: dict[tuple, int] = {}
    for i, row in enumerate(flat):
        j = seen.setdefault(cell_key(row), i)
        if j != i:
            raise ResultsError(f"{path}: row {i}: the same cell as row {j} ({describe_cell(row)})")
    return {**document, "rows": flat}
