"""Print the dependencies of scorestream and of the given extras, as pyproject.toml declares them;
or, with --hashed, the complete set of pinned and hashed requirements that installs them.

The images install these in a layer of their own, before the project's code: the layer changes
only with the pins, so a change to the code rebuilds seconds, not minutes.

    python requirements.py pyproject.toml [EXTRA...] [--extras-only]
    python requirements.py --hashed requirements.lock requirements.txt

--hashed resolves requirements.txt under the lock's pins (pip's own resolver, a dry run) and prints
the lock's line, with its hashes, for every package of the result, so that the image installs
with `pip install --require-hashes`: every file pip downloads must match a hash the lock records.
A package the resolution needs that the lock does not pin (or pins at another version) is an
error. (`make setup` cannot check hashes: pip refuses an editable install in hash-checking mode,
and a hash in a constraints file turns that mode on; it installs from the lock without them.)
"""

import json
import re
import subprocess
import sys
import tempfile

HASH = re.compile(r"\s+--hash=\S+")


def norm(name):  # PEP 503
    return re.sub(r"[-_.]+", "-", name).lower()


def lock_lines(path):
    """name -> (version, the whole line) of a lock whose lines are `name==version --hash=...`."""
    lines = {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line and not line.startswith("#"):
                name, version = HASH.sub("", line).split("==")
                lines[norm(name)] = (version.strip(), line)
    return lines


def hashed(lock_path, requirements_path):
    lock = lock_lines(lock_path)
    with tempfile.NamedTemporaryFile("w", suffix=".txt") as constraints:
        constraints.write("".join(f"{HASH.sub('', line)}\n" for _, line in lock.values()))
        constraints.flush()
        report = subprocess.run(
            [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet", "--report", "-",
             "-c", constraints.name, "-r", requirements_path],
            check=True, stdout=subprocess.PIPE, text=True).stdout
    out, problems = [], []
    for item in json.loads(report)["install"]:
        name, version = norm(item["metadata"]["name"]), item["metadata"]["version"]
        pinned = lock.get(name)
        if pinned is None or pinned[0] != version:
            problems.append(f"{name}=={version} (the lock has {pinned[0] if pinned else 'nothing'})")
        elif "--hash=" not in pinned[1]:
            problems.append(f"{name}=={version} has no hash in the lock")
        else:
            out.append(pinned[1])
    if problems:
        sys.exit("requirements.lock does not cover what the image installs: " + "; ".join(problems))
    return sorted(out)


def main(argv):
    if argv[1] == "--hashed":
        print("\n".join(hashed(argv[2], argv[3])))
        return
    import tomllib

    with open(argv[1], "rb") as f:
        project = tomllib.load(f)["project"]
    deps = [] if "--extras-only" in argv else list(project["dependencies"])
    for extra in (a for a in argv[2:] if not a.startswith("--")):
        deps += [d for d in project["optional-dependencies"][extra] if not d.startswith("scorestream[")]
    print("\n".join(deps))


if __name__ == "__main__":
    main(sys.argv)
