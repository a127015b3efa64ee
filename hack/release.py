"""Releases: the version's one source and its copies, the record of the releases made, and what
a release writes into dist/.

    python hack/release.py version              # the version, and every copy of it that differs
    python hack/release.py bump X.Y.Z           # the source and every copy to X.Y.Z
    python hack/release.py dist [--out DIR]     # make dist: images, chart, plugin, SBOMs, SHA256SUMS
    python hack/release.py release X.Y.Z        # make release: check, dist, then record the release

The version's source is pyproject.toml's `version`. Its copies are where a file must spell it out:
the chart's `version` and `appVersion`, the Dockerfile's `VERSION` default, and the project's
image references and dist/ file names in the docs, examples and tests (COPY_PATTERNS). `bump`
rewrites them all; tests/test_release.py fails while one differs. The Maven modules' versions are
not copies: their jars are never published and the job finds the scorer's by a digest.

releases/releases.toml records the releases made: the commit each was cut from and its CRD as
released (releases/<version>/modelserving.yaml). tests/test_release.py compares this tree's CRD
with the newest release's (hack/crd_compat.py, docs/upgrading-the-crd.md): a change that breaks
must be a **BREAKING** entry of the CHANGELOG since that release, and the version must have moved
as SemVer asks.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

import crd_compat
import images

REPO = Path(__file__).resolve().parents[1]
CRD = Path("crds/modelserving.yaml")
RECORD = Path("releases/releases.toml")
JUDGED = Path("releases/compatible.toml")
CHANGELOG = Path("CHANGELOG.md")
SEMVER = r"\d+\.\d+\.\d+(?:-[0-9A-Za-z.-]+)?"
# The images' names less their common start: a pattern that starts with a literal is searched fast.
IMAGE_NAMES = "|".join(sorted((i.name.removeprefix("scorestream-") for i in images.IMAGES.values()), key=len, reverse=True))
# Where a file spells out the project's version: each pattern's group 1 is the copy.
COPY_PATTERNS = [
    re.compile(rf"^version: ({SEMVER})$", re.M),  # Chart.yaml
    re.compile(rf'^appVersion: "({SEMVER})"$', re.M),
    re.compile(rf"^ARG VERSION=({SEMVER})$", re.M),  # Dockerfile
    re.compile(rf"scorestream-(?:{IMAGE_NAMES}):({SEMVER})\b"),  # image references
    re.compile(rf"scorestream-(?:{IMAGE_NAMES})-({SEMVER})\.(?:oci\.tar|cdx\.json)\b"),  # dist/'s images and SBOMs
    re.compile(rf"scorestream-({SEMVER})\.tgz\b"),  # dist/'s chart
    re.compile(rf"kubectl-scorestream-v({SEMVER})-(?:linux|darwin|windows)-"),  # dist/'s plugin archive
    re.compile(rf"charts/scorestream --version ({SEMVER})\b"),  # the chart in an OCI registry
]
# Files whose versions are history, test data or someone else's, not copies of this one.
NOT_COPIES = ("CHANGELOG.md", "releases/", "tests/", "requirements.lock", "go.mod", "go.sum", "pom.xml")


class ReleaseError(RuntimeError):
    pass


# ----------------------------------------------------------------------------- the version
def version(root: Path = REPO) -> str:
    return tomllib.loads((root / "pyproject.toml").read_text())["project"]["version"]


@dataclass(frozen=True)
class Copy:
    path: str
    line: int
    value: str
    span: tuple[int, int]

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.value}"


def copies(root: Path = REPO) -> list[Copy]:
    """Every copy of the version in the tracked files of `root`."""
    found = []
    for rel in _tracked(root):
        if rel.startswith(NOT_COPIES) or rel.endswith(NOT_COPIES) or rel == "pyproject.toml":
            continue
        try:
            text = (root / rel).read_text()
        except (UnicodeDecodeError, FileNotFoundError, IsADirectoryError):
            continue
        for pattern in COPY_PATTERNS:
            for m in pattern.finditer(text):
                found.append(Copy(rel, text.count("\n", 0, m.start(1)) + 1, m.group(1), m.span(1)))
    return sorted(found, key=lambda c: (c.path, c.span))


def _tracked(root: Path) -> list[str]:
    res = subprocess.run(["git", "ls-files", "-z"], cwd=root, capture_output=True, text=True)
    if res.returncode != 0:  # a tree outside git (a test's copy): every file in it
        return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())
    return [p for p in res.stdout.split("\0") if p]


def diverging(root: Path = REPO) -> list[Copy]:
    v = version(root)
    return [c for c in copies(root) if c.value != v]


def bump(new: str, root: Path = REPO) -> list[Copy]:
    """Set the version's source and every copy to `new`; returns the copies rewritten."""
    if not re.fullmatch(SEMVER, new):
        raise ReleaseError(f"{new} is not a SemVer version (X.Y.Z)")
    pyproject = root / "pyproject.toml"
    pyproject.write_text(re.sub(r'^version = "[^"]*"$', f'version = "{new}"', pyproject.read_text(), count=1, flags=re.M))
    moved = [c for c in copies(root) if c.value != new]
    for path in {c.path for c in moved}:
        text = (root / path).read_text()
        for c in sorted((c for c in moved if c.path == path), key=lambda c: c.span, reverse=True):
            text = text[:c.span[0]] + new + text[c.span[1]:]
        (root / path).write_text(text)
    return moved


def semver_key(v: str) -> tuple:
    core, _, pre = v.partition("-")
    return (*map(int, core.split(".")), 0 if pre else 1, pre)


# ----------------------------------------------------------------------------- releases made
def record(root: Path = REPO) -> dict:
    return tomllib.loads((root / RECORD).read_text())


def last_release(root: Path = REPO) -> dict:
    return max(record(root)["release"], key=lambda r: semver_key(r["version"]))


def released_crd(release: dict, root: Path = REPO) -> dict:
    return crd_compat.load(root / release["crd"])


# ----------------------------------------------------------------------------- the changelog
@dataclass(frozen=True)
class Section:
    title: str  # "Unreleased" or a version
    date: str | None
    body: str

    def entries(self) -> list[str]:
        """Its list items, each with its continuation lines."""
        items, current = [], None
        for line in self.body.splitlines():
            if line.startswith("- "):
                current = [line]
                items.append(current)
            elif current is not None and (line.startswith("  ") or not line.strip()):
                current.append(line)
            else:
                current = None
        return ["\n".join(i).strip() for i in items]

    def breaking_entries(self) -> list[str]:
        """The entries marked as breaking: `- **BREAKING:** ...`, or `(**BREAKING** for ...)` in one."""
        return [e for e in self.entries() if e.startswith("- **BREAKING:**") or "(**BREAKING**" in e]


HEADING = re.compile(rf"^## \[(Unreleased|{SEMVER})\](?: - (\d{{4}}-\d{{2}}-\d{{2}}))?\s*$", re.M)


def changelog(root: Path = REPO) -> list[Section]:
    text = (root / CHANGELOG).read_text()
    heads = list(HEADING.finditer(text))
    end = re.search(r"^\[Unreleased\]:", text, re.M)
    bodies = [text[h.end():(heads[i + 1].start() if i + 1 < len(heads) else (end.start() if end else len(text)))]
              for i, h in enumerate(heads)]
    return [Section(h.group(1), h.group(2), body) for h, body in zip(heads, bodies)]


def since(release: str, root: Path = REPO) -> list[Section]:
    """The changelog's sections newer than `release`: Unreleased and the versions after it."""
    return [s for s in changelog(root) if s.title == "Unreleased" or semver_key(s.title) > semver_key(release)]


# ----------------------------------------------------------------------------- the CRD against the last release
def unlisted_breaking_changes(root: Path = REPO) -> list[crd_compat.Change]:
    """This tree's CRD's breaking changes since the newest release that no **BREAKING** entry of
    the changelog since then names, less those releases.toml records as judged compatible."""
    last = last_release(root)
    changes = crd_compat.breaking_changes(released_crd(last, root), crd_compat.load(root / CRD))
    changes = [c for c in changes if not any(_judges(j, c) for j in judgements(root))]
    named = set()
    for section in since(last["version"], root):
        for entry in section.breaking_entries():
            named |= {_field(n) for n in re.findall(r"`([^`\s]+)`", entry)}
    return [c for c in changes if not named & _names_of(c)]


def judgements(root: Path = REPO) -> list[dict]:
    return tomllib.loads((root / JUDGED).read_text()).get("compatible", [])


def _judges(judgement: dict, change: crd_compat.Change) -> bool:
    return judgement["path"] == change.path and judgement["change"] in change.detail


def stale_judgements(root: Path = REPO) -> list[dict]:
    """The judgements of compatible.toml that match no change the checker finds any more."""
    changes = crd_compat.breaking_changes(released_crd(last_release(root), root), crd_compat.load(root / CRD))
    return [j for j in judgements(root) if not any(_judges(j, c) for c in changes)]


def _field(name: str) -> str:
    """A field as an entry may write it: with or without `spec.`, with or without `[]`."""
    name = re.sub(r"\[[^\]]*\]", "", name)
    return name[len("spec."):] if name.startswith("spec.") else name


def _names_of(change: crd_compat.Change) -> set[str]:
    """What an entry may name a change by: its field, or for a rule of an object any field of it
    the rule reads (`self.dataTopic` of spec.kafka: spec.kafka.dataTopic)."""
    names = {_field(change.path)}
    for chain in re.findall(r"self\.([\w.]+)", change.detail):
        parts = chain.split(".")
        names |= {_field(".".join([change.path, *parts[:i]])) for i in range(1, len(parts) + 1)}
    return names


def bump_needed(root: Path = REPO) -> str | None:
    """"major", "minor" or None: the least move since the newest release that the CRD's changes ask
    for (SemVer; before 1.0 a minor version may break, docs/upgrading-the-crd.md)."""
    last = last_release(root)
    old, new = released_crd(last, root), crd_compat.load(root / CRD)
    if crd_compat.breaking_changes(old, new):
        return "minor" if last["version"].startswith("0.") else "major"
    return "minor" if crd_compat.without_descriptions(old) != crd_compat.without_descriptions(new) else None


def bump_made(root: Path = REPO) -> str | None:
    old, new = (semver_key(v)[:3] for v in (last_release(root)["version"], version(root)))
    if new[0] > old[0]:
        return "major"
    if new[:2] > old[:2]:
        return "minor"
    return "patch" if new > old else None


def version_fits_the_crd(root: Path = REPO) -> str | None:
    """Why this tree's version cannot follow the newest release with this CRD, or None."""
    needed, made = bump_needed(root), bump_made(root)
    order = [None, "patch", "minor", "major"]
    if needed and order.index(made) < order.index(needed):
        return (f"the CRD changed since {last_release(root)['version']} in a way that needs a {needed} version; "
                f"the version is {version(root)} (python hack/release.py bump X.Y.Z)")
    return None


# ----------------------------------------------------------------------------- dist/
# No update check (it would call out), and packages only: the files each package owns would be
# thousands of components more (4,061 beside 157 packages in the operator's image).
SYFT_ENV = {"SYFT_CHECK_FOR_APP_UPDATE": "false", "SYFT_FILE_METADATA_SELECTION": "none"}


def sbom(archive: Path, image: images.Image, syft: Path) -> Path:
    """The image archive's CycloneDX SBOM, cached beside the archive (its name carries the
    archive's inputs and syft's build)."""
    cached = archive.with_name(f"{archive.name}.{syft.parent.name}.cdx.json")
    if not cached.is_file():
        partial = cached.with_suffix(".partial")
        images._run(str(syft), "scan", f"oci-archive:{archive}", "--quiet", "--source-name", image.name,
                    "--source-version", images.VERSION, "-o", f"cyclonedx-json={partial}",
                    env={**os.environ, **SYFT_ENV, "TMPDIR": str(images.cache())})
        partial.replace(cached)
    return cached


def components(bom: Path) -> int:
    return len(json.loads(bom.read_text()).get("components", []))


def dist(out: Path, base: str | None = None) -> list[Path]:
    """What a user installs from, in `out` (emptied first): the chart package, the image archives,
    the kubectl plugin's archive and krew manifest, a CycloneDX SBOM per image, and SHA256SUMS of
    them all."""
    import plugin  # hack/plugin.py: pip, so it runs under the project's Python

    sys.path.insert(0, str(REPO / "tests"))
    from harness import cluster

    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    files = list(plugin.build(out))
    archives = images.build(list(images.IMAGES), base)
    files += images.dist(out, base, archives)
    syft = cluster.build(("syft",))["syft"]
    boms = {}
    for target, archive in archives.items():
        image = images.IMAGES[target]
        bom = out / f"{image.name}-{images.VERSION}.cdx.json"
        shutil.copyfile(sbom(archive, image, syft), bom)
        files.append(bom)
        boms[bom] = components(bom)
    sums = images.write_sums(out, files)
    for f in sorted(files) + [sums]:
        count = f"  {boms[f]:>5} components" if f in boms else ""
        print(f"{images.human(f.stat().st_size):>9}  {f}{count}")
    return files


# ----------------------------------------------------------------------------- make release
def check(v: str, root: Path = REPO) -> list[str]:
    """Why `v` cannot be released from this tree (nothing: it can)."""
    problems = []
    if v != version(root):
        problems.append(f"the version is {version(root)}, not {v}: python hack/release.py bump {v}")
    problems += [f"{c} differs from the version" for c in diverging(root)]
    last = last_release(root)["version"]
    if semver_key(v) <= semver_key(last):
        problems.append(f"{v} is not after the last release, {last}")
    dated = {s.title: s.date for s in changelog(root)}
    if not dated.get(v):
        problems.append(f"{CHANGELOG} has no `## [{v}] - YYYY-MM-DD` section: move Unreleased's entries under one")
    problems += [f"{c}: a breaking change no BREAKING entry of {CHANGELOG} names" for c in unlisted_breaking_changes(root)]
    if reason := version_fits_the_crd(root):
        problems.append(reason)
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                           capture_output=True, text=True, check=True).stdout
    if dirty:
        problems.append("the work tree has uncommitted changes: a release is cut from a commit")
    return problems


def record_release(v: str, root: Path = REPO) -> None:
    """Add `v`, cut from HEAD, to releases.toml with its CRD, and drop the compatibility
    judgements made against the release before it (compatible.toml keeps its header)."""
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, check=True).stdout.strip()
    crd = Path("releases") / v / "modelserving.yaml"
    (root / crd).parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(root / CRD, root / crd)
    date = {s.title: s.date for s in changelog(root)}[v]
    judged = (root / JUDGED).read_text()
    (root / JUDGED).write_text(judged[:judged.index("[[compatible]]")] if "[[compatible]]" in judged else judged)
    text = (root / RECORD).read_text().rstrip("\n") + "\n\n" + "\n".join(
        ["[[release]]", f"version = {json.dumps(v)}", f"date = {json.dumps(date)}", f"commit = {json.dumps(commit)}",
         f"crd = {json.dumps(crd.as_posix())}"]) + "\n"
    (root / RECORD).write_text(text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="hack/release.py", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("version", help="the version, and every copy of it that differs")
    sub.add_parser("bump", help="set the version and its copies").add_argument("version")
    d = sub.add_parser("dist", help="write dist/ (make dist)")
    d.add_argument("--out", type=Path, default=REPO / "dist")
    r = sub.add_parser("release", help="check, write dist/ and record the release (make release)")
    r.add_argument("version")
    r.add_argument("--out", type=Path, default=REPO / "dist")
    args = parser.parse_args(argv)
    base = os.environ.get("BASE_IMAGE") or None
    try:
        if args.command == "version":
            print(version())
            for c in diverging():
                print(f"differs: {c}", file=sys.stderr)
            return 1 if diverging() else 0
        if args.command == "bump":
            for c in bump(args.version):
                print(f"{c} -> {args.version}")
            return 0
        if args.command == "dist":
            dist(args.out, base)
            return 0
        problems = check(args.version)
        if problems:
            print(f"error: {args.version} cannot be released from this tree:\n  " + "\n  ".join(problems), file=sys.stderr)
            return 1
        dist(args.out, base)
        record_release(args.version)
        print(f"recorded {args.version} in {RECORD}: commit it with releases/{args.version}/, "
              f"then tag v{args.version}", file=sys.stderr)
    except RuntimeError as e:  # ReleaseError, BuildError, and the helm and Go builds' failures
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
