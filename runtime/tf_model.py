"""TensorFlow SavedModels and frozen graphs: unpack, load once per Python worker, predict a batch.

A frozen graph (a binary GraphDef, variables folded into constants) travels to the executors as
our own archive too: ``frozen_graph.pb`` and ``graph.json`` (the descriptor's ``TensorFlowGraph``,
its tensor names), so one SparkFiles name and one cache serve both kinds.

Imported lazily: a job that serves only PMML never loads TensorFlow.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import time
import zipfile
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa

from scorestream.runtime import artifacts
from scorestream.api.descriptor import TensorFlowGraph
from scorestream.config import ArtifactPolicy

_lock = threading.Lock()
_loaded: "OrderedDict[str, SavedModel | FrozenGraph]" = OrderedDict()
_KEEP = 3  # models kept loaded per worker

GRAPH_FILE = "frozen_graph.pb"
GRAPH_NAMES_FILE = "graph.json"


_import_seconds: float | None = None  # how long this process took to import TensorFlow


def _tf():
    global _import_seconds
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    started = time.perf_counter()
    try:
        import tensorflow as tf
    except ModuleNotFoundError:
        raise RuntimeError("TensorFlow is not installed here: the PMML-only runtime image "
                           "(scorestream-runtime-pmml) serves PMML models; use scorestream-runtime for TensorFlow") from None

    if _import_seconds is None:
        _import_seconds = time.perf_counter() - started

    # One intra-op thread per worker: Spark already runs one task per core, and more threads
    # only contend (measured ~35% faster on 2 cores than TensorFlow's default).
    try:
        tf.config.threading.set_intra_op_parallelism_threads(1)
        tf.config.threading.set_inter_op_parallelism_threads(1)
    except RuntimeError:
        pass  # already initialised in this process: the settings are fixed by then
    return tf


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


@dataclass
class TensorFlowFunction:
    """A model called once per batch with one dense (None, n) input, giving one output. ``n_inputs``
    None: a frozen graph whose input width nothing in it declares."""

    fn: object
    input_name: str
    output_name: str
    n_inputs: int | None
    dtype: object

    def predict(self, x: np.ndarray) -> np.ndarray:
        tf = _tf()
        return np.asarray(self._call(tf.constant(x, dtype=self.dtype)))

    def _call(self, x):
        raise NotImplementedError


class SavedModel(TensorFlowFunction):
    def _call(self, x):
        return self.fn(**{self.input_name: x})[self.output_name]


def load(folder: Path) -> SavedModel:
    tf = _tf()
    model = tf.saved_model.load(str(folder))
    sigs = dict(model.signatures)
    if not sigs:
        raise ValueError("SavedModel has no signatures")
    name = "serving_default" if "serving_default" in sigs else ("predict" if "predict" in sigs else sorted(sigs)[0])
    fn = sigs[name]
    inputs = fn.structured_input_signature[1]
    if len(inputs) != 1:
        raise ValueError(f"signature {name!r} has {len(inputs)} inputs; one dense (None, n) input is supported")
    input_name, spec = next(iter(inputs.items()))
    if spec.shape.rank != 2 or spec.shape[1] is None:
        raise ValueError(f"signature {name!r} input {input_name!r} has shape {spec.shape}; (None, n) is supported")
    outputs = fn.structured_outputs
    output_name = sorted(outputs)[0]
    saved = SavedModel(fn, input_name, output_name, int(spec.shape[1]), spec.dtype)
    saved._keep = model  # the signature function needs its model alive
    return saved


def graph_archive(graph_def: bytes, names: TensorFlowGraph, target: Path) -> Path:
    """Zip a frozen graph with its tensor names, to hand it to executors as one file."""
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr(GRAPH_FILE, graph_def)
        z.writestr(GRAPH_NAMES_FILE, names.model_dump_json())
    return target


class FrozenGraph(TensorFlowFunction):
    """A GraphDef imported once into a function pruned to its input and output tensors: called
    like a SavedModel's signature, one call per batch."""

    def _call(self, x):
        return self.fn(x)


# Ops that are no model output even when nothing reads them.
_NOT_SINKS = {"NoOp", "Placeholder", "Const", "Assert", "SaveV2", "RestoreV2"}


def _tensor(name: str) -> str:
    return name if ":" in name else f"{name}:0"


def infer_names(graph_def, names: TensorFlowGraph) -> tuple[str, str]:
    """The input and output tensors: as named, else the one Placeholder and the one sink (an op
    whose outputs no other op reads). Ambiguity is a reason, never a guess."""
    given_in, given_out = names.input, names.output
    if given_in is None:
        placeholders = [n.name for n in graph_def.node if n.op == "Placeholder"]
        if len(placeholders) != 1:
            raise ValueError(f"frozen graph has {len(placeholders)} Placeholder ops "
                             f"({', '.join(placeholders[:5]) or 'none'}); name the input in graph.input")
        given_in = placeholders[0]
    if given_out is None:
        read = {i.lstrip("^").split(":")[0] for n in graph_def.node for i in n.input}
        sinks = [n.name for n in graph_def.node if n.name not in read and n.op not in _NOT_SINKS]
        if len(sinks) != 1:
            raise ValueError(f"frozen graph has {len(sinks)} sinks ({', '.join(sinks[:5]) or 'none'}); "
                             f"name the output in graph.output")
        given_out = sinks[0]
    return _tensor(given_in), _tensor(given_out)


# Ops whose output has their input's shape: the width is read past them.
_PASS_THROUGH = {"Identity", "Cast", "StopGradient", "Snapshot", "CheckNumerics", "PreventGradient",
                 "Relu", "Relu6", "Sigmoid", "Tanh", "Neg", "Abs", "Sqrt", "Rsqrt", "Square", "Exp", "Log"}
# Element-wise ops (a normalisation before the first layer): a constant operand of shape (n,) or
# (1, n) broadcast against the input says n, and the result keeps the input's shape.
_ELEMENTWISE = {"Add", "AddV2", "Sub", "Mul", "RealDiv", "Div", "Maximum", "Minimum", "BiasAdd", "SquaredDifference"}

# A matrix product's (transpose input, transpose weight) attributes: what tf.matmul writes for an
# input of known rank 2, and for one of unknown rank.
_MATMUL = {"MatMul": ("transpose_a", "transpose_b"), "BatchMatMul": ("adj_x", "adj_y"),
           "BatchMatMulV2": ("adj_x", "adj_y"), "BatchMatMulV3": ("adj_x", "adj_y")}


def _const_shape(nodes: dict, name: str) -> list[int] | None:
    """The shape of a constant tensor (a frozen weight), through Identity ops; None if it is none."""
    node = nodes.get(name.lstrip("^").split(":")[0])
    while node is not None and node.op == "Identity" and node.input:
        node = nodes.get(node.input[0].lstrip("^").split(":")[0])
    if node is None or node.op != "Const":
        return None
    return [d.size for d in node.attr["value"].tensor.tensor_shape.dim]


def input_width(graph_def, input_name: str) -> int | None:
    """The number of features a (None, n) input takes, read from the ops consuming it, for a graph
    whose input has no shape attribute (what ``optimize_for_inference`` writes) or a partly unknown
    one: the first matrix product's weight, (n, k) or (k, n) transposed, and any constant
    broadcast against the input on the way there. None when no op says; ops that disagree are an
    error."""
    nodes = {n.name: n for n in graph_def.node}
    readers: dict[str, list] = {}
    for n in graph_def.node:
        for i in n.input:
            if not i.startswith("^"):
                readers.setdefault(_tensor(i), []).append(n)
    widths, frontier, seen = set(), [_tensor(input_name)], set()
    while frontier:
        tensor = frontier.pop()
        for n in readers.get(tensor, []):
            if n.name in seen:
                continue
            seen.add(n.name)
            if n.op in _PASS_THROUGH:
                frontier.append(f"{n.name}:0")
            elif n.op in _ELEMENTWISE:
                for other in n.input:
                    shape = _const_shape(nodes, other) if _tensor(other) != tensor else None
                    if shape is not None and 1 <= len(shape) <= 2 and shape[-1] > 1:
                        widths.add(shape[-1])
                frontier.append(f"{n.name}:0")
            elif n.op in _MATMUL and _tensor(n.input[0]) == tensor and not n.attr[_MATMUL[n.op][0]].b:
                shape = _const_shape(nodes, n.input[1])
                if shape is not None and len(shape) == 2:
                    widths.add(shape[1 if n.attr[_MATMUL[n.op][1]].b else 0])
    if len(widths) > 1:
        raise ValueError(f"frozen graph input {input_name!r}: the ops reading it take {sorted(widths)} features")
    return widths.pop() if widths else None


def load_graph(graph_def_bytes: bytes, names: TensorFlowGraph) -> FrozenGraph:
    """Import a frozen GraphDef once (``wrap_function`` + ``import_graph_def``, as TensorFlow 2
    runs a TF1 graph) and prune it to one (None, n) input and one output. An input without a shape
    (or with an unknown n) is given one from the ops that read it (``input_width``); where none
    says, n stays unknown (``n_inputs`` None) and the caller's field count is tried (``check``)."""
    tf = _tf()
    graph_def = tf.compat.v1.GraphDef()
    try:
        graph_def.ParseFromString(graph_def_bytes)
    except Exception as e:  # protobuf's DecodeError: the bytes are not a GraphDef
        raise ValueError(f"frozen graph is not a binary GraphDef: {e}") from None
    if not graph_def.node:
        raise ValueError("frozen graph has no ops")
    input_name, output_name = infer_names(graph_def, names)
    _complete_input_shape(tf, graph_def, input_name)
    wrapped = tf.compat.v1.wrap_function(lambda: tf.compat.v1.import_graph_def(graph_def, name=""), [])
    graph = wrapped.graph
    try:
        x, y = graph.get_tensor_by_name(input_name), graph.get_tensor_by_name(output_name)
    except (KeyError, ValueError) as e:
        raise ValueError(f"frozen graph: {e}") from None
    if x.shape.rank not in (None, 2):
        raise ValueError(f"frozen graph input {input_name!r} has shape {x.shape}; (None, n) is supported")
    fn = wrapped.prune(x, y)
    n = x.shape[1] if x.shape.rank == 2 else None
    model = FrozenGraph(fn, input_name, output_name, int(n) if n is not None else None, x.dtype)
    model._keep = wrapped  # the pruned function needs its graph alive
    return model


def _complete_input_shape(tf, graph_def, input_name: str) -> None:
    """Give the input Placeholder the (None, n) shape its consumers imply, when its own shape
    attribute is absent or leaves n unknown, so that TensorFlow checks the graph against it on
    import. A shape of another rank is left as it is, for load_graph to refuse."""
    op = input_name.split(":")[0]
    node = next((n for n in graph_def.node if n.name == op), None)
    if node is None or node.op != "Placeholder":
        return
    shape = tf.TensorShape(node.attr["shape"].shape) if "shape" in node.attr else tf.TensorShape(None)
    if shape.rank is not None and (shape.rank != 2 or shape[1] is not None):
        return
    width = input_width(graph_def, input_name)
    if width is not None:
        node.attr["shape"].shape.CopyFrom(tf.TensorShape([shape[0] if shape.rank else None, width]).as_proto())


def check(model: "TensorFlowFunction", n_inputs: int) -> str | None:
    """Why ``model`` cannot be fed ``n_inputs`` features, or None: its input width against the
    count, and a row of zeros scored (which proves a graph whose width nothing declares)."""
    if model.n_inputs is not None and model.n_inputs != n_inputs:
        return f"model takes {model.n_inputs} inputs but {n_inputs} are configured"
    try:
        out = model.predict(np.zeros((1, n_inputs), dtype=np.float32))
    except Exception as e:  # TensorFlow's InvalidArgumentError: the width does not fit the graph
        return f"model cannot be fed {n_inputs} inputs: {_first_line(e)}"
    if out.shape[0] != 1:
        return f"model returned {out.shape[0]} rows for 1"
    return None


def _first_line(e: Exception) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0][:300]}" if text else type(e).__name__


def check_report(name: str, n_inputs: int) -> dict:
    """What the driver asks before a model may serve, answered in the Python worker that will score
    with it: load the archive handed out through SparkFiles and score a row of zeros. ``reason``:
    None when it may serve, else why not; the model stays loaded for the batches to come. And where
    the time went in this worker (seconds): importing TensorFlow (0 when it was already),
    loading the model (~0 when this worker had it already), scoring the row."""
    from pyspark import SparkFiles

    started = time.perf_counter()
    imported = _import_seconds is None
    report = {"reason": None, "pid": os.getpid(), "importSeconds": 0.0, "loadSeconds": 0.0, "predictSeconds": 0.0}
    try:
        _tf()
        report["importSeconds"] = (time.perf_counter() - started) if imported else 0.0
        t0 = time.perf_counter()
        model = cached(SparkFiles.get(name))
        report["loadSeconds"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        report["reason"] = check(model, n_inputs)
        report["predictSeconds"] = time.perf_counter() - t0
    except Exception as e:  # whatever TensorFlow raised: the model is bad, not the job
        report["reason"] = f"tensorflow model does not load: {_first_line(e)}"
    return report


def cached(archive_path: str) -> SavedModel | FrozenGraph:
    """The model in a SparkFiles archive, unpacked and loaded once per Python worker."""
    with _lock:
        model = _loaded.get(archive_path)
        if model is not None:
            _loaded.move_to_end(archive_path)
        else:
            # Our own archive (archive() or graph_archive() of what the driver checked), not a message's.
            with zipfile.ZipFile(archive_path) as z:
                if GRAPH_FILE in z.namelist():
                    names = TensorFlowGraph.model_validate_json(z.read(GRAPH_NAMES_FILE))
                    model = load_graph(z.read(GRAPH_FILE), names)
                else:
                    folder = Path(tempfile.mkdtemp(prefix="scorestream-tf-"))
                    try:
                        z.extractall(folder)
                        model = load(saved_model_folder(folder))
                    finally:
                        shutil.rmtree(folder, ignore_errors=True)  # the loaded graph no longer needs them
            _loaded[archive_path] = model
            # Swapped-out models go, the least recently used first; the ones still in use stay
            # (the serving model and a candidate, or the model a new one is about to replace).
            while len(_loaded) > _KEEP:
                _loaded.popitem(last=False)
        return model


def interpret(out: np.ndarray, output_name: str) -> tuple[np.ndarray, np.ndarray | None, pa.MapArray]:
    """Predictions from raw outputs, vectorised: the value for one output; for class scores the
    argmax as prediction and label, and every score under its class index."""
    n = out.shape[0]
    if out.ndim == 1 or (out.ndim == 2 and out.shape[1] == 1):
        values = out.reshape(-1).astype(np.float64)
        keys = pa.array(np.full(n, output_name, dtype=object), pa.string())
        return values, None, pa.MapArray.from_arrays(np.arange(n + 1, dtype=np.int32), keys, pa.array(values))
    flat = out.reshape(n, -1).astype(np.float64)
    k = flat.shape[1]
    best = flat.argmax(axis=1)
    keys = pa.array(np.tile(np.arange(k).astype(str), n), pa.string())
    outputs = pa.MapArray.from_arrays(np.arange(0, n * k + 1, k, dtype=np.int32), keys, pa.array(flat.ravel()))
    return best.astype(np.float64), best.astype(str), outputs
