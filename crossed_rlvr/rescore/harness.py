"""Harness extractors (paper 000 App. E) as a registry, each named by its source and version.

Those that ship in installed packages are called from them, never copied: lm-evaluation-harness's
GSM8K strict-match and flexible-extract filters (its own ``RegexFilter`` with the patterns of its own
``gsm8k.yaml``), verl's GSM8K ``extract_solution`` (strict and flexible), and the MATH benchmark's
last-``\\boxed{}`` reader (``last_boxed_only_string`` / ``remove_boxed``, which verl ships verbatim
from hendrycks/math). The versions paper 000 pinned, which no package ships, are transcribed from the
files at those commits (``rescore/pinned.py``, checked against the upstream files' own outputs): the
MATH reader (hendrycks/math), Open-Reasoner-Zero's boxed reader applied to the whole response,
verl's GSM8K reader as simpleRL-reason shipped it, and simple-evals' multiple-choice and math
patterns; the installed verl's differing copies are registered beside them as ``verl-installed-*``. Each returns the extracted string or None (an abstention);
a returned string, empty or not, is an answer. Multiple choice is scored on the answer's first
character (App. E, "First-character scoring").
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING

from crossed_rlvr.rescore import pinned
from crossed_rlvr.rescore.omega import same

if TYPE_CHECKING:
    from lm_eval.filters.extraction import RegexFilter


@dataclass(frozen=True)
class Harness:
    name: str
    source: str  # where the behaviour comes from, with the version that runs here
    kinds: tuple[str, ...]  # "mc", "free"
    extract: Callable[..., str | None]
    uses_item: bool = False  # called as extract(text, {"benchmark": ..., "key": ...})
    normalize_key: Callable[[str], str] | None = None  # a harness that normalises the key too (Qwen2.5-Math)
    package: str | None = None  # the installed package it calls (None: transcribed or written here)

    def installed(self) -> bool:
        return self.package is None or _version(self.package) != "not installed"

    def read(self, text: str, benchmark: str = "", key: str = "") -> str | None:
        return self.extract(text, {"benchmark": benchmark, "key": key}) if self.uses_item else self.extract(text)


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "not installed"


@cache
def _lm_eval_filters() -> dict[str, Callable[[str], str]]:
    """lm-eval's GSM8K filters, built from the installed package's own task file."""
    import lm_eval
    import yaml
    from lm_eval.filters.extraction import RegexFilter

    task = yaml.safe_load((Path(lm_eval.__file__).parent / "tasks" / "gsm8k" / "gsm8k.yaml").read_text())
    out: dict[str, Callable[[str], str]] = {}
    for spec in task["filter_list"]:
        regex = next(f for f in spec["filter"] if f["function"] == "regex")
        filt = RegexFilter(regex_pattern=regex["regex_pattern"], group_select=regex.get("group_select", 0))
        out[spec["name"]] = _applied(filt)
    return out


def _applied(filt: RegexFilter) -> Callable[[str], str]:
    """One response through an lm-eval filter, as the harness applies it to one document's one response."""
    def extract(text: str) -> str:
        return filt.apply([[text]], [{}])[0][0]

    return extract


def _lm_eval(name: str) -> Callable[[str], str | None]:
    def read(text: str) -> str | None:  # the filters are built on first use, not at import
        return _lm_eval_filters()[name](text)

    return read


def _verl_gsm8k(method: str) -> Callable[[str], str | None]:
    def extract(text: str) -> str | None:
        from verl.utils.reward_score.gsm8k import extract_solution

        return extract_solution(text, method=method)

    return extract


def verl_math_boxed(text: str) -> str | None:
    """The installed verl's copy of the MATH reader (it adds a ``\\boxed `` branch hendrycks/math lacks)."""
    from verl.utils.reward_score.math_reward import last_boxed_only_string, remove_boxed

    box = last_boxed_only_string(text)
    if box is None:
        return None
    try:
        return remove_boxed(box)
    except AssertionError:  # "\fbox{...}" or an unclosed box: the source's own assertion, no answer
        return None


REGISTRY: dict[str, Harness] = {h.name: h for h in (
    Harness("lm-eval-gsm8k-strict", f"lm-evaluation-harness {_version('lm-eval')}: gsm8k.yaml strict-match",
            ("free",), _lm_eval("strict-match"), package="lm-eval"),
    Harness("lm-eval-gsm8k-flexible", f"lm-evaluation-harness {_version('lm-eval')}: gsm8k.yaml flexible-extract",
            ("free",), _lm_eval("flexible-extract"), package="lm-eval"),
    # the copy the paper used (its pairs' training reward) and the installed verl's, under their own names
    Harness("verl-gsm8k-strict", "hkust-nlp/simpleRL-reason 2204dd1 verl/utils/reward_score/gsm8k.py strict "
            "(paper 000; transcribed, rescore/pinned.py)", ("free",), lambda t: pinned.simplerl_gsm8k(t, "strict")),
    Harness("verl-gsm8k-flexible", "hkust-nlp/simpleRL-reason 2204dd1 verl/utils/reward_score/gsm8k.py flexible "
            "(paper 000; transcribed)", ("free",), lambda t: pinned.simplerl_gsm8k(t, "flexible")),
    Harness("verl-installed-gsm8k-strict", f"verl {_version('verl')}: utils/reward_score/gsm8k.py extract_solution "
            "strict (the last '####' in the final 300 characters; not the paper's)", ("free",), _verl_gsm8k("strict"),
            package="verl"),
    Harness("verl-installed-gsm8k-flexible", f"verl {_version('verl')}: utils/reward_score/gsm8k.py extract_solution "
            "flexible (not the paper's)", ("free",), _verl_gsm8k("flexible"), package="verl"),
    Harness("math-boxed", "hendrycks/math 940d1bf last_boxed_only_string + remove_boxed (paper 000; transcribed)",
            ("mc", "free"), pinned.math_boxed),
    Harness("verl-installed-math-boxed", f"verl {_version('verl')}: math_reward.py's copy of the MATH reader (adds a "
            "'\\boxed ' branch; not the paper's)", ("mc", "free"), verl_math_boxed, package="verl"),
    Harness("orz-boxed", "Open-Reasoner-Zero f6d1ec7 orz/ppo/tools/math_utils.py get_answer_str, applied to the "
            "whole response (paper 000; transcribed)", ("mc", "free"), pinned.orz_boxed),
    Harness("simple-evals-mc", "openai/simple-evals 5e623c2 common.py ANSWER_PATTERN_MULTICHOICE (transcribed)",
            ("mc",), pinned.simple_evals_mc),
    Harness("simple-evals-math", "openai/simple-evals 5e623c2 common.py ANSWER_PATTERN (transcribed)",
            ("free",), pinned.simple_evals_math),
)}


def correct(answer: str | None, key: str, kind: str) -> bool:
    """Scoring shared by every extractor and both models: first character for multiple choice, the light
    normalisation for free form."""
    if answer is None:
        return False
    if kind == "mc":
        return answer[:1] == key.strip()[:1]  # literally the first character: "Answer..." reads as A
    return same(answer, key)


# ---------------------------------------------------------------------- Qwen2.5-Math (written here)
QWEN_LETTER_BENCHMARKS = ("mmlu_stem", "sat_math", "aqua", "gaokao2023")
# Our task names as Qwen2.5-Math's data names: paper 000 ran MMLU as its MMLU-STEM and AQuA-RAT as "aqua"
QWEN_DATA_NAME = {"mmlu": "mmlu_stem", "aqua_rat": "aqua"}


def qwen_data_name(benchmark: str) -> str:
    return QWEN_DATA_NAME.get(benchmark, benchmark)
_QWEN_TRIGGERS = ("choice is", "answer is")
_QWEN_LETTER = re.compile(r"\b(A|B|C|D|E)\b")


def qwen_letter_rule(text: str) -> str:
    """Qwen2.5-Math's letter rule: a letter A-E standing alone, the first after the last "answer is" / "choice
    is" (only the first paragraph when either occurs twice, a few-shot echo), else the last in the
    response, read case-insensitively; without a letter, the remaining text itself."""
    t = text.strip("\n")
    if any(t.count(trigger) > 1 for trigger in _QWEN_TRIGGERS):
        t = t.split("\n\n")[0]
    parts = re.split("|".join(_QWEN_TRIGGERS), t)
    after_trigger = len(parts) > 1
    if after_trigger:
        t = parts[-1]
    t = t.strip("\n").rstrip(".").rstrip("/").strip(" ").lstrip(":")
    found = _QWEN_LETTER.findall(t.upper()) or [t.strip().strip(".")]
    pick = found[0] if after_trigger else found[-1]
    return pick.rstrip(".").rstrip("/")


def _qwen_box(text: str) -> str:
    rest = text.split("boxed")[-1]
    if not rest:
        return ""
    if rest[0] != "{":
        return rest.split("$")[0].strip()
    depth, out = 1, []
    for ch in rest[1:]:
        depth += (ch == "{") - (ch == "}")
        if depth == 0:
            break
        out.append(ch)
    return "".join(out)


def qwen_normalize(pred: str) -> str:
    """The part of Qwen2.5-Math's ``strip_string`` applied here: layout and LaTeX spelling (its unit-word list,
    number-word conversion and fraction rewriting are not applied; paper 000 Table 17 lists departures)."""
    s = str(pred).strip().replace("\n", "").rstrip(".").replace("\\!", "")
    for old, new in (("tfrac", "frac"), ("dfrac", "frac"), ("\\left", ""), ("\\right", ""), ("\\{", "{"),
                     ("\\}", "}"), ("^{\\circ}", ""), ("^\\circ", ""), ("\\$", ""), ("$", ""), ("\\(", ""),
                     ("\\)", ""), ("\\%", ""), ("%", "")):
        s = s.replace(old, new)
    s = re.sub(r"\\text\{(.*?)\}", r"\1", s)
    for key in ("x=", "y=", "z=", "x\\in", "y\\in", "z\\in"):
        s = s.replace(key, "")
    s = s.replace(" ", "")
    if re.fullmatch(r"\.\d+", s):  # ".5" -> "0.5"
        s = "0" + s
    return s


def qwen_extract(text: str, benchmark: str = "") -> str:
    """Qwen2.5-Math's extraction function (benchmark-aware), without its evaluation loop's letter step."""
    text = text.replace("\u043a\u0438", "")
    benchmark = qwen_data_name(benchmark)
    if benchmark in QWEN_LETTER_BENCHMARKS:
        return qwen_letter_rule(text)
    if "final answer is $" in text and "$. I hope" in text:
        pred = text.split("final answer is $", 1)[1].split("$. I hope", 1)[0].strip()
    elif "boxed" in text:
        pred = _qwen_box(text)
        if not pred and not text.split("boxed")[-1]:
            return ""
    elif "he answer is" in text:
        pred = text.split("he answer is")[-1].strip()
    elif "final answer is" in text:
        pred = text.split("final answer is")[-1].strip()
    elif "答案是" in text:
        pred = text.split("答案是")[1].strip().split("\n\n")[0].strip()
    else:
        numbers = re.findall(r"-?\d*\.?\d+", text.replace(",", ""))
        pred = numbers[-1] if numbers else ""
    if benchmark in ("sat_math", "aqua") or "mmlu" in benchmark:  # MMLU-Pro: narrowed to A-E
        letters = _QWEN_LETTER.findall(pred.upper())
        pred = letters[-1] if letters else pred.strip().strip(".")
    pred = re.sub(r"\n\s*", "", pred)
    pred = pred.removeprefix(":")
    pred = pred[:-1] if pred.endswith((".", "/")) else pred
    return qwen_normalize(pred)


def qwen_math(text: str, item: dict | None = None) -> str:
    """Qwen2.5-Math as its repository runs it: the extraction function, then the evaluation loop's letter step
    (on an item keyed A-E whose result is not such a letter, the letter rule on the whole response)."""
    item = item or {}
    pred = qwen_extract(text, item.get("benchmark", ""))
    if item.get("key") in tuple("ABCDE") and pred not in tuple("ABCDE"):
        pred = qwen_letter_rule(text)
    return pred


def qwen_key(key: str) -> str:
    """The key as Qwen2.5-Math's ``parse_ground_truth`` leaves it: ``strip_string`` (the same part as for
    answers), so a ``\\dfrac`` or ``^\\circ`` key matches the answer spelled without it."""
    k = key.strip()
    return k if k in tuple("ABCDEFGHIJ") else qwen_normalize(k)


REGISTRY["qwen2.5-math"] = Harness(
    "qwen2.5-math", "QwenLM/Qwen2.5-Math cb098e1 evaluation/parser.py extract_answer + math_eval.py letter step "
    "(written here; strip_string in part, on answers and keys)", ("mc", "free"), qwen_math, uses_item=True,
    normalize_key=qwen_key)
REGISTRY["qwen2.5-math-no-letter-step"] = Harness(
    "qwen2.5-math-no-letter-step", "QwenLM/Qwen2.5-Math cb098e1 evaluation/parser.py extract_answer alone (written "
    "here)", ("mc", "free"), lambda text, item=None: qwen_extract(text, (item or {}).get("benchmark", "")), uses_item=True,
    normalize_key=qwen_key)
