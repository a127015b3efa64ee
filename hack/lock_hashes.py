"""Write the sha256 of each pinned package's file into requirements.lock (`--hash=`), for the
images' hash-checking install (runtime/docker/requirements.py --hashed).

    .venv/bin/python hack/lock_hashes.py

pip resolves every extra of pyproject.toml under the lock's pins (a dry run) and reports the file
it picked for each package, with the hash the index gives for it: the file of Linux x86-64 and
CPython 3.11, the images' platform (tests/test_dockerfile.py checks the Python). A build for
another platform needs that platform's hashes added (`pip hash`). Packages the resolution installs
but `pip freeze` leaves out (setuptools, wheel) are pinned as resolved.
"""

import json
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "runtime" / "docker"))
from requirements import HASH, lock_lines, norm  # noqa: E402


def main() -> None:
    lock_path = REPO / "requirements.lock"
    header = [line for line in lock_path.read_text().splitlines() if line.startswith("#")]
    lock = lock_lines(lock_path)
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    wanted = [d for deps in extras.values() for d in deps if not d.startswith("scorestream[")]
    wanted += tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    with tempfile.TemporaryDirectory() as tmp:
        constraints, requirements = Path(tmp, "c.txt"), Path(tmp, "r.txt")
        constraints.write_text("".join(f"{HASH.sub('', line)}\n" for _, line in lock.values()))
        requirements.write_text("\n".join(wanted) + "\n")
        report = json.loads(subprocess.run(
            [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet", "--report", "-",
             "-c", str(constraints), "-r", str(requirements)], check=True, stdout=subprocess.PIPE, text=True).stdout)
    lines = {name: f"{name}=={version}" for name, (version, _) in lock.items()}
    names = {name: name for name in lock}
    for item in report["install"]:
        name, version = norm(item["metadata"]["name"]), item["metadata"]["version"]
        sha = item["download_info"]["archive_info"]["hashes"]["sha256"]
        pinned = lock.get(name)
        if pinned is not None and pinned[0] != version:
            sys.exit(f"{name}: the lock pins {pinned[0]}, pip resolved {version}")
        original = HASH.sub("", pinned[1]).split("==")[0] if pinned else item["metadata"]["name"]
        names[name] = original
        lines[name] = f"{original}=={version} --hash=sha256:{sha}"
    body = sorted(lines.values(), key=str.lower)
    lock_path.write_text("\n".join(header + body) + "\n")
    print(f"{lock_path}: {sum('--hash=' in b for b in body)} of {len(body)} packages hashed")


if __name__ == "__main__":
    main()
