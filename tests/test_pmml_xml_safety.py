"""PMML is untrusted input (issue #15): the JVM checks every file with a hardened parser before
PMML4S reads it. No DOCTYPE at all (so no external entities, no external DTD, no error-based DTD
echoing a local file), bounded size and nesting, and reasons that never quote the file.

Driven directly in the JVM, as the driver describes a model: no streaming query, no broker.
"""

from __future__ import annotations

import http.server
import re
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest

from scorestream.tools.demo import feed, models

pytestmark = [pytest.mark.spark]

CANARY = "CANARY-7d1c-not-for-your-eyes"
DOCTYPE_REFUSED = "PMML with a DOCTYPE is refused: DTDs and entities are not allowed"


@pytest.fixture(scope="module")
def spark(jvm_session):
    return jvm_session


@pytest.fixture(scope="module")
def jvm(spark):
    return spark.sparkContext._jvm


class Listener:
    """A local HTTP server that counts the requests it is sent."""

    def __init__(self):
        self.paths: list[str] = []
        seen = self.paths

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                seen.append(self.path)
                body = b"FETCHED" if self.path.endswith("/ent") else b""
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def listener():
    lis = Listener()
    yield lis
    lis.close()


@pytest.fixture(scope="module")
def canary_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("secret") / "canary.txt"
    path.write_text(CANARY)
    return path


def pmml_with(doctype: str, text: str = "&e;") -> bytes:
    """The demo tree with a DOCTYPE after the XML declaration and ``text`` in the Timestamp, where
    an entity reference is expanded into the document (an external one is not legal in an
    attribute value)."""
    decl, rest = models.tree_pmml().split(b"\n", 1)
    assert decl.startswith(b"<?xml")
    body, n = re.subn(rb"<Timestamp>[^<]*</Timestamp>", b"<Timestamp>" + text.encode() + b"</Timestamp>", rest, count=1)
    assert n == 1
    return decl + b"\n" + doctype.encode() + b"\n" + body


def write(tmp_path: Path, name: str, data: bytes) -> str:
    path = tmp_path / name
    path.write_bytes(data)
    return str(path)


def java_error(jvm, call) -> str | None:
    """What the JVM threw, stack and causes included (pyspark turns some Java exceptions into its
    own, keeping the original), or None when the call returned."""
    try:
        call()
    except Exception as e:
        origin = getattr(e, "java_exception", None) or getattr(e, "_origin", None)
        assert origin is not None, repr(e)
        return jvm.org.apache.spark.util.Utils.exceptionString(origin)
    return None


def describe_error(jvm, path: str) -> str:
    """The whole Java exception describe throws: nothing of it may quote a file."""
    error = java_error(jvm, lambda: jvm.dev.scorestream.jvm.Scorer.describe(path))
    assert error is not None, "describe accepted it"
    assert error.startswith("java.lang.IllegalArgumentException: "), error.splitlines()[0]
    return error


def pmml4s_error(jvm, path: str) -> str | None:
    """PMML4S on its own, as it was called before the check: its error, or None if it loaded."""
    return java_error(jvm, lambda: jvm.org.pmml4s.model.Model.fromFile(jvm.java.io.File(path)))


def error_based_payloads(tmp_path: Path, canary_file: Path) -> dict[str, bytes]:
    """The classic error-based DTD: a parameter entity reads the file, another puts it into a
    system id that cannot be opened, and the parser names that path in its error."""
    evil = tmp_path / "evil.dtd"
    evil.write_text(
        f'<!ENTITY % file SYSTEM "{canary_file.as_uri()}">\n'
        "<!ENTITY % eval \"<!ENTITY &#x25; error SYSTEM 'file:///nonexistent/%file;'>\">\n"
        "%eval;\n%error;\n"
    )
    return {
        "internal-subset": pmml_with(f'<!DOCTYPE PMML [<!ENTITY % x SYSTEM "{evil.as_uri()}">%x;]>', "x"),
        "external-subset": pmml_with(f'<!DOCTYPE PMML SYSTEM "{evil.as_uri()}">', "x"),
        "inline": pmml_with(
            f'<!DOCTYPE PMML [<!ENTITY % file SYSTEM "{canary_file.as_uri()}">'
            "<!ENTITY % eval \"<!ENTITY &#x25; error SYSTEM 'file:///nonexistent/%file;'>\">%eval;%error;]>",
            "x",
        ),
    }


def test_plain_tree_still_describes(jvm, tmp_path):
    import json

    info = json.loads(jvm.dev.scorestream.jvm.Scorer.describe(write(tmp_path, "tree.pmml", models.tree_pmml())))
    assert info["inputs"] == list(feed.WINE_COLUMNS)
    assert info["classification"] is True


@pytest.mark.parametrize("kind", ["entity", "external-dtd"])
def test_http_entity_is_refused_without_a_request(jvm, tmp_path, listener, kind):
    doctype = (
        f'<!DOCTYPE PMML [<!ENTITY e SYSTEM "{listener.url}/ent">]>'
        if kind == "entity"
        else f'<!DOCTYPE PMML SYSTEM "{listener.url}/dtd">'
    )
    path = write(tmp_path, "http.pmml", pmml_with(doctype, "&e;" if kind == "entity" else "x"))
    error = describe_error(jvm, path)
    assert DOCTYPE_REFUSED in error
    assert listener.paths == []


def test_pmml4s_alone_would_fetch_the_entity(jvm, tmp_path, listener):
    """The payload above is live: PMML4S on its own (Hadoop's shaded Woodstox on Spark's
    classpath, at its defaults) fetches the URL. So the check before it is what protects."""
    path = write(tmp_path, "http.pmml", pmml_with(f'<!DOCTYPE PMML [<!ENTITY e SYSTEM "{listener.url}/ent">]>'))
    pmml4s_error(jvm, path)
    assert listener.paths == ["/ent"], "PMML4S no longer resolves external entities: update issue #15 notes"


def test_file_entity_is_refused_without_its_content(jvm, tmp_path, canary_file):
    path = write(tmp_path, "file.pmml", pmml_with(f'<!DOCTYPE PMML [<!ENTITY e SYSTEM "{canary_file.as_uri()}">]>'))
    error = describe_error(jvm, path)
    assert DOCTYPE_REFUSED in error
    assert CANARY not in error


@pytest.mark.parametrize("variant", ["internal-subset", "external-subset", "inline"])
def test_error_based_dtd_is_refused_without_file_content(jvm, tmp_path, canary_file, variant):
    path = write(tmp_path, f"{variant}.pmml", error_based_payloads(tmp_path, canary_file)[variant])
    error = describe_error(jvm, path)
    assert DOCTYPE_REFUSED in error
    assert CANARY not in error


def test_pmml4s_alone_would_echo_the_file(jvm, tmp_path, canary_file):
    """The error-based payload is live: PMML4S on its own puts the file's content in its error."""
    path = write(tmp_path, "ext.pmml", error_based_payloads(tmp_path, canary_file)["external-subset"])
    error = pmml4s_error(jvm, path)
    assert error is not None and CANARY in error.splitlines()[0]


def test_undeclared_entity_is_refused(jvm, tmp_path):
    error = describe_error(jvm, write(tmp_path, "undeclared.pmml", pmml_with("", "&secret;")))
    assert "entity reference is refused" in error


def test_malformed_xml_reason_quotes_nothing(jvm, tmp_path):
    data = models.tree_pmml().replace(b"<Timestamp>", f"<{CANARY} a='{CANARY}'><Timestamp>".encode(), 1)
    error = describe_error(jvm, write(tmp_path, "bad.pmml", data))
    first = error.splitlines()[0]
    assert re.fullmatch(r"java\.lang\.IllegalArgumentException: PMML is not well-formed XML "
                        r"\(line \d+, column \d+\)", first), first
    assert CANARY not in error


def test_oversize_file_is_refused(jvm, tmp_path):
    limit = jvm.dev.scorestream.jvm.SafeXml.MAX_BYTES
    assert limit == 64 << 20
    path = tmp_path / "big.pmml"
    with path.open("wb") as f:  # sparse: written in no time
        f.write(b'<?xml version="1.0" encoding="UTF-8"?>\n<PMML>')
        f.truncate(limit + 1)
    error = describe_error(jvm, str(path))
    assert "PMML file is larger than the limit of 64 MiB" in error


def nested(depth: int) -> bytes:
    inner = "<Extension>" * (depth - 1) + "</Extension>" * (depth - 1)
    return f'<?xml version="1.0"?>\n<PMML xmlns="http://www.dmg.org/PMML-4_4" version="4.4">{inner}</PMML>'.encode()


def test_deep_nesting_is_refused(jvm, tmp_path):
    limit = jvm.dev.scorestream.jvm.SafeXml.MAX_DEPTH
    assert limit == 512
    error = describe_error(jvm, write(tmp_path, "deep.pmml", nested(limit + 1)))
    assert f"PMML nests elements deeper than {limit} levels" in error
    jvm.dev.scorestream.jvm.SafeXml.check(write(tmp_path, "deep-ok.pmml", nested(limit)))  # at the limit: fine


def test_rejection_reason_holds_no_file_content(spark, tmp_path, canary_file, listener):
    """The model loader's path: describe as ServingJob does (the Java message's first line), and
    the reason the model is rejected with, which reaches /models, the status and an Event."""
    from scorestream.config import JobConfig
    from scorestream.runtime.job import ServingJob
    from scorestream.runtime.models import ModelLoader, ModelRejected

    config = JobConfig.model_validate({
        "name": "xml-safety",
        "kafka": {"bootstrapServers": "127.0.0.1:9", "dataTopic": "data", "outputTopic": "out",
                  "deadLetterTopic": "dlq"},
        "input": {"fields": list(feed.WINE_COLUMNS)},
        "checkpointLocation": str(tmp_path / "checkpoint"),
        "workDir": str(tmp_path / "work"),
    })
    added: list[str] = []
    job = SimpleNamespace(spark=spark)
    loader = ModelLoader(config, added.append, lambda p: ServingJob._describe_pmml(job, p))

    good = loader.load(models.descriptor("tree", "1", "pmml", models.tree_pmml()))
    assert list(good.inputs) == list(feed.WINE_COLUMNS)
    assert len(added) == 1

    payloads = error_based_payloads(tmp_path, canary_file)
    payloads["file-entity"] = pmml_with(f'<!DOCTYPE PMML [<!ENTITY e SYSTEM "{canary_file.as_uri()}">]>')
    payloads["http-entity"] = pmml_with(f'<!DOCTYPE PMML [<!ENTITY e SYSTEM "{listener.url}/ent">]>')
    for i, (name, data) in enumerate(payloads.items()):
        with pytest.raises(ModelRejected) as info:
            loader.load(models.descriptor("evil", str(i), "pmml", data))
        reason = str(info.value)
        assert DOCTYPE_REFUSED in reason, (name, reason)
        assert CANARY not in reason, name
    assert len(added) == 1  # nothing refused was handed to the executors
    assert listener.paths == []


def test_the_bytes_checked_are_the_bytes_parsed(jvm, tmp_path, listener):
    """#30 LOW: the check and PMML4S used to open the file each on its own, so a writer of the
    model directory could swap a checked file for one with an external entity in between. Here a
    thread swaps the file (atomic renames) between the demo tree and the same tree with an http
    entity while the driver describes it again and again: each load is refused or accepted whole,
    and PMML4S never fetches the entity."""
    import os

    path = tmp_path / "model.pmml"
    safe, evil = models.tree_pmml(), pmml_with(f'<!DOCTYPE PMML [<!ENTITY e SYSTEM "{listener.url}/ent">]>')
    path.write_bytes(safe)
    stop = threading.Event()

    def swap():
        i = 0
        while not stop.is_set():
            i += 1
            staged = tmp_path / f"staged-{i % 2}"
            staged.write_bytes(evil if i % 2 else safe)
            os.replace(staged, path)

    swapper = threading.Thread(target=swap, daemon=True)
    swapper.start()
    outcomes = {"accepted": 0, "refused": 0}
    try:
        for _ in range(300):
            error = java_error(jvm, lambda: jvm.dev.scorestream.jvm.Scorer.describe(str(path)))
            outcomes["refused" if error else "accepted"] += 1
            assert error is None or DOCTYPE_REFUSED in error or "not found" in error, error.splitlines()[0]
    finally:
        stop.set()
        swapper.join()
    assert listener.paths == [], f"PMML4S parsed a file the check did not see ({outcomes})"
    assert outcomes["accepted"] and outcomes["refused"], f"the swaps did not race the loads: {outcomes}"
    got = bytes(jvm.dev.scorestream.jvm.SafeXml.read(jvm.java.io.File(write(tmp_path, "tree.pmml", safe))))
    assert got == safe
