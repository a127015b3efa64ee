"""The ``scorestream`` command."""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scorestream", description="Serve ML models on Kafka streams with Spark")
    sub = parser.add_subparsers(dest="command", required=True)

    demo = sub.add_parser("demo", help="run the local demo: embedded broker, wine data, three models, hot swaps")
    demo.add_argument("--records", type=int, default=30000, help="records to stream (the wine rows, repeated)")
    demo.add_argument("--rate", type=int, default=3000, help="records per second")
    demo.add_argument("--workdir", default=None, help="where to keep models, checkpoints and logs")

    run = sub.add_parser("run", help="run a serving job (same as python -m scorestream.runtime)")
    run.add_argument("--config", required=True)

    sub.add_parser("build-jvm", help="compile the JVM scorer (needs a JDK 17+)")

    args = parser.parse_args(argv)
    if args.command == "demo":
        from scorestream.demo.run import run_demo

        return run_demo(records=args.records, rate=args.rate, workdir=args.workdir)
    if args.command == "run":
        from scorestream.runtime.__main__ import main as runtime_main

        return runtime_main(["--config", args.config])
    if args.command == "build-jvm":
        from scorestream.runtime import jvm

        print(jvm.scorer_jar())
        return 0
    return 2


if __name__ == "__main__":
    sys.exit(main())
