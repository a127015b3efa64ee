"""Model verification: what a descriptor may ask for, what the JVM answers, what the verdict says.

- ``Sample``: records a model's publisher sends with it (in the descriptor's ``verification``),
  the share of them that must yield a prediction, and optionally the expected prediction of each.
- ``JvmRequest`` / ``JvmAnswer``: the contract with ``dev.scorestream.jvm.Verifier``, which
  scores with the serving code and reports raw outcomes.
- ``VerificationReport``: the verdict, one type for the job (its rejection reason and
  ``/models``), ``scorestream verify`` and the tests.
"""

from __future__ import annotations

import csv
import json
import re
from collections.abc import Iterator
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

# Beyond these a verification set is a data set, not a check: publish fewer records.
MAX_SAMPLE_RECORDS = 10_000
# A model's inputs are far fewer; the bound keeps a header's checks and each row's dict small
# whoever wrote the sample (issue 48: 52,000 columns were 17 s of the operator's event loop).
MAX_SAMPLE_COLUMNS = 1_024
# The text of a sample, in characters: 10,000 records of a wide model, and no more. A larger
# sample is refused before a single line of it is split, so its size costs no memory of its own.
MAX_SAMPLE_CHARS = 64 * 1024 * 1024
# Blank lines are skipped, not records: without a bound a sample of newlines is work for nothing.
MAX_SAMPLE_LINES = 4 * MAX_SAMPLE_RECORDS
# Failures kept in a report (all are counted); a reason names the first few.
MAX_FAILURES_KEPT = 20


class Sample(BaseModel):
    """Records in the input format (JSON objects) to score before the model serves."""

    model_config = ConfigDict(extra="forbid")

    # Exactly one of: the records inline, or where a JSON-lines or CSV file of them is (as a model's location).
    records: list[dict[str, Any]] | None = Field(None, max_length=MAX_SAMPLE_RECORDS)
    location: str | None = None
    # The share of records that must yield a prediction (not dead-lettered, not NaN).
    minShare: float = Field(1.0, ge=0.0, le=1.0)
    # The record field holding each record's expected prediction (a number, or a class label);
    # records without it are only checked for a prediction.
    expectedField: str | None = None
    # How far a numeric prediction may be from the expected one (absolute).
    tolerance: float = Field(1e-6, ge=0.0)

    @model_validator(mode="after")
    def _one_source(self) -> Sample:
        if (self.records is None) == (self.location is None):
            raise ValueError("exactly one of records and location must be set")
        return self


class BadSample(ValueError):
    """Sample records that cannot be read."""


CSV_MEDIA_TYPES = ("text/csv", "text/tab-separated-values")
_CSV_SUFFIXES = (".csv", ".tsv")
_JSON_SUFFIXES = (".jsonl", ".ndjson", ".json")
_CSV_DELIMITERS = (",", ";", "\t", "|")
_INT = re.compile(r"[+-]?[0-9]+")
_FLOAT = re.compile(r"[+-]?([0-9]+\.[0-9]*|\.[0-9]+|[0-9]+)([eE][+-]?[0-9]+)?")


def read_records(text: str, origin: str, name: str | None = None) -> list[dict[str, Any]]:
    """Sample records: JSON lines (one JSON object per line), or CSV with a header row naming the
    fields. Which one: by ``name``'s extension (a path or URI: .csv, .tsv, .jsonl, .json) or media
    type (``text/csv``), else by content (a first line that is not a JSON object is CSV).

    Errors name the line, column and kind of problem, never the text: a sample may hold anything.
    The work is linear in the text and bounded by ``MAX_SAMPLE_CHARS``, ``MAX_SAMPLE_LINES``,
    ``MAX_SAMPLE_COLUMNS`` and ``MAX_SAMPLE_RECORDS``."""
    if len(text) > MAX_SAMPLE_CHARS:
        raise BadSample(f"{origin} has more than {MAX_SAMPLE_CHARS} characters")
    kind = _sample_kind(name)
    if kind is None:
        head = _head(text, origin)
        # By content, CSV has two fields or more in its header: one column is told by its name only.
        csv_like = bool(head) and not head[0].lstrip().startswith("{") and _delimiter(head)[1] > 1
        kind = "csv" if csv_like else "json"
    return _csv_records(text, origin) if kind == "csv" else _json_records(text, origin)


def _lines(text: str, origin: str) -> Iterator[str]:
    """The text's lines (``\n``, with a ``\r`` before it dropped), one at a time: a list of them
    would be as long as the text has newlines."""
    start, n = 0, 0
    while start < len(text):
        n += 1
        if n > MAX_SAMPLE_LINES:
            raise BadSample(f"{origin} has more than {MAX_SAMPLE_LINES} lines")
        end = text.find("\n", start)
        if end < 0:
            end = len(text)
        yield text[start:end].removesuffix("\r")
        start = end + 1


def _head(text: str, origin: str) -> list[str]:
    """The first two lines that are not blank."""
    head: list[str] = []
    for line in _lines(text, origin):
        if line.strip():
            head.append(line)
            if len(head) == 2:
                break
    return head


def _sample_kind(name: str | None) -> str | None:
    if not name:
        return None
    if name.startswith("data:"):
        media = name[len("data:"):].partition(",")[0].split(";")[0].strip().lower()
        return "csv" if media in CSV_MEDIA_TYPES else ("json" if media.endswith("json") else None)
    path = name.split("?")[0].split("#")[0].lower()
    if path.endswith(_CSV_SUFFIXES):
        return "csv"
    return "json" if path.endswith(_JSON_SUFFIXES) else None


def _json_records(text: str, origin: str) -> list[dict[str, Any]]:
    records = []
    for n, line in enumerate(_lines(text, origin), 1):
        if not line.strip():
            continue
        try:
            doc = json.loads(line)
        except json.JSONDecodeError as e:
            raise BadSample(f"{origin} line {n} is not JSON: {e.msg}") from None
        except RecursionError:
            # Nesting deeper than the interpreter's recursion limit: no record of a model is.
            raise BadSample(f"{origin} line {n} is nested too deeply") from None
        if not isinstance(doc, dict):
            raise BadSample(f"{origin} line {n} is not a JSON object")
        records.append(doc)
        if len(records) > MAX_SAMPLE_RECORDS:
            raise BadSample(f"{origin} has more than {MAX_SAMPLE_RECORDS} records")
    return records


def csv_value(cell: str) -> int | float | str | None:
    """A CSV cell as the CSV wrote it: an integer stays an int, a decimal number is a float, an
    empty cell is no value, anything else is text."""
    cell = cell.strip()
    if not cell:
        return None
    if _INT.fullmatch(cell):
        return int(cell)
    if _FLOAT.fullmatch(cell):
        return float(cell)
    return cell


def _csv_records(text: str, origin: str) -> list[dict[str, Any]]:
    head = _head(text, origin)
    if not head:
        return []
    # csv takes its lines from _lines (keeping their ends, which quoted cells may hold) rather than
    # from a copy of the whole text in a StringIO.
    reader = csv.reader((line + "\n" for line in _lines(text, origin)), delimiter=_delimiter(head)[0], strict=True)
    records: list[dict[str, Any]] = []
    header: list[str] | None = None
    try:
        for row in reader:
            if not any(cell.strip() for cell in row):
                continue  # blank lines, as in JSON lines
            if len(row) > MAX_SAMPLE_COLUMNS:
                raise BadSample(f"{origin} line {reader.line_num} has more than {MAX_SAMPLE_COLUMNS} fields")
            if header is None:
                header = [h.strip() for h in row]
                _check_header(header, origin)
                continue
            if len(row) != len(header):
                raise BadSample(f"{origin} line {reader.line_num} has {len(row)} fields, the header {len(header)}")
            # An empty cell is an absent field, as a JSON record leaves it out.
            records.append({h: v for h, v in zip(header, map(csv_value, row)) if v is not None})
            if len(records) > MAX_SAMPLE_RECORDS:
                raise BadSample(f"{origin} has more than {MAX_SAMPLE_RECORDS} records")
    except csv.Error as e:
        # csv's messages name the reader's state ("unexpected end of data"), never a cell.
        raise BadSample(f"{origin} line {reader.line_num} is not readable CSV: {e}") from None
    return records


def _check_header(header: list[str], origin: str) -> None:
    if not any(isinstance(csv_value(h), str) for h in header):
        raise BadSample(f"{origin} is CSV without a header row: its first line must name the fields")
    seen: set[str] = set()  # a set: the check is linear in the header, not quadratic
    for col, h in enumerate(header, 1):
        if not h:
            raise BadSample(f"{origin} header column {col} is empty")
        if h in seen:
            raise BadSample(f"{origin} header column {col} repeats an earlier column's name")
        seen.add(h)


def _delimiter(head: list[str]) -> tuple[str, int]:
    """The delimiter that splits the header into the most fields, and the first record into as
    many (``;`` in the wine data set, ``,`` in most CSV files), and that many fields."""
    def fields(line: str, d: str) -> int:
        try:
            return len(next(csv.reader([line], delimiter=d)))
        except csv.Error:
            return 0

    best, most = ",", 1
    for d in _CSV_DELIMITERS:
        n = fields(head[0], d)
        if n > most and (len(head) < 2 or fields(head[1], d) == n):
            best, most = d, n
    return best, most


class _Contract(BaseModel):
    model_config = ConfigDict(extra="forbid")


class JvmRequest(_Contract):
    model: str  # the PMML file, or a TensorFlow model's archive (SavedModel zip, or frozen graph's)
    format: Literal["pmml", "tensorflow"] = "pmml"
    inputs: list[str] | None = None  # a TensorFlow model's, in order
    sample: list[str] = Field(default_factory=list)  # JSON records, as text
    timeoutMillis: int
    answerFile: str | None = None  # the JVM writes its answer there (Verifier.Request says why)


class Outcome(_Contract):
    """One record scored by the serving code: a prediction, or the stage and reason it failed."""

    prediction: float | None = None
    label: str | None = None
    outputs: dict[str, float | None] | None = None
    values: dict[str, float | int | str | None] | None = None  # PMML4S's output row by name
    features: list[float] | None = None
    stage: str | None = None
    error: str | None = None


class VerificationField(_Contract):
    field: str
    column: str
    precision: float
    zeroThreshold: float


class Embedded(_Contract):
    """The PMML's own ``<ModelVerification>``."""

    recordCount: str | None = None
    tableLocator: bool = False
    fields: list[VerificationField]
    rows: list[dict[str, str]]
    results: list[Outcome] = Field(default_factory=list)  # fewer than rows when time ran out


class JvmAnswer(_Contract):
    inputs: list[str]
    reason: str | None = None  # why a TensorFlow model cannot serve (it does not load, or takes other inputs)
    outputs: list[str] | None = None
    target: str | None = None
    classification: bool | None = None
    embedded: Embedded | None = None
    sample: list[Outcome]
    timedOut: bool
    millis: float


FailureKind = Literal["no prediction", "NaN", "off", "unreadable"]


class RecordFailure(BaseModel):
    """One record that failed, and how. It names the record, the field and the kind of failure and
    gives numeric differences only: the records and the expected values may come from a fetched
    sample or artifact, and whatever a rejection shows (status, Events, /models, logs) is readable
    by whoever published the model, who need not be who may read what the driver fetched."""

    model_config = ConfigDict(extra="forbid")

    set: Literal["ModelVerification", "sample"]
    record: int  # 1-based, in its set
    kind: FailureKind
    field: str | None = None  # the output compared
    difference: float | None = None  # actual - expected, when both are numbers
    allowed: float | None = None  # the largest |difference| accepted
    detail: str | None = None  # the scorer's stage, or the job's own words; never the record's

    def describe(self) -> str:
        where = f"record {self.record}"
        if self.kind == "off":
            if self.difference is not None:
                return f"{where}: {self.field} off by {_num(self.difference)} (allowed {_num(self.allowed)})"
            return f"{where}: {self.field} is not the expected label"
        if self.kind == "NaN":
            return f"{where}: {self.field or 'prediction'} is NaN"
        return f"{where}: {self.kind}" + (f" ({self.detail})" if self.detail else "")


class SetResult(BaseModel):
    """One verification set's outcome."""

    model_config = ConfigDict(extra="forbid")

    set: Literal["ModelVerification", "sample"]
    records: int  # in the set
    scored: int  # scored before the time ran out
    predicted: int  # yielded a prediction (not NaN)
    off: int  # predicted, but not the expected output within its tolerance
    failed: int  # records with any failure
    minShare: float = 1.0  # of records that must yield a prediction
    failures: list[RecordFailure] = Field(default_factory=list)  # the first MAX_FAILURES_KEPT

    @property
    def passed(self) -> bool:
        if self.scored < self.records:
            return False
        if self.set == "ModelVerification":  # the producer's own records: every one must hold
            return self.failed == 0
        share = self.predicted / self.records if self.records else 1.0
        return share >= self.minShare and self.off == 0

    def summary(self) -> str:
        if self.scored < self.records:
            head = f"{self.set}: only {self.scored} of {self.records} records scored in time"
        elif self.set == "sample":
            share = self.predicted / self.records if self.records else 1.0
            head = (f"{self.set}: {self.predicted} of {self.records} records predicted ({share:.1%}, "
                    f"{self.minShare:.0%} required), {self.failed} failed")
        else:
            head = f"{self.set}: {self.failed} of {self.records} records failed"
        if self.failures:
            head += " — " + "; ".join(f.describe() for f in self.failures[:3])
            if self.failed > 3:
                head += f"; and {self.failed - 3} more"
        return head


class VerificationReport(BaseModel):
    """Whether a model may serve, from scoring its verification sets with the serving code."""

    model_config = ConfigDict(extra="forbid")

    model: str  # name:version, or the file
    format: Literal["pmml", "tensorflow"]
    sets: list[SetResult] = Field(default_factory=list)
    seconds: float  # verification alone, not fetching or parsing the model
    timeoutSeconds: float
    error: str | None = None  # the model could not be verified at all

    @property
    def passed(self) -> bool:
        return self.error is None and all(s.passed for s in self.sets)

    @property
    def verified(self) -> bool:
        """Something was checked: a model with neither set passes unverified, and says so."""
        return bool(self.sets)

    def summary(self) -> str:
        took = f"in {self.seconds:.2f}s"
        if self.error:
            return f"verification failed {took}: {self.error}"
        if not self.sets:
            return f"not verified: no ModelVerification in the model and no sample ({took})"
        verdict = "verification passed" if self.passed else "verification failed"
        return f"{verdict} {took}: " + "; ".join(s.summary() for s in self.sets)


def _num(x: float | str | None) -> str:
    if isinstance(x, float):
        return f"{x:.6g}"
    return str(x)
