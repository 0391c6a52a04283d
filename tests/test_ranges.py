"""Every numeric setting has a declared range, and every value outside it is refused in one line.

The fields are enumerated from the schemas (and the argparse commands' numeric flags from their parsers), so a
new field or flag without a range fails here. Each one is tried with NaN, infinity, 0, -1 and a huge value, on
the command line (before Hydra composes) and in a composed config; 0 may pass only where the field's range
says what 0 means (docs/settings.md lists them).
"""

from __future__ import annotations

import dataclasses
import math
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_module

from crossed_rlvr.conf.checks import ConfigError
from crossed_rlvr.conf.ranges import check_overrides, check_ranges, check_relations, numeric_fields
from crossed_rlvr.conf.schema import SCHEMAS

BIN = Path(sys.executable).parent
ROOT = Path(__file__).resolve().parents[1]
BAD = {"nan": math.nan, "inf": math.inf, "0": 0, "-1": -1, "huge": None}
FIELDS = [(command, f) for command in SCHEMAS for f in numeric_fields(command)]


def huge(f) -> float | int:
    return 10**30 if f.integer else 1e300


def zero_is_meaningful(f) -> bool:
    """0 is admitted only where the range says what it means (or the field is a seed: 0 is a seed like any)."""
    return f.range.admits(0) and (bool(f.range.why) or f.key.rsplit(".", 1)[-1] in ("seed", "seeds", "train_seed",
                                                                                      "dev_seed", "base_seed",
                                                                                      "data_seed", "rng_seed",
                                                                                      "template_subset_seed"))


def test_every_numeric_field_of_every_schema_has_a_range():
    counts = {command: len(numeric_fields(command)) for command in SCHEMAS}
    # the counts move when a field is added: a new field enters the generated tests below with its range
    assert counts == {"crossed_train": 70, "crossed_eval": 36, "crossed_sft": 44, "crossed_study": 101,
                      "crossed_audit": 40}, counts

    from crossed_rlvr.conf import ranges

    @dataclasses.dataclass
    class Unranged:
        steps: int = 3

    with pytest.raises(TypeError, match=r"Unranged\.steps: a numeric field without a declared Range"):
        list(ranges._numeric(Unranged, ""))


@pytest.mark.parametrize("bad", list(BAD))
def test_every_numeric_field_refuses_nan_inf_zero_minus_one_and_huge(bad):
    """Each (field, value) on the checked path a composed config takes, and on the command line."""
    from crossed_rlvr.conf.ranges import refusal

    checked = 0
    for command, f in FIELDS:
        value = huge(f) if bad == "huge" else BAD[bad]
        why = refusal(f, [value] if f.container == "list" else {1: value} if f.container == "dict" else value)
        if why is None:
            assert bad == "0" and zero_is_meaningful(f), f"{command} {f.key}={value} is admitted ({f.range.text()})"
            continue
        checked += 1
        assert "\n" not in why and f.key.replace("[]", "").split(".")[0] in why and f.range.text() in why, why
        if "[]." in f.key:  # a field of each policy: not a command-line key
            continue
        text = {"nan": "nan", "inf": "inf", "0": "0", "-1": "-1", "huge": repr(huge(f))}[bad]
        arg = f"{f.key}=[{text}]" if f.container == "list" else f"{f.key}={{1: {text}}}" if f.container == "dict" \
            else f"{f.key}={text}"
        with pytest.raises(ConfigError) as info:
            check_overrides([arg], command)
        assert str(info.value).startswith(f.key), (arg, str(info.value))
    assert checked > 150


# the settings from a fixed set, each declared beside its field (schema.choice, schema.choices)
CHOICE_KEYS = {"numerics", "tracking.mode", "model.source", "task.source", "task.split", "eval.backend", "eval.dtype",
               "eval.device", "eval.linear", "eval.attention", "sft.attention", "engine.attention", "engine.device",
               "engine.sampler", "engine.name", "algorithm.name", "numerics_before",
               "template", "mode", "arm", "control", "stages", "initial.build", "arms.kind", "arms.sft_arm",
               "arms.sft_control", "validation.requests", "validation.templates"}


@pytest.mark.parametrize("command", ["crossed_train", "crossed_eval", "crossed_sft", "crossed_study", "crossed_audit"])
def test_every_choice_field_refuses_a_value_outside_its_declared_set(command):
    """A composed config with one setting changed to a value outside its field's choices is refused, in one line
    naming the key and the choices; a list setting refuses an unknown entry and the empty list. The registries'
    choices are read when checked (a convention or task source registered later is admitted)."""
    from omegaconf import OmegaConf

    from crossed_rlvr.conf.ranges import choice_fields

    fields = choice_fields(command)
    assert {c.key for c in fields} <= CHOICE_KEYS and len(fields) >= 3
    with initialize_config_module(config_module="crossed_rlvr.conf", version_base="1.3"):
        cfg = compose(config_name=command, overrides=["initial=MODEL"] if command == "crossed_audit" else [])
    check_ranges(cfg, command)
    for c in fields:
        names = [n for n in c.choices.names() if n is not False]
        is_list = OmegaConf.is_list(OmegaConf.select(cfg, c.key))
        for bad, said in ([["nonsense"], f"{c.key}: 'nonsense' unknown; expected among {', '.join(names)}"],
                          [[], f"{c.key}=[] is empty; give at least one of"]) if is_list else \
                [("nonsense", f"{c.key}='nonsense' is unknown; expected one of {', '.join(names)}")]:
            changed = OmegaConf.to_container(cfg)
            OmegaConf.update(node := OmegaConf.create(changed), c.key, bad, force_add=True)
            with pytest.raises(ConfigError) as info:
                check_ranges(node, command)
            assert str(info.value).startswith(said), (c.key, str(info.value))


def settings_script():  # the module scripts/settings_table.py
    """scripts/settings_table.py, the generator of docs/settings.md, as a module."""
    import importlib
    import sys

    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        return importlib.import_module("settings_table")
    finally:
        sys.path.remove(str(ROOT / "scripts"))


def test_zero_admitting_fields_say_what_zero_means_in_docs():
    """docs/settings.md is the generated table of every range; it must be current."""
    settings_table = settings_script().settings_table
    assert (ROOT / "docs" / "settings.md").read_text() == settings_table(), \
        "docs/settings.md is stale: python scripts/settings_table.py > docs/settings.md"


PRESETS = sorted(p.stem for p in (ROOT / "crossed_rlvr" / "conf" / "experiment").glob("*.yaml"))


@pytest.mark.parametrize("preset", PRESETS)
def test_every_preset_is_within_every_range(preset):
    with initialize_config_module(config_module="crossed_rlvr.conf", version_base="1.3"):
        cfg = compose(config_name="crossed_study", overrides=[f"experiment={preset}"])
    check_ranges(cfg, "crossed_study")
    check_relations(cfg, "crossed_study")


@pytest.mark.parametrize("config", ["crossed_train", "crossed_eval", "crossed_sft"])
def test_every_command_default_is_within_every_range(config):
    with initialize_config_module(config_module="crossed_rlvr.conf", version_base="1.3"):
        cfg = compose(config_name=config)
    check_ranges(cfg, config)
    check_relations(cfg, config)


# (command line, exit code, first line of stderr): the real commands, before any work
CLI = [
    (["crossed-study", "recipe.lr=nan"], 2, "crossed-study: recipe.lr=nan: outside its range (0, 1]"),
    (["crossed-study", "recipe.updates=1e9"], 2,
     "crossed-study: recipe.updates=1000000000.0: outside its range [1, 1,000,000]"),
    (["crossed-study", "recipe.max_context_tokens=10"], 2,
     "crossed-study: recipe.max_context_tokens=10 must exceed recipe.max_response_tokens=96"),
    (["crossed-study", "arms.conventions=[hash]"], 2, "crossed-study: arms.conventions=['hash']: no crossed pair"),
    (["crossed-study", "arms.seeds=[83,83]"], 2, "crossed-study: arms.seeds=[83, 83]: seed 83 appears twice"),
    (["crossed-study", "-m", "recipe.lr=1e-6,nan"], 2, "crossed-study: recipe.lr=nan: outside its range (0, 1]"),
    (["crossed-study", "experiment=qwen2.5-7b-gsm8k-crossed", "engine.rollout_tp=3"], 2,
     "crossed-study: engine.rollout_tp=3 must divide engine.n_gpus_per_node=4"),
    (["crossed-study", "experiment=qwen2.5-7b-gsm8k-crossed", "engine.gpu_memory_utilization=1.5"], 2,
     "crossed-study: engine.gpu_memory_utilization=1.5: outside its range (0, 0.99]"),
    (["crossed-train", "recipe.temperature=0"], 2,
     "crossed-train: recipe.temperature=0: outside its range (0, 10] (sampled rollouts: at 0 a group is one response)"),
    (["crossed-eval", "eval.top_p=2"], 2, "crossed-eval: eval.top_p=2: outside its range (0, 1]"),
    (["crossed-sft", "seeds=[-1]"], 2, "crossed-sft: seeds[0]=-1: outside its range [0, 2**32 - 1]"),
    (["crossed-analyze", "x.parquet", "-o", "out", "--resamples", "0"], 2,
     "crossed-analyze: argument --resamples: 0 is outside its range [10, 1,000,000] (an interval needs at least 10 "
     "resamples) (see crossed-analyze --help)"),
    (["crossed-analyze", "x.parquet", "-o", "out", "--rng-seed", "-1"], 2,
     "crossed-analyze: argument --rng-seed: -1 is outside its range [0, 2**64 - 1] (see crossed-analyze --help)"),
    (["crossed-rescore", "--resamples", "nan"], 2,
     "crossed-rescore: argument --resamples: nan: expected a whole number in [10, 1,000,000]"),
    (["crossed-calibrate", "sample", "x", "--cap", "-5"], 2, "crossed-calibrate sample: argument --cap: -5 is outside its range"),
    (["crossed-score", "x", "--workers", "1e30"], 2,
     "crossed-score: argument --workers: 1e30 is outside its range [0, 1,024] (0: score in this process)"),
]


@pytest.mark.parametrize(("argv", "code", "first"), CLI, ids=[" ".join(c[0][:3]) for c in CLI])
def test_commands_refuse_out_of_range_values_in_one_line(tmp_path, argv, code, first):
    out = subprocess.run([str(BIN / argv[0]), *argv[1:], *([f"run_dir={tmp_path}/run"] if argv[0] in (
        "crossed-study", "crossed-train", "crossed-eval", "crossed-sft") else [])],
        capture_output=True, text=True, cwd=tmp_path, check=False, timeout=120)
    lines = [line for line in out.stderr.splitlines() if line.strip() and not line.startswith("─")]
    assert out.returncode == code, out.stderr
    assert lines and lines[0].startswith(first), out.stderr
    assert len(lines) == 1, out.stderr
    # nothing ran: at most Hydra's own record of the composed config, written before any check can run
    run = tmp_path / "run"
    assert not run.exists() or {p.name for p in run.iterdir()} <= {"hydra", f"{argv[0]}.log"}, list(run.iterdir())
    assert not (tmp_path / "out").exists()


def test_every_numeric_flag_of_the_argparse_commands_has_a_range():
    """Build each argparse command's parser (through --help) and try the bad values on each registered flag."""
    from crossed_rlvr.limits import FLAGS

    script = settings_script()
    PARSER_MODULES = script.PARSER_MODULES
    script.build_parsers()
    progs = " | ".join(FLAGS)
    for prog in ("crossed-analyze", "crossed-rescore", "crossed-calibrate sample", "crossed-calibrate annotate",
                 "crossed-score", "crossed-import", "crossed-rlvr panel", "verl_launch", "crossed_rlvr.cluster",
                 "crossed_rlvr.eval.generate.workers", "crossed-rescore code", "crossed-view"):
        assert prog in progs, (prog, progs)
    assert len(PARSER_MODULES) == 11
    for prog, flags in FLAGS.items():
        for flag, (rng, _integer) in flags.items():
            for value in (math.nan, math.inf, -1, 10**30):
                assert not (rng.admits(value) if math.isfinite(value) else False), (prog, flag, value)
            assert not rng.admits(0) or rng.why or "seed" in flag, (prog, flag, "0 is admitted without saying why")


def test_a_range_compares_without_converting_to_float():
    """NaN and infinities fail the comparisons; an integer beyond a float's range is refused, not an
    OverflowError; the same check runs elementwise over a table's column."""
    import numpy as np

    from crossed_rlvr.limits import Range

    r = Range(1, 10)
    assert [r.admits(v) for v in (1, 10, 0, 11, math.nan, math.inf, -math.inf, 10**400)] == [True, True] + [False] * 6
    assert not Range(0, 1, low_open=True).admits(0)
    assert r.admits(np.array([1.0, np.nan, np.inf, 11.0])).tolist() == [True, False, False, False]
    with pytest.raises(ConfigError, match=r"^recipe.updates=1000.*: outside its range \[1, 1,000,000\]"):
        check_overrides([f"recipe.updates={10**400}"], "crossed_study")
