"""The ``scorestream`` command."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scorestream", description="Serve ML models on Kafka streams with Spark")
    sub = parser.add_subparsers(dest="command", required=True)

    demo = sub.add_parser("demo", help="run the local demo: Apache Kafka, wine data, three models, hot swaps")
    demo.add_argument("--records", type=int, default=30000, help="records to stream (the wine rows, repeated)")
    demo.add_argument("--rate", type=int, default=3000, help="records per second")
    demo.add_argument("--workdir", default=None, help="where to keep models, checkpoints and logs")

    run = sub.add_parser("run", help="run a serving job (same as python -m scorestream.runtime)")
    run.add_argument("--config", required=True)

    sub.add_parser("build-jvm", help="build the JVM scorer with Maven and run its JUnit tests (needs a JDK 17+ and "
                   "mvn); into $SCORESTREAM_JVM_DIR when set")

    from scorestream.runtime import verification
    verification.add_arguments(sub.add_parser("verify", help=verification.HELP))

    crd = sub.add_parser("crd", help="print the ModelServing CRD generated from the spec types")
    crd.add_argument("--write", action="store_true", help="write crds/modelserving.yaml instead of printing")

    render = sub.add_parser("render", help="print the objects the operator would create for a ModelServing")
    render.add_argument("-f", "--filename", required=True, help="a ModelServing manifest (YAML; - for stdin)")

    op = sub.add_parser("operator", help="run the operator (kopf)")
    op.add_argument("--config", default=None,
                    help="the operator's configuration (YAML/JSON, OperatorConfig); flags given override it")
    op.add_argument("--metrics-port", type=int, default=None, help="serve Prometheus metrics on this port")
    op.add_argument("-n", "--namespace", action="append", default=[], help="a namespace to watch (repeatable)")
    op.add_argument("-A", "--all-namespaces", action="store_true", help="watch every namespace")
    op.add_argument("--peering", default=None, help="kopf peering name: run several replicas, one active")
    op.add_argument("--priority", type=int, default=None,
                    help="peering priority (the highest serves); default: random, distinct per replica")
    op.add_argument("--observe-interval", type=float, default=None, help="seconds between observations (10)")
    op.add_argument("-v", "--verbose", action="store_true", help="log kopf's INFO messages too (peering, handlers)")

    args = parser.parse_args(argv)
    if args.command == "demo":
        from scorestream.demo.run import run_demo

        return run_demo(records=args.records, rate=args.rate, workdir=args.workdir)
    if args.command == "run":
        from scorestream.runtime.__main__ import main as runtime_main

        return runtime_main(["--config", args.config])
    if args.command == "verify":
        return verification.cli(args)
    if args.command == "build-jvm":
        from scorestream.runtime import jvm

        into = os.environ.get("SCORESTREAM_JVM_DIR")
        try:
            print(jvm.build(Path(into) if into else None))
        except jvm.JvmError as e:
            print(f"error: {e}", file=sys.stderr)
            return 1
        return 0
    if args.command == "crd":
        from scorestream.operator import crd as crd_module

        if args.write:
            crd_module.CRD_PATH.write_text(crd_module.render())
            print(crd_module.CRD_PATH)
        else:
            sys.stdout.write(crd_module.render())
        return 0
    if args.command == "render":
        return _render(args.filename)
    if args.command == "operator":
        from pydantic import ValidationError

        from scorestream.operator.handlers import run as run_operator
        from scorestream.operator.settings import OperatorConfig

        raw: dict = {}
        if args.config:
            import yaml

            raw = yaml.safe_load(open(args.config).read()) or {}
        flags = {"namespaces": args.namespace or None, "allNamespaces": args.all_namespaces or None,
                 "peering": args.peering, "priority": args.priority, "observeInterval": args.observe_interval,
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
            parser.error(f"operator configuration: {e}")
        run_operator(config, verbose=args.verbose)
        return 0
    return 2


def _render(filename: str) -> int:
    import yaml
    from pydantic import ValidationError

    from scorestream.operator import desired, spec

    text = sys.stdin.read() if filename == "-" else open(filename).read()
    out = []
    for doc in yaml.safe_load_all(text):
        if not doc:
            continue
        api_version, kind = doc.get("apiVersion"), doc.get("kind")
        name = (doc.get("metadata") or {}).get("name", "?")
        # Ours but not what the CRD serves: the API server would refuse it, so rendering it would mislead.
        if (str(kind).lower() == spec.KIND.lower() or str(api_version).split("/")[0] == spec.GROUP) \
                and (api_version, kind) != (spec.API_VERSION, spec.KIND):
            print(f"{filename}: {name}: apiVersion {api_version!r} kind {kind!r}: the CRD serves only"
                  f" apiVersion: {spec.API_VERSION}, kind: {spec.KIND}", file=sys.stderr)
            return 2
        if kind != spec.KIND:
            print(f"{filename}: skipping {kind!r}: not a {spec.KIND}", file=sys.stderr)
            continue
        try:
            out.extend(desired.render(doc))
        except ValidationError as e:
            for err in e.errors():
                print(f"{filename}: {name}: spec.{'.'.join(str(p) for p in err['loc'])}: {err['msg']}", file=sys.stderr)
            return 1
    sys.stdout.write(yaml.safe_dump_all(out, sort_keys=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
