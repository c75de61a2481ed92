"""``python -m kubetune_operator``: run the operator (kopf) with its collector.

Watches the namespaces in ``KUBETUNE_OPERATOR_WATCH_NAMESPACES`` (all when
empty); serves kopf's liveness probe at ``--liveness`` (the Helm chart's probe).
"""

from __future__ import annotations

import argparse
import asyncio
import logging

import kopf

from .settings import Settings


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kubetune_operator", description=__doc__.splitlines()[0])
    parser.add_argument("--liveness", default=None, help="liveness endpoint, e.g. http://0.0.0.0:8081/healthz")
    parser.add_argument("--verbose", action="store_true", help="debug logging")
    args = parser.parse_args(argv)
    settings = Settings.from_env()  # fail fast on bad settings, before connecting
    kopf.configure(verbose=args.verbose, log_format=kopf.LogFormat.PLAIN)
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
    from . import handlers  # noqa: F401  (registers the handlers)

    if settings.katib.enabled:
        from . import katib_handlers  # noqa: F401  (serves Katib's Experiments)

    namespaces = list(settings.watch.namespaces)
    asyncio.run(
        kopf.operator(
            clusterwide=not namespaces, namespaces=namespaces, standalone=True, liveness_endpoint=args.liveness
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
