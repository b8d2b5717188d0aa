"""docs/chain.md links each pitfall to the test that shows mideng prevents it: every test it
names (``path::name``, or ``::name`` after a path, or a bare ``test_...`` in a named file)
exists, and every file it links to is there, so a renamed or deleted test breaks this page's
claims here rather than silently."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "chain.md"


def test_every_test_the_chain_page_names_exists() -> None:
    text = PAGE.read_text()
    named: list[tuple[str, str]] = []
    last = ""
    for path, name in re.findall(r"`(tests/[\w/]+\.py)?::(\w+)`", text):
        last = path or last
        named.append((last, name))
    assert len(named) >= 15, named
    for path, name in named:
        source = (ROOT / path).read_text()
        assert re.search(rf"def {name}\b", source), f"{path} has no {name}"
    # A bare test name after the file it is in (the consumer's two rules).
    glue = (ROOT / "tests/messaging/test_operation_consumer.py").read_text()
    for name in re.findall(r"`(test_\w+)`", text):
        assert f"def {name}(" in glue, name


def test_every_file_the_chain_page_links_to_exists() -> None:
    for target in re.findall(r"\]\(([^)#]+)", PAGE.read_text()):
        if "://" not in target:
            assert (PAGE.parent / target).exists(), target
