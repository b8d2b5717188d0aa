"""How the modules of src/ reach each other: through public seams, never by reading another
module's private attributes, replacing methods at run time, or naming an operation by a string.

Each rule walks every module's syntax tree. ``STILL_READ`` lists the private reads left to
reshape; a test fails on any new one, and on any listed one that is gone (so the list only
shrinks).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src" / "mideng"

# Underscore names that are public API by their library's own rules: NamedTuple's methods,
# SQLAlchemy Row's mapping view, an Enum member's value slot, and a Django model's ``_meta``
# (its Options: Django's documented Model _meta API, underscored only to keep it apart from
# the model's fields).
PUBLIC_BY_CONVENTION = {
    "_asdict",
    "_fields",
    "_make",
    "_replace",
    "_mapping",
    "_value_",
    "_meta",
}

#: (module, expression) pairs read today that a public seam should replace.
STILL_READ = {
    ("core/event_loop.py", "loop._thread_id"),
    ("messaging/kafka/consume.py", "client._coordinator"),
    ("messaging/kafka/consume.py", "client._fetcher"),
    ("messaging/kafka/consume.py", "client._client"),
    ("messaging/kafka/consume.py", "coordinator._coordination_task"),
    ("messaging/kafka/consume.py", "coordinator._stop_heartbeat_task"),
    ("messaging/kafka/consume.py", "coordinator._stop_commit_offsets_refresh_task"),
    ("messaging/kafka/consume.py", "fetcher._fetch_task"),
    ("messaging/kafka/consume.py", "fetcher._pending_tasks"),
}

# Where a name is turned into an object on purpose: the store and broker registries load
# "module:Class" strings lazily (so a driver is imported only when its URL is opened).
REGISTRIES = {"stores/registry.py", "messaging/brokers.py"}


def _modules() -> Iterator[tuple[str, ast.Module]]:
    for path in sorted(SRC.rglob("*.py")):
        yield str(path.relative_to(SRC)), ast.parse(path.read_text(), str(path))


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def private_reads() -> set[tuple[str, str]]:
    """``x._name`` where ``x`` is not the object's own ``self`` or ``cls``."""
    found = set()
    for module, tree in _modules():
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and _private(node.attr)
                and node.attr not in PUBLIC_BY_CONVENTION
                and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))
            ):
                found.add((module, ast.unparse(node)))
    return found


def _method_like(value: ast.expr) -> bool:
    """A value that makes a method of whatever it is set on: a bound method, a function."""
    if isinstance(value, ast.Lambda):
        return True
    return isinstance(value, ast.Call) and ast.unparse(value.func).split(".")[-1] in (
        "MethodType",
        "partial",
    )


def replaced_methods() -> set[tuple[str, str]]:
    """``Class.name = ...`` (an attribute of a capitalised name assigned), ``setattr`` of a
    method-like value on anything but ``self``, and ``delattr`` (what takes one off)."""
    found = set()
    for module, tree in _modules():
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign):
                for target in node.targets:
                    if (
                        isinstance(target, ast.Attribute)
                        and isinstance(target.value, ast.Name)
                        and target.value.id[:1].isupper()
                    ):
                        found.add((module, ast.unparse(target)))
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                args = node.args
                if node.func.id == "delattr" and args:
                    found.add((module, f"delattr({', '.join(map(ast.unparse, args[:2]))})"))
                elif node.func.id == "setattr" and len(args) == 3 and _method_like(args[2]):
                    found.add((module, f"setattr({', '.join(map(ast.unparse, args[:2]))}, ...)"))
    return found


def by_name() -> set[tuple[str, str]]:
    """``getattr(obj, <not a string literal>)(...)``: a call whose target is chosen by a
    computed name."""
    found = set()
    for module, tree in _modules():
        if module in REGISTRIES:
            continue
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Call)
                and isinstance(node.func.func, ast.Name)
                and node.func.func.id == "getattr"
                and len(node.func.args) >= 2
                and not isinstance(node.func.args[1], ast.Constant)
            ):
                found.add((module, ast.unparse(node.func)))
    return found


def test_no_new_read_of_another_modules_private_attributes() -> None:
    assert private_reads() - STILL_READ == set()


def test_no_method_is_replaced_at_run_time() -> None:
    assert replaced_methods() == set()


def test_no_operation_is_named_by_a_string() -> None:
    assert by_name() == set()


def test_the_list_of_private_reads_left_only_shrinks() -> None:
    assert STILL_READ - private_reads() == set()


def built_in_place() -> set[tuple[str, str]]:
    """Objects made without their class's constructor: ``object.__new__`` / ``tuple.__new__``
    (or any ``X.__new__``) called or kept outside a ``__new__`` of its own, then filled field
    by field."""
    found = set()
    for module, tree in _modules():
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef) and node.name == "__new__":
                continue
            if isinstance(node, ast.Attribute) and node.attr == "__new__":
                found.add((module, ast.unparse(node)))
    return found


def test_no_object_is_built_field_by_field() -> None:
    # A class's own constructor makes every object: built in place, a field left out of one
    # path is found only when it is read.
    assert built_in_place() == set()
