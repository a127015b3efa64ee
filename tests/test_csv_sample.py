"""Samples as CSV with a header row (#32), besides JSON lines: one parser (``read_records``) for
`scorestream verify --sample`, spec.model.verification and the samples descriptors carry; numbers
read as the CSV writes them; errors that name lines and columns, never a sample's text."""

from __future__ import annotations

import base64
import json

import pytest

from scorestream.api.v1alpha1.modelserving import ModelServingSpec
from scorestream.api.verification import BadSample, Sample, read_records
from scorestream.operator import publish
from scorestream.runtime import verification
from scorestream.tools import cli
from scorestream.tools.demo import feed, models


def wine_csv(rows, header: bool = True) -> str:
    """The wine data as the report's data set file writes it: ';'-separated, a quoted header row,
    integers without a decimal point."""
    head = ";".join(f'"{c}"' for c in (*feed.WINE_COLUMNS, "quality")) + "\n" if header else ""
    return head + "".join(";".join(f"{v:g}" for v in r) + "\n" for r in rows)


def test_csv_records_keep_the_numbers_as_written():
    rows = feed.wine_rows()[:3]
    records = read_records(wine_csv(rows), "sample")
    assert records[0] == {**dict(zip(feed.WINE_COLUMNS, rows[0][:11])), "quality": 5}
    assert records[0]["free sulfur dioxide"] == 11 and type(records[0]["free sulfur dioxide"]) is int
    assert type(records[0]["citric acid"]) is int and type(records[0]["density"]) is float
    # Comma-separated, quoted text, a blank line, an empty cell (an absent field), exponents, signs.
    text = 'id,label,x,y\n1,"a, b",-1.5e-3,\n\n2,plain,+7,0.25\n'
    assert read_records(text, "s") == [{"id": 1, "label": "a, b", "x": -1.5e-3}, {"id": 2, "label": "plain", "x": 7, "y": 0.25}]
    assert read_records("a\tb\n1\t2.0\n", "s") == [{"a": 1, "b": 2.0}]


def test_json_lines_or_csv_by_extension_media_type_or_content():
    jsonl = "".join(json.dumps(r) + "\n" for r in ({"a": 1}, {"a": 2.5}))
    assert read_records(jsonl, "s") == read_records(jsonl, "s", "x.jsonl") == [{"a": 1}, {"a": 2.5}]
    one_column = "a\n1\n2\n"
    # One column: CSV by its name only (by content it is not told from text that is not JSON).
    assert read_records(one_column, "s", "/samples/x.csv") == [{"a": 1}, {"a": 2}]
    assert read_records(one_column, "s", "https://h/x.CSV?sig=1") == [{"a": 1}, {"a": 2}]
    assert read_records(one_column, "s", "data:text/csv;base64,...") == [{"a": 1}, {"a": 2}]
    with pytest.raises(BadSample, match="line 1 is not JSON"):
        read_records(one_column, "s")
    with pytest.raises(BadSample, match="line 1 is not JSON"):
        read_records("a,b\n1,2\n", "s", "x.jsonl")


@pytest.mark.parametrize("text, name, error", [
    (wine_csv(feed.wine_rows()[:2], header=False), None, "sample is CSV without a header row"),
    ("a,b,a\n1,2,3\n", None, "sample header column 3 repeats an earlier column's name"),
    ("a,,b\n1,2,3\n", None, "sample header column 2 is empty"),
    ("a,b\n1,2\nsecret-token,2,3\n", None, "sample line 3 has 3 fields, the header 2"),
    ('a,b\n1,"secret-token\n', None, "sample line 2 is not readable CSV"),
])
def test_unreadable_csv_is_refused_by_line_and_column_without_quoting_it(text, name, error):
    with pytest.raises(BadSample) as e:
        read_records(text, "sample", name)
    assert str(e.value).startswith(error), e.value
    assert "secret" not in str(e.value) and "7.4" not in str(e.value)


def test_spec_and_descriptor_samples_take_csv_through_the_same_parser(tmp_path):
    rows = feed.wine_rows()[:4]
    text = wine_csv(rows)
    spec = {"dataType": "wine", "kafka": {"bootstrapServers": "k:9092", "dataTopic": "d", "outputTopic": "o",
                                          "deadLetterTopic": "x"},
            "spark": {"image": "i"}, "model": {"name": "m", "version": "1", "format": "pmml", "uri": "/models/m.pmml"}}
    for uri in ("data:text/csv;base64," + base64.b64encode(text.encode()).decode(),
                "data:," + text.replace(";", "%3B").replace("\n", "%0A").replace('"', "%22").replace(" ", "%20")):
        spec["model"]["verification"] = {"uri": uri, "expectedField": "quality"}
        d = publish.descriptor(ModelServingSpec.model_validate(spec))
        assert d.verification == Sample(records=read_records(text, "s"), expectedField="quality")
    # A descriptor's sample by location, fetched as the job fetches it.
    path = tmp_path / "sample.csv"
    path.write_text(text)
    fetched = verification.sample_records(Sample(location=path.as_uri()), lambda loc: path.read_bytes())
    assert fetched == read_records(text, "s") and len(fetched) == 4


@pytest.mark.jvm  # the scorer's JVM, started by `verify`
def test_verify_takes_the_wine_data_set_as_csv(tmp_path, capsys):
    """`scorestream verify --sample winequality_red.csv`: the report's data set with its header row,
    every record scored by the JVM scorer, and a tampered expectation named by record and field."""
    rows = feed.wine_rows()
    model, sample = tmp_path / "tree.pmml", tmp_path / "winequality_red.csv"
    model.write_bytes(models.tree_pmml(rows))
    sample.write_text(wine_csv(rows))
    assert cli.main(["verify", str(model), "--sample", str(sample)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("PASS") and f"sample: {len(rows)} of {len(rows)} records predicted" in out, out

    # Every expected quality 20 above the data set's: each record is named off, by record and field.
    head = ";".join(f'"{c}"' for c in (*feed.WINE_COLUMNS, "quality")) + "\n"
    sample.write_text(head + "".join(";".join(f"{v:g}" for v in r[:11]) + f";{int(r[11]) + 20}\n" for r in rows[:20]))
    assert cli.main(["verify", str(model), "--sample", str(sample), "--expected-field", "quality",
                     "--tolerance", "5", "--json"]) == 1
    (result,) = json.loads(capsys.readouterr().out)["sets"]
    assert (result["records"], result["predicted"], result["failed"]) == (20, 20, 20), result
    assert [(f["record"], f["field"], f["kind"]) for f in result["failures"][:2]] == [(1, "quality", "off"),
                                                                                     (2, "quality", "off")]

    # A CSV without a header row is refused before anything runs, naming the file only.
    sample.write_text(wine_csv(rows[:5], header=False))
    assert cli.main(["verify", str(model), "--sample", str(sample)]) == 2
    err = capsys.readouterr().err
    assert "CSV without a header row" in err and "7.4" not in err, err
