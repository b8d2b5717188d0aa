"""``python -m bench NAME… [OPTIONS]``: run the named cases one after another, each with the
options given; ``python -m bench --list``: every case and what it measures."""

from __future__ import annotations

import importlib
import sys

from bench.cases import CASES

USAGE = """usage: python -m bench NAME... [OPTIONS]
       python -m bench --list
       python -m bench NAME --help

Run from the repository's root. OPTIONS go to every case named; a case's --help lists its own.
"""


def listing() -> str:
    width = max(map(len, CASES))
    return "\n".join(f"{name:<{width}}  {entry.summary}" for name, entry in CASES.items())


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE + "\ncases:\n" + listing())
        return 0
    if argv[0] == "--list":
        print(listing())
        return 0
    names = []
    for arg in argv:
        if arg not in CASES:
            break
        names.append(arg)
    if not names:
        print(f"{argv[0]!r} is not a case; python -m bench --list names them", file=sys.stderr)
        return 2
    options = argv[len(names) :]
    for name in names:
        entry = CASES[name]
        case = importlib.import_module(f"bench.cases.{entry.module}")
        case.main([*entry.args, *options])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
