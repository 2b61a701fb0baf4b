//! Table tests of strategic merge patch: kube's documented examples (the `kubectl patch` task
//! page and apimachinery's strategic-merge-patch design notes) and its errors.

use super::*;
use serde_json::json;

/// The patch metadata of a Deployment-like type (a subset of apps/v1's Go struct tags).
const DEPLOYMENT: [(&str, ListMerge); 7] = [
    ("metadata.finalizers", ListMerge::Set),
    ("metadata.ownerReferences", ListMerge::Keyed("uid")),
    ("spec.template.spec.containers", ListMerge::Keyed("name")),
    (
        "spec.template.spec.containers[].ports",
        ListMerge::Keyed("containerPort"),
    ),
    (
        "spec.template.spec.containers[].env",
        ListMerge::Keyed("name"),
    ),
    ("spec.template.spec.volumes", ListMerge::Keyed("name")),
    (
        "spec.template.spec.initContainers",
        ListMerge::Keyed("name"),
    ),
];

fn patched(original: Value, patch: Value) -> Result<Value, PatchError> {
    let mut target = original;
    apply(&mut target, &patch, &DEPLOYMENT)?;
    Ok(target)
}

fn containers(list: Value) -> Value {
    json!({"spec": {"template": {"spec": {"containers": list}}}})
}

#[test]
fn documented_examples() {
    // (what, original, patch, expected)
    let cases = vec![
        (
            "containers merge by name; the patch's item comes first (kubectl patch task page)",
            containers(json!([{"name": "patch-demo-ctr", "image": "nginx"}])),
            containers(json!([{"name": "patch-demo-ctr-2", "image": "redis"}])),
            containers(json!([
                {"name": "patch-demo-ctr-2", "image": "redis"},
                {"name": "patch-demo-ctr", "image": "nginx"}
            ])),
        ),
        (
            "a list without a patch strategy is replaced (tolerations)",
            json!({"spec": {"template": {"spec": {"tolerations": [{"key": "a"}]}}}}),
            json!({"spec": {"template": {"spec": {"tolerations": [{"effect": "NoSchedule", "key": "disktype", "value": "ssd"}]}}}}),
            json!({"spec": {"template": {"spec": {"tolerations": [{"effect": "NoSchedule", "key": "disktype", "value": "ssd"}]}}}}),
        ),
        (
            "$retainKeys clears the fields it does not list (strategy: Recreate)",
            json!({"spec": {"strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%"}}}}),
            json!({"spec": {"strategy": {"$retainKeys": ["type"], "type": "Recreate"}}}),
            json!({"spec": {"strategy": {"type": "Recreate"}}}),
        ),
        (
            "nested keyed lists merge by their own key",
            containers(
                json!([{"name": "c", "image": "a", "ports": [{"containerPort": 80, "name": "http"}]}]),
            ),
            containers(
                json!([{"name": "c", "ports": [{"containerPort": 80, "protocol": "TCP"}, {"containerPort": 443}]}]),
            ),
            containers(
                json!([{"name": "c", "image": "a", "ports": [{"containerPort": 80, "name": "http", "protocol": "TCP"}, {"containerPort": 443}]}]),
            ),
        ),
        (
            "$patch: delete removes a list item by its merge key",
            containers(json!([{"name": "a"}, {"name": "b"}])),
            containers(json!([{"name": "a", "$patch": "delete"}])),
            containers(json!([{"name": "b"}])),
        ),
        (
            "$patch: replace on a list replaces it with the other items",
            containers(json!([{"name": "a"}, {"name": "b"}])),
            containers(json!([{"$patch": "replace"}, {"name": "z", "image": "x"}])),
            containers(json!([{"name": "z", "image": "x"}])),
        ),
        (
            "$patch: replace on a map replaces the map",
            json!({"metadata": {"labels": {"a": "1", "b": "2"}}}),
            json!({"metadata": {"labels": {"$patch": "replace", "c": "3"}}}),
            json!({"metadata": {"labels": {"c": "3"}}}),
        ),
        (
            "$patch: delete on a map removes it",
            json!({"metadata": {"name": "x", "labels": {"a": "1"}}}),
            json!({"metadata": {"labels": {"$patch": "delete"}}}),
            json!({"metadata": {"name": "x"}}),
        ),
        (
            "a null deletes a field; maps merge",
            json!({"metadata": {"labels": {"a": "1", "b": "2"}}, "data": {"x": "1"}}),
            json!({"metadata": {"labels": {"a": null, "c": "3"}}, "data": {"y": "2"}}),
            json!({"metadata": {"labels": {"b": "2", "c": "3"}}, "data": {"x": "1", "y": "2"}}),
        ),
        (
            "primitive merge lists are a union; server items keep their place before the patch's",
            json!({"metadata": {"finalizers": ["a", "b"]}}),
            json!({"metadata": {"finalizers": ["c", "b"]}}),
            json!({"metadata": {"finalizers": ["c", "a", "b"]}}),
        ),
        (
            "$deleteFromPrimitiveList removes scalars",
            json!({"metadata": {"finalizers": ["a", "b", "c"]}}),
            json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["b"]}}),
            json!({"metadata": {"finalizers": ["a", "c"]}}),
        ),
        (
            "$setElementOrder orders a merged list (kubectl apply sends it)",
            containers(json!([{"name": "a", "image": "1"}, {"name": "b", "image": "2"}])),
            json!({"spec": {"template": {"spec": {
                "$setElementOrder/containers": [{"name": "b"}, {"name": "a"}],
                "containers": [{"name": "a", "image": "3"}]
            }}}}),
            containers(json!([{"name": "b", "image": "2"}, {"name": "a", "image": "3"}])),
        ),
        (
            "$setElementOrder with an item deleted and one added",
            containers(json!([{"name": "a"}, {"name": "b"}, {"name": "c"}])),
            json!({"spec": {"template": {"spec": {
                "$setElementOrder/containers": [{"name": "c"}, {"name": "d"}, {"name": "a"}],
                "containers": [{"name": "d"}, {"$patch": "delete", "name": "b"}]
            }}}}),
            containers(json!([{"name": "c"}, {"name": "d"}, {"name": "a"}])),
        ),
        (
            "$setElementOrder of primitives",
            json!({"metadata": {"finalizers": ["a", "b", "c"]}}),
            json!({"metadata": {"$setElementOrder/finalizers": ["c", "a", "b"]}}),
            json!({"metadata": {"finalizers": ["c", "a", "b"]}}),
        ),
        (
            "a list set where there was none takes the patch without directives",
            json!({}),
            containers(json!([{"name": "a", "env": [{"name": "X", "$patch": "delete"}]}])),
            containers(json!([{"name": "a", "env": []}])),
        ),
        (
            "a keyed list item whose map is deleted goes",
            containers(json!([{"name": "a", "image": "x"}, {"name": "b"}])),
            containers(json!([{"name": "a", "$patch": "delete"}, {"name": "b", "image": "y"}])),
            containers(json!([{"name": "b", "image": "y"}])),
        ),
    ];
    for (what, original, patch, expected) in cases {
        assert_eq!(patched(original, patch).unwrap(), expected, "{what}");
    }
}

#[test]
fn errors_read_like_apimachinerys() {
    let cases = vec![
        (
            json!({"metadata": {"labels": {"$patch": "bogus"}}}),
            PatchError::BadRequest("unknown patch type: bogus in map: map[$patch:bogus]".into()),
        ),
        (
            json!({"spec": {"$retainKeys": "type"}}),
            PatchError::BadRequest("invalid patch format of retainKeys".into()),
        ),
        (
            json!({"spec": {"$retainKeys": ["type"], "replicas": 3}}),
            PatchError::BadRequest("invalid patch format of retainKeys".into()),
        ),
        (
            json!({"metadata": {"$setElementOrder/finalizers": "a"}}),
            PatchError::BadRequest("invalid patch format of setElementOrder list".into()),
        ),
        (
            json!({"metadata": {"$deleteFromPrimitiveList": ["a"]}}),
            PatchError::BadRequest("invalid patch format of primitive list".into()),
        ),
        (
            containers(json!([{"image": "x"}])),
            PatchError::BadRequest(
                "map: map[image:x] does not contain declared merge key: name".into(),
            ),
        ),
        (
            containers(json!([{"name": "a", "$patch": "merge"}])),
            PatchError::BadRequest("merging lists cannot yet be specified in the patch".into()),
        ),
        (
            containers(json!([{"name": "a", "$patch": "sideways"}])),
            PatchError::BadRequest(
                "unknown patch type: sideways in map: map[$patch:sideways name:a]".into(),
            ),
        ),
        (
            json!({"metadata": {"finalizers": [["a"]]}}),
            PatchError::Invalid("lists of lists are not supported".into()),
        ),
        (
            json!([1]),
            PatchError::BadRequest("invalid JSON document".into()),
        ),
    ];
    let original = json!({"metadata": {"finalizers": ["z"], "labels": {"a": "1"}}, "spec": {"replicas": 1, "template": {"spec": {"containers": [{"name": "a"}]}}}});
    for (patch, expected) in cases {
        assert_eq!(
            patched(original.clone(), patch.clone()).unwrap_err(),
            expected,
            "{patch}"
        );
    }
    // An order that contradicts the patch list.
    let err = patched(
        containers(json!([{"name": "a"}, {"name": "b"}])),
        json!({"spec": {"template": {"spec": {
            "$setElementOrder/containers": [{"name": "a"}, {"name": "b"}],
            "containers": [{"name": "b"}, {"name": "a"}]
        }}}}),
    )
    .unwrap_err();
    assert!(
        matches!(&err, PatchError::BadRequest(m) if m.starts_with("The order in patch list:")),
        "{err:?}"
    );
}
