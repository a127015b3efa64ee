"""kopf as the event source, thin: every watch event of a ModelServing, of a child it owns or of
its driver pod stores the object in the controller's cache and queues the resource's key; the
controller's workers reconcile (controller.py). kopf runs no handler that changes a resource: no
create/update handlers, no timers, no finalizer (ADR 31).

Handlers are registered into a registry passed in (not kopf's global one), so the tests can run
a real operator per test against the test control plane.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from typing import Any

import kopf

from scorestream import naming
from scorestream.api.v1alpha1 import modelserving as s
from scorestream.operator import controller, leader, reconciler
from scorestream.operator.kube import PLURALS, Kube
from scorestream.operator.settings import OperatorConfig


def register(registry: kopf.OperatorRegistry, config: OperatorConfig,
             connection: kopf.ConnectionInfo | None = None, exit_after_cleanup: float | None = None,
             leading: threading.Event | None = None) -> None:
    """Register the operator's handlers. `connection`: a fixed API server (tests); else kubeconfig/in-cluster.
    `exit_after_cleanup`: end the process this many seconds after kopf's cleanup if kopf has not.
    `leading`: set once this replica leads (leader.lead); until then its watches only fill the cache.
    None: it leads from the start."""
    _register_lifecycle(registry, config, connection, exit_after_cleanup, leading)
    _register_watches(registry)


def _register_lifecycle(registry: kopf.OperatorRegistry, config: OperatorConfig,
                        connection: kopf.ConnectionInfo | None, exit_after_cleanup: float | None,
                        leading: threading.Event | None) -> None:
    @kopf.on.login(registry=registry)
    def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
        return connection or kopf.login_via_client(**kwargs)

    @kopf.on.startup(registry=registry)
    async def startup(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
        # The finalizer an earlier version put on every resource: kopf removes it, as no handler needs it.
        settings.persistence.finalizer = f"{naming.GROUP}/finalizer"
        # No watching of CRDs and namespaces: the operator serves one CRD installed before it, and
        # exact namespaces. That keeps its RBAC to what it touches (no cluster-wide reads at all
        # in namespaced mode); a CRD installed later is found at the next start.
        settings.scanning.disabled = True
        kube = Kube.for_server(connection.server, connection.token, verify_ssl=not connection.insecure) \
            if connection else await Kube.from_environment()
        memo.controller = controller.Controller(reconciler.Context(kube=kube, config=config), config.workers)
        # kopf starts its watches once every startup handler is done: the children are in the cache
        # before the first ModelServing is queued.
        await memo.controller.prime(None if config.all_namespaces else config.namespaces)
        if leading is None:
            memo.controller.start()
        else:  # a follower's cache stays warm: on taking over, it reconciles at once
            memo.elected = asyncio.create_task(_lead_once_elected(memo.controller, leading))

    @kopf.on.cleanup(registry=registry)
    async def cleanup(memo: kopf.Memo, logger: Any, **_: Any) -> None:
        if getattr(memo, "elected", None):
            memo.elected.cancel()
        if getattr(memo, "controller", None):
            await memo.controller.stop()
            await memo.controller.ctx.close()
        if exit_after_cleanup is not None:
            # kopf 1.45 could hang after cleanup waiting for credentials its closed API session
            # no longer gives (its peering keep-alive did): every handler is done by now.
            def _exit() -> None:
                logger.warning("kopf did not exit %.0f s after cleanup; exiting", exit_after_cleanup)
                logging.shutdown()
                os._exit(0)

            timer = threading.Timer(exit_after_cleanup, _exit)
            timer.daemon = True
            timer.start()


async def _lead_once_elected(ctl: controller.Controller, leading: threading.Event) -> None:
    while not leading.is_set():
        await asyncio.sleep(0.1)
    ctl.start()


def _register_watches(registry: kopf.OperatorRegistry) -> None:
    @kopf.on.event(naming.GROUP, s.VERSION, s.PLURAL, registry=registry)
    async def resource_event(event: dict[str, Any], memo: kopf.Memo, **_: Any) -> None:
        memo.controller.resource_event(event.get("type"), event["object"])

    for api_version, kind in controller.CHILD_KINDS + [("v1", "Pod")]:
        group, _, version = api_version.rpartition("/")
        plural = PLURALS[(api_version, kind)]
        labels = controller.DRIVER_PODS if kind == "Pod" else controller.MANAGED

        @kopf.on.event(group, version, plural, labels=labels, registry=registry)
        async def child_event(event: dict[str, Any], memo: kopf.Memo, **_: Any) -> None:
            memo.controller.child_event(event.get("type"), event["object"])


def operator_scope(config: OperatorConfig) -> dict[str, Any]:
    """kopf's arguments for what to watch. Always standalone: replicas elect their leader through
    a Lease before kopf starts (operator/leader.py), not through kopf's peering."""
    return dict(clusterwide=config.all_namespaces, namespaces=config.namespaces, standalone=True)


def run(config: OperatorConfig, verbose: bool = False, log_level: str | None = None) -> None:
    """The operator's main loop (blocking)."""
    registry = kopf.OperatorRegistry()
    election = config.leader_election
    leading = None if election is None else threading.Event()
    register(registry, config, exit_after_cleanup=10.0, leading=leading)
    if config.metrics_port:
        from scorestream.operator import metrics

        metrics.serve(config.metrics_port, config.observe_interval)
    kopf.configure(verbose=verbose, **config.kopf_logging())
    if log_level:  # the chart's logLevel; kopf.configure set the root logger's level just now
        logging.getLogger().setLevel(log_level.upper())

    def serve() -> None:
        kopf.run(registry=registry, liveness_endpoint=f"http://0.0.0.0:{config.health_port}/healthz",
                 **operator_scope(config))

    if election is None:
        serve()
        return
    namespace = election.namespace or config.operator_namespace or os.environ.get("POD_NAMESPACE")
    if not namespace:
        raise ValueError("leaderElection: no namespace for the Lease: set leaderElection.namespace,"
                         " operatorNamespace or POD_NAMESPACE")

    def lost() -> None:  # another may lead by now: stop at once, the pod restarts as a follower
        logging.shutdown()
        os._exit(1)

    leader.lead(Kube.from_environment, namespace, election.lease_name, election.lease_duration,
                election.renew_deadline, election.retry_period, serve, leading.set, lost)
