"""Every relative link of the README, CONTRIBUTING.md and every page under docs/ resolves: a guide moved or renamed
fails here, not in a reader's browser. Markdown links and images are resolved from the page that holds them, and
so are the guides a page names in a code span (`gpu.md`, `docs/gpu.md`), which a reader follows by hand."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").rglob("*.md"))]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
NAMED_PAGE = re.compile(r"`((?:\.\./|docs/)?[A-Za-z0-9_\-/]+\.md)`")
RUN_OUTPUTS = ("report.md",)  # markdown a run writes (runs/study/analysis/report.md), not a page of ours


def targets(page: Path) -> list[tuple[str, str]]:
    """(kind, target) of every relative link ("link") and every page named in a code span ("named")."""
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)  # commands, not links
    links = [("link", t) for t in LINK.findall(text) if not re.match(r"^[a-z]+:", t) and not t.startswith("#")]
    return links + [("named", t) for t in NAMED_PAGE.findall(text) if not t.endswith(RUN_OUTPUTS)]


def resolves(page: Path, kind: str, target: str) -> bool:
    """A link resolves from its page (as a browser follows it); a page named in a code span may be named from the
    page's folder or from the repository root."""
    path = target.split("#", 1)[0]
    return (page.parent / path).exists() or (kind == "named" and (ROOT / path).exists())


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page):
    broken = [t for kind, t in targets(page) if not resolves(page, kind, t)]
    assert not broken, f"{page.relative_to(ROOT)}: {broken}"


def test_the_link_reader_sees_links_images_and_named_pages(tmp_path):
    page = tmp_path / "p.md"
    page.write_text("[a](gone.md) ![b](img/x.png) `missing.md` [c](https://x.org) [d](#top)\n```\n[e](f.md)\n```\n")
    assert targets(page) == [("link", "gone.md"), ("link", "img/x.png"), ("named", "missing.md")]
    assert not any(resolves(page, kind, t) for kind, t in targets(page))
    (tmp_path / "img").mkdir()
    (tmp_path / "img" / "x.png").write_bytes(b"")
    assert resolves(page, "link", "img/x.png") and not resolves(page, "link", "docs/gpu.md")
    assert resolves(page, "named", "docs/gpu.md")  # named from the repository root
