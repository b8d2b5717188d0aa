"""docs/task-queues.md: every Python example parses, and every name it imports from mideng is
there."""

from __future__ import annotations

import ast
import importlib
import re

from tests.helpers.storm import ROOT

PAGE = ROOT / "docs" / "task-queues.md"


def _examples() -> list[str]:
    return re.findall(r"```python\n(.*?)```", PAGE.read_text(), re.S)


def test_every_example_parses_and_imports_what_mideng_has() -> None:
    examples = _examples()
    assert len(examples) == 4  # RQ, arq, Dramatiq, Huey
    for example in examples:
        tree = ast.parse(example)
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("mideng"):
                module = importlib.import_module(node.module or "")
                for alias in node.names:
                    assert hasattr(module, alias.name), (node.module, alias.name)


def test_the_messaging_page_links_here() -> None:
    assert "(task-queues.md)" in (ROOT / "docs" / "messaging.md").read_text()
