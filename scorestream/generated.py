"""The command of a generated file (a dashboard, a reference page): print it, or `--write` it
where it is checked in; a test compares the checked-in file with the generator."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path


def print_or_write(prog: str, description: str, path: Path, render: Callable[[], str],
                   argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog=prog, description=description)
    ap.add_argument("--write", action="store_true", help=f"write {path}")
    args = ap.parse_args(argv)
    if args.write:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(render())
        print(path)
    else:
        sys.stdout.write(render())
    return 0
