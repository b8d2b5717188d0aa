"""mideng's benchmarks: each case measures mideng against the least the same work can cost
(a raw driver floor, a hand-written scheme) and against peers, in one run.

From the repository's root, with mideng importable (installed, or ``PYTHONPATH=src``):

    .venv/bin/python -m bench --list                  # every case, one line each
    .venv/bin/python -m bench core redis sql          # cases one after another
    .venv/bin/python -m bench python --calls 500      # a case with its own options
    .venv/bin/python -m bench http --help             # a case's options

The cases live in bench/cases (the list is bench/cases/__init__.py); what they share lives
here: the callgrind counter (callgrind), contenders and their results (contenders), the timing
loops (timing), tables and result files (report), the servers' addresses (services), stubbed
cursors (stubs), the stores and applications of the HTTP cases (stores, web, django_site) and
the business tables of the state cases (business). Timed figures move with the machine's
load; counted ones (instructions under valgrind) do not. One counted call, from Python:

    from bench.callgrind import instructions_per_call
    instructions_per_call("bench.cases.python", "mideng first", 500, 1000)

Some cases write their tables to bench/results/ as well as printing them.
"""
