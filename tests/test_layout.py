"""The layout's rules as tests: no import circle between files of the package, every sync
operation of a store or a feature with its async twin, and the benchmarks a package of their
own (no import from the tests, no edit of ``sys.path``, no circle, every case listed).

Every ``import`` / ``from … import`` in src counts — at module level, inside functions (lazy)
and under ``TYPE_CHECKING`` — since a lazy or type-only import between two modules still ties
them together: neither can be understood, moved or tested without the other. A name imported
from a package goes through its ``__init__``, so a module inside a package that imports the
package's own re-exports closes a circle too: import the sibling module instead.
"""

from __future__ import annotations

import ast
import inspect
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src"
BENCH = ROOT / "bench"


def _module_of(path: Path, root: Path = SRC) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _files(root: Path = SRC, package: str = "mideng") -> dict[str, Path]:
    return {_module_of(p, root): p for p in (root / package).rglob("*.py")}


def _resolve(name: str, modules: dict[str, Path], attribute: bool) -> str | None:
    """The file a name loads: the module itself, or (``attribute``: ``from m import name``)
    the module holding it. A folder without ``__init__`` (a namespace package) runs no code."""
    if name in modules:
        return name
    if attribute:
        holder = name.rpartition(".")[0]
        if holder in modules:
            return holder
    return None


def _imports(module: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The files of ``module``'s own top-level package that ``module`` imports."""
    top = module.partition(".")[0]
    tree = ast.parse(path.read_text(), str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        names: list[tuple[str, bool]] = []
        if isinstance(node, ast.Import):
            names = [(alias.name, False) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            # ``from pkg import sub`` loads pkg, then the submodule when there is one.
            names = [(f"{base}.{alias.name}", True) for alias in node.names] + [(base, False)]
        for name, attribute in names:
            if name.partition(".")[0] != top:
                continue
            target = _resolve(name, modules, attribute)
            if target is not None and target != module:
                found.add(target)
    return found


def _graph(root: Path = SRC, package: str = "mideng") -> dict[str, set[str]]:
    modules = _files(root, package)
    return {m: _imports(m, p, modules) for m, p in modules.items()}


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_walker_sees_every_kind_of_import(tmp_path: Path) -> None:
    """On a module of its own: module-level, relative, lazy and TYPE_CHECKING imports are all
    edges; a namespace folder is not; a circle through them is found."""
    src = tmp_path / "mideng" / "pkg"
    src.mkdir(parents=True)
    (src / "__init__.py").write_text("")
    (src / "a.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "from mideng.pkg import b\n"
        "from .c import thing\n"
        "if TYPE_CHECKING:\n    from mideng.pkg.d import D\n"
        "def lazy():\n    import mideng.pkg.e\n"
    )
    for name in "bcde":
        (src / f"{name}.py").write_text("from mideng.pkg.a import x\n" if name == "e" else "")
    modules = {
        "mideng.pkg": src / "__init__.py",
        **{f"mideng.pkg.{n}": src / f"{n}.py" for n in "abcde"},
    }
    edges = _imports("mideng.pkg.a", modules["mideng.pkg.a"], modules)
    assert edges == {"mideng.pkg", "mideng.pkg.b", "mideng.pkg.c", "mideng.pkg.d", "mideng.pkg.e"}
    graph = {m: _imports(m, p, modules) for m, p in modules.items()}
    assert _circles(graph) == [["mideng.pkg.a", "mideng.pkg.e"]]


def test_no_import_circles() -> None:
    circles = _circles(_graph())
    assert circles == [], "import circles between files:\n" + "\n".join(
        " <-> ".join(c) for c in circles
    )


# -- every broker package has one inner shape -----------------------------------------------
#: A broker adapter's package: the adapter that fetches and carries out the consumer's verdicts
#: (consume), a delivery read as a Message and the copy a dead letter leaves (message), its
#: publisher (publish). A task queue's has its consuming side only: its own worker fetches and
#: acks, and its own send (Celery's ``delay``) publishes, so there is no Message and nothing for
#: a mideng publisher to add.
ADAPTER = {"__init__.py", "consume.py", "message.py", "publish.py"}
TASK_QUEUE = {"__init__.py", "consume.py"}
BROKER_PACKAGES = {
    "rabbitmq": ADAPTER,
    "nats": ADAPTER,
    "memory": ADAPTER,
    "redis_streams": ADAPTER,
    "kafka": ADAPTER,
    "celery": TASK_QUEUE,
    "rq": TASK_QUEUE,
    "arq": TASK_QUEUE,
    "dramatiq": TASK_QUEUE,
    "huey": TASK_QUEUE,
}
#: A framework over several brokers: the framework fetches and settles, mideng's entry is its
#: middleware, and how each of the framework's brokers carries out a verdict (settling).
FRAMEWORK = {"__init__.py", "middleware.py", "settling.py"}
FRAMEWORK_PACKAGES = {"faststream": FRAMEWORK}
#: Each adapter's broker as FastStream names it: its settling follows the adapter's ways.
FASTSTREAM_NAMES = {
    "rabbitmq": "rabbit",
    "nats": "nats",
    "kafka": "kafka",
    "redis_streams": "redis",
}


def test_every_broker_package_has_the_same_inner_files() -> None:
    messaging = SRC / "mideng" / "messaging"
    packages = {init.parent.name for init in messaging.glob("*/__init__.py")} - {"publish"}
    assert packages == set(BROKER_PACKAGES) | set(FRAMEWORK_PACKAGES)
    for name, files in {**BROKER_PACKAGES, **FRAMEWORK_PACKAGES}.items():
        assert {path.name for path in (messaging / name).glob("*.py")} == files, name


def test_faststream_settles_every_broker_mideng_has_an_adapter_for() -> None:
    from mideng.messaging.brokers import BROKERS
    from mideng.messaging.faststream.settling import BY_MODULE

    # The in-process broker is mideng's own; FastStream's in-process one is its TestBroker.
    assert set(FASTSTREAM_NAMES) == set(BROKERS) - {"memory"}
    named = {f"faststream.{name}.message" for name in FASTSTREAM_NAMES.values()}
    assert set(BY_MODULE) == named


def test_the_broker_registry_finds_each_adapter_and_publisher_in_its_package() -> None:
    from mideng.messaging.brokers import BROKERS

    adapters = {name for name, files in BROKER_PACKAGES.items() if files == ADAPTER}
    assert set(BROKERS) == adapters
    for name, broker in BROKERS.items():
        assert broker.consume == f"mideng.messaging.{name}.consume:consume"
        assert broker.publisher.startswith(f"mideng.messaging.{name}.publish:")


# -- every sync operation has its native async twin ------------------------------------------
def _store_classes() -> list[type]:
    import importlib
    import pkgutil

    import mideng.stores
    from mideng.stores.base import RecordStore, TokenStore, WindowStore
    from mideng.stores.steps import StepStore

    for info in pkgutil.walk_packages(mideng.stores.__path__, "mideng.stores."):
        importlib.import_module(info.name)
    found: list[type] = []
    todo: list[type] = [RecordStore, TokenStore, WindowStore, StepStore]
    while todo:
        cls = todo.pop()
        subclasses: list[type] = cls.__subclasses__()
        for sub in subclasses:
            if sub not in found:
                found.append(sub)
                todo.append(sub)
    return [c for c in found if c.__module__.startswith("mideng.") and not inspect.isabstract(c)]


def test_the_store_protocol_pairs_every_operation() -> None:
    from mideng.stores.base import RecordStore, TokenStore, WindowStore
    from mideng.stores.steps import StepStore

    for capability in (RecordStore, TokenStore, WindowStore, StepStore):
        ops = capability.__abstractmethods__
        sync = {n for n in ops if not inspect.iscoroutinefunction(getattr(capability, n))}
        asynchronous = ops - sync
        assert {f"a{n}" for n in sync} == asynchronous, capability.__name__


def test_every_store_operation_is_native_async_or_says_why_not() -> None:
    from mideng.stores.base import LocalStore, RecordStore, TokenStore, WindowStore
    from mideng.stores.steps import StepStore

    classes = _store_classes()
    names = {c.__name__ for c in classes}
    assert {"MemoryStore", "SQLiteStore", "SQLStore", "RedisStore", "HybridStore"} <= names
    missing = []
    for cls in classes:
        for capability in (RecordStore, TokenStore, WindowStore, StepStore):
            if not issubclass(cls, capability):
                continue
            for name in capability.__abstractmethods__:
                method = getattr(cls, name)
                if not inspect.iscoroutinefunction(method):
                    continue
                owner = next(k for k in cls.__mro__ if name in vars(k))
                reason: str = getattr(cls, "offload_reason", "")
                if owner is LocalStore and reason:
                    continue  # an embedded store, offloading on purpose, and saying why
                if owner is not LocalStore and vars(owner).get("offload_reason"):
                    continue  # an embedded store's steps, saying why where they are written
                if owner in (RecordStore, TokenStore, WindowStore, StepStore, LocalStore):
                    missing.append(f"{cls.__name__}.{name}")
    assert missing == []


# Feature methods that do no I/O of their own, so they need no async twin.
NO_IO = {
    "Guard": {"configure_scope", "policy", "prepare", "idempotent", "log_duplicate"},
    "Operations": {"operation", "step"},
    "TokenService": {"new_token"},
    "Debouncer": {"key"},
}


@pytest.mark.parametrize("name", sorted(NO_IO))
def test_every_feature_operation_has_an_async_twin(name: str) -> None:
    from mideng.guard import Guard
    from mideng.http.debounce import Debouncer
    from mideng.operations.methods import Operations
    from mideng.tokens import TokenService

    classes = {"Guard": Guard, "Operations": Operations, "TokenService": TokenService}
    cls = {**classes, "Debouncer": Debouncer}[name]
    public = {n for n, v in vars(cls).items() if callable(v) and not n.startswith("_")}
    twins = {n for n in public if n.startswith("a") and n[1:] in public}
    lacking = sorted(n for n in public - twins - NO_IO[name] if f"a{n}" not in public)
    assert lacking == []


# -- the benchmarks: a package of their own ----------------------------------------------------
def _is_sys_path(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Attribute)
        and node.attr == "path"
        and isinstance(node.value, ast.Name)
        and node.value.id == "sys"
    )


def _outside_imports(tree: ast.Module) -> list[tuple[int, str]]:
    """Each line that imports from the tests, or edits ``sys.path`` (assigned, item-assigned,
    added to, or called: insert, append, extend…), or imports ``path`` from ``sys``."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if not isinstance(node, (ast.stmt, ast.expr)):
            continue  # only statements and expressions import or edit anything
        modules: list[str] = []
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            modules = [node.module]
            if node.module == "sys" and any(a.name == "path" for a in node.names):
                found.append((node.lineno, "sys.path imported"))
        found += [(node.lineno, m) for m in modules if m.partition(".")[0] == "tests"]
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        for target in targets:
            edited = target.value if isinstance(target, ast.Subscript) else target
            if _is_sys_path(edited):
                found.append((node.lineno, "sys.path assigned"))
        called = node.func if isinstance(node, ast.Call) else None
        if isinstance(called, ast.Attribute) and _is_sys_path(called.value):
            found.append((node.lineno, f"sys.path.{called.attr}"))
    return sorted(found)


def test_the_bench_walker_sees_tests_imports_and_sys_path_edits() -> None:
    source = (
        "import sys\n"
        "import tests.services\n"
        "from tests.state.storm import tables\n"
        "from sys import path\n"
        "sys.path.insert(0, 'x')\n"
        "sys.path[:0] = ['x']\n"
        "sys.path = ['x']\n"
        "sys.path += ['x']\n"
        "def lazy():\n    from tests import services\n"
        "import testsuite\n"
        "print(sys.path[0])\n"
    )
    assert _outside_imports(ast.parse(source)) == [
        (2, "tests.services"),
        (3, "tests.state.storm"),
        (4, "sys.path imported"),
        (5, "sys.path.insert"),
        (6, "sys.path assigned"),
        (7, "sys.path assigned"),
        (8, "sys.path assigned"),
        (10, "tests"),
    ]


def test_the_bench_imports_nothing_from_tests_and_leaves_sys_path_alone() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{line}: {what}"
        for path in sorted(BENCH.rglob("*.py"))
        for line, what in _outside_imports(ast.parse(path.read_text(), str(path)))
    ]
    assert found == []


def test_no_import_circles_in_the_bench() -> None:
    graph = _graph(ROOT, "bench")
    assert "bench.cases.http" in graph, "the walker found the bench's modules"
    circles = _circles(graph)
    assert circles == [], "import circles between files:\n" + "\n".join(
        " <-> ".join(c) for c in circles
    )


def test_every_bench_case_is_registered_and_listed() -> None:
    from bench.cases import CASES

    runnable = {
        _module_of(path, BENCH / "cases")
        for path in (BENCH / "cases").glob("*.py")
        if any(
            isinstance(node, ast.FunctionDef) and node.name == "main"
            for node in ast.parse(path.read_text()).body
        )
    }
    assert runnable == {entry.module for entry in CASES.values()}
    paths = [str(SRC), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}
    done = subprocess.run(
        [sys.executable, "-m", "bench", "--list"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    listed = dict(line.split(maxsplit=1) for line in done.stdout.splitlines())
    assert listed == {name: entry.summary for name, entry in CASES.items()}


def _table_rows(text: str, heading: str) -> list[list[str]]:
    """The body rows of the first Markdown table after ``heading``, as cells."""
    table: list[str] = []
    for line in text.split(heading, 1)[1].splitlines():
        if line.startswith("|"):
            table.append(line)
        elif table:
            break  # the table's end
    return [[cell.strip() for cell in row.strip("|").split("|")] for row in table[2:]]


def test_every_row_of_the_box_has_its_folder() -> None:
    """Each row of README.md's "What is in the box" is a row of docs/architecture.md's map,
    whose folder is a package under src/mideng."""
    readme = (ROOT / "README.md").read_text()
    box = [row[0] for row in _table_rows(readme, "## What is in the box")]
    architecture = (ROOT / "docs" / "architecture.md").read_text()
    mapped = {
        row[0]: row[1] for row in _table_rows(architecture, "## Where each part of the box lives")
    }
    assert box
    assert set(box) == set(mapped), (box, sorted(mapped))
    for row, folders in mapped.items():
        folder = folders.split("`")[1].rstrip("/")
        assert any((SRC / "mideng" / folder).glob("*.py")), (row, folder)
