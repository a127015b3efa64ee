"""Two peers' predictions for the same records, compared: the (K-TF) peer's against scorestream's
TensorFlow job's (or, when the job did not run, against scorestream's own TensorFlow scoring code,
runtime/tf_model.py, in this process).

Output messages are matched by key: the input's key i (`topics.preload`: record i is wine row
i mod 1599), which every peer's prediction repeats. Each score is compared relative to the larger
of the two; a label may differ only where its two scores are within the tolerance (a tie).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from scorestream.tools.demo import feed

TOLERANCE = 1e-5  # relative: float32 arithmetic in two builds of TensorFlow's kernels
SAMPLE = 1000


@dataclass
class Difference:
    """What comparing two peers' predictions found."""

    reference: str  # what the predictions were compared with
    checked: int = 0
    max_relative: float = 0.0
    max_absolute: float = 0.0
    worst: str | None = None  # the record and output of the largest relative difference
    labels_differ: list[str] = field(default_factory=list)  # keys whose label differs beyond a tie

    @property
    def within_tolerance(self) -> bool:
        return self.checked > 0 and self.max_relative <= TOLERANCE and not self.labels_differ

    def describe(self) -> str:
        if not self.checked:
            return f"no record in common with {self.reference}: nothing compared"
        text = (f"{self.checked:,} records against {self.reference}: max relative difference "
                f"{self.max_relative:.2e} (absolute {self.max_absolute:.2e}, {self.worst or 'none'}), tolerance {TOLERANCE:g}")
        if self.labels_differ:
            text += f"; labels differ for {len(self.labels_differ)} (keys {', '.join(self.labels_differ[:5])})"
        return text


def sample(outputs, n: int = SAMPLE) -> dict[bytes, dict]:
    """About `n` predictions spread evenly over a peer's output messages, by key."""
    step = max(1, len(outputs) // n)
    return {m.key: json.loads(m.value) for m in outputs[::step][:n]}


def matching(outputs, keys) -> dict[bytes, dict]:
    """The predictions among `outputs` for these keys."""
    keys = set(keys)
    return {m.key: json.loads(m.value) for m in outputs if m.key in keys}


def compare(reference: dict[bytes, dict], found: dict[bytes, dict], what: str) -> Difference:
    """`found`'s scores against `reference`'s, for the keys both have."""
    d = Difference(what)
    for key in sorted(set(reference) & set(found)):
        want, got = reference[key], found[key]
        d.checked += 1
        for name, (a, b) in _scores(want, got).items():
            absolute = abs(a - b)
            relative = absolute / max(abs(a), abs(b)) if absolute else 0.0
            if relative > d.max_relative:
                d.max_relative, d.max_absolute, d.worst = relative, absolute, f"record {key.decode()}, {name!r}"
        if str(want.get("label")) != str(got.get("label")) and not _tie(want, got):
            d.labels_differ.append(key.decode())
    return d


def _scores(want: dict, got: dict) -> dict[str, tuple[float, float]]:
    """Each output score, and the prediction, of both; an output only one has is no match."""
    a, b = want.get("outputs") or {}, got.get("outputs") or {}
    if set(a) != set(b):
        raise AssertionError(f"the peers' outputs differ in names: {sorted(a)} and {sorted(b)}")
    pairs = {name: (float(a[name]), float(b[name])) for name in a}
    if "label" not in want:  # one value: the prediction itself is the score
        pairs["prediction"] = (float(want["prediction"]), float(got["prediction"]))
    return pairs


def _tie(want: dict, got: dict) -> bool:
    """The two labels' scores within the tolerance of each other in both: either label is the
    argmax of the same numbers."""
    a, b = want.get("outputs") or {}, got.get("outputs") or {}
    first, second = str(want.get("label")), str(got.get("label"))
    if not {first, second} <= set(a) & set(b):
        return False
    return all(abs(float(s[first]) - float(s[second])) <= TOLERANCE * max(abs(float(s[first])), abs(float(s[second])))
               for s in (a, b))


def tf_model_predictions(savedmodel_zip: bytes, keys) -> dict[bytes, dict]:
    """Python TensorFlow's own answer on the records of these keys, in this process: the features as
    float32 in the wine columns' order (as the job feeds them), the serving signature's first
    output by name read as the job reads it (the argmax as prediction and label, each class's score
    under its index)."""
    import io
    import tempfile
    import zipfile

    import numpy as np
    import tensorflow as tf

    keys = sorted(keys)
    rows = feed.wine_rows()
    x = np.asarray([rows[int(k) % len(rows)][:11] for k in keys], dtype=np.float32)
    with tempfile.TemporaryDirectory() as tmp:
        zipfile.ZipFile(io.BytesIO(savedmodel_zip)).extractall(tmp)
        signature = tf.saved_model.load(tmp).signatures["serving_default"]
        (name, _), = signature.structured_input_signature[1].items()
        out = signature(**{name: x})
        scores = np.asarray(out[sorted(out)[0]], dtype=np.float64)
    found = {}
    for key, row in zip(keys, scores):
        best = int(row.argmax())
        found[key] = {"prediction": float(best), "label": str(best), "outputs": {str(k): float(v) for k, v in enumerate(row)}}
    return found
