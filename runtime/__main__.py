"""``python -m scorestream.runtime --config job.json``: the serving job (what spark-submit runs)."""

from __future__ import annotations

import argparse
import logging
import sys

from scorestream.config import ConfigError, load_job_config


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m scorestream.runtime", description=__doc__)
    parser.add_argument("--config", required=True, help="the job's JobConfig as JSON")
    parser.add_argument("--log-level", default="INFO")
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        config = load_job_config(args.config)
    except ConfigError as e:
        print(e, file=sys.stderr)
        return 2
    from scorestream.runtime.job import main as run

    return run(config)


if __name__ == "__main__":
    sys.exit(main())
