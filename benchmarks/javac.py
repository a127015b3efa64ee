"""Java sources of the benchmark, compiled on first use into a jar cached outside git."""

from __future__ import annotations

import hashlib
import os
import subprocess
import tempfile
import zipfile
from pathlib import Path


def cache_dir() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "scorestream" / "bench"


def compiled_jar(name: str, sources_dir: Path, classpath: list[Path]) -> Path:
    """``javac --release 17`` of the folder's sources, named by their digest: built once."""
    sources = sorted(sources_dir.glob("*.java"))
    digest = hashlib.sha256(b"".join(s.name.encode() + s.read_bytes() for s in sources)).hexdigest()[:12]
    target = cache_dir() / f"{name}-{digest}.jar"
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:  # same filesystem: atomic rename
        out = Path(tmp) / "classes"
        res = subprocess.run(
            ["javac", "--release", "17", "-nowarn", "-cp", os.pathsep.join(map(str, classpath)), "-d", str(out),
             *map(str, sources)],
            capture_output=True, text=True,
        )
        if res.returncode != 0:
            raise RuntimeError(f"javac failed for {sources_dir}:\n{res.stdout}{res.stderr}")
        partial = Path(tmp) / target.name
        with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as jar:
            jar.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\n\n")
            for f in sorted(out.rglob("*.class")):
                jar.write(f, f.relative_to(out).as_posix())
        partial.replace(target)  # a concurrent reader never sees half a jar
    return target
