"""A figure that changes with each measurement (how long a run, the suite or a benchmark took; how many tests there
are; a study's estimates and intervals) is written in docs/results-on-cpu.md only, and the other pages say in words
what was measured and link there: a copy elsewhere is not updated with the next measurement and drifts from it.
A hardware fact is stated one way everywhere: a GPU's memory as torch reads it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HOME = ROOT / "docs" / "results-on-cpu.md"
PAGES = [p for p in [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").rglob("*.md")),
                     ROOT / "examples" / "README.md"] if p != HOME]
MEASURED = {
    "a run's time": re.compile(r"\b\d+m\d{2}(?:\.\d+)?s\b"),  # 4m41s, 6m46.1s
    "a study's interval": re.compile(r"\bpp \[|\bpp \(95%"),  # +168.0 pp [+161.8, +174.0]
    "a study's estimate": re.compile(r"\bI_(?:P|S|MV)\b,? (?:=|of|is)? ?[+−-]\d"),  # I_P +183.5, I_MV = −1.5
    "a test count": re.compile(r"\b\d[\d,]* tests\b"),  # 1,324 tests
}
# (page, the text matched): why it stays there
ALLOWED: dict[tuple[str, str], str] = {}
# what torch reads as one card's memory (torch.cuda.get_device_properties(i).total_memory, GiB)
CARD_GIB = {"H100": "79.2", "H200": "139.8"}
CARD = r"(?P<card>H100|H200)(?: 80 GB)?"
GIB = r"(?P<gib>\d{2,3}\.\d)"
CARD_MEMORY = [re.compile(p) for p in (rf"{CARD} as {GIB} GiB", rf"{CARD} \({GIB} GiB as torch reads it",
                                        rf"{CARD}, {GIB} GiB each", rf"{GIB}(?: GiB)? for an? {CARD}")]


def flat(path: Path) -> str:
    return " ".join(path.read_text(encoding="utf-8").split())


def measured_figures(text: str) -> list[tuple[str, str]]:
    return [(kind, m[0]) for kind, pattern in MEASURED.items() for m in pattern.finditer(text)]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_measured_figures_live_in_results_on_cpu_only(page):
    name = str(page.relative_to(ROOT))
    found = [(kind, text) for kind, text in measured_figures(flat(page)) if (name, text) not in ALLOWED]
    assert found == [], f"{name}: write these in docs/results-on-cpu.md and link there: {found}"


def test_the_patterns_find_what_results_on_cpu_holds():
    """The negative control: the page that holds the figures has every kind of them, and a sentence of each is
    caught (a pattern that matched nothing would pass every page above)."""
    kinds = {kind for kind, _ in measured_figures(flat(HOME))}
    assert kinds == set(MEASURED)
    sample = "took 4m41s; I_P = +168.0 pp [+161.8, +174.0], I_MV −1.5; 1,324 tests passed"
    assert {kind for kind, _ in measured_figures(sample)} == set(MEASURED)
    assert ALLOWED.keys() <= {(str(p.relative_to(ROOT)), t) for p in PAGES for _, t in measured_figures(flat(p))}


def test_a_cards_memory_is_one_value_everywhere():
    """Every page that states an H100's or an H200's memory states what torch reads, and every declared
    ``engine.gpu_memory_gib`` of a node is one of those cards' (or the default)."""
    seen: dict[str, set[str]] = {}
    for page in [*PAGES, HOME]:
        text = flat(page)
        for m in (m for pattern in CARD_MEMORY for m in pattern.finditer(text)):
            seen.setdefault(m["card"], set()).add(m["gib"])
        declared = set(re.findall(r"engine\.gpu_memory_gib=(\d+(?:\.\d+)?)", text))
        assert declared <= {*CARD_GIB.values(), "79.6"}, (page.name, declared)
    assert {card: sorted(v) for card, v in seen.items()} == {card: [gib] for card, gib in CARD_GIB.items()}
