"""Models the driver has checked, and which one serves each dataType.

A descriptor becomes a ``LoadedModel`` only after the driver fetched it, parsed it with the engine
that will score it and checked its inputs against the record fields. Only then may it replace
the serving model; a bad one is rejected with a reason and changes nothing.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from scorestream.runtime import artifacts, jvm
from scorestream.runtime import verification
from scorestream.api.descriptor import ModelDescriptor
from scorestream.api.job_http import CandidateInfo, ModelInfo, Rejection
from scorestream.api.scoring import Route, RoutingTable
from scorestream.api.verification import VerificationReport
from scorestream.config import JobConfig

log = logging.getLogger(__name__)


class ModelRejected(ValueError):
    """A model that must not serve, and why."""


def normalize(name: str) -> str:
    """Field names as the JVM scorer matches them (lower case, other runs -> '_')."""
    out, gap = [], False
    for c in name.lower():
        if c.isascii() and c.isalnum():
            if gap and out:
                out.append("_")
            out.append(c)
            gap = False
        else:
            gap = True
    return "".join(out)


@dataclass(frozen=True)
class LoadedModel:
    name: str
    version: str
    description: str
    data_type: str
    format: str
    inputs: tuple[str, ...]
    file: str  # the file executors fetch through SparkFiles
    digest: str
    since: float = field(default_factory=time.time)
    verification: VerificationReport | None = None

    @property
    def route(self) -> str:
        """How records and statistics name the model: ``name:version``."""
        return f"{self.name}:{self.version}"

    def info(self) -> ModelInfo:
        return ModelInfo(name=self.name, version=self.version, description=self.description, dataType=self.data_type,
                         format=self.format, inputs=list(self.inputs), file=self.file, digest=self.digest,
                         since=self.since, verification=self.verification)


class ModelLoader:
    """Turns descriptors into checked models. ``add_file`` hands a file to the executors;
    ``describe_pmml`` parses a PMML file in the JVM; ``run_verifier`` (the driver JVM's
    ``Verifier``) scores a model's verification records, and loads and checks a TensorFlow model's
    archive against its inputs."""

    def __init__(self, config: JobConfig, add_file: Callable[[str], None], describe_pmml: Callable[[str], dict],
                 run_verifier: Callable[[str], str] | None = None,
                 drift_baseline: Callable[[str, str, str, list[str], list[dict]], int] | None = None):
        self.config = config
        self.add_file = add_file
        self.describe_pmml = describe_pmml
        # dev.scorestream.jvm.Verifier.run; None: PMML models serve unverified, TensorFlow models not at all
        self.run_verifier = run_verifier
        self.drift_baseline = drift_baseline  # pipeline.BatchScorer.drift_baseline; None: no drift counted
        self.dir = Path(config.work_dir) / "models"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.fields = [normalize(f) for f in config.input.fields] if config.input.fields else None

    def load(self, d: ModelDescriptor) -> LoadedModel:
        if ":" in d.name:
            raise ModelRejected(f"model name {d.name!r} must not contain ':'")
        steps = _Steps()
        try:
            content = artifacts.content(d.data, d.location, self.config.artifacts)
        except artifacts.ArtifactError as e:
            raise ModelRejected(f"cannot fetch model: {e}") from None
        steps.done("fetch")
        try:
            if d.format == "pmml":
                return self._pmml(d, content)
            return self._tensorflow(d, content, steps)
        except ModelRejected:
            raise
        except Exception as e:  # whatever the engine raised: the model is bad, not the job
            raise ModelRejected(f"{d.format} model does not load: {_short(e)}") from None

    def _stem(self, d: ModelDescriptor, digest: str) -> str:
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in f"{d.data_type}-{d.name}-{d.version}")
        return f"{safe[:80]}-{digest[:12]}"

    def _check_inputs(self, inputs: list[str]) -> None:
        if self.fields is None:
            return
        missing = [i for i in inputs if normalize(i) not in self.fields]
        if missing:
            raise ModelRejected(f"model inputs not among the record fields: {', '.join(missing)}")

    def _pmml(self, d: ModelDescriptor, content: bytes | Path) -> LoadedModel:
        if isinstance(content, Path):
            raise ModelRejected(f"{d.location} is a folder, not a PMML document")
        digest = hashlib.sha256(content).hexdigest()
        path = self.dir / f"{self._stem(d, digest)}.pmml"
        if not path.exists():
            path.write_bytes(content)
        info = self.describe_pmml(str(path))
        inputs = list(info["inputs"])
        self._check_inputs(inputs)
        report = None
        if self.run_verifier is not None:
            report = verification.admit_pmml(path, self.run_verifier, label=d.label, data_type=d.data_type,
                                             sample=d.verification,
                                             fetch=lambda loc: artifacts.content(None, loc, self.config.artifacts))
            if not report.passed:
                raise ModelRejected(report.summary())
        self.add_file(str(path))
        self._baseline(d, "pmml", path, inputs)
        return LoadedModel(d.name, d.version, d.description, d.data_type, "pmml", tuple(inputs), path.name, digest,
                           verification=report)

    def _baseline(self, d: ModelDescriptor, fmt: str, path: Path, inputs: list[str]) -> None:
        """The model's drift baseline: the descriptor's baseline records, else its verification
        sample, which it has just passed (a sample at a location is fetched again: the verifier
        keeps no records)."""
        sample = d.baseline or d.verification
        if self.drift_baseline is None or sample is None:
            return
        try:
            records = verification.sample_records(sample,
                                                  lambda loc: artifacts.content(None, loc, self.config.artifacts))
        except (artifacts.ArtifactError, ValueError) as e:  # VerificationError, BadSample: no content quoted
            raise ModelRejected(f"drift baseline: {e}") from None
        n = self.drift_baseline(f"{d.name}:{d.version}", fmt, str(path), inputs, records)
        log.info("model %s: drift baseline of %d sample records", d.label, n)

    def _tensorflow(self, d: ModelDescriptor, content: bytes | Path, steps: "_Steps | None" = None) -> LoadedModel:
        from scorestream.runtime import tf_model

        steps = steps or _Steps()

        if not jvm.has_tensorflow():
            raise ModelRejected(jvm.NO_TENSORFLOW)
        inputs = d.inputs or self.config.input.fields
        if not inputs:
            raise ModelRejected("a TensorFlow model needs its input order: set inputs in the descriptor or input.fields")
        self._check_inputs(list(inputs))
        if d.graph is not None:
            # A frozen graph: its bytes and names are shipped as they are, for the JVM to parse.
            if isinstance(content, Path):
                raise ModelRejected(f"{d.location} is a folder, not a frozen graph (a binary GraphDef)")
            names = d.graph.model_dump_json().encode()
            # The names choose the tensors: the same bytes under other names are another model.
            digest = hashlib.sha256(content + b"\0" + names).hexdigest()
            archive = self.dir / f"{self._stem(d, digest)}.graph.zip"
            if not archive.exists():
                tf_model.graph_archive(content, d.graph, archive.with_suffix(".tmp"))
                archive.with_suffix(".tmp").replace(archive)
        else:
            if isinstance(content, Path):
                digest = _folder_digest(content)
                folder = content
                stem = self._stem(d, digest)
            else:
                digest = hashlib.sha256(content).hexdigest()
                stem = self._stem(d, digest)
                try:
                    folder = tf_model.unpack(content, self.dir / stem, self.config.artifacts)
                except ValueError as e:
                    raise ModelRejected(str(e)) from None
            archive = self.dir / f"{stem}.zip"
            if not archive.exists():
                tf_model.archive(folder, archive.with_suffix(".tmp"))
                archive.with_suffix(".tmp").replace(archive)
        if self.run_verifier is None:
            raise ModelRejected("this job cannot load a TensorFlow model (no JVM verifier)")
        steps.done("unpack")
        reason, report = verification.admit_tensorflow(
            archive, self.run_verifier, label=d.label, data_type=d.data_type, inputs=list(inputs),
            sample=d.verification, fetch=lambda loc: artifacts.content(None, loc, self.config.artifacts))
        steps.done("admission")
        if reason is not None:
            raise ModelRejected(reason)
        if report is not None and not report.passed:
            raise ModelRejected(report.summary())
        self.add_file(str(archive))
        self._baseline(d, "tensorflow", archive, list(inputs))
        steps.done("ship+baseline")
        log.info("tensorflow model %s admitted: %s (of which verification %.0f ms)", d.label, steps,
                 1000 * (report.seconds if report else 0))
        return LoadedModel(d.name, d.version, d.description, d.data_type, "tensorflow", tuple(inputs), archive.name, digest,
                           verification=report)


class _Steps:
    """Where a model's load went, step by step, for the log."""

    def __init__(self):
        self._last = time.monotonic()
        self.times: dict[str, float] = {}

    def done(self, step: str) -> None:
        now = time.monotonic()
        self.times[step] = now - self._last
        self._last = now

    def __str__(self) -> str:
        return ", ".join(f"{k} {v * 1000:.0f} ms" for k, v in self.times.items())


def _folder_digest(folder: Path) -> str:
    h = hashlib.sha256()
    for f in sorted(folder.rglob("*")):
        if f.is_file():
            h.update(f.relative_to(folder).as_posix().encode())
            h.update(f.read_bytes())
    return h.hexdigest()


def _short(e: Exception) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0][:300]}" if text else type(e).__name__


@dataclass(frozen=True)
class Candidate:
    """A model on trial next to the serving one: a canary takes a share of the records (by key
    hash, so a key stays with one version), a shadow scores every record without being written."""

    model: LoadedModel
    strategy: str  # "Canary" | "Shadow"
    basis_points: int  # the canary's share of records, in 1/10000; 0 for a shadow

    @property
    def percent(self) -> float:
        return self.basis_points / 100

    def info(self) -> CandidateInfo:
        return CandidateInfo(**dict(self.model.info()), strategy=self.strategy, percent=self.percent)


@dataclass(frozen=True)
class Snapshot:
    """The models of one micro-batch: fixed when the batch starts, so it is scored by one version
    per dataType (and, during a canary or shadow, its one candidate)."""

    generation: int
    models: dict[str, LoadedModel]
    candidates: dict[str, Candidate] = field(default_factory=dict)

    def all_models(self) -> list[LoadedModel]:
        return [*self.models.values(), *(c.model for c in self.candidates.values())]


class ModelRegistry:
    """The serving model and candidate per dataType, and a bounded record of what was rejected."""

    def __init__(self, history: int = 50):
        self._lock = threading.Lock()
        self._models: dict[str, LoadedModel] = {}
        self._candidates: dict[str, Candidate] = {}
        self._generation = 0
        self.rejected: deque[Rejection] = deque(maxlen=history)
        # The list above is what /models shows and forgets; the metric counts every rejection.
        self.rejections = 0
        self.switches = 0

    def install(self, model: LoadedModel) -> bool:
        with self._lock:
            current = self._models.get(model.data_type)
            if current is not None and _same(current, model):
                return False  # the same model again (a replay, a re-publish): nothing changes
            self._models[model.data_type] = model
            candidate = self._candidates.get(model.data_type)
            if candidate is not None and _same(candidate.model, model):
                # The candidate promoted: one generation, so no batch sees it as both.
                del self._candidates[model.data_type]
            self._generation += 1
            if current is not None:
                self.switches += 1
        log.info("serving %s for dataType %s (%s)", model.route, model.data_type, model.format)
        return True

    def install_candidate(self, model: LoadedModel, strategy: str, basis_points: int) -> bool:
        candidate = Candidate(model, strategy, basis_points)
        with self._lock:
            old = self._candidates.get(model.data_type)
            if old is not None and _same(old.model, model) and (old.strategy, old.basis_points) == (strategy, basis_points):
                return False
            current = self._models.get(model.data_type)
            if current is not None and _same(current, model):
                # Promoted already (a replay of the topic before the candidate's tombstone).
                log.info("candidate %s for dataType %s already serves", model.route, model.data_type)
                return False
            self._candidates[model.data_type] = candidate
            self._generation += 1
        log.info("candidate %s for dataType %s: %s %.2f%%", model.route, model.data_type, strategy, candidate.percent)
        return True

    def withdraw_candidate(self, data_type: str) -> bool:
        with self._lock:
            gone = self._candidates.pop(data_type, None)
            if gone is not None:
                self._generation += 1
        if gone is not None:
            log.info("candidate %s for dataType %s withdrawn", gone.model.route, data_type)
        return gone is not None

    def reject(self, label: str, data_type: str | None, reason: str) -> None:
        log.warning("model %s for dataType %s rejected: %s", label, data_type, reason)
        with self._lock:
            self.rejected.append(Rejection(model=label, dataType=data_type, reason=reason, at=time.time()))
            self.rejections += 1

    def snapshot(self) -> Snapshot:
        with self._lock:
            return Snapshot(self._generation, dict(self._models), dict(self._candidates))

    def serving(self) -> dict[str, ModelInfo]:
        return {dt: m.info() for dt, m in self.snapshot().models.items()}

    def candidates(self) -> dict[str, CandidateInfo]:
        return {dt: c.info() for dt, c in self.snapshot().candidates.items()}


def _same(a: LoadedModel, b: LoadedModel) -> bool:
    return a.digest == b.digest and a.route == b.route


def _route(m: LoadedModel) -> Route:
    return Route(key=m.route, format=m.format, file=m.file, inputs=list(m.inputs))


def routing_table(config: JobConfig, snap: Snapshot, protobuf_fields: dict | None) -> RoutingTable:
    """The JVM scorer's table for the batches of one snapshot: dataType -> model (and candidate),
    how to decode records, where results go. The batch id is set per batch."""
    routes = {dt: _route(m) for dt, m in sorted(snap.models.items())}
    for dt, c in snap.candidates.items():
        if dt in routes:  # a candidate needs a serving model to stand next to
            candidate = _route(c.model).model_copy(update={"mode": c.strategy.lower(), "share": c.basis_points})
            routes[dt] = routes[dt].model_copy(update={"candidate": candidate})
    return RoutingTable(
        dataTypeField=config.input.data_type_field,
        served=config.data_types or None,
        routes=routes,
        protobuf=protobuf_fields,
        outputTopic=config.kafka.output_topic,
        deadLetterTopic=config.kafka.dead_letter_topic,
    )
