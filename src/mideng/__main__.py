"""``python -m mideng``: the ``mideng`` command, under the same name."""

from mideng.cli import main

if __name__ == "__main__":
    main(prog_name="mideng")
