"""The Python `kubernetes` client as a certificate user (alice, bound to the spec-writer Role
in namespace `team`). Run by crates/plinth/tests/rbac.rs with alice's kubeconfig."""

import sys

from kubernetes import client, config
from kubernetes.client.rest import ApiException

config.load_kube_config(config_file=sys.argv[1])
custom = client.CustomObjectsApi()
authz = client.AuthorizationV1Api()
authn = client.AuthenticationV1Api()
core = client.CoreV1Api()


def check(name):
    def wrap(fn):
        fn()
        print(f"ok: {name}", flush=True)
        return fn
    return wrap


def forbidden(call):
    try:
        call()
    except ApiException as e:
        assert e.status == 403, (e.status, e.body)
        return e.body
    raise AssertionError("the call was allowed")


@check("who am I")
def _():
    review = authn.create_self_subject_review(client.V1SelfSubjectReview())
    assert review.status.user_info.username == "alice", review
    assert "widget-fans" in review.status.user_info.groups, review


@check("the spec may change")
def _():
    custom.patch_namespaced_custom_object(
        "example.com", "v1", "team", "widgets", "w1", {"spec": {"size": 7}})
    w = custom.get_namespaced_custom_object("example.com", "v1", "team", "widgets", "w1")
    assert w["spec"]["size"] == 7, w


@check("the status may not")
def _():
    body = forbidden(lambda: custom.patch_namespaced_custom_object_status(
        "example.com", "v1", "team", "widgets", "w1", {"status": {"ready": False}}))
    assert 'cannot patch resource \\"widgets/status\\"' in body, body


@check("access reviews agree")
def _():
    def allowed(verb, sub=""):
        review = authz.create_self_subject_access_review(client.V1SelfSubjectAccessReview(
            spec=client.V1SelfSubjectAccessReviewSpec(resource_attributes=client.V1ResourceAttributes(
                namespace="team", verb=verb, group="example.com", resource="widgets",
                subresource=sub))))
        return review.status.allowed
    assert allowed("patch")
    assert not allowed("patch", "status")
    assert not allowed("delete")


@check("nothing outside the namespace")
def _():
    forbidden(lambda: core.list_namespaced_config_map("other"))


print("python rbac: all checks passed")
