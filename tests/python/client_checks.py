"""The official Python `kubernetes` client against `plinth serve`.

Run by crates/plinth/tests/python_client.rs with the server's kubeconfig as the only argument.
Every check asserts; the script prints one line per check and exits non-zero on the first
failure.
"""

import json
import sys
import threading
import time

from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException

config.load_kube_config(config_file=sys.argv[1])
core = client.CoreV1Api()
coordination = client.CoordinationV1Api()
NS = "default"


def check(name):
    def wrap(fn):
        fn()
        print(f"ok: {name}", flush=True)
        return fn
    return wrap


def cm(name, data=None, labels=None):
    return client.V1ConfigMap(metadata=client.V1ObjectMeta(name=name, labels=labels), data=data)


@check("system namespaces are there")
def _():
    names = {n.metadata.name for n in core.list_namespace().items}
    assert {"default", "kube-system", "kube-public", "kube-node-lease"} <= names, names


@check("create, read, replace, and a stale replace conflicts with 409")
def _():
    created = core.create_namespaced_config_map(NS, cm("py-cm", {"a": "1"}))
    assert created.metadata.uid and created.metadata.resource_version
    fresh = core.read_namespaced_config_map("py-cm", NS)
    fresh.data["a"] = "2"
    updated = core.replace_namespaced_config_map("py-cm", NS, fresh)
    assert int(updated.metadata.resource_version) > int(created.metadata.resource_version)
    created.data["a"] = "3"  # still carries the old resourceVersion
    try:
        core.replace_namespaced_config_map("py-cm", NS, created)
        raise AssertionError("a stale replace must fail")
    except ApiException as e:
        assert e.status == 409, e.status
        body = json.loads(e.body)
        assert body["reason"] == "Conflict", body
        assert "the object has been modified" in body["message"], body
    assert core.read_namespaced_config_map("py-cm", NS).data == {"a": "2"}


@check("errors carry Status bodies")
def _():
    try:
        core.read_namespaced_config_map("missing", NS)
        raise AssertionError("must be 404")
    except ApiException as e:
        assert e.status == 404
        body = json.loads(e.body)
        assert body["kind"] == "Status" and body["reason"] == "NotFound"
        assert body["details"] == {"name": "missing", "kind": "configmaps"}, body
    try:
        core.create_namespaced_config_map(NS, cm("Bad_Name"))
        raise AssertionError("must be 422")
    except ApiException as e:
        assert e.status == 422
        body = json.loads(e.body)
        assert body["details"]["causes"][0]["field"] == "metadata.name", body


@check("patches: merge and JSON patch")
def _():
    core.patch_namespaced_config_map("py-cm", NS, {"data": {"b": "x"}})
    got = core.read_namespaced_config_map("py-cm", NS)
    assert got.data == {"a": "2", "b": "x"}, got.data


@check("paginated lists stay consistent under concurrent writes")
def _():
    for i in range(60):
        core.create_namespaced_config_map(NS, cm(f"page-{i:03d}", labels={"set": "paged"}))
    stop = threading.Event()
    writes = []

    def writer():
        i = 0
        while not stop.is_set():
            core.create_namespaced_config_map(NS, cm(f"page-new-{i:04d}", labels={"set": "paged"}))
            core.delete_namespaced_config_map(f"page-{i % 60:03d}", NS) if i < 30 else None
            writes.append(i)
            i += 1

    thread = threading.Thread(target=writer)
    thread.start()
    time.sleep(0.05)
    names, token, versions = [], None, set()
    first = core.list_namespaced_config_map(NS, label_selector="set=paged", limit=7)
    snapshot = first.metadata.resource_version
    names += [i.metadata.name for i in first.items]
    token = first.metadata._continue
    while token:
        page = core.list_namespaced_config_map(NS, label_selector="set=paged", limit=7, _continue=token)
        versions.add(page.metadata.resource_version)
        names += [i.metadata.name for i in page.items]
        token = page.metadata._continue
    stop.set()
    thread.join()
    assert writes, "the writer ran during pagination"
    assert versions <= {snapshot}, (versions, snapshot)
    assert len(names) == len(set(names)), "no object twice"
    whole = core.list_namespaced_config_map(NS, label_selector="set=paged", resource_version=snapshot,
                                            resource_version_match="Exact")
    assert sorted(names) == sorted(i.metadata.name for i in whole.items), "pages add up to the snapshot"


@check("watch resumes from a resourceVersion")
def _():
    rv = core.list_namespaced_config_map(NS, limit=1).metadata.resource_version
    core.create_namespaced_config_map(NS, cm("watched-1"))
    core.patch_namespaced_config_map("watched-1", NS, {"data": {"k": "v"}})
    core.delete_namespaced_config_map("watched-1", NS)
    seen = []
    for event in watch.Watch().stream(core.list_namespaced_config_map, NS, resource_version=rv,
                                      field_selector="metadata.name=watched-1", timeout_seconds=2):
        seen.append(event["type"])
    assert seen == ["ADDED", "MODIFIED", "DELETED"], seen


@check("watch-list: initial events, then the initial-events-end bookmark")
def _():
    events = []
    stream = watch.Watch().stream(core.list_namespaced_config_map, NS, send_initial_events=True,
                                  allow_watch_bookmarks=True, resource_version_match="NotOlderThan",
                                  label_selector="set=paged", timeout_seconds=2)
    for event in stream:
        events.append(event)
        if event["type"] == "BOOKMARK":
            break
    bookmark = events[-1]
    assert bookmark["type"] == "BOOKMARK", [e["type"] for e in events]
    annotations = bookmark["raw_object"]["metadata"].get("annotations", {})
    assert annotations.get("k8s.io/initial-events-end") == "true", bookmark["raw_object"]
    assert all(e["type"] == "ADDED" for e in events[:-1]) and len(events) > 1


@check("a resourceVersion older than history is 410 Gone")
def _():
    # The server under test compacts every second, up to the revision of the tick before.
    old = core.list_namespaced_config_map(NS, limit=1).metadata.resource_version
    for i in range(3):
        core.create_namespaced_config_map(NS, cm(f"compact-{i}"))
    time.sleep(3)
    try:
        list(watch.Watch().stream(core.list_namespaced_config_map, NS, resource_version=old,
                                  timeout_seconds=1))
        raise AssertionError("a watch from a compacted resourceVersion must fail")
    except ApiException as e:
        # As from kube-apiserver: the watch starts, and its one event is an ERROR with the 410
        # Status, which the client raises.
        assert e.status == 410, (e.status, e.reason)
        assert e.reason.startswith("Expired: too old resource version"), e.reason
    try:
        core.list_namespaced_config_map(NS, resource_version=old, resource_version_match="Exact")
        raise AssertionError("an exact list at a compacted resourceVersion must fail")
    except ApiException as e:
        assert e.status == 410, e.status


@check("leases and secrets")
def _():
    lease = client.V1Lease(metadata=client.V1ObjectMeta(name="py-lease"),
                           spec=client.V1LeaseSpec(holder_identity="me", lease_duration_seconds=15))
    created = coordination.create_namespaced_lease(NS, lease)
    assert created.spec.holder_identity == "me"
    secret = client.V1Secret(metadata=client.V1ObjectMeta(name="py-secret"), string_data={"pw": "hunter2"})
    stored = core.create_namespaced_secret(NS, secret)
    assert stored.data == {"pw": "aHVudGVyMg=="} and stored.type == "Opaque", stored


@check("flow control: the defaults are readable, a bad priority level gets 422")
def _():
    flow = client.FlowcontrolApiserverV1Api()
    schemas = {f.metadata.name: f for f in flow.list_flow_schema().items}
    assert {"exempt", "probes", "catch-all"} <= set(schemas), set(schemas)
    catch_all = schemas["catch-all"]
    assert catch_all.spec.priority_level_configuration.name == "catch-all"
    assert catch_all.spec.distinguisher_method.type == "ByUser"
    assert [c.status for c in catch_all.status.conditions if c.type == "Dangling"] == ["False"]
    level = flow.read_priority_level_configuration("catch-all")
    assert level.spec.type == "Limited" and level.spec.limited.limit_response.type == "Queue"
    bad = client.V1PriorityLevelConfiguration(
        metadata=client.V1ObjectMeta(name="py-bad"),
        spec=client.V1PriorityLevelConfigurationSpec(type="Limited", limited=client.V1LimitedPriorityLevelConfiguration(
            limit_response=client.V1LimitResponse(type="Queue", queuing=client.V1QueuingConfiguration(
                queues=2, hand_size=4, queue_length_limit=10)))))
    try:
        flow.create_priority_level_configuration(bad)
        raise AssertionError("handSize > queues must be refused")
    except ApiException as e:
        assert e.status == 422, e.status
        body = json.loads(e.body)
        assert body["details"]["causes"][0]["field"] == "spec.limited.limitResponse.queuing.handSize", body
    names = {p.metadata.name for p in flow.list_priority_level_configuration().items}
    assert "py-bad" not in names and {"exempt", "catch-all"} <= names, names


print("python client: all checks passed")
