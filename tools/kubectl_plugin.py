"""`kubectl scorestream`: look at a ModelServing and its job, and ask the operator for a rollout step.

kubectl runs any executable named `kubectl-<name>` on PATH as `kubectl <name>`; this is
`kubectl-scorestream` (a console script of the package). It talks to the API server only, as the
user (their kubeconfig, context and RBAC):

- status, models, stats read the resource, its Events, and the job's /models and /stats through
  the API server's service proxy (`/api/v1/namespaces/NS/services/NAME-driver:9090/proxy/...`, the job's read-only port):
  no port-forward, and the `services/proxy` permission decides who may look;
- promote, abort, rollback, restart patch the resource (the control annotations, or
  spec.restartNonce): the operator acts on them and records what it did in status, so GitOps
  tools and `kubectl get -o yaml` see every request. Nothing here talks to the job directly.

Exit codes: 0 done; 1 refused or failed (not found, forbidden, nothing to act on, the API server
unreachable); 2 a usage error; 3 printed what the resource's status has, but the job did not answer
through the proxy; 4 `status --check` and the resource is not Ready.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
import uuid
from datetime import UTC, datetime
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from scorestream import naming
from scorestream.api import job_http as h
from scorestream.api.v1alpha1 import modelserving as s
from scorestream.api.v1alpha1.controls import rollback_value
from scorestream.naming import METRICS_PORT, Names

UNREACHABLE = 3  # not 2: argparse exits 2 on a usage error
NOT_READY = 4  # status --check: the resource is not Ready


class PluginError(Exception):
    """A refusal to show the user, without a traceback."""


class Cluster:
    """The user's API server, through the kubernetes package's kubeconfig loading (KUBECONFIG,
    ~/.kube/config, --kubeconfig, --context; in a pod, its service account)."""

    def __init__(self, kubeconfig: str | None, context: str | None, namespace: str | None):
        try:
            from kubernetes import client, config
        except ImportError:
            raise PluginError("the plugin needs the Kubernetes client: pip install 'scorestream[operator]'") from None

        try:
            config.load_kube_config(config_file=kubeconfig, context=context)
            contexts, active = config.list_kube_config_contexts(config_file=kubeconfig)
            active = next((c for c in contexts if c["name"] == context), active) if context else active
            default_ns = ((active or {}).get("context") or {}).get("namespace") or "default"
        except config.ConfigException as e:
            if kubeconfig or context:
                raise PluginError(f"kubeconfig: {e}") from None
            try:
                config.load_incluster_config()  # no kubeconfig: inside a pod, as its service account
            except config.ConfigException:
                raise PluginError(f"no kubeconfig and not in a pod: {e}") from None
            default_ns = "default"
        self.namespace = namespace or default_ns
        configuration = client.Configuration.get_default_copy()
        configuration.retries = 0  # one clear error at once, not urllib3's three silent retries
        client.Configuration.set_default(configuration)
        self.server = configuration.host
        self.core = client.CoreV1Api()
        self.custom = client.CustomObjectsApi()

    def _call(self, what: str, fn, *args, **kwargs):
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        kwargs.setdefault("_request_timeout", REQUEST_TIMEOUT)
        deadline = time.monotonic() + REQUEST_TIMEOUT
        while True:
            try:
                return fn(*args, **kwargs)
            except HTTPError as e:  # refused, no route, TLS, timed out: the API server itself is unreachable
                raise PluginError(f"{what}: cannot reach the API server at {self.server}: {_network_reason(e)}") \
                    from None
            except ApiException as e:
                # Too many requests, or a CRD whose storage is still starting: retried as kubectl does.
                if e.status != 429 or time.monotonic() > deadline:
                    self._refusal(what, e)
                time.sleep(_retry_after(e))

    @staticmethod
    def _refusal(what: str, e: Any) -> None:
        """A refusal of the API server, said as one line."""
        reason = _api_message(e)
        if e.status == 404:
            raise PluginError(f"{what}: not found ({reason})") from None
        if e.status == 403:
            raise PluginError(f"{what}: forbidden by RBAC ({reason})") from None
        raise PluginError(f"{what}: the API server answered {e.status} ({reason})") from None

    def get(self, name: str) -> dict[str, Any]:
        return self._call(f"modelserving {self.namespace}/{name}", self.custom.get_namespaced_custom_object,
                          naming.GROUP, s.VERSION, self.namespace, s.PLURAL, name)

    def list(self, all_namespaces: bool) -> list[dict[str, Any]]:
        if all_namespaces:
            found = self._call("listing modelservings in all namespaces", self.custom.list_cluster_custom_object,
                               naming.GROUP, s.VERSION, s.PLURAL)
        else:
            found = self._call(f"listing modelservings in {self.namespace}", self.custom.list_namespaced_custom_object,
                               naming.GROUP, s.VERSION, self.namespace, s.PLURAL)
        return sorted(found.get("items", []), key=lambda m: (m["metadata"].get("namespace", ""), m["metadata"]["name"]))

    def patch(self, name: str, body: dict[str, Any]) -> dict[str, Any]:
        # A dict body goes as a JSON merge patch: only the named fields change.
        return self._call(f"patching modelserving {self.namespace}/{name}", self.custom.patch_namespaced_custom_object,
                          naming.GROUP, s.VERSION, self.namespace, s.PLURAL, name, body)

    def events(self, name: str, uid: str, limit: int = 10) -> list[dict[str, Any]]:
        found = self._call("events", self.core.list_namespaced_event, self.namespace,
                           field_selector=f"involvedObject.kind={s.KIND},involvedObject.name={name}")
        events = [e for e in self.core.api_client.sanitize_for_serialization(found).get("items", [])
                  if (e.get("involvedObject") or {}).get("uid") in (None, uid)]
        events.sort(key=_event_time)
        return events[-limit:]

    def job(self, name: str, path: str, answer: type[BaseModel]) -> BaseModel:
        """GET the job's `path` through the API server's service proxy to the driver's Service,
        parsed as the job's typed answer. Raises JobUnreachable."""
        from kubernetes.client.exceptions import ApiException

        # The read-only port: the plugin only reads, and the job's NetworkPolicy admits the API
        # server (apiServerCIDRs) there and nowhere else.
        service = f"{Names(name, self.namespace).driver}:{METRICS_PORT}"
        where = f"/api/v1/namespaces/{self.namespace}/services/{service}/proxy/{path}"
        try:
            raw = self.core.connect_get_namespaced_service_proxy_with_path(
                service, self.namespace, path, _preload_content=False, _request_timeout=10)
            try:
                # As the operator reads it (job_http.MAX_ANSWER_BYTES), not decompressed: the job's
                # answer is a tenant's, and one byte more than the bound says it is too large.
                body = raw.read(h.MAX_ANSWER_BYTES + 1, decode_content=False)
            finally:
                raw.release_conn()
        except ApiException as e:
            raise JobUnreachable(f"the job did not answer through the service proxy ({where}): "
                                 f"{e.status} {_api_message(e)}") from None
        except Exception as e:  # urllib3 errors: the API server itself is unreachable
            raise JobUnreachable(f"the job did not answer through the service proxy ({where}): {e}") from None
        if len(body) > h.MAX_ANSWER_BYTES:
            raise JobUnreachable(f"the job's {path} answer is larger than {h.MAX_ANSWER_BYTES} bytes")
        try:
            return answer.model_validate_json(body)
        except ValidationError as e:
            raise JobUnreachable(f"the job's {path} answer is outside its contract: {h.explain(e)}") from None


class JobUnreachable(Exception):
    pass


def _retry_after(e: Any) -> float:
    try:
        return min(max(float((e.headers or {}).get("Retry-After", 1)), 0.2), 2.0)
    except (TypeError, ValueError):
        return 1.0


REQUEST_TIMEOUT = 15  # seconds for one call to the API server


def _network_reason(e: Exception) -> str:
    """urllib3's innermost reason, without its object reprs: 'connection refused'."""
    reason = getattr(e, "reason", None) or e
    text = str(reason)
    for known in ("Connection refused", "timed out", "Name or service not known", "No route to host",
                  "certificate verify failed", "Network is unreachable"):
        if known.lower() in text.lower():
            return known.lower()
    return text.split(": ", 1)[-1][:200]


def _api_message(e: Any) -> str:
    try:
        return json.loads(e.body).get("message") or e.reason
    except (TypeError, ValueError, AttributeError):
        return str(e.reason)


def _event_time(e: dict[str, Any]) -> str:
    return e.get("lastTimestamp") or e.get("eventTime") or (e.get("metadata") or {}).get("creationTimestamp") or ""


# --- what each command shows ----------------------------------------------------------------------


def status_view(ms: dict[str, Any], events: list[dict[str, Any]]) -> dict[str, Any]:
    st = ms.get("status") or {}
    model = st.get("model") or {}
    return {
        "name": ms["metadata"]["name"], "namespace": ms["metadata"]["namespace"],
        "phase": st.get("phase", "Unknown"), "observedGeneration": st.get("observedGeneration"),
        "generation": ms["metadata"].get("generation"),
        "conditions": [{k: c.get(k) for k in ("type", "status", "reason", "message")} for c in st.get("conditions", [])],
        "model": {k: model.get(k) for k in ("current", "desired", "rollout", "pinned") if model.get(k)},
        "lag": st.get("lag"), "replicas": {"running": st.get("replicas"), "spec": ms["spec"].get("replicas"),
                                           **({"target": st["scaling"]["target"]} if st.get("scaling") else {})},
        "controls": st.get("controls"),
        "events": [{"type": e.get("type"), "reason": e.get("reason"), "at": _event_time(e),
                    "count": e.get("count"), "message": e.get("message")} for e in events],
    }


def models_view(ms: dict[str, Any], job: h.Models | None, error: str | None) -> dict[str, Any]:
    model = (ms.get("status") or {}).get("model") or {}
    data_type = ms["spec"]["dataType"]
    view: dict[str, Any] = {"name": ms["metadata"]["name"], "dataType": data_type,
                            "status": {k: model.get(k) for k in ("current", "desired", "rollout", "pinned")
                                       if model.get(k)},
                            "history": [{k: v for k, v in e.items() if k != "model"} for e in model.get("history", [])]}
    if job is not None:
        view["job"] = {
            "serving": {dt: _model_info(m) for dt, m in job.serving.items()},
            "candidates": {dt: {**_model_info(c), "strategy": c.strategy, "percent": c.percent}
                           for dt, c in job.candidates.items()},
            "rejected": [r.model_dump(mode="json") | {"at": _rfc3339(r.at)} for r in job.rejected],
        }
    else:
        view["job"] = {"error": error}
    return view


def _model_info(m: h.ModelInfo) -> dict[str, Any]:
    return {"name": m.name, "version": m.version, "format": m.format, "since": _rfc3339(m.since), "digest": m.digest}


def stats_view(ms: dict[str, Any], stats: h.Stats | None, error: str | None) -> dict[str, Any]:
    view: dict[str, Any] = {"name": ms["metadata"]["name"]}
    if stats is None:
        trial = ((ms.get("status") or {}).get("model") or {}).get("rollout")
        return {**view, "error": error, "statusFigures": trial}
    return {**view, **stats.model_dump(mode="json")}


def _rfc3339(seconds: float | None) -> str | None:
    return None if seconds is None else datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def list_row(ms: dict[str, Any]) -> dict[str, Any]:
    st = ms.get("status") or {}
    ready = next((c for c in st.get("conditions", []) if c.get("type") == "Ready"), {})
    current = (st.get("model") or {}).get("current")
    return {"namespace": ms["metadata"].get("namespace"), "name": ms["metadata"]["name"],
            "ready": ready.get("status", "Unknown"), "phase": st.get("phase", "Unknown"),
            "reason": st.get("reason") or ("" if ready.get("status") == "True" else ready.get("reason", "")),
            "model": _label(current), "lag": st.get("lag"), "replicas": st.get("replicas"),
            "suspended": bool((ms.get("spec") or {}).get("suspend"))}


# --- human output -------------------------------------------------------------------------------


def _label(m: dict[str, Any] | None) -> str:
    return f"{m['name']} {m['version']}" if m else "-"


def _figures(f: dict[str, Any] | None) -> str:
    if not f:
        return ""
    mean = f" mean {f['meanMs']:.3f} ms" if f.get("meanMs") is not None else ""
    return f"{f.get('records', 0)} records, {f.get('errors', 0)} errors{mean}"


def human_status(v: dict[str, Any]) -> str:
    lines = [f"ModelServing {v['namespace']}/{v['name']}: {v['phase']} "
             f"(generation {v['generation']}, observed {v['observedGeneration']})", "", "Conditions:"]
    for c in v["conditions"]:
        lines.append(f"  {c['type']:<12} {c['status']:<7} {c['reason']}" + (f": {c['message']}" if c.get("message") else ""))
    m = v["model"]
    lines += ["", f"Model:     serving {_label(m.get('current'))}, desired {_label(m.get('desired'))}"]
    if m.get("pinned"):
        lines.append(f"  pinned:  {_label(m['pinned'])} (rolled back by request at {m['pinned']['at']})")
    trial = m.get("rollout")
    if trial:
        share = f" {trial['percent']:g}%" if trial.get("percent") else ""
        lines.append(f"Candidate: {_label(trial['candidate'])} ({trial['strategy']}{share}, {trial['phase']} "
                     f"since {trial['startedAt']})")
        lines.append(f"  candidate: {_figures(trial['candidate']) or 'no figures yet'}")
        if trial.get("current"):
            lines.append(f"  serving:   {_figures(trial['current'])}")
        if trial.get("agreement") is not None:
            lines.append(f"  agreement: {trial['agreement']:.2%}, mean |diff| {trial.get('meanAbsDiff')}")
        if trial.get("message"):
            lines.append(f"  {trial['message']}")
    r = v["replicas"]
    lag = "-" if v["lag"] is None else v["lag"]
    lines += [f"Lag:       {lag} records",
              f"Replicas:  {r['running']} running, {r.get('target', '-')} asked, {r['spec']} in spec"]
    if v.get("controls"):
        c = v["controls"]
        lines.append(f"Controls:  {c.get('message', '')}")
    lines += ["", "Recent events:"]
    for e in v["events"] or [{"type": "", "reason": "(none)", "at": "", "message": ""}]:
        lines.append(f"  {e['at']:<21} {e['type']:<8} {e['reason']}: {e['message']}".rstrip(": "))
    return "\n".join(lines)


def human_list(rows: list[dict[str, Any]], all_namespaces: bool, namespace: str) -> str:
    if not rows:
        return "No ModelServings found" + ("." if all_namespaces else f" in namespace {namespace}.")
    head = ["NAMESPACE"] if all_namespaces else []
    table = [head + ["NAME", "READY", "PHASE", "REASON", "MODEL", "REPLICAS", "LAG"]]
    for r in rows:
        table.append(([r["namespace"]] if all_namespaces else []) + [
            r["name"], r["ready"], r["phase"], r["reason"] or "-", r["model"],
            "-" if r["replicas"] is None else str(r["replicas"]), "-" if r["lag"] is None else str(r["lag"])])
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    return "\n".join("   ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in table)


def human_models(v: dict[str, Any]) -> str:
    st = v["status"]
    lines = [f"ModelServing {v['name']} (dataType {v['dataType']})",
             f"Status:  serving {_label(st.get('current'))}, desired {_label(st.get('desired'))}"]
    if st.get("pinned"):
        lines.append(f"         pinned to {_label(st['pinned'])} by a rollback request")
    job = v["job"]
    if "error" in job:
        lines += ["", f"Job:     unreachable: {job['error']}"]
    else:
        lines += ["", "Serving (the job's /models):"]
        for dt, m in job["serving"].items() or [("-", None)]:
            lines.append(f"  {dt:<12} {_label(m)} ({m['format']}, since {m['since']}, sha256 {m['digest'][:12]})"
                         if m else "  (none)")
        lines.append("Candidates:")
        for dt, c in job["candidates"].items():
            lines.append(f"  {dt:<12} {_label(c)} ({c['strategy']} {c['percent']:g}%, since {c['since']})")
        if not job["candidates"]:
            lines.append("  (none)")
        lines.append("Rejected:")
        for r in job["rejected"]:
            lines.append(f"  {r['at']} {r['model']} ({r.get('dataType') or '-'}): {r['reason']}")
        if not job["rejected"]:
            lines.append("  (none)")
    lines += ["", "History (status.model.history, oldest first):"]
    for e in v["history"]:
        lines.append(f"  {e['at']}  {e['name'] + ' ' + e['version']:<28} {e['outcome']}"
                     + (f": {e['reason']}" if e.get("reason") else ""))
    return "\n".join(lines)


def human_stats(v: dict[str, Any]) -> str:
    if "error" in v:
        lines = [f"Job unreachable: {v['error']}"]
        if v.get("statusFigures"):
            t = v["statusFigures"]
            lines += ["From status (the last trial):", f"  candidate {_label(t['candidate'])}: {_figures(t['candidate'])}"]
            if t.get("current"):
                lines.append(f"  serving   {_label(t['current'])}: {_figures(t['current'])}")
        return "\n".join(lines)
    lines = [f"{'DATATYPE':<12} {'ROLE':<9} {'MODEL':<28} {'INVOCATIONS':>11} {'ERRORS':>7} {'MEAN MS':>9}  SINCE"]

    def row(dt: str, role: str, m: dict[str, Any]) -> str:
        mean = m["duration"]["meanMs"]
        return (f"{dt:<12} {role:<9} {m['name'] + ' ' + m['version']:<28} {m['invocations']:>11} {m['errors']:>7} "
                f"{'-' if mean is None else f'{mean:.4f}':>9}  {_rfc3339(m['since'])}")

    for dt, m in v["dataTypes"].items():
        lines.append(row(dt, "serving", m))
        if m.get("candidate"):
            c = m["candidate"]
            lines.append(row(dt, c["strategy"].lower(), c))
            if c.get("comparison"):
                cmp = c["comparison"]
                lines.append(f"{'':<22} agreement {cmp['agreement']}, mean |diff| {cmp['meanAbsDiff']} "
                             f"over {cmp['records']} records")
        for p in m.get("previous", []):
            lines.append(row(dt, "previous", p))
    t = v["totals"]
    lines += ["", f"Totals: {t['recordsIn']} in, {t['recordsOut']} out, {t['recordsDeadLettered']} dead-lettered, "
                  f"{t['batches']} batches, lag {t['lag']}, executors {t['executors']}/{t['executorTarget']}"]
    return "\n".join(lines)


# --- the commands -------------------------------------------------------------------------------


def _request_id() -> str:
    return f"{datetime.now(UTC):%Y%m%dT%H%M%SZ}-{uuid.uuid4().hex[:6]}"


def _trial(ms: dict[str, Any]) -> dict[str, Any]:
    return (((ms.get("status") or {}).get("model") or {}).get("rollout")) or {}


def _await(cluster: Cluster, name: str, done, seconds: float) -> dict[str, Any] | None:
    """The resource once `done(ms)`, polling up to `seconds`; None if it did not happen."""
    deadline = time.monotonic() + seconds
    while True:
        ms = cluster.get(name)
        if done(ms):
            return ms
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.5)


def control(cluster: Cluster, name: str, key: str, value: str, wait: float) -> tuple[dict[str, Any], int]:
    """Set a control annotation; with `wait`, until the operator records it handled."""
    annotation = naming.CONTROL_ANNOTATIONS[key]
    cluster.patch(name, {"metadata": {"annotations": {annotation: value}}})
    result = {"name": name, "annotation": annotation, "value": value, "handled": None}
    if wait <= 0:
        return result, 0
    ms = _await(cluster, name, lambda m: ((m.get("status") or {}).get("controls") or {}).get(key) == value, wait)
    if ms is None:
        raise PluginError(f"{annotation}={value} set, but the operator did not record it handled within {wait:g}s "
                          "(is it running and watching this namespace?)")
    handled = ms["status"]["controls"]
    result["handled"] = handled.get("message", "")
    if handled.get("acted") is False:  # answered, not carried out (the trial ended meanwhile...)
        raise PluginError(f"the operator did not act on {annotation}={value}: {result['handled']}")
    return result, 0


def run(args: argparse.Namespace) -> tuple[Any, str, int]:
    """The command's view, its human rendering, and the exit code."""
    if args.command == "version":
        from scorestream.tools.cli import package_version

        v = {"plugin": package_version()}
        return v, f"kubectl-scorestream {v['plugin']} (serves {s.API_VERSION} {s.KIND})", 0
    cluster = Cluster(args.kubeconfig, args.context, args.namespace)
    if args.command == "list":
        items = cluster.list(args.all_namespaces)
        v = [list_row(ms) for ms in items]
        return v, human_list(one_line(v), args.all_namespaces, cluster.namespace), 0
    ms = cluster.get(args.name)
    name = args.name
    if args.command == "status":
        v = status_view(ms, cluster.events(name, ms["metadata"]["uid"]))
        ready = next((c["status"] for c in v["conditions"] if c["type"] == "Ready"), "Unknown")
        return v, human_status(one_line(v)), NOT_READY if args.check and ready != "True" else 0
    if args.command in ("suspend", "resume"):
        want = args.command == "suspend"
        if bool((ms.get("spec") or {}).get("suspend")) == want:
            return {"name": name, "suspend": want}, f"modelserving {cluster.namespace}/{name} is already " \
                f"{'suspended' if want else 'running (not suspended)'}: nothing to do", 0
        cluster.patch(name, {"spec": {"suspend": want}})
        what = ("suspend requested: spec.suspend=true (the job stops gracefully and keeps its checkpoint and offsets)"
                if want else "resume requested: spec.suspend=false (the job starts from its checkpoint)")
        return {"name": name, "suspend": want}, what, 0
    if args.command in ("models", "stats"):
        path, answer, view, human = (("models", h.Models, models_view, human_models) if args.command == "models"
                                     else ("stats", h.Stats, stats_view, human_stats))
        try:
            got, error = cluster.job(name, path, answer), None
        except JobUnreachable as e:
            got, error = None, str(e)
        v = view(ms, got, error)
        return v, human(one_line(v)), 0 if got is not None else UNREACHABLE
    if args.command in ("promote", "abort"):
        trial = _trial(ms)
        if trial.get("phase") != "Analyzing":
            raise PluginError(f"nothing to {args.command}: no candidate is on trial"
                              + (f" (the last one, {_label(trial.get('candidate'))}, is {trial['phase']})" if trial else ""))
        v, code = control(cluster, name, args.command, _request_id(), args.timeout)
        what = f"{args.command} of {_label(trial['candidate'])} requested ({v['annotation']}={v['value']})"
        return v, what + (f"; the operator: {v['handled']}" if v["handled"] else ""), code
    if args.command == "rollback":
        history = ((ms.get("status") or {}).get("model") or {}).get("history", [])
        desired = (ms.get("spec") or {}).get("model") or {}
        version = args.to or next((e["version"] for e in reversed(history) if e.get("model")
                                   and e["version"] != desired.get("version") and e["outcome"] in ("Replaced", "Serving")),
                                  None)
        if version is None:
            raise PluginError("no earlier version to roll back to in status.model.history; name one with --to")
        entry = next((e for e in reversed(history) if e["version"] == version), None)
        if entry is None:
            raise PluginError(f"version {version!r} is not in status.model.history "
                              f"(it has: {', '.join(e['version'] for e in history) or 'none'})")
        if not entry.get("model"):
            raise PluginError(f"version {version!r} has no kept spec.model in status.model.history: "
                              "set spec.model to it instead")
        v, code = control(cluster, name, "rollbackTo", rollback_value(version, _request_id()), args.timeout)
        what = f"rollback to {entry['name']} {version} requested ({v['annotation']}={v['value']})"
        return v, what + (f"; the operator: {v['handled']}" if v["handled"] else ""), code
    if args.command == "restart":
        if (ms.get("spec") or {}).get("suspend"):
            raise PluginError(f"modelserving {cluster.namespace}/{name} is suspended: a restart does nothing while"
                              f" no driver runs; `kubectl scorestream resume {name}` starts it")
        nonce = int(ms["spec"].get("restartNonce") or 0) + 1
        cluster.patch(name, {"spec": {"restartNonce": nonce}})
        v = {"name": name, "restartNonce": nonce}
        return v, f"restart requested: spec.restartNonce={nonce} (the driver rolls, resuming from its checkpoint)", 0
    raise PluginError(f"unknown command {args.command!r}")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="kubectl scorestream", description=__doc__.split("\n\n")[0])
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("-n", "--namespace", help="the resource's namespace (default: the context's)")
    common.add_argument("--context", help="the kubeconfig context to use")
    common.add_argument("--kubeconfig", help="the kubeconfig file (default: $KUBECONFIG or ~/.kube/config)")
    common.add_argument("-o", "--output", choices=["human", "json", "yaml"], default="human")
    sub = p.add_subparsers(dest="command", required=True)
    helps = {"list": "the ModelServings of the namespace (-A: of all namespaces): ready, phase, reason, model, lag",
             "status": "phase, conditions, model and candidate with their figures, lag, replicas, recent events",
             "models": "serving, candidates, rejected (the job's /models) and the history (status)",
             "stats": "ModelServingInfo per model (the job's /stats)",
             "promote": "promote the canary or shadow on trial now (annotation scorestream.dev/promote)",
             "abort": "withdraw the candidate on trial now (annotation scorestream.dev/abort)",
             "rollback": "serve an earlier version from status.model.history (annotation scorestream.dev/rollback-to)",
             "restart": "restart the driver (spec.restartNonce + 1)",
             "suspend": "stop the job gracefully, keeping its checkpoint and offsets (spec.suspend=true)",
             "resume": "start a suspended job again from its checkpoint (spec.suspend=false)",
             "ui": "Spark's web UI of the driver, through a port-forward (where spec.spark.ui.enabled)"}
    version = sub.add_parser("version", help="the plugin's version", description="the plugin's version")
    version.add_argument("-o", "--output", choices=["human", "json", "yaml"], default="human")
    for command, text in helps.items():
        c = sub.add_parser(command, parents=[common], help=text, description=text)
        if command == "list":
            c.add_argument("-A", "--all-namespaces", action="store_true", help="list every namespace's")
        else:
            c.add_argument("name", help="the ModelServing's name")
        if command == "status":
            c.add_argument("--check", action="store_true",
                           help=f"exit {NOT_READY} when the resource is not Ready (for scripts and CI)")
        if command == "ui":
            c.add_argument("--port", type=int, default=4040, help="the local port (default 4040)")
            c.add_argument("--address", default="127.0.0.1", help="the local address (default 127.0.0.1)")
        if command == "rollback":
            c.add_argument("--to", metavar="VERSION", help="the version (default: the last one replaced)")
        if command in ("promote", "abort", "rollback"):
            c.add_argument("--timeout", type=_duration, default=0, metavar="DURATION",
                           help="wait this long for the operator to record the request handled (e.g. 30s, 2m)")
            c.add_argument("--wait", type=_duration, dest="timeout", help=argparse.SUPPRESS)  # the older spelling
    return p


def _duration(text: str) -> float:
    """kubectl's --timeout: 30s, 2m, 1h, 500ms, or plain seconds."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)(ms|s|m|h)?", text.strip())
    if not m:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration: e.g. 30s, 2m, 1h")
    return float(m.group(1)) * {"ms": 0.001, "s": 1, "m": 60, "h": 3600, None: 1}[m.group(2)]



def one_line(view: Any) -> Any:
    """The view with every string on one line (newlines, carriage returns and tabs escaped): the
    human output lays values out in lines and columns, and a tenant's newline in a reason or a
    model name would print a line of its own choosing. JSON and YAML output keep the text as is."""
    if isinstance(view, str):
        return view.replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t")
    if isinstance(view, dict):
        return {k: one_line(v) for k, v in view.items()}
    if isinstance(view, list):
        return [one_line(v) for v in view]
    return view


def printable(text: str) -> str:
    """`text` with control characters escaped (newlines and tabs kept): model names, reasons and
    Event messages are tenants' and models-topic writers' text, and a terminal acts on escapes."""
    return "".join(c if c in "\n\t" or c.isprintable() else f"\\x{ord(c):02x}" if ord(c) < 0x100
                   else f"\\u{ord(c):04x}" for c in text)


def _ui(args: argparse.Namespace) -> int:
    """A port-forward to the driver's Spark UI (scorestream.spark_ui), running until stopped."""
    from scorestream.tools import spark_ui

    try:
        cluster = Cluster(args.kubeconfig, args.context, args.namespace)
        return spark_ui.forward(cluster.get(args.name), args.port, args.address, args.kubeconfig, args.context)
    except (PluginError, spark_ui.NoUI) as e:
        print(f"error: {printable(str(e))}", file=sys.stderr)
        return 1


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.command == "ui":
        return _ui(args)
    try:
        view, human, code = run(args)
    except PluginError as e:
        print(f"error: {printable(str(e))}", file=sys.stderr)
        return 1
    if args.output == "json":
        print(json.dumps(view, indent=2))
    elif args.output == "yaml":
        print(yaml.safe_dump(view, sort_keys=False), end="")
    else:
        print(printable(human))
    if code == UNREACHABLE:
        print("warning: the job did not answer through the API server's service proxy; shown: what the "
              "resource's status has", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
