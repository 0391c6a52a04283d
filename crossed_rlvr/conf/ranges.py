"""One check for every numeric setting: each value against the range its schema field declares; and one for every
setting from a fixed set: its value against the choices declared beside its field (``schema.choice``).

Every ``int``/``float`` field of every schema (and each number of a list or dict field) carries a
:class:`~crossed_rlvr.limits.Range` in its metadata; ``numeric_fields`` finds them all, so a new field
without a range fails the suite. A value is checked twice, with the same message:

- on the command line, before Hydra composes (``check_overrides``): ``recipe.updates=nan`` would otherwise
  stop in OmegaConf's type conversion with a three-line message, and ``recipe.lr=nan`` pass it;
- after composition (``check_ranges``), for values that came from a preset or a group file.

Then the relations between fields (``check_relations``): a context longer than the response, a
tensor-parallel size that divides the GPUs, a crossed pair of conventions, no repeated seed.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from collections.abc import Iterator
from functools import cache
from typing import TYPE_CHECKING, Any

from crossed_rlvr.conf.schema import SCHEMAS
from crossed_rlvr.errors import ConfigError
from crossed_rlvr.limits import Choices, Range
from crossed_rlvr.task_sources import SOURCES

if TYPE_CHECKING:
    from omegaconf import DictConfig


@dataclasses.dataclass(frozen=True)
class NumericField:
    key: str                 # dotted key in the command's config
    range: Range
    integer: bool            # whole numbers only
    container: str | None    # None, "list" or "dict" (the range holds for each element / value)
    optional: bool           # null is admitted


def _unwrap_optional(tp: object) -> tuple[Any, bool]:
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return (args[0] if len(args) == 1 else tp), len(args) < len(typing.get_args(tp))
    return tp, False


def _sections(cls: type, prefix: str = "") -> Iterator[tuple[type, str]]:
    """Every section of a schema (the schema itself, each dataclass field, each element of a list of dataclasses:
    ``policies[].``) with its dotted prefix: where fields declare their ranges and choices and sections their
    relations."""
    yield cls, prefix
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        tp, _optional = _unwrap_optional(hints[f.name])
        element = typing.get_args(tp)[0] if typing.get_origin(tp) is list else tp
        if isinstance(element, type) and dataclasses.is_dataclass(element):
            yield from _sections(element, f"{prefix}{f.name}{'[].' if element is not tp else '.'}")


def _numeric(cls: type, prefix: str) -> Iterator[NumericField]:
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        tp, optional = _unwrap_optional(hints[f.name])
        origin = typing.get_origin(tp)
        element, container = tp, None
        if origin is list:
            element, container = typing.get_args(tp)[0], "list"
        elif origin is dict:
            element, container = typing.get_args(tp)[1], "dict"
        if element in (int, float):
            rng = f.metadata.get("range")
            if rng is None:
                raise TypeError(f"{cls.__name__}.{f.name}: a numeric field without a declared Range")
            yield NumericField(f"{prefix}{f.name}", rng, element is int, container, optional)


@dataclasses.dataclass(frozen=True)
class ChoiceField:
    key: str                 # dotted key in the command's config
    choices: Choices         # what its value (each value of a list) may be


@cache
def choice_fields(command: str) -> tuple[ChoiceField, ...]:
    """Every field of a command's schema whose value comes from a declared set, with that set."""
    return tuple(ChoiceField(f"{prefix}{f.name}", f.metadata["choices"]) for cls, prefix in _sections(SCHEMAS[command])
                 for f in dataclasses.fields(cls) if "choices" in f.metadata)


@cache
def numeric_fields(command: str) -> tuple[NumericField, ...]:
    """Every numeric field of a command's schema (``crossed_study``, ...), with its range."""
    return tuple(f for cls, prefix in _sections(SCHEMAS[command]) for f in _numeric(cls, prefix))


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def refusal(f: NumericField, value: Any, shown_key: str | None = None) -> str | None:  # Any: as given
    """One line naming the key, the value and its range when ``value`` is not admitted, else None."""
    key = shown_key or f.key
    if value is None:
        return None if f.optional or f.container else f"{key}=null: expected a number in {f.range.text()}"
    if f.container == "list" and not isinstance(value, list | tuple):
        return f"{key}={value!r}: expected a list of numbers, each in {f.range.text()}"
    if f.container:  # each element of a list, each value of a dict
        one = dataclasses.replace(f, container=None, optional=False)
        pairs = enumerate(value) if f.container == "list" else dict(value).items()
        return next((why for k, v in pairs if (why := refusal(one, v, f"{key}[{k}]"))), None)
    kind = "a whole number" if f.integer else "a number"
    if not _is_number(value) or (f.integer and isinstance(value, float) and not value.is_integer()):
        return f"{key}={value!r}: expected {kind} in {f.range.text()}"
    if not f.range.admits(value if isinstance(value, int) else float(value)):
        shown = value if isinstance(value, int) or math.isfinite(value) else str(value)
        why = f" ({f.range.why})" if f.range.why else ""
        return f"{key}={shown}: outside its range {f.range.text()}{why}"
    return None


def select(cfg: DictConfig, key: str) -> Any:  # Any: the value at key, None where unset or missing
    from omegaconf import OmegaConf

    return OmegaConf.select(cfg, key, throw_on_missing=False)


def check_ranges(cfg: DictConfig, command: str, present_only: bool = False) -> None:
    """Every numeric value of a composed config against its declared range, and every value from a declared set
    against its choices (ConfigError on the first).
    ``present_only``: a config that holds only some of the schema's keys (see ``check_ranges_of``)."""
    from omegaconf import OmegaConf

    for f in numeric_fields(command):
        if "[]." in f.key:  # fields of each element of a list of dataclasses (crossed-eval's policies)
            head, tail = f.key.split("[].", 1)
            for k, element in enumerate(select(cfg, head) or []):
                why = refusal(f, OmegaConf.select(element, tail), f"{head}[{k}].{tail}")
                if why:
                    raise ConfigError(why)
            continue
        value = select(cfg, f.key)
        if value is None and (present_only or ("." in f.key and select(cfg, f.key.rsplit(".", 1)[0]) is None)):
            continue  # a field of an optional group that is null (model.tiny of a hub model), or one not given
        if OmegaConf.is_config(value):
            value = OmegaConf.to_container(value)
        why = refusal(f, value)
        if why:
            raise ConfigError(why)
    for c in choice_fields(command):
        value = select(cfg, c.key)
        why = c.choices.refusal(c.key, OmegaConf.to_container(value) if OmegaConf.is_config(value) else value)
        if why:
            raise ConfigError(why)


def open_schema(command: str) -> Any:
    """``command``'s schema as a config that types the keys it declares and admits others (the study adds hashes
    and frozen files to a command's own settings): every group's struct flag lifted, not only the root's."""
    from omegaconf import DictConfig, OmegaConf

    def lift(node: DictConfig) -> None:
        OmegaConf.set_struct(node, False)
        for key in node:
            child = node._get_node(key)  # the node itself: a missing group has no value to read
            if isinstance(child, DictConfig):
                lift(child)

    schema = OmegaConf.structured(SCHEMAS[command])
    lift(schema)
    return schema


def check_ranges_of(cfg: object, command: str) -> None:
    """``check_ranges`` of a config that holds only some of the schema's keys (a study's projection of one command's
    config, a config built in code or read back from JSON): each number it holds against its declared range."""
    from omegaconf import DictConfig, OmegaConf

    check_ranges(cfg if isinstance(cfg, DictConfig) else OmegaConf.structured(cfg), command, present_only=True)


def check_overrides(argv: list[str], command: str) -> None:
    """The command line's numeric overrides (sweeps included) against their ranges, before Hydra composes."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    fields = {f.key: f for f in numeric_fields(command)}
    args = [a for a in argv if "=" in a and not a.startswith("-")]
    try:
        overrides = OverridesParser.create().parse_overrides(args)
    except Exception:  # noqa: BLE001 - a malformed override: Hydra itself names it
        return
    for o in overrides:
        f = fields.get(o.key_or_group)
        if f is None or o.is_delete():
            continue
        values = list(o.sweep_iterator()) if o.is_sweep_override() else [o.value()]
        for value in values:
            if isinstance(value, str) and f.integer is False and not f.container:
                continue  # an interpolation or a string Hydra will refuse with its own message
            why = refusal(f, value)
            if why:
                raise ConfigError(why)


def check_relations(cfg: DictConfig, command: str) -> None:
    """Settings that are each in range but impossible together: each section's declared relations (a schema's
    ``relations``: ``limits.Relation``), then those across sections."""
    def get(key: str) -> Any:
        return select(cfg, key)

    for cls, prefix in _sections(SCHEMAS[command]):
        for rule in () if "[]" in prefix else getattr(cls, "relations", ()):
            if why := rule.refusal(get, prefix):
                raise ConfigError(why)
    if get("engine.name") == "verl":
        tp, gpus = get("engine.rollout_tp"), get("engine.n_gpus_per_node")
        if tp and gpus and gpus % tp:
            raise ConfigError(f"engine.rollout_tp={tp} must divide engine.n_gpus_per_node={gpus} (each vLLM "
                              "replica spans rollout_tp GPUs of one node)")
    if (get("task.dev_items") == 0 and get("validation.split") == "dev" and get("task.source") in {n for n, s in SOURCES.items() if s.frozen_train_rows}
            and get("arms.kind") in (None, "grpo")):
        raise ConfigError("task.dev_items=0 holds no dev items out, but validation.split=dev validates on them; set "
                          "validation.split=test (paper 001 Table 23) or task.dev_items to a positive count")
    conventions = list(get("arms.conventions") or [])
    if conventions and get("arms.kind") == "grpo":
        from crossed_rlvr.rewards.conventions import ARM_PARTNER, CROSSED_PAIRS

        # a design of arms that have no crossed partner (boxed_math, the answer-only control: gains against the
        # initial policy only, D.3.1) is complete as it is; one that could pair but does not has forgotten an arm
        pairable = [c for c in conventions if c in ARM_PARTNER]
        if pairable and not any(ARM_PARTNER[c] in conventions for c in pairable):
            pairs = [f"{a} + {b}" for a, b in CROSSED_PAIRS]
            raise ConfigError(f"arms.conventions={conventions}: no crossed pair to compare; include both of "
                              f"{' or '.join(pairs)}")
