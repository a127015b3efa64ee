"""TensorFlow SavedModels and frozen graphs as the job ships them to its JVMs: one zip each.

A SavedModel is unpacked from a model message within the artifact policy's limits and zipped
again, from what was checked; a frozen graph (a binary GraphDef, variables folded into
constants) travels as our own archive too: ``frozen_graph.pb`` and ``graph.json`` (the
descriptor's ``TensorFlowGraph``, its tensor names), so one SparkFiles name serves both kinds.
The JVM loads them (``dev.scorestream.jvm.TensorFlowModel``): no TensorFlow in Python here.
"""

from __future__ import annotations

import zipfile
from pathlib import Path

from scorestream.runtime import artifacts
from scorestream.api.descriptor import TensorFlowGraph
from scorestream.config import ArtifactPolicy

# dev.scorestream.jvm.TensorFlowModel.GRAPH_FILE and GRAPH_NAMES_FILE
GRAPH_FILE = "frozen_graph.pb"
GRAPH_NAMES_FILE = "graph.json"


def unpack(data: bytes, target: Path, policy: ArtifactPolicy) -> Path:
    """Extract a SavedModel archive (zip or tar[.gz]) from a model message within the policy's
    limits, and return the folder holding saved_model.pb."""
    try:
        artifacts.unpack(data, target, policy)
    except artifacts.ArtifactError as e:
        raise ValueError(str(e)) from None
    return saved_model_folder(target)


def saved_model_folder(target: Path) -> Path:
    found = sorted(p.parent for p in target.rglob("saved_model.pb"))
    if not found:
        raise ValueError("no saved_model.pb in the model archive")
    return found[0]


def archive(folder: Path, target: Path) -> Path:
    """Zip a SavedModel folder, to hand it to executors as one file."""
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as z:
        for f in sorted(folder.rglob("*")):
            if f.is_file():
                z.write(f, f.relative_to(folder).as_posix())
    return target


def graph_archive(graph_def: bytes, names: TensorFlowGraph, target: Path) -> Path:
    """Zip a frozen graph with its tensor names, to hand it to executors as one file."""
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr(GRAPH_FILE, graph_def)
        z.writestr(GRAPH_NAMES_FILE, names.model_dump_json())
    return target
