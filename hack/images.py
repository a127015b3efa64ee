"""The project's images, built from the Dockerfile into OCI archives cached by the digest of their inputs.

    python hack/images.py build [TARGET...]   # operator, runtime-pmml, runtime: archives, sizes
    python hack/images.py release VERSION     # a release's images, from its recorded commit (releases/)

`make dist` (hack/release.py) puts the archives in dist/ with the chart, the plugin and the SBOMs.

Docker builds where a Docker engine answers; elsewhere buildah, daemonless, with a storage of its
own under the cache (the host's /var/lib/containers is left alone). The base is BASE_IMAGE (pulled
by the engine: give a digest) or, where none is given, one made here from Debian's packages with
debootstrap — Debian bookworm's Python 3.11 with pip, what the official `python:3.11-slim-bookworm`
holds — and stored under that name, so the Dockerfile builds unchanged on a machine that reaches
no image registry. Each archive's name carries the digest of everything that went into it (the
Dockerfile, the files of the build context, the build arguments, the base image's id): a warm
cache builds nothing.
"""

from __future__ import annotations

import argparse
import fnmatch
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
VERSION = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
DEBIAN_RELEASE = "bookworm"
DEFAULT_BASE = "docker.io/library/python:3.11-slim-bookworm"
# What the official slim image holds that a minbase lacks: Python, pip (from the wheel that
# python3-venv brings), CA certificates for pip and Maven.
BASE_PACKAGES = ("python3", "python3-venv", "python-is-python3", "ca-certificates")


@dataclass(frozen=True)
class Image:
    target: str  # the Dockerfile's stage
    name: str  # what the chart and a ModelServing call it

    @property
    def ref(self) -> str:
        return f"localhost/{self.name}:{VERSION}"


IMAGES = {i.target: i for i in (Image("operator", "scorestream-operator"),
                                 Image("runtime-pmml", "scorestream-runtime-pmml"),
                                 Image("runtime", "scorestream-runtime"))}


# A stage no image is built on, whose layers the next build reuses (the JDK, the scorer's Maven
# build and JUnit tests: minutes). Tagged, or the prune after a build takes them as dangling.
KEPT_STAGES = {"scorer": f"localhost/scorestream-build-scorer:{VERSION}"}


class BuildError(RuntimeError):
    pass


def cache() -> Path:
    root = os.environ.get("SCORESTREAM_CACHE") or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "scorestream"
    return Path(root) / "images"


def _run(*cmd: str, capture: bool = True, **kw) -> str:
    res = subprocess.run(cmd, capture_output=capture, text=True, **kw)
    if res.returncode != 0:
        out = (res.stdout or "") + (res.stderr or "") if capture else ""
        raise BuildError(f"{' '.join(cmd[:4])} … failed (exit {res.returncode}):\n{out[-4000:]}")
    return res.stdout if capture else ""


# The tests' working containers (tests/test_images.py) are named for the process that made them.
TEST_CONTAINER_PREFIX = "ss-test-"


def test_container_name(pid: int, suffix: str) -> str:
    return f"{TEST_CONTAINER_PREFIX}{pid}-{suffix}"


def stale_test_container(name: str) -> bool:
    """A tests' working container whose process is gone (an older name, without one, too)."""
    if not name.startswith(TEST_CONTAINER_PREFIX):
        return False
    pid = name[len(TEST_CONTAINER_PREFIX):].split("-", 1)[0]
    if not pid.isdigit() or "-" not in name[len(TEST_CONTAINER_PREFIX):]:
        return True
    return not Path(f"/proc/{pid}").exists()


# ----------------------------------------------------------------------------- engines
class Buildah:
    """buildah with a storage of its own: the images never mix with the host's."""

    def __init__(self) -> None:
        if not shutil.which("buildah"):
            raise BuildError("neither a Docker engine nor buildah: `apt-get install buildah` (Debian)")
        self.root = cache() / "storage"
        self.runroot = Path("/run/scorestream-buildah")

    def __call__(self, *args: str, capture: bool = True) -> str:
        return _run("buildah", "--root", str(self.root), "--runroot", str(self.runroot),
                    "--storage-driver", "overlay", *args, capture=capture)

    def image_id(self, ref: str) -> str | None:
        try:
            return self("inspect", "--type", "image", "--format", "{{.FromImageID}}", ref).strip()
        except BuildError:
            return None

    def build(self, target: str, ref: str, build_args: dict[str, str], pull: bool, context: Path = REPO) -> None:
        """`context`: this tree, or an earlier release's (whose Dockerfile may declare no CA arguments)."""
        local_ca = _local_ca_args()
        if context == REPO:
            build_args = {**build_args, **local_ca}
            volumes = LOCAL_CA_MOUNTS if local_ca else {}
        else:
            volumes = _release_ca() if local_ca else {}
        args = [f"--build-arg={k}={v}" for k, v in build_args.items()]
        mounts = [f"--volume={host}:{inside}:ro" for host, inside in volumes.items()]
        # The host's network for RUN steps: they fetch from PyPI, Debian and Maven Central.
        # --force-rm: a failed step leaves no working container mounted in the storage either.
        self("bud", "--layers", "--force-rm", "--network=host", f"--pull={'true' if pull else 'never'}", "--target", target,
             "-t", ref, *args, *mounts, "-f", str(context / "Dockerfile"), str(context), capture=False)

    def save(self, ref: str, archive: Path) -> None:
        self("push", "--quiet", ref, f"oci-archive:{archive}:{ref}")

    def prune(self) -> int:
        """Remove the images no tag leads to any more (earlier builds' results and the layers
        only they used); the layers the tagged images are built from stay, for the next build.
        An image's parent is dangling only once its child is gone: a pass per generation.
        First the working containers of test runs that are gone (a run killed midway leaves its
        own): an image a container uses cannot be removed."""
        for name in self("containers", "--format", "{{.ContainerName}}").split():
            if stale_test_container(name):
                self("rm", name)
        removed = 0
        for _ in range(50):
            try:
                gone = [l for l in self("rmi", "--prune").splitlines() if l.strip()]
            except BuildError as e:
                if "in use by a container" not in str(e):
                    raise
                # A build beside this one holds the image, or a stage's working container that
                # Debian's buildah 1.28 leaves after a multi-stage build: it goes at a later prune.
                print(f"prune stopped at an image in use: {str(e).splitlines()[-1].strip()}", file=sys.stderr)
                break
            if not gone:
                break
            removed += len(gone)
        return removed


class Docker:
    def __call__(self, *args: str, capture: bool = True) -> str:
        return _run("docker", *args, capture=capture)

    @staticmethod
    def available() -> bool:
        if not shutil.which("docker"):
            return False
        return subprocess.run(["docker", "info"], capture_output=True, timeout=20).returncode == 0

    def image_id(self, ref: str) -> str | None:
        try:
            return self("image", "inspect", "--format", "{{.Id}}", ref).strip()
        except BuildError:
            return None

    def build(self, target: str, ref: str, build_args: dict[str, str], pull: bool, context: Path = REPO) -> None:
        args = [f"--build-arg={k}={v}" for k, v in build_args.items()]
        self("build", *(["--pull"] if pull else []), "--target", target, "-t", ref, *args, str(context), capture=False)

    def save(self, ref: str, archive: Path) -> None:
        # docker save writes an OCI image layout since Docker 25; skopeo makes it an oci-archive.
        with tempfile.TemporaryDirectory() as tmp:
            self("save", "-o", f"{tmp}/image.tar", ref)
            _run("skopeo", "copy", f"docker-archive:{tmp}/image.tar", f"oci-archive:{archive}:{ref}")

    def prune(self) -> int:
        return len([l for l in self("image", "prune", "--force").splitlines() if l.startswith("deleted:")])


# A machine whose TLS goes through an inspecting proxy trusts that proxy's CA locally
# (/usr/local/share/ca-certificates); its RUN steps' pip and Maven must too. The machine's bundles
# are mounted for the build alone and named by build arguments the Dockerfile declares.
LOCAL_CA_MOUNTS = {"/etc/ssl/certs/ca-certificates.crt": "/run/build-ca/ca-certificates.crt",
                   "/etc/ssl/certs/java/cacerts": "/run/build-ca/cacerts"}


def _local_ca_args() -> dict[str, str]:
    if not any(Path("/usr/local/share/ca-certificates").glob("*.crt")) or not all(map(os.path.isfile, LOCAL_CA_MOUNTS)):
        return {}
    return {"PIP_CERT": LOCAL_CA_MOUNTS["/etc/ssl/certs/ca-certificates.crt"],
            "MAVEN_OPTS": f"-Djavax.net.ssl.trustStore={LOCAL_CA_MOUNTS['/etc/ssl/certs/java/cacerts']}"}


def engine() -> Buildah | Docker:
    return Docker() if Docker.available() else Buildah()


# ----------------------------------------------------------------------------- the base from Debian
def debian_base(engine: Buildah | Docker, ref: str = DEFAULT_BASE) -> str:
    """Make `ref` from Debian's packages unless the engine holds it already; returns its id."""
    found = engine.image_id(ref)
    if found:
        return found
    if not isinstance(engine, Buildah):
        raise BuildError(f"{ref} is not in the Docker engine: pull it, or set BASE_IMAGE")
    if not shutil.which("debootstrap"):
        raise BuildError("debootstrap not found: `apt-get install debootstrap` (Debian), or set BASE_IMAGE")
    started = time.monotonic()
    container = engine("from", "scratch").strip()
    try:
        root = Path(engine("mount", container).strip())
        _run("debootstrap", "--variant=minbase", f"--include={','.join(BASE_PACKAGES)}", DEBIAN_RELEASE,
             str(root), _debian_mirror())
        # A container's Python is its own: pip installs into /usr/local as in the official image.
        for marker in root.glob("usr/lib/python3*/EXTERNALLY-MANAGED"):
            marker.unlink()
        # pip from the wheel Debian ships for venvs (what ensurepip would install; Debian
        # disables ensurepip for the system Python), into /usr/local where `pip install pip==X`
        # can replace it.
        wheel = next(root.glob("usr/share/python-wheels/pip-*.whl")).relative_to(root)
        _run("chroot", str(root), "python3", f"/{wheel}/pip", "install", "--no-index", "--no-cache-dir", f"/{wheel}")
        for junk in ("var/lib/apt/lists", "var/cache/apt", "usr/share/doc", "usr/share/man", "usr/share/locale"):
            shutil.rmtree(root / junk, ignore_errors=True)
        # apt's list directory, and man1, where the JDK's post-install links its pages (it fails
        # without the directory, as on Debian's own slim images)
        for kept in ("var/lib/apt/lists/partial", "usr/share/man/man1"):
            (root / kept).mkdir(parents=True, exist_ok=True)
        engine("umount", container)
        engine("config", "--env", "LANG=C.UTF-8", "--env", "PATH=/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin",
               "--cmd", "python3", "--label", f"org.opencontainers.image.description=Debian {DEBIAN_RELEASE} with "
               "Python and pip, made by scorestream's hack/images.py from Debian's packages", container)
        engine("commit", "--quiet", container, ref)
    finally:
        subprocess.run(["buildah", "--root", str(engine.root), "--runroot", str(engine.runroot), "rm", container],
                       capture_output=True)
    print(f"base {ref} made from Debian's packages in {time.monotonic() - started:.0f} s", file=sys.stderr)
    return engine.image_id(ref) or ""


def _debian_mirror() -> str:
    """The mirror this machine's apt uses (the one registry of Debian packages it reaches)."""
    for source in [Path("/etc/apt/sources.list"), *sorted(Path("/etc/apt/sources.list.d").glob("*"))]:
        if not source.is_file():
            continue
        for line in source.read_text().splitlines():
            words = line.split()
            if line.startswith("URIs:") and words[1:] and not words[1].endswith("-security"):
                return words[1]
            if words[:1] == ["deb"] and "security" not in line:
                return next(w for w in words[1:] if w.startswith("http"))
    return "http://deb.debian.org/debian"


# ----------------------------------------------------------------------------- inputs and archives
def context_files() -> list[Path]:
    """The build context as .dockerignore leaves it: its `!` lines are what the Dockerfile copies."""
    lines = [l.strip() for l in (REPO / ".dockerignore").read_text().splitlines() if l.strip() and not l.startswith("#")]
    included = [l[1:].rstrip("/") for l in lines if l.startswith("!")]
    excluded = [l.rstrip("/") for l in lines if not l.startswith("!") and l != "*"]
    files = []
    for entry in included:
        path = REPO / entry
        for f in sorted([path] if path.is_file() else path.rglob("*")):
            rel = f.relative_to(REPO).as_posix()
            if f.is_file() and not any(fnmatch.fnmatch(rel, pat) or fnmatch.fnmatch(rel, pat + "/*")
                                       or any(fnmatch.fnmatch(part, pat.lstrip("*/")) for part in rel.split("/"))
                                       for pat in excluded):
                files.append(f)
    return files


def inputs_digest(target: str, build_args: dict[str, str], base_id: str, tree: str | None = None) -> str:
    """What an image is built from: this work tree's build context, or a release's `tree`."""
    h = hashlib.sha256()
    for part in (target, json.dumps(build_args, sort_keys=True), base_id, *([tree] if tree else [])):
        h.update(part.encode() + b"\0")
    if tree is None:
        for f in [REPO / "Dockerfile", REPO / ".dockerignore", *context_files()]:
            h.update(f.relative_to(REPO).as_posix().encode() + b"\0" + f.read_bytes())
    return h.hexdigest()[:16]


def archive_path(image: Image, digest: str, version: str = VERSION) -> Path:
    return cache() / f"{image.name}-{version}-{digest}.oci.tar"


def build(targets: list[str], base: str | None = None) -> dict[str, Path]:
    """Each target's OCI archive, built where its inputs changed; prints each image's sizes."""
    eng = engine()
    pull = base is not None
    base_ref = base or DEFAULT_BASE
    base_id = base_ref if pull else debian_base(eng)
    build_args = {"BASE_IMAGE": base_ref, "VERSION": VERSION}
    cache().mkdir(parents=True, exist_ok=True)
    out, built = {}, False
    for target in targets:
        image = IMAGES[target]
        archive = archive_path(image, inputs_digest(target, build_args, base_id))
        if not archive.is_file():
            if not built:
                for stage, ref in KEPT_STAGES.items():
                    eng.build(stage, ref, build_args, pull)
            build_archive(eng, target, image.ref, build_args, pull, archive)
            built = True
            keep_only(archive, image, VERSION)
        out[target] = archive
        print_sizes(image.ref, archive)
    if built:
        # Each build leaves the one before it untagged: gigabytes a build, kept only by the storage.
        print(f"removed {eng.prune()} images no tag uses any more", file=sys.stderr)
    return out


def keep_only(archive: Path, image: Image, version: str) -> None:
    """A gigabyte or more each: an image of a version keeps its newest archive only."""
    for older in cache().glob(f"{image.name}-{version}-*.oci.tar*"):
        if not older.name.startswith(archive.name):
            older.unlink(missing_ok=True)


def build_archive(eng: Buildah | Docker, target: str, ref: str, build_args: dict[str, str], pull: bool,
                  archive: Path, context: Path = REPO) -> None:
    """Build `target` as `ref` and save it as `archive`, by way of a partial file: a build killed
    midway leaves no archive the next run would take for a finished one."""
    started = time.monotonic()
    eng.build(target, ref, build_args, pull, context)
    partial = archive.with_suffix(".partial")
    partial.unlink(missing_ok=True)
    eng.save(ref, partial)
    partial.replace(archive)
    print(f"built {ref} in {time.monotonic() - started:.0f} s", file=sys.stderr)


def print_sizes(ref: str, archive: Path) -> None:
    print(f"{ref:<45} {human(unpacked_size(archive)):>9} unpacked  {human(archive.stat().st_size):>9} archive  {archive}")


def unpacked_size(archive: Path) -> int:
    """The sum of the image's layers, uncompressed (what a node's disk holds); counted once per archive."""
    counted = archive.with_name(archive.name + ".unpacked")
    if counted.is_file():
        return int(counted.read_text())
    total = _count_unpacked(archive)
    counted.write_text(str(total))
    return total


def _count_unpacked(archive: Path) -> int:
    with tarfile.open(archive) as tar:
        index = json.load(tar.extractfile("index.json"))
        manifest = json.load(tar.extractfile(_blob(index["manifests"][0]["digest"])))
        total = 0
        for layer in manifest["layers"]:
            member = tar.extractfile(_blob(layer["digest"]))
            if layer["mediaType"].endswith("gzip"):
                import gzip
                with gzip.open(member) as g:
                    while chunk := g.read(1 << 20):
                        total += len(chunk)
            else:
                total += layer["size"]
        return total


def _blob(digest: str) -> str:
    algo, _, hexdigest = digest.partition(":")
    return f"blobs/{algo}/{hexdigest}"


def human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit in ("B", "KiB") else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def dist(out: Path, base: str | None = None, archives: dict[str, Path] | None = None) -> list[Path]:
    """The chart package and the image archives (`archives`, else built) in `out`, with their
    checksums (`make dist`, hack/release.py, adds the plugin and the SBOMs)."""
    archives = archives or build(list(IMAGES), base)
    out.mkdir(parents=True, exist_ok=True)
    sys.path.insert(0, str(REPO / "tests"))
    from harness import helm as helm_tool

    files = []
    for target, archive in archives.items():
        copy = out / f"{IMAGES[target].name}-{VERSION}.oci.tar"
        copy.unlink(missing_ok=True)
        try:
            os.link(archive, copy)  # gigabytes: a second name, where the cache is on the same disk
        except OSError:
            shutil.copyfile(archive, copy)
        files.append(copy)
    _run(str(helm_tool.ensure()), "package", str(REPO / "charts" / "scorestream"), "--version", VERSION,
         "--app-version", VERSION, "-d", str(out))
    files.append(out / f"scorestream-{VERSION}.tgz")
    write_sums(out, files)
    return files


def write_sums(out: Path, files: list[Path]) -> Path:
    """`out`/SHA256SUMS of `files` (in `out`), as `sha256sum -c` reads it."""
    sums = out / "SHA256SUMS"
    sums.write_text("".join(f"{sha256(f)}  {f.name}\n" for f in sorted(files)))
    return sums


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


# ----------------------------------------------------------------------------- a release's images
# An earlier release's images, built from the commit releases/releases.toml records for it (0.1.0
# was never tagged and published no images): its tree is taken out of git into the cache and built
# with its own Dockerfile, as above. The upgrade test (tests/long/test_upgrade.py) installs them.
RELEASES = REPO / "releases" / "releases.toml"


def release_record(version: str) -> dict:
    """The release's entry in releases.toml: its commit, and the fixes its images are built with."""
    for release in tomllib.loads(RELEASES.read_text()).get("release", []):
        if release["version"] == version:
            return release
    raise BuildError(f"no release {version} in {RELEASES.relative_to(REPO)}")


def release_tree(version: str) -> tuple[Path, str]:
    """The release's files (`git archive` of its commit, with the commits its record names under
    `fixes` applied) under the cache, and what identifies them: the tree id and the fixes."""
    record = release_record(version)
    commit, fixes = record["commit"], record.get("fixes", [])
    tree = "+".join([_run("git", "-C", str(REPO), "rev-parse", f"{commit}^{{tree}}").strip(), *fixes])
    root = cache() / "releases" / f"{version}-{hashlib.sha256(tree.encode()).hexdigest()[:12]}"
    if not (root / "Dockerfile").is_file():
        partial = root.with_name(root.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir(parents=True)
        git = subprocess.Popen(["git", "-C", str(REPO), "archive", "--format=tar", commit], stdout=subprocess.PIPE)
        with tarfile.open(fileobj=git.stdout, mode="r|") as tar:
            tar.extractall(partial, filter="tar")
        if git.wait() != 0:
            raise BuildError(f"git archive {commit} failed (exit {git.returncode})")
        for fix in fixes:
            _apply(fix, partial)
        shutil.rmtree(root, ignore_errors=True)
        partial.replace(root)
    return root, tree


def _apply(commit: str, root: Path) -> None:
    """One commit's change applied to a release's files, which are no git work tree (git looks for
    none above them, wherever the cache is)."""
    diff = _run("git", "-C", str(REPO), "show", "--format=", "--binary", commit)
    res = subprocess.run(["git", "apply", "-p1"], input=diff, cwd=root, capture_output=True, text=True,
                         env={**os.environ, "GIT_CEILING_DIRECTORIES": str(root.parent)})
    if res.returncode != 0:
        raise BuildError(f"fix {commit[:12]} does not apply to the release: {res.stderr.strip()}")


def release_targets(root: Path) -> list[str]:
    """The images a release's Dockerfile builds (0.1.0: operator and runtime, no runtime-pmml)."""
    stages = re.findall(r"^FROM\s+\S+\s+AS\s+(\S+)", (root / "Dockerfile").read_text(), re.M | re.I)
    return [t for t in IMAGES if t in stages]


def release_ref(target: str, version: str) -> str:
    return f"localhost/{IMAGES[target].name}:{version}"


def _release_ca() -> dict[str, str]:
    """The local CA for an older Dockerfile that declares no PIP_CERT or MAVEN_OPTS: pip's site
    configuration and Maven's mavenrc, mounted for the build alone like the bundles, name them."""
    conf = cache() / "build-ca"
    conf.mkdir(parents=True, exist_ok=True)
    (conf / "pip.conf").write_text(f"[global]\ncert = {LOCAL_CA_MOUNTS['/etc/ssl/certs/ca-certificates.crt']}\n")
    (conf / "mavenrc").write_text(f'MAVEN_OPTS="$MAVEN_OPTS {_local_ca_args()["MAVEN_OPTS"]}"\n')
    return {**LOCAL_CA_MOUNTS, str(conf / "pip.conf"): "/etc/pip.conf", str(conf / "mavenrc"): "/usr/local/etc/mavenrc"}


def build_release(version: str, base: str | None = None) -> dict[str, Path]:
    """Each of the release's images as an OCI archive named `localhost/<name>:<version>`, cached by
    the digest of its inputs (the target, the build arguments, the base, the release's tree)."""
    eng = engine()
    root, tree = release_tree(version)
    pull = base is not None
    base_ref = base or DEFAULT_BASE
    # 0.1.0's Dockerfile names no BASE_IMAGE: it builds FROM python:3.11-slim-bookworm, the name
    # the base made from Debian's packages is stored under.
    base_id = base_ref if pull else debian_base(eng)
    build_args = {"BASE_IMAGE": base_ref, "VERSION": version}
    out = {}
    for target in release_targets(root):
        image, ref = IMAGES[target], release_ref(target, version)
        archive = archive_path(image, inputs_digest(target, build_args, base_id, tree), version)
        if not archive.is_file():
            build_archive(eng, target, ref, build_args, pull, archive, context=root)
            keep_only(archive, image, version)
        out[target] = archive
        print_sizes(ref, archive)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="hack/images.py", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="build images into OCI archives (cached) and print their sizes")
    b.add_argument("targets", nargs="*", metavar="TARGET", help=f"any of {', '.join(IMAGES)} (default: all)")
    r = sub.add_parser("release", help="a release's images, from the commit releases/releases.toml records")
    r.add_argument("version")
    args = parser.parse_args(argv)
    if args.command == "release":
        try:
            build_release(args.version, os.environ.get("BASE_IMAGE") or None)
        except BuildError as e:
            print(f"error: {e}", file=sys.stderr)
            return 1
        return 0
    unknown = set(args.targets) - set(IMAGES)
    if unknown:
        parser.error(f"unknown target {', '.join(sorted(unknown))} (known: {', '.join(IMAGES)})")
    try:
        build(args.targets or list(IMAGES), os.environ.get("BASE_IMAGE") or None)
    except BuildError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
