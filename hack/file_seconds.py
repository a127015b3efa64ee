"""Copy the seconds each test file took in this clone's last full runs (pytest's cache, written by
tests/harness/fixtures.py) to tests/file-seconds.json, which orders the files of a run without a
cache (CI's): longest first, so that no long file starts last."""

from __future__ import annotations

import json
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CACHE = REPO / ".pytest_cache" / "v" / "scorestream" / "file-seconds"
OUT = REPO / "tests" / "file-seconds.json"


def main() -> None:
    selections = {p.name: json.loads(p.read_text()) for p in sorted(CACHE.glob("*"))} if CACHE.is_dir() else {}
    wanted = {name: selections[name] for name in ("all", "quick") if name in selections}
    if not wanted:
        raise SystemExit(f"no file times in {CACHE}: run `make test` (or `make test-quick`) first")
    present = {str(p.relative_to(REPO)) for p in (REPO / "tests").rglob("test_*.py")}
    OUT.write_text(json.dumps({name: {path: s for path, s in sorted(times.items()) if path in present}
                               for name, times in wanted.items()}, indent=1, sort_keys=True) + "\n")
    print(f"wrote {OUT.relative_to(REPO)}: {', '.join(f'{n} ({len(t)} files)' for n, t in wanted.items())}")


if __name__ == "__main__":
    main()
