"""The README and the documentation site: built with no broken links, the reference current, the
README short and for a user, its manifest the example's."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import yaml

from scorestream.operator import reference

REPO = Path(__file__).resolve().parent.parent
README = (REPO / "README.md").read_text()
MKDOCS = Path(sys.executable).parent / "mkdocs"


def test_the_site_builds_strict_with_no_broken_links(tmp_path):
    # strict: any warning (a link to a missing page or anchor, a page left out of nav) fails the build.
    done = subprocess.run([str(MKDOCS), "build", "--strict", "--site-dir", str(tmp_path / "site")], cwd=REPO,
                          capture_output=True, text=True, timeout=300, env={"NO_MKDOCS_2_WARNING": "1",
                                                                            "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr[-3000:]
    assert "WARNING" not in done.stderr, done.stderr[-3000:]
    assert (tmp_path / "site" / "reference" / "modelserving" / "index.html").exists()


def test_the_modelserving_reference_is_generated_from_the_current_crd():
    assert reference.PAGE.read_text() == reference.render(), \
        "docs/reference/modelserving.md is stale: python -m scorestream.operator.reference --write"


def test_the_chart_values_reference_is_generated_from_the_current_schema():
    from scorestream.tools import values_reference

    assert values_reference.PAGE.read_text() == values_reference.render(), \
        "docs/operations/values.md is stale: python -m scorestream.tools.values_reference --write"


def test_every_chart_value_says_what_it_is_for():
    """The schema's descriptions are the reference page's: a value without one is a row that says nothing."""
    from scorestream.tools import values_reference

    silent = [row.split(" | ")[0] for row in values_reference.render().splitlines()
              if row.startswith("| `") and row.rstrip().endswith("|  |")]
    assert not silent, "values.schema.json: describe " + ", ".join(silent)


def test_readme_is_short_and_for_a_user():
    assert len(README.splitlines()) <= 200
    for pattern in (r"\bnotes? \d+", r"the report\b", r"\b20\d\d-\d\d-\d\d\b", r"issue #\d+", r"ARCHITECTURE\.md",
                    r"this session"):
        assert not re.search(pattern, README, re.I), pattern
    for needed in ("make demo", "make test", "kind: ModelServing", "helm install", "skopeo copy"):
        assert needed in README


def test_readme_links_point_at_files_that_exist():
    for target in re.findall(r"\]\(([^)#]+)\)", README):
        if "://" not in target:
            assert (REPO / target).exists(), target


def test_docs_cite_no_notes_or_report():
    for page in [*(REPO / "docs").rglob("*.md"), REPO / "benchmarks" / "RESULTS.md", REPO / "CHANGELOG.md"]:
        text = page.read_text()
        for pattern in (r"\b[Nn]otes? \d+\b", r"\bthe report\b", r"ARCHITECTURE\.md"):
            assert not re.search(pattern, text), f"{page.relative_to(REPO)}: {pattern}"


def test_readme_manifest_is_the_example_without_an_image():
    block = next(b for b in re.findall(r"```yaml\n(.*?)```", README, re.S) if "kind: ModelServing" in b)
    shown = yaml.safe_load(block)
    example = yaml.safe_load((REPO / "examples" / "wine-pmml.yaml").read_text())
    del example["spec"]["spark"]["image"]
    assert shown == example


def test_docs_name_no_chart_repository_that_does_not_exist():
    text = (REPO / "docs" / "upgrading-the-crd.md").read_text()
    assert "oci-or-repo" not in text
    assert "dist/scorestream-" in text


# --- what the pages name, checked against the code ----------------------------------------------
# Each check below reads every page a user reads (the site, the README, the changelog, the chart's
# values.yaml, which `helm show values` prints) and compares what it names with the one place the
# code defines it, so that a rename or a removal cannot leave a page behind.

import argparse  # noqa: E402
import json  # noqa: E402
import typing  # noqa: E402

PAGES = sorted([*(REPO / "docs").rglob("*.md"), REPO / "README.md", REPO / "operator" / "README.md",
                REPO / "CHANGELOG.md", REPO / "SECURITY.md", REPO / "crds" / "README.md", REPO / "charts" / "README.md",
                REPO / "charts" / "scorestream" / "values.yaml"])
CHART = REPO / "charts" / "scorestream"
SCHEMA = json.loads((CHART / "values.schema.json").read_text())


def _code(text: str) -> list[str]:
    """The page's code: inline spans and the lines of fenced blocks (values.yaml: its comments)."""
    blocks = re.findall(r"^```[^\n]*\n(.*?)^```", text, re.S | re.M)
    prose = re.sub(r"^```[^\n]*\n.*?^```", "", text, flags=re.S | re.M)
    return re.findall(r"`([^`\n]+)`", prose) + [line for b in blocks for line in b.splitlines()]


def _texts():
    for page in PAGES:
        yield page.relative_to(REPO).as_posix(), page.read_text()


def _schema_has(path: list[str], node: dict | None = None) -> bool:
    node = SCHEMA if node is None else node
    if "$ref" in node:  # "#/definitions/x"
        node = SCHEMA["definitions"][node["$ref"].rsplit("/", 1)[1]]
    if not path:
        return True
    head, rest = path[0], path[1:]
    if head == "*":
        return True
    props = node.get("properties", {})
    if head in props:
        return _schema_has(rest, props[head])
    if isinstance(node.get("additionalProperties"), dict):  # a map (labels, annotations): any key
        return True
    if re.fullmatch(r"\d+|\[\d+\]", head) and "items" in node:
        return _schema_has(rest, node["items"])
    return False


# Top-level values that are also a pod's or container's fields: a dotted `securityContext.x` is the
# pod's (docs/pod-templates.md), and only `--set` or a values table names these as values.
POD_WORDS = {"securityContext", "podSecurityContext", "resources", "affinity", "tolerations", "nodeSelector",
             "image", "imagePullSecrets", "topologySpreadConstraints", "envFrom", "extraVolumes", "extraVolumeMounts"}
FILE = re.compile(r"\.(py|md|ya?ml|json|java|txt|lua|tpl|lock)$")
_VALUE = r"[a-zA-Z][a-zA-Z0-9]*(?:(?:\.|\[\d+\]\.?)[a-zA-Z0-9*]+)*"


def _chart_values(name: str, text: str) -> set[str]:
    """Chart values a page names: `--set x.y=...`, a dotted `x.y` whose first part is a top-level
    value (`spec.…` is a resource's), and the first column of a table headed `value`."""
    top = set(SCHEMA["properties"])
    found: set[str] = set()
    for span in _code(text):
        for m in re.finditer(rf"--set(?:-json|-string)?[ =]['\"]?({_VALUE})=", span):
            found.add(m.group(1))
        m = re.fullmatch(rf"({_VALUE})(?:[:=].*)?", span.strip())
        if (m and "." in m.group(1) and m.group(1).split(".")[0] in top - POD_WORDS and not FILE.search(m.group(1))
                and not name.startswith(("docs/reference/", "docs/adr/"))):  # the CRD's fields; records of their day
            found.add(m.group(1))
    for table in re.findall(r"^\| value \|.*\n\|[-| ]+\|\n((?:\|.*\n)+)", text, re.M):
        for row in table.splitlines():
            found.update(re.findall(rf"`({_VALUE})`", row.split("|")[1]))
    return found


def test_every_chart_value_a_page_names_is_in_the_values_schema():
    wrong = [f"{name}: {value}" for name, text in _texts() if not name.endswith("values.yaml")
             for value in sorted(_chart_values(name, text))
             if not _schema_has(re.sub(r"\[(\d+)\]", r".\1", value).split("."))]
    assert not wrong, "values no longer in charts/scorestream/values.schema.json:\n" + "\n".join(wrong)


class _Parsed(Exception):
    def __init__(self, parser):
        self.parser = parser


def _parser_of(main) -> argparse.ArgumentParser:
    """The parser a command's main() builds, taken at its parse_args (the command does not run)."""
    original = argparse.ArgumentParser.parse_args

    def take(self, *args, **kwargs):
        raise _Parsed(self)

    argparse.ArgumentParser.parse_args = take
    try:
        main([])
    except _Parsed as p:
        return p.parser
    finally:
        argparse.ArgumentParser.parse_args = original
    raise AssertionError("main() built no parser")


def _commands(parser: argparse.ArgumentParser) -> dict[str, set[str]]:
    """Each subcommand with the option strings it takes (the top level's too)."""
    top = {o for a in parser._actions for o in a.option_strings}
    subs = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return {name: top | {o for a in p._actions for o in a.option_strings} for name, p in subs.choices.items()}


def test_every_command_and_flag_a_page_names_exists():
    from scorestream.tools import cli, kubectl_plugin

    known = {"scorestream": _commands(_parser_of(cli.main)), "kubectl scorestream": _commands(kubectl_plugin.parser())}
    known["kubectl-scorestream"] = known["kubectl scorestream"]
    invocation = re.compile(r"(?:^|[;&|(]\s*|\$\s+)(?:[\w./-]*/)?(kubectl[ -]scorestream|scorestream)"
                            r"[ \t]+([a-z][\w-]*)([^;&|#]*)")
    wrong = []
    for name, text in _texts():
        for span in _code(text):
            for m in invocation.finditer(span.strip()):
                tool, command, rest = m.groups()
                options = known[tool].get(command)
                if options is None:
                    wrong.append(f"{name}: {tool} {command}: no such command")
                    continue
                for flag in re.findall(r"(?:^|[\s[])(--?[a-zA-Z][\w-]*)", rest):  # `[--flag]` too
                    if flag not in options:
                        wrong.append(f"{name}: {tool} {command} {flag}: no such flag")
    assert not wrong, "\n".join(wrong)


def test_every_duration_a_hint_offers_is_one_its_parser_takes():
    from scorestream.config import DURATION_PATTERN
    from scorestream.tools import cli, kubectl_plugin

    hint = cli._message({"type": "string_pattern_mismatch", "ctx": {"pattern": DURATION_PATTERN}, "input": "x"})
    offered = re.search(r"e\.g\. (.*)$", hint).group(1).split(", ")
    assert offered and all(re.match(DURATION_PATTERN, d) for d in offered), f"{hint}: not all match {DURATION_PATTERN}"
    try:
        kubectl_plugin._duration("x")
    except argparse.ArgumentTypeError as e:
        for d in re.search(r"e\.g\. (.*)$", str(e)).group(1).split(", "):
            kubectl_plugin._duration(d)


# Ports of other software the pages name (Kafka's listeners, MinIO's API): not scorestream's.
OTHER_PORTS = {9092, 9093, 9000}


def test_every_metric_reason_condition_and_port_a_page_names_is_the_codes():
    from scorestream import monitoring, naming
    from scorestream.api.v1alpha1 import modelserving as s
    from scorestream.operator.conditions import Reason
    from scorestream.operator.settings import OperatorConfig

    series = monitoring.series_names() | {f.name for f in vars(monitoring).values() if isinstance(f, monitoring.Family)}
    reasons = {r.value for r in Reason}
    types = set(typing.get_args(s.ConditionType)) | {"ContainersReady", "PodScheduled", "Initialized"}  # a pod's
    ports = {v for k, v in vars(naming).items() if k.endswith("_PORT") and isinstance(v, int)}
    ports |= {OperatorConfig.model_fields["health_port"].default,
              yaml.safe_load((CHART / "values.yaml").read_text())["metrics"]["port"]}
    # The alerts (the chart's PrometheusRule) and apimachinery's function, named beside reasons.
    others = set(re.findall(r"alert: (\w+)", (CHART / "templates" / "prometheusrule.yaml").read_text()))
    others.add("SetStatusCondition")
    wrong = []
    for name, text in _texts():
        if name != "CHANGELOG.md":  # it names the metrics a release renamed
            wrong += [f"{name}: metric {m}" for m in re.findall(r"\bscorestream_[a-z0-9_]+\b", text)
                      if m not in series and not m.endswith("_")]
        for ctype, _status, reason in re.findall(r"`([A-Z]\w+)=(True|False|Unknown)(?:,\s*(?:reason\s+)?(\w+))?`", text):
            if ctype not in types:
                wrong.append(f"{name}: condition {ctype}")
            if reason and reason not in reasons:
                wrong.append(f"{name}: reason {reason}")
        for sentence in re.split(r"(?<=[.:])\s", text):
            if re.search(r"\breasons?\b|REASON", sentence):
                wrong += [f"{name}: reason {r}" for r in re.findall(r"`([A-Z][a-z]+(?:[A-Z][a-z]*)+)`", sentence)
                          if r not in reasons | types | others and not r.startswith(("Model", "Kafka", "Stateful", "Config"))]
        for port in re.findall(r"\bports?\s+\(?`?(\d{4,5})\b|\b(\d{4,5})`?\)?\s+port\b", text):
            p = int(port[0] or port[1])
            if p not in ports | OTHER_PORTS:
                wrong.append(f"{name}: port {p}")
    assert not wrong, "\n".join(wrong)


def test_every_repository_path_and_adr_a_page_names_exists():
    adrs = {int(p.name[:4]) for p in (REPO / "docs" / "adr").glob("[0-9][0-9][0-9][0-9]-*.md")}
    roots = ("docs/", "operator/", "runtime/", "scorestream/", "tools/", "tests/", "hack/", "charts/", "crds/",
             "examples/", "benchmarks/")
    path = re.compile(r"(?<![\w./-])((?:%s)[\w./-]*[\w/])" % "|".join(map(re.escape, roots)))
    wrong = []
    for name, text in _texts():
        page = REPO / name
        for found in path.findall(text):
            # scorestream/operator/... is the package path of operator/... (pyproject's package-dir).
            alt = re.sub(r"^scorestream/(operator|runtime|tools)/", r"\1/", found)
            if not (REPO / found).exists() and not (REPO / alt).exists() and "*" not in found and "..." not in found:
                wrong.append(f"{name}: {found}")
        for link in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", re.sub(r"`[^`\n]*`", "", text)):
            if "://" not in link and not link.startswith("mailto:") and not (page.parent / link).exists():
                wrong.append(f"{name}: link {link}")
        for n in re.findall(r"\bADRs? (\d+)\b|docs/adr/(\d{4})\b|adr/(\d{4})-", text):
            number = int(next(x for x in n if x))
            if number not in adrs:
                wrong.append(f"{name}: ADR {number}")
    assert not wrong, "named but not in the repository:\n" + "\n".join(wrong)


def test_the_adr_index_marks_every_superseded_record():
    index = (REPO / "docs" / "adr" / "index.md").read_text()
    for record in sorted((REPO / "docs" / "adr").glob("[0-9][0-9][0-9][0-9]-*.md")):
        status = next((line for line in record.read_text().splitlines() if line.startswith("Status:")), "")
        for old in re.findall(r"supersedes \[(\d+)\]", status):
            line = next(line for line in index.splitlines() if line.startswith(f"- [{int(old)}."))
            assert "superseded" in line.lower(), f"adr/index.md lists ADR {old} as in force; {record.name} supersedes it"


def test_every_build_argument_a_page_names_is_the_dockerfiles():
    args = set(re.findall(r"^ARG (\w+)", (REPO / "Dockerfile").read_text(), re.M))
    wrong = []
    for name, text in _texts():
        named = set(re.findall(r"--build-arg[ =](\w+)", text))
        for sentence in re.split(r"(?<=[.;:])\s", text):
            if re.search(r"build\s+arguments?", sentence):
                named |= set(re.findall(r"`([A-Z][A-Z0-9_]+)`", sentence))
        wrong += [f"{name}: {a}" for a in sorted(named - args)]
    assert not wrong, "not an ARG of the Dockerfile:\n" + "\n".join(wrong)


def test_the_compatibility_page_names_the_versions_the_tests_run():
    """docs/compatibility.md's tested versions are the pins the tests and the images use."""
    import tomllib

    from harness import cluster, helm
    from scorestream import jars

    page = (REPO / "docs" / "compatibility.md").read_text()
    tested = {row.split("|")[1].strip(): row.split("|")[2].strip()
              for row in page.split("## Tested", 1)[1].split("## ", 1)[0].splitlines() if row.startswith("| ")}
    pins = {dep.split("==")[0]: dep.split("==")[1].split()[0]
            for deps in tomllib.loads((REPO / "pyproject.toml").read_text())["project"].values()
            if isinstance(deps, list) for dep in deps if "==" in dep}
    pins.update({dep.split("==")[0]: dep.split("==")[1] for deps in
                 tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"].values()
                 for dep in deps if "==" in dep})
    lock = (REPO / "scorestream" / "jars.lock").read_text()
    spark_kafka_clients = re.search(r"^spark-kafka kafka-clients-(\S+)\.jar", lock, re.M).group(1)
    kube = next(v for k, v in tested.items() if k.startswith("Kubernetes ("))
    assert kube == cluster.KUBE_VERSION.lstrip("v")
    assert tested["kubectl"] == helm.KUBECTL_VERSION.lstrip("v") and tested["Helm"] == helm.VERSION.lstrip("v")
    assert tested["Apache Kafka broker"].startswith(f"{jars.KAFKA} ")
    # The oldest end of the matrix (make test-compat), and the chart admitting no older Kubernetes.
    oldest_kube = next(v for k, v in tested.items() if k.startswith("Kubernetes, the oldest"))
    assert oldest_kube == cluster.OLDEST_KUBE_VERSION.lstrip("v")
    assert yaml.safe_load((REPO / "charts" / "scorestream" / "Chart.yaml").read_text())["kubeVersion"] == \
        f">={'.'.join(oldest_kube.split('.')[:2])}.0-0"
    assert tested["kubectl, with the oldest Kubernetes"] == helm.OLDEST.kubectl.lstrip("v")
    assert tested["Helm 3"] == helm.OLDEST.helm.lstrip("v")
    assert tested["Apache Kafka broker, the oldest claimed"].startswith(f"{jars.OLDEST_KAFKA} ")
    assert tested["Strimzi"].startswith(f"{jars.STRIMZI} ")
    assert tested["Apache Spark"] == f"{pins['pyspark']}, with its Kafka connector (Kafka clients {spark_kafka_clients})"
    assert tested["librdkafka (confluent-kafka)"] == pins["confluent-kafka"]
    pom = (REPO / "runtime" / "jvm" / "pom.xml").read_text()
    assert tested["PMML4S"] == re.search(r"<pmml4s.version>(\S+)</pmml4s.version>", pom).group(1)
    assert tested["TensorFlow (CPU)"] == pins["tensorflow-cpu"]


def test_the_pod_template_page_names_every_field_path_and_variable_the_operator_owns():
    """docs/pod-templates.md's table against operator/podtemplate.py: what a template loses
    silently must be on the page, or a CA bundle or a proxy set in a template just disappears."""
    from scorestream.operator import podtemplate as pt

    page = (REPO / "docs" / "pod-templates.md").read_text()
    named = set(_code(page))
    owned = [*pt.MAIN_CONTAINER_OWNED, *pt.POD_OWNED, *pt.DRIVER_VOLUMES, *pt.PROTECTED_PATHS, *pt.STEERING_ENV,
             *pt.STEERING_ENV_PREFIXES, "envFrom"]
    assert [f for f in owned if f not in named] == []
