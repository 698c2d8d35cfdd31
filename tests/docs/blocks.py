"""The fenced code blocks of the documentation, read one way by every docs test.

A block is preceded by nothing (it is run or validated by the docs tests) or by
`<!-- no-test: REASON -->` (it is not, and REASON says why: it needs a cluster, it is CI itself,
another test runs it). A fence always names its language.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").glob("*.md"))]
"""Every page whose blocks must run, be validated or say why not."""
FENCE = re.compile(
    r"(?:<!-- no-test(?P<colon>:?)(?P<reason>[^>]*?)-->[ \t]*\n(?:[ \t]*\n)*)?"
    r"^```(?P<language>[^\n`]*)\n(?P<body>.*?)^```[ \t]*$",
    re.DOTALL | re.MULTILINE,
)


@dataclass(frozen=True)
class Block:
    page: Path
    line: int
    language: str
    body: str
    skipped: str | None
    """The reason given by `<!-- no-test: REASON -->` ('' for a marker without one), or None."""

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def page_blocks(page: Path) -> list[Block]:
    text = page.read_text()
    found = []
    for match in FENCE.finditer(text):
        reason = match.group("reason")
        reason = None if reason is None else reason.strip()
        line = text.count("\n", 0, match.start("language")) + 1
        found.append(Block(page, line, match.group("language").strip(), match["body"], reason))
    return found


def blocks(page: Path, language: str) -> list[str]:
    """The bodies of `page`'s `language` blocks that are not marked no-test, in order."""
    return [b.body for b in page_blocks(page) if b.language == language and b.skipped is None]
