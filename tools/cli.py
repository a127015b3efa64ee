"""The ``scorestream`` command."""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path
from typing import Any

from scorestream import naming

# The API server stores objects nested up to 10,000 levels (sigs.k8s.io/json's maxNestingDepth), and
# kopf walks each event's object: json.loads (one C level per level) and copy.deepcopy of it for
# its diff base (two Python frames per level). Room for both, and for the frames under them.
OPERATOR_RECURSION_LIMIT = 25_000
# The main thread's stack may grow to this (the kernel checks the limit as it grows): C code that
# recurses once per level of an object 10,000 levels deep needs more than the usual 8 MiB.
OPERATOR_STACK_BYTES = 64 * 1024 * 1024


def _deep_enough() -> None:
    """The operator's process: recursion and main-thread stack for any object the API server stores."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_STACK)
    want = OPERATOR_STACK_BYTES if hard == resource.RLIM_INFINITY else min(OPERATOR_STACK_BYTES, hard)
    if soft != resource.RLIM_INFINITY and soft < want:
        resource.setrlimit(resource.RLIMIT_STACK, (want, hard))
    sys.setrecursionlimit(max(sys.getrecursionlimit(), OPERATOR_RECURSION_LIMIT))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scorestream", description="Serve ML models on Kafka streams with Spark")
    parser.add_argument("--version", action="version", version=f"scorestream {package_version()}")
    sub = parser.add_subparsers(dest="command", required=True)

    demo = sub.add_parser("demo", help="run the local demo: Apache Kafka, wine data, three models, hot swaps")
    demo.add_argument("--records", type=int, default=30000, help="records to stream (the wine rows, repeated)")
    demo.add_argument("--rate", type=int, default=3000, help="records per second")
    demo.add_argument("--workdir", default=None, help="where to keep models, checkpoints and logs")

    run = sub.add_parser("run", help="run a serving job (same as python -m scorestream.runtime)")
    run.add_argument("--config", required=True, metavar="FILE",
                     help="the job's configuration (JobConfig as JSON), as the operator renders it")

    from scorestream.runtime import verification
    verification.add_arguments(sub.add_parser("verify", help=verification.HELP))

    sub.add_parser("crd", help="print the ModelServing CRD (to apply or upgrade it without the chart)")

    render = sub.add_parser("render", help="print the objects the operator would create for a ModelServing")
    render.add_argument("-f", "--filename", required=True, help="a ModelServing manifest (YAML; - for stdin)")
    render.add_argument("--runtime-image", metavar="IMAGE",
                        help="the image of a ModelServing without spec.spark.image (the chart's runtimeImage)")

    op = sub.add_parser("operator", help="run the operator (kopf)")
    op.add_argument("--config", default=None,
                    help="the operator's configuration (YAML/JSON, OperatorConfig); flags given override it")
    op.add_argument("--metrics-port", type=int, default=None, help="serve Prometheus metrics on this port")
    op.add_argument("-n", "--namespace", action="append", default=[], help="a namespace to watch (repeatable)")
    op.add_argument("-A", "--all-namespaces", action="store_true", help="watch every namespace")
    op.add_argument("--leader-elect", action="store_true",
                    help="run several replicas, one active: elect it through a Lease (leaderElection's defaults)")
    op.add_argument("--observe-interval", type=float, default=None, help="seconds between observations (10)")
    op.add_argument("-v", "--verbose", action="store_true", help="log kopf's INFO messages too (handlers)")
    op.add_argument("--log-level", choices=["debug", "info", "warning", "error"], default=None,
                    help="the least severe messages logged (default: info)")

    args = parser.parse_args(argv)
    try:
        return _dispatch(parser, args)
    except InputError as e:
        print(f"error: {e}", file=sys.stderr)
        return e.code
    except KeyboardInterrupt:
        return 130


def package_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("scorestream")
    except PackageNotFoundError:
        return "unknown (not installed as a package)"


class InputError(Exception):
    """Bad input, said in one or two lines: the file, the field, what would be right."""

    def __init__(self, message: str, code: int = 1):
        super().__init__(message)
        self.code = code


def _read(filename: str, what: str) -> str:
    if filename == "-":
        return sys.stdin.read()
    try:
        return Path(filename).read_text()
    except FileNotFoundError:
        raise InputError(f"{filename}: no such file ({what})") from None
    except IsADirectoryError:
        raise InputError(f"{filename}: a directory, not a file ({what})") from None
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(f"{filename}: cannot be read: {e}") from None


def _yaml_documents(text: str, filename: str) -> list[Any]:
    import yaml

    try:
        return [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"{filename}:{mark.line + 1}:{mark.column + 1}" if mark else filename
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        context = getattr(e, "context", None)
        raise InputError(f"{where}: not valid YAML: {problem}" + (f" ({context})" if context else "")) from None


def _dispatch(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    if args.command == "demo":
        from scorestream.tools.demo.run import run_demo

        return run_demo(records=args.records, rate=args.rate, workdir=args.workdir)
    if args.command == "run":
        from scorestream.runtime.__main__ import main as runtime_main

        return runtime_main(["--config", args.config])
    if args.command == "verify":
        from scorestream.runtime import verification

        return verification.cli(args)
    if args.command == "crd":
        from scorestream.operator import crd as crd_module

        sys.stdout.write(crd_module.render())
        return 0
    if args.command == "render":
        return _render(args.filename, args.runtime_image)
    if args.command == "operator":
        from pydantic import ValidationError

        # A RecursionError in kopf's watcher stopped the operator, and one in its processing of an
        # event leaves the resource unserved: Python's default limit of 1,000 is below what a spec
        # author may write (issue 48).
        _deep_enough()

        from scorestream.operator.handlers import run as run_operator
        from scorestream.operator.settings import OperatorConfig

        raw: dict = {}
        if args.config:
            docs = _yaml_documents(_read(args.config, "the operator's configuration"), args.config)
            if len(docs) != 1 or not isinstance(docs[0], dict):
                raise InputError(f"{args.config}: expected one YAML mapping of OperatorConfig's fields"
                                 " (namespaces, observeInterval...), not " + _shape(docs))
            raw = docs[0]
        flags = {"namespaces": args.namespace or None, "allNamespaces": args.all_namespaces or None,
                 "leaderElection": (raw.get("leaderElection") or {}) if args.leader_elect else None, "observeInterval": args.observe_interval,
                 "metricsPort": args.metrics_port}
        raw.update({k: v for k, v in flags.items() if v is not None})
        if not raw.get("namespaces") and not raw.get("allNamespaces"):
            own = os.environ.get("POD_NAMESPACE")  # the Deployment's downward API
            if not own:
                parser.error("operator: give -n NAMESPACE (repeatable) or -A; or set POD_NAMESPACE")
            raw["namespaces"] = [own]
        try:
            config = OperatorConfig.model_validate(raw)
        except ValidationError as e:
            raise InputError("operator configuration: " + "; ".join(
                f"{_path(err['loc'])}: {_message(err)}" for err in e.errors())) from None
        run_operator(config, verbose=args.verbose, log_level=args.log_level)
        return 0
    return 2


def _shape(docs: list[Any]) -> str:
    if not docs:
        return "an empty file"
    if len(docs) > 1:
        return f"{len(docs)} documents"
    return f"a {type(docs[0]).__name__}"


def _path(loc: tuple[Any, ...], prefix: str = "") -> str:
    """A field's path as the manifest writes it: `spec.kafka.dataTopic`, `spec.podTemplate.spec.containers[0]`."""
    out = prefix
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out or "(the document)"


def _message(err: dict[str, Any]) -> str:
    """Pydantic's message, said for a person: quantities and durations in words, not a raw pattern."""
    from scorestream.api.v1alpha1 import modelserving as s

    if err.get("type") == "string_pattern_mismatch":
        pattern = (err.get("ctx") or {}).get("pattern")
        got = err.get("input")
        if pattern == s._QUANTITY:
            return f"{got!r} is not a Kubernetes quantity: a number with an optional suffix, e.g. 500m, 2, 512Mi, 2Gi"
        if pattern == s.DURATION_PATTERN:
            return f"{got!r} is not a duration: a number and a unit, e.g. 500ms, 30s, 5m, 90 minutes"
        if pattern == s._DNS_1035:
            return f"{got!r} is not a DNS-1035 label: lower case letters, digits and '-', starting with a letter"
        return f"{got!r} does not match the pattern {pattern}"
    if err.get("type") == "extra_forbidden":
        return "not a field of this object (misspelt, or at the wrong level?)"
    if err.get("type") == "missing":
        return "required, missing"
    msg = str(err.get("msg", ""))
    return msg.removeprefix("Value error, ").removeprefix("Assertion failed, ")


def _manifest_errors(doc: dict[str, Any]) -> list[str]:
    """What the API server would refuse in this ModelServing, each with its path."""
    from pydantic import ValidationError

    from scorestream.api.v1alpha1 import modelserving as s

    errors = []
    meta = doc.get("metadata")
    name = meta.get("name") if isinstance(meta, dict) else None
    if not isinstance(meta, dict):
        errors.append("metadata: missing: a ModelServing needs metadata.name (and metadata.namespace, or -n)")
    elif not isinstance(name, str) or not name:
        errors.append("metadata.name: missing: every ModelServing needs a name")
    elif len(name) > s.MAX_NAME_LENGTH or not re.match(s._DNS_1035, name):
        errors.append(f"metadata.name: {name!r}: {s.NAME_RULE['message']}")
    if not isinstance(doc.get("spec"), dict):
        errors.append("spec: missing: a ModelServing needs a spec (dataType, kafka, input, spark...)")
        return errors
    try:
        s.ModelServingSpec.model_validate(doc["spec"])
    except ValidationError as e:
        errors += [f"{_path(err['loc'], 'spec')}: {_message(err)}" for err in e.errors()]
    return errors


def _render(filename: str, runtime_image: str | None) -> int:
    import yaml

    from scorestream.api.v1alpha1 import modelserving as s
    from scorestream.operator import desired, images, podtemplate

    text = _read(filename, "the ModelServing manifest to render")
    filename = "(stdin)" if filename == "-" else filename
    docs = _yaml_documents(text, filename)
    if not docs:
        raise InputError(f"{filename}: empty: no ModelServing in it (apiVersion: {s.API_VERSION}, kind: {s.KIND})")
    out = []
    for index, doc in enumerate(docs, 1):
        where = f"{filename}" + (f" (document {index})" if len(docs) > 1 else "")
        if not isinstance(doc, dict):
            raise InputError(f"{where}: a YAML {type(doc).__name__}, not a manifest: expected a mapping with"
                             f" apiVersion: {s.API_VERSION}, kind: {s.KIND}, metadata and spec")
        api_version, kind = doc.get("apiVersion"), doc.get("kind")
        name = (doc.get("metadata") or {}).get("name", "?") if isinstance(doc.get("metadata"), dict) else "?"
        # Ours but not what the CRD serves: the API server would refuse it, so rendering it would mislead.
        if (str(kind).lower() == s.KIND.lower() or str(api_version).split("/")[0] == naming.GROUP) \
                and (api_version, kind) != (s.API_VERSION, s.KIND):
            raise InputError(f"{where}: {name}: apiVersion {api_version!r} kind {kind!r}: the CRD serves only"
                             f" apiVersion: {s.API_VERSION}, kind: {s.KIND}", code=2)
        if kind != s.KIND:
            print(f"{where}: skipping {kind!r}: not a {s.KIND}", file=sys.stderr)
            continue
        errors = _manifest_errors(doc)
        if errors:
            for line in errors:
                print(f"error: {where}: " + (f"{name}: " if name != "?" else "") + line, file=sys.stderr)
            return 1
        spec = s.ModelServingSpec.model_validate(doc["spec"])
        verdict = images.decide(spec, runtime_image, [])
        if verdict.image is None:
            raise InputError(f"{where}: {name}: spec.spark.image: not set: set it, or give the image the operator"
                             " would use (the chart's runtimeImage) with --runtime-image")
        for path in podtemplate.overridden(spec):
            print(f"{where}: {name}: warning: {path} is set by the operator; the template's value is ignored",
                  file=sys.stderr)
        try:
            out.extend(desired.render(images.with_image(doc, verdict.image)))
        except ValueError as e:  # the job's configuration refused what the spec allowed
            raise InputError(f"{where}: {name}: {e}".splitlines()[0]) from None
    sys.stdout.write(yaml.safe_dump_all(out, sort_keys=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
