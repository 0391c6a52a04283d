"""scripts/code_metrics.py counts each figure on a small package whose counts are written by hand: the figures a
design change is judged by must count what they say (a parameter typed ``Any``, a ``DictConfig`` below the study,
a name parsed back, a file named outside the layout, a long function) and nothing else."""

from __future__ import annotations

from tests.helpers import code_metrics as code_metrics_module

FILES = {
    "layout.py": 'REPORT = "report.md"\n',  # the layout's own spelling: not counted
    "names.py": 'import re\n_N = re.compile(r"(?P<arm>[^/]+)/s(?P<seed>\\d+)")\n\n\n'
                "def policy_facts(name):\n    return {}\n",
    "train/run.py": (
        "import re\n"
        "from typing import Any\n\n"
        "from omegaconf import DictConfig, OmegaConf\n"
        "from pkg.names import policy_facts\n\n\n"
        "def run(cfg: Any, task_cfg: Any | None, n: int, *args: Any, **kwargs: Any) -> None:\n"
        '    """Writes "notes.md" (a docstring: not a file literal)."""\n'
        "    plain = OmegaConf.to_container(cfg)\n"
        '    return policy_facts("grpo-hash/s83"), OmegaConf.create({}), plain\n\n\n'
        "def check(cfg: DictConfig, loose) -> str:\n"
        '    return f"shard-{cfg}.parquet", "metrics.jsonl", ".json", "wrote report.md", "config.json"\n\n\n'
        "class Arm:\n"
        "    def go(self, x: Any):\n"
        '        return re.fullmatch(r"grpo-(\\w+)/s(\\d+)", x)\n\n'
        "    @staticmethod\n"
        "    def make(y):\n"
        "        return y\n\n\n"
        "def long():\n" + "    x = 1\n" * 60
    ),
    "study/plan.py": (
        "from omegaconf import OmegaConf\n\n\n"
        "def plain(node):\n    return OmegaConf.to_container(node)\n\n\n"
        "def typed(d):\n    return plain(d)\n"
    ),
}


def test_each_figure_counts_what_it_names(tmp_path):
    pkg = tmp_path / "pkg"
    for rel, text in FILES.items():
        (pkg / rel).parent.mkdir(parents=True, exist_ok=True)
        (pkg / rel).write_text(text)
    code_metrics = code_metrics_module()
    m = code_metrics.measure(pkg)
    s = code_metrics.summary(m)
    # cfg, task_cfg (Any | None) and x; *args/**kwargs apart; self not counted, make's y and check's loose
    # unannotated, as are plan.py's node and d and names.py's name
    assert s["any_params"] == 3 and s["any_params_by_subpackage"] == {"train": 3} and s["any_variadic"] == 2
    assert s["any_params_by_name"] == {"cfg": 1, "task_cfg": 1, "x": 1}
    assert s["unannotated_params"] == 5 and s["unannotated_by_subpackage"] == {"train": 2, "study": 2, "(top)": 1}
    # below the study: DictConfig named once, one to_container, one create; the study's plain() and to_container
    assert s["config_below_study"] == {"DictConfig": 1, "OmegaConf.to_container()": 1,
                                       "OmegaConf.create/merge/structured()": 1}
    assert s["config_in_study_and_conf"] == {"OmegaConf.to_container()": 1, "plain()": 1}
    # policy_facts called in train/run.py (its definition in names.py is no call site); a name regex outside
    # names.py, the one inside not
    assert s["name_parser_calls"] == 1 and s["name_parser_calls_by_function"] == {"policy_facts": 1}
    assert s["name_regexes"] == 1
    # the f-string, metrics.jsonl and config.json (another tool's); not ".json", the sentence, the docstring or
    # layout.py's own
    assert sorted(x.split()[-1] for x in m.items["file_literals"]) == ["'config.json'", "'metrics.jsonl'",
                                                                       "'shard-{}.parquet'"]
    assert s["file_literals_outside_layout"] == 3 and s["of_them_other_tools_names"] == 1
    line = FILES["train/run.py"].splitlines().index("def long():") + 1
    assert s["functions_over_60_lines"] == 1 and m.items["long"] == [f"pkg/train/run.py:{line} long (61 lines)"]
    assert s["files"] == 4 and s["lines"] == sum(len(t.splitlines()) for t in FILES.values())


def test_the_script_prints_its_report_on_the_package(capsys):
    code_metrics_module().main([])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("package crossed_rlvr: ") and len(lines) == 7
    assert any(line.startswith("functions over 60 lines: ") for line in lines)
