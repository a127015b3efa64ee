"""kopf handlers, thin: each hands the resource to reconciler.reconcile, which writes its status.

Handlers are registered into a registry passed in (not kopf's global one), so the tests can run
a real operator per test against the test control plane.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
from typing import Any

import kopf

from scorestream import naming
from scorestream.operator import leader, metrics, reconciler
from scorestream.operator import spec as s
from scorestream.operator.conditions import Reason
from scorestream.operator.kube import Kube
from scorestream.operator.settings import OperatorConfig

CHILD_KINDS = [("", "v1", "configmaps"), ("", "v1", "serviceaccounts"), ("", "v1", "services"),
               ("rbac.authorization.k8s.io", "v1", "roles"), ("rbac.authorization.k8s.io", "v1", "rolebindings"),
               ("apps", "v1", "statefulsets"), ("networking.k8s.io", "v1", "networkpolicies")]
MANAGED = {"app.kubernetes.io/managed-by": "scorestream-operator"}


def register(registry: kopf.OperatorRegistry, config: OperatorConfig,
             connection: kopf.ConnectionInfo | None = None, exit_after_cleanup: float | None = None) -> None:
    """Register the operator's handlers. `connection`: a fixed API server (tests); else kubeconfig/in-cluster.
    `exit_after_cleanup`: end the process this many seconds after kopf's cleanup if kopf has not."""
    _register_lifecycle(registry, config, connection, exit_after_cleanup)
    _register_resource(registry, config)
    _register_children(registry)


def _register_lifecycle(registry: kopf.OperatorRegistry, config: OperatorConfig,
                        connection: kopf.ConnectionInfo | None, exit_after_cleanup: float | None) -> None:
    @kopf.on.login(registry=registry)
    def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
        return connection or kopf.login_via_client(**kwargs)

    @kopf.on.startup(registry=registry)
    async def startup(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
        # The name of the finalizer kopf removes where an earlier version left it (none is added now).
        settings.persistence.finalizer = f"{naming.GROUP}/finalizer"
        settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=naming.GROUP)
        settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(prefix=naming.GROUP)
        # No watching of CRDs and namespaces: the operator serves one CRD installed before it, and
        # exact namespaces. That keeps its RBAC to what it touches (no cluster-wide reads at all
        # in namespaced mode); a CRD installed later is found at the next start.
        settings.scanning.disabled = True
        settings.posting.level = 20  # INFO and above (of the per-object logger too) become Events
        kube = Kube.for_server(connection.server, connection.token, verify_ssl=not connection.insecure) \
            if connection else await Kube.from_environment()
        memo.ctx = reconciler.Context(kube=kube, config=config)

    @kopf.on.cleanup(registry=registry)
    async def cleanup(memo: kopf.Memo, logger: Any, **_: Any) -> None:
        if getattr(memo, "ctx", None):
            await memo.ctx.close()
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


def _register_resource(registry: kopf.OperatorRegistry, config: OperatorConfig) -> None:
    resource = (naming.GROUP, s.VERSION, s.PLURAL)

    @kopf.on.resume(*resource, registry=registry)
    @kopf.on.create(*resource, registry=registry)
    @kopf.on.update(*resource, registry=registry)
    async def apply(body: kopf.Body, memo: kopf.Memo, logger: Any, reason: str, **_: Any) -> None:
        await reconciler.reconcile(memo.ctx, dict(body), logger, trigger=str(reason))

    async def observe(body: kopf.Body, memo: kopf.Memo, logger: Any, **_: Any) -> None:
        if body.metadata.get("deletionTimestamp"):
            return
        await reconciler.reconcile(memo.ctx, dict(body), logger, trigger="timer")

    # Deleted resources, by uid: their timers stop (below) when kopf re-matches them on the DELETED event.
    gone: set[str] = set()

    # Called for every event of a ModelServing; its id says so, where kopf logs "Handler ... succeeded".
    @kopf.on.event(*resource, registry=registry, id="watch-for-deletion")
    async def deleted(event: dict[str, Any], body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
        if event.get("type") == "DELETED":  # its status series and what the operator remembers go with it
            gone.add(body.metadata.uid)
            metrics.forget(body.metadata.namespace, body.metadata.name)
            if getattr(memo, "ctx", None) and body.metadata.uid:
                memo.ctx.forget(body.metadata.uid)

    def alive(body: kopf.Body, **_: Any) -> bool:
        return body.metadata.uid not in gone

    kopf.timer(*resource, registry=registry, interval=config.observe_interval, initial_delay=1.0,
               sharp=False, idle=0, id="observe", when=alive)(observe)
    # While a rollout waits for the job's confirmation, look more often than the observer does:
    # the time to ModelReady is then bounded by this poll, not by the observe interval.
    kopf.timer(*resource, registry=registry, interval=config.rollout_poll, initial_delay=config.rollout_poll,
               sharp=False, id="confirm-rollout", when=lambda **kw: alive(**kw) and _rolling_out(**kw))(observe)
    _without_finalizer(registry)


def _register_children(registry: kopf.OperatorRegistry) -> None:
    for group, version, plural in CHILD_KINDS:
        @kopf.on.event(group, version, plural, labels=MANAGED, registry=registry)
        async def child_changed(event: dict[str, Any], body: kopf.Body, memo: kopf.Memo, logger: Any,
                                **_: Any) -> None:
            """A child deleted or edited by someone else: its owner's reconcile repairs it at once,
            not at the next spec change."""
            if event.get("type") not in ("DELETED", "MODIFIED"):
                return
            owner = next((r for r in body.metadata.get("ownerReferences", [])
                          if r.get("kind") == s.KIND and r.get("controller")), None)
            if owner is None:
                return
            ms = {"metadata": {"name": owner["name"], "namespace": body.metadata.namespace, "uid": owner.get("uid")}}
            child = reconciler.Child(dict(body), deleted=event["type"] == "DELETED")
            await reconciler.reconcile(memo.ctx, ms, logger, trigger="child", child=child)


def _without_finalizer(registry: kopf.OperatorRegistry) -> None:
    """No finalizer on ModelServings: the operator has no work of its own on deletion (the garbage
    collector takes the children by their owner references), and a finalizer left by an operator
    that is gone (`helm uninstall`) would make `kubectl delete ms` hang. kopf puts one on every
    resource with a timer, only so that it can stop the timers: the `alive` filter stops them on
    the DELETED event instead. kopf 1.45 has no public switch for it, hence the replace; it also
    removes the finalizer an earlier operator version left on existing resources."""
    spawning = registry._spawning  # kopf's own registry of timers and daemons
    spawning._handlers[:] = [dataclasses.replace(h, requires_finalizer=False) for h in spawning._handlers]


def _rolling_out(body: kopf.Body, **_: Any) -> bool:
    ready = next((c for c in (body.get("status") or {}).get("conditions", []) if c.get("type") == "ModelReady"), {})
    reason = ready.get("reason")
    # A canary is watched closely (its rules may fail within seconds); a shadow, which may run
    # for days, at the observer's pace.
    return reason in (Reason.ROLLING_OUT, Reason.CANARY_ANALYSIS) or \
        (reason == Reason.NO_MODEL and bool(body.get("spec", {}).get("model")))


def operator_scope(config: OperatorConfig) -> dict[str, Any]:
    """kopf's arguments for what to watch. Always standalone: replicas elect their leader through
    a Lease before kopf starts (operator/leader.py), not through kopf's peering."""
    return dict(clusterwide=config.all_namespaces, namespaces=config.namespaces, standalone=True)


def run(config: OperatorConfig, verbose: bool = False, log_level: str | None = None) -> None:
    """The operator's main loop (blocking)."""
    registry = kopf.OperatorRegistry()
    register(registry, config, exit_after_cleanup=10.0)
    if config.metrics_port:
        from scorestream.operator import metrics

        metrics.serve(config.metrics_port, config.observe_interval)
    kopf.configure(verbose=verbose)
    if log_level:  # the chart's logLevel; kopf.configure set the root logger's level just now
        logging.getLogger().setLevel(log_level.upper())

    def serve() -> None:
        kopf.run(registry=registry, liveness_endpoint=f"http://0.0.0.0:{config.health_port}/healthz",
                 **operator_scope(config))

    election = config.leader_election
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
                election.renew_deadline, election.retry_period, serve, lost, health_port=config.health_port)
