"""Model admission: before a model serves, score its verification sets with the serving code.

Two sets, either or both:
- the PMML's own ``<ModelVerification>`` rows (inputs and expected outputs), each expected output
  compared within its field's ``precision`` (relative) and ``zeroThreshold`` as the PMML
  specification defines them;
- a ``Sample`` carried in the descriptor (records in the input format): the share of records that
  must yield a prediction (default all), and each record's expected prediction where given.

Scoring happens in the JVM (``dev.scorestream.jvm.Verifier``), through the scorer's own code, never
a stand-in: the driver calls it over Py4J, ``scorestream verify`` runs it as a process. Comparing
and deciding happen here, once, for both. The time is bounded (``timeout``); running out of it
fails the verification, since the records not scored were not checked.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from scorestream.api.verification import (
    MAX_FAILURES_KEPT,
    MAX_SAMPLE_CHARS,
    BadSample,
    JvmAnswer,
    JvmRequest,
    Outcome,
    RecordFailure,
    Sample,
    SetResult,
    VerificationReport,
    read_records,
)

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT_SECONDS = 10.0
# A TensorFlow model's bound covers loading it, and the JVM's first one loads TensorFlow's native
# libraries first (JavaCPP unpacks them on a machine's first use).
TENSORFLOW_TIMEOUT_SECONDS = 60.0
# `scorestream verify` starts a JVM of its own for each model, which a job has running already;
# on a busy machine that start alone took 5-9 s of a 10 s bound.
CLI_TIMEOUT_SECONDS = 30.0

# request JSON -> answer JSON: dev.scorestream.jvm.Verifier.run, in the driver's JVM or a process.
RunVerifier = Callable[[str], str]


class VerificationError(ValueError):
    """The verification could not run at all (an unreadable sample, no JVM)."""


# -- the sets ------------------------------------------------------------------------------------


def sample_records(sample: Sample, fetch: Callable[[str], bytes | Path]) -> list[dict[str, Any]]:
    """The sample's records: inline, or fetched from its location as a model artifact would be."""
    if sample.records is not None:
        return sample.records
    content = fetch(sample.location or "")
    if isinstance(content, Path):
        raise VerificationError(f"sample location {sample.location} is a folder, not a JSON-lines or CSV file")
    # Before decoding: the fetch's own bound is a model's, far larger than a sample's.
    if len(content) > MAX_SAMPLE_CHARS:
        raise VerificationError(f"sample has more than {MAX_SAMPLE_CHARS} bytes")
    try:
        return read_records(content.decode(), "sample", sample.location)
    except UnicodeDecodeError:
        raise VerificationError("sample is not UTF-8 text") from None


# -- verifying -----------------------------------------------------------------------------------


def verify_pmml(path: str | Path, run: RunVerifier, *, label: str, sample: Sample | None = None,
                records: list[dict[str, Any]] | None = None,
                timeout: float = DEFAULT_TIMEOUT_SECONDS) -> VerificationReport:
    """Score the PMML's ``<ModelVerification>`` rows and the sample's records, and judge them."""
    started = time.monotonic()
    records = records if records is not None else (sample.records if sample is not None else None) or []
    request = JvmRequest(model=str(Path(path).resolve()), sample=[json.dumps(r) for r in records],
                         timeoutMillis=max(1, round(timeout * 1000)))
    try:
        answer = _ask(run, request)
    except VerificationError as e:
        return _failed(label, "pmml", str(e), started, timeout)
    except Exception as e:  # Py4JJavaError or a broken answer: the model is not verified
        return _failed(label, "pmml", _first_line(e), started, timeout)
    sets = []
    if answer.embedded is not None:
        sets.append(_embedded(answer))
    if sample is not None:
        sets.append(_sample(records, answer.sample, sample))
    return VerificationReport(model=label, format="pmml", sets=sets, seconds=time.monotonic() - started,
                              timeoutSeconds=timeout)


def verify_tensorflow(archive: str | Path, run: RunVerifier, *, label: str, inputs: list[str],
                      sample: Sample | None, records: list[dict[str, Any]] | None = None,
                      timeout: float = TENSORFLOW_TIMEOUT_SECONDS) -> tuple[str | None, VerificationReport | None]:
    """A TensorFlow model's archive (``tf_model.archive`` or ``graph_archive``) loaded and checked
    against its ``inputs`` in the JVM, and its sample scored there as a micro-batch scores records
    (``Verifier``). Returns why it cannot serve (None: it can), and the sample's report (None
    without a sample, or when the model cannot serve)."""
    started = time.monotonic()
    records = records if records is not None else (sample.records if sample is not None else None) or []
    request = JvmRequest(model=str(Path(archive).resolve()), format="tensorflow", inputs=list(inputs),
                         sample=[json.dumps(r) for r in records], timeoutMillis=max(1, round(timeout * 1000)))
    try:
        answer = _ask(run, request)
    except Exception as e:  # Py4J, the verifier's process: the model is not verified
        return None, _failed(label, "tensorflow", _first_line(e), started, timeout)
    if answer.reason is not None:
        return answer.reason, None
    if sample is None:
        return None, None
    return None, VerificationReport(model=label, format="tensorflow", sets=[_sample(records, answer.sample, sample)],
                                    seconds=time.monotonic() - started, timeoutSeconds=timeout)


def _ask(run: RunVerifier, request: JvmRequest) -> JvmAnswer:
    """The Verifier's answer, through a file (``JvmRequest.answerFile`` says why)."""
    import tempfile

    fd, name = tempfile.mkstemp(prefix="scorestream-verification-", suffix=".json")
    os.close(fd)
    try:
        inline = run(request.model_copy(update={"answerFile": name}).model_dump_json())
        text = inline.strip() or Path(name).read_text()
        return JvmAnswer.model_validate(json.loads(text))
    finally:
        Path(name).unlink(missing_ok=True)


def _failed(label: str, fmt: str, error: str, started: float, timeout: float) -> VerificationReport:
    return VerificationReport(model=label, format=fmt, error=error, seconds=time.monotonic() - started,
                              timeoutSeconds=timeout)


def _first_line(e: Exception) -> str:
    """Why verification could not run, without quoting what was read: the job's own reasons
    (ArtifactError, VerificationError, BadSample) are written to be shown; an engine's may quote
    the model or the sample, so only its type is."""
    from scorestream.runtime.artifacts import ArtifactError

    if isinstance(e, (ArtifactError, VerificationError, BadSample)):
        text = str(e).strip().splitlines()
        return text[0][:300] if text else type(e).__name__
    java = getattr(e, "java_exception", None)
    if java is not None:
        try:
            return f"{type(e).__name__} ({java.getClass().getName()})"
        except Exception:  # the gateway is gone: the Python type is all there is
            pass
    return type(e).__name__


class _Tally:
    def __init__(self, name: str):
        self.name = name
        self.predicted = self.off = self.failed = 0
        self.failures: list[RecordFailure] = []

    def fail(self, found: list[RecordFailure], off: bool = False) -> None:
        self.failed += 1
        self.off += off
        room = MAX_FAILURES_KEPT - len(self.failures)
        self.failures.extend(found[:max(0, room)])


def _no_prediction(res: Outcome, where: str, n: int) -> RecordFailure | None:
    """How a record failed to yield a prediction, if it did: dead-lettered (stage and reason, with
    any NaN outputs named), nothing predicted, or a NaN prediction."""
    nan = [k for k, v in (res.values or {}).items() if isinstance(v, float) and math.isnan(v)]
    nan_note = f"; NaN outputs: {', '.join(nan[:5])}" + (" …" if len(nan) > 5 else "") if nan else ""
    if res.error is not None:
        # The stage only: the scorer's error may quote the record's values.
        return RecordFailure(set=where, record=n, kind="no prediction", detail=f"failed at {res.stage}{nan_note}")
    if res.prediction is None and res.label is None:
        return RecordFailure(set=where, record=n, kind="no prediction", detail=nan_note.lstrip("; ") or None)
    if res.prediction is not None and math.isnan(res.prediction):
        return RecordFailure(set=where, record=n, kind="NaN", field="prediction")
    return None


def _number(x: Any) -> float | None:
    if isinstance(x, bool):
        return None
    if isinstance(x, (int, float)):
        return float(x)
    if isinstance(x, str):
        try:
            return float(x)
        except ValueError:
            return None
    return None


def _embedded(a: JvmAnswer) -> SetResult:
    e = a.embedded
    t = _Tally("ModelVerification")
    if e.tableLocator:
        # The rows live outside the PMML: nothing here can be checked, and that is not a pass.
        t.fail([RecordFailure(set=t.name, record=0, kind="unreadable",
                              detail="ModelVerification uses a TableLocator, which is not supported")])
    expected = [f for f in e.fields if f.field not in a.inputs]
    for n, (row, res) in enumerate(zip(e.rows, e.results), 1):
        problem = _no_prediction(res, t.name, n)
        if problem is not None:
            t.fail([problem])
            continue
        t.predicted += 1
        wrong = []
        for f in expected:
            text = row.get(f.column)
            if text is None or text == "":
                continue  # nothing expected of this field for this record
            if res.values is not None and f.field in res.values:
                actual = res.values[f.field]
            elif f.field == a.target:
                actual = res.label if a.classification and res.label is not None else res.prediction
            else:
                wrong.append(RecordFailure(set=t.name, record=n, kind="unreadable", field=f.field,
                                           detail="not an output of the model"))
                continue
            failure = _compare(t.name, n, f.field, text, actual, f.precision, f.zeroThreshold)
            if failure is not None:
                wrong.append(failure)
        if wrong:
            t.fail(wrong, off=True)
    return SetResult(set=t.name, records=len(e.rows), scored=len(e.results), predicted=t.predicted, off=t.off,
                     failed=t.failed, failures=t.failures)


def _compare(where: str, n: int, field: str, expected: str, actual: Any, precision: float,
             zero: float) -> RecordFailure | None:
    """The PMML rule: a number is acceptable within ``precision`` of the expected value, relative
    to it (so [x(1-p), x(1+p)]), and two values both within ``zeroThreshold`` of zero are equal
    (relative precision means nothing there). Anything else must be equal as text."""
    if actual is None:
        return RecordFailure(set=where, record=n, kind="no prediction", field=field)
    want, got = _number(expected), _number(actual)
    if isinstance(actual, float) and math.isnan(actual):
        return RecordFailure(set=where, record=n, kind="NaN", field=field)
    if want is not None and got is not None:
        if abs(want) <= zero and abs(got) <= zero:
            return None
        allowed = abs(want) * precision
        if abs(got - want) <= allowed:
            return None
        return RecordFailure(set=where, record=n, kind="off", field=field, difference=got - want, allowed=allowed)
    if str(actual) == expected:
        return None
    return RecordFailure(set=where, record=n, kind="off", field=field)


def _sample(records: list[dict[str, Any]], outcomes: list[Outcome], sample: Sample) -> SetResult:
    t = _Tally("sample")
    for n, (record, res) in enumerate(zip(records, outcomes), 1):
        problem = _no_prediction(res, t.name, n)
        if problem is not None:
            t.fail([problem])
            continue
        t.predicted += 1
        if sample.expectedField is None or record.get(sample.expectedField) is None:
            continue
        want = record[sample.expectedField]
        failure = _compare_sample(n, sample.expectedField, want, res, sample.tolerance)
        if failure is not None:
            t.fail([failure], off=True)
    return SetResult(set=t.name, records=len(records), scored=len(outcomes), predicted=t.predicted, off=t.off,
                     failed=t.failed, minShare=sample.minShare, failures=t.failures)


def _compare_sample(n: int, field: str, want: Any, res: Outcome, tolerance: float) -> RecordFailure | None:
    """A sample's expected prediction: a number within ``tolerance`` (absolute), or the class label."""
    w = _number(want)
    got = res.prediction if res.prediction is not None else _number(res.label)
    if w is not None and got is not None:
        if abs(got - w) <= tolerance:
            return None
        return RecordFailure(set="sample", record=n, kind="off", field=field, difference=got - w, allowed=tolerance)
    if res.label is not None and str(want) == res.label:
        return None
    return RecordFailure(set="sample", record=n, kind="off", field=field)


# -- the job -------------------------------------------------------------------------------------


def admit_pmml(path: str | Path, run: RunVerifier, *, label: str, data_type: str, sample: Sample | None,
               fetch: Callable[[str], bytes | Path], timeout: float = DEFAULT_TIMEOUT_SECONDS) -> VerificationReport:
    """The job's check of a PMML model before it serves; logged either way. The caller rejects the
    model with ``report.summary()`` unless ``report.passed``."""
    started = time.monotonic()
    try:
        records = sample_records(sample, fetch) if sample is not None else None
    except Exception as e:  # ArtifactError, VerificationError: the sample is unusable, so is the model
        report = _failed(label, "pmml", f"sample: {_first_line(e)}", started, timeout)
    else:
        report = verify_pmml(path, run, label=label, sample=sample, records=records, timeout=timeout)
    level = logging.INFO if report.passed else logging.WARNING
    log.log(level, "model %s for dataType %s: %s", label, data_type, report.summary())
    return report


def admit_tensorflow(archive: str | Path, run: RunVerifier, *, label: str, data_type: str, inputs: list[str],
                     sample: Sample | None, fetch: Callable[[str], bytes | Path],
                     timeout: float = TENSORFLOW_TIMEOUT_SECONDS) -> tuple[str | None, VerificationReport | None]:
    """The job's admission of a TensorFlow model, in the driver's JVM (``verify_tensorflow``): why
    it cannot serve, and its sample's report. The caller rejects the model with the reason, else
    unless ``report.passed``; a report is logged either way."""
    started = time.monotonic()
    try:
        records = sample_records(sample, fetch) if sample is not None else None
    except Exception as e:  # ArtifactError, VerificationError: the sample is unusable, so is the model
        reason, report = None, _failed(label, "tensorflow", f"sample: {_first_line(e)}", started, timeout)
    else:
        reason, report = verify_tensorflow(archive, run, label=label, inputs=inputs, sample=sample, records=records,
                                           timeout=timeout)
    if report is not None:
        log.log(logging.INFO if report.passed else logging.WARNING, "model %s for dataType %s: %s", label, data_type,
                report.summary())
    return reason, report


# -- scorestream verify --------------------------------------------------------------------------

HELP = "score a model's verification records and a sample as the job does before serving it"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model_file", help="a PMML file, a TensorFlow SavedModel (folder, zip or tar),"
                                      " or a frozen graph (a binary GraphDef, .pb)")
    p.add_argument("--inputs", help="a TensorFlow model's input fields, in order, comma-separated"
                                    " (default: the first sample record's numeric fields)")
    p.add_argument("--sample", help="records in the input format: one JSON object per line, or CSV with a"
                                    " header row naming the fields (by the .csv extension or the content)")
    p.add_argument("--format", choices=["pmml", "tensorflow"], default=None, help="default: from the file")
    p.add_argument("--graph-input", default=None, help="a frozen graph's input tensor (default: its one Placeholder)")
    p.add_argument("--graph-output", default=None, help="a frozen graph's output tensor (default: its one sink)")
    p.add_argument("--min-share", type=float, default=1.0, help="share of records that must yield a prediction (1)")
    p.add_argument("--expected-field", default=None, help="the record field holding the expected prediction")
    p.add_argument("--tolerance", type=float, default=1e-6, help="absolute tolerance for expected predictions")
    p.add_argument("--timeout", type=float, default=CLI_TIMEOUT_SECONDS,
                   help="seconds (30: this command starts a JVM of its own, which a job has running)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")


def process_runner() -> RunVerifier:
    """The Verifier in a JVM of its own, on the classpath the job's JVM has for it."""
    from scorestream.runtime import jvm

    home = os.environ.get("JAVA_HOME")
    java = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    if not java:
        raise VerificationError("java not found: install a JDK 17+ or set JAVA_HOME")
    cp = os.pathsep.join([str(jvm.scorer_jar()), *map(str, jvm.pmml4s_jars()), *map(str, jvm.tensorflow_jars()),
                          str(jvm.spark_jars_dir() / "*")])

    def run(request: str) -> str:
        # C1 only: this JVM lives a second or two, and C2's compiling never pays back in that time
        # (the report's tree on its 1,599 records: 2.3 s a model with HotSpot's default, 1.6-1.8 s
        # and half the CPU with C1 only).
        res = subprocess.run([java, "-XX:TieredStopAtLevel=1", "-cp", cp, "dev.scorestream.jvm.Verifier"],
                             input=request, capture_output=True, text=True, env=_verifier_env())
        if res.returncode != 0:
            # Not its stderr: the exception's text may quote the model or the sample. Its classes do not.
            raise VerificationError(f"the verifier exited with {res.returncode}{_exception_classes(res.stderr)}")
        lines = res.stdout.strip().splitlines()
        return lines[-1] if lines else ""

    return run


def _verifier_env() -> dict[str, str]:
    # Spark's SQL configuration, which the scorer's types are parsed with, resolves this host's
    # name unless SPARK_LOCAL_HOSTNAME is set: a container without a network or /etc/hosts entry
    # for its name (`buildah run --network=none`, a CI sandbox) has none. This JVM talks to no one.
    return {"TF_CPP_MIN_LOG_LEVEL": "2", "SPARK_LOCAL_HOSTNAME": "localhost", **os.environ}


_THROWN = re.compile(r"^(?:Exception in thread \"[^\"]*\"|Caused by:) ([\w.$]+)", re.MULTILINE)


def _exception_classes(stderr: str) -> str:
    """' (A caused by B ...)': the classes of the JVM's uncaught exception and its causes."""
    classes = [m.group(1) for m in _THROWN.finditer(stderr)]
    return f" ({' caused by '.join(dict.fromkeys(classes))})" if classes else ""


def cli(args: argparse.Namespace) -> int:
    path = Path(args.model_file)
    fmt = args.format or ("tensorflow" if path.is_dir() or path.suffix in (".zip", ".tar", ".gz", ".pb") else "pmml")
    if not path.exists():
        print(f"{path}: not found", file=sys.stderr)
        return 2
    sample = None
    if args.sample:
        try:
            records = read_records(Path(args.sample).read_text(), args.sample, args.sample)
            sample = Sample(records=records, minShare=args.min_share, expectedField=args.expected_field,
                            tolerance=args.tolerance)
        except (OSError, VerificationError, ValueError) as e:
            print(f"{args.sample}: {e}", file=sys.stderr)
            return 2
    if fmt == "pmml":
        report = verify_pmml(path, process_runner(), label=str(path), sample=sample, timeout=args.timeout)
    elif sample is None:
        report = VerificationReport(model=str(path), format="tensorflow", seconds=0.0, timeoutSeconds=args.timeout)
    else:
        inputs = args.inputs.split(",") if args.inputs else _numeric_fields(sample.records[0], args.expected_field)
        # The model's archive, as the job would ship it: gone with the command.
        with tempfile.TemporaryDirectory(prefix="scorestream-verify-") as scratch:
            started = time.monotonic()
            try:
                archive = _tensorflow_archive(path, args, Path(scratch))
            except ValueError as e:  # no saved_model.pb in it, an archive it cannot read
                reason, report = f"tensorflow model does not load: {e}", None
            else:
                # A model that does not load or cannot be fed these inputs fails once, as such,
                # not once per record.
                reason, report = verify_tensorflow(archive, process_runner(), label=str(path), inputs=inputs,
                                                   sample=sample, timeout=args.timeout)
            if reason is not None:
                report = _failed(str(path), "tensorflow", reason, started, args.timeout)
    if args.json:
        print(report.model_dump_json(indent=2))
    else:
        print(render(report))
    return 0 if report.passed and report.verified else 1


def _numeric_fields(record: dict[str, Any], expected: str | None) -> list[str]:
    """A TensorFlow model's input order when none is given: the first record's numeric fields."""
    return [k for k, v in record.items() if k != expected and _number(v) is not None and not isinstance(v, str)]


def _tensorflow_archive(path: Path, args: argparse.Namespace, scratch: Path) -> Path:
    """The archive the job would ship of a SavedModel folder or archive, or a frozen graph (made
    in ``scratch``)."""
    from scorestream.api.descriptor import TensorFlowGraph
    from scorestream.runtime import tf_model

    # A GraphDef's own file; saved_model.pb is a SavedModel's, not a graph.
    if (path.is_file() and path.suffix == ".pb" and path.name != "saved_model.pb") or args.graph_input or args.graph_output:
        names = TensorFlowGraph(input=args.graph_input, output=args.graph_output)
        return tf_model.graph_archive(path.read_bytes(), names, scratch / "model.graph.zip")
    if path.is_dir():
        return tf_model.archive(path, scratch / "model.zip")
    if path.suffix == ".zip":
        return path
    # A tar[.gz]: unpacked and zipped again, as the job does with one it fetches.
    from scorestream.config import ArtifactPolicy

    return tf_model.archive(tf_model.unpack(path.read_bytes(), scratch / "model", ArtifactPolicy()), scratch / "model.zip")


def render(report: VerificationReport) -> str:
    """The short report ``scorestream verify`` prints."""
    if report.error:
        head = "FAIL"
    elif not report.verified:
        head = "NOT VERIFIED"
    else:
        head = "PASS" if report.passed else "FAIL"
    lines = [f"{head} {report.model} ({report.format}) in {report.seconds:.2f}s"]
    if report.error:
        lines.append(f"  {report.error}")
    if not report.verified and not report.error:
        lines.append("  no <ModelVerification> in the model and no --sample given")
    for s in report.sets:
        lines.append(f"  {'ok  ' if s.passed else 'FAIL'} {s.summary().split(' — ')[0]}")
        for f in s.failures[:10]:
            lines.append(f"       {f.describe()}")
        if s.failed > min(10, len(s.failures)):
            lines.append(f"       ... {s.failed - min(10, len(s.failures))} more failed records")
    return "\n".join(lines)
