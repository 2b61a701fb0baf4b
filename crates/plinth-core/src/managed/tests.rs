use super::*;

struct Plain;
impl Shape for Plain {
    fn list_type(&self, path: &[Element]) -> ListType {
        match field_names(path).as_slice() {
            ["metadata", "finalizers"] => ListType::Set,
            ["spec", "ports"] => ListType::Map(vec!["port".into(), "protocol".into()]),
            _ => ListType::Atomic,
        }
    }
    fn map_type(&self, path: &[Element]) -> MapType {
        match field_names(path).as_slice() {
            ["data"] | ["metadata", "labels"] => MapType::Granular,
            _ => MapType::Struct,
        }
    }
}

fn me(name: &str, operation: Operation) -> Manager {
    Manager {
        name: name.into(),
        operation,
        api_version: "v1".into(),
        subresource: String::new(),
        time: "2026-01-01T00:00:00Z".into(),
    }
}

#[test]
fn fields_v1_round_trips_with_kube_encoding() {
    let object = json!({
        "apiVersion": "v1", "kind": "X",
        "metadata": {"name": "a", "labels": {"app": "web"}, "finalizers": ["x"]},
        "spec": {"ports": [{"port": 80, "protocol": "TCP", "name": "http"}], "args": ["a"]},
    });
    let set = field_set(&object, &Plain);
    let encoded = encode(&set);
    assert_eq!(
        encoded,
        json!({
            "f:metadata": {"f:finalizers": {"v:\"x\"": {}}, "f:labels": {"f:app": {}}},
            "f:spec": {
                "f:args": {},
                "f:ports": {"k:{\"port\":80,\"protocol\":\"TCP\"}": {
                    ".": {}, "f:name": {}, "f:port": {}, "f:protocol": {}}},
            },
        })
    );
    assert_eq!(decode(&encoded).unwrap(), set);
    assert!(decode(&json!({"x:y": {}})).is_err());
}

#[test]
fn updates_record_created_maps_and_take_changed_fields() {
    let mut entries = Vec::new();
    let created = json!({"metadata": {"name": "a"}, "data": {"k": "1"}});
    record_update(
        &mut entries,
        None,
        &created,
        &Plain,
        &me("kubectl-create", Operation::Update),
    );
    assert_eq!(
        encode(&entries[0].fields),
        json!({"f:data": {".": {}, "f:k": {}}})
    );
    let edited = json!({"metadata": {"name": "a"}, "data": {"k": "2", "j": "x"}});
    record_update(
        &mut entries,
        Some(&created),
        &edited,
        &Plain,
        &me("kubectl-edit", Operation::Update),
    );
    assert_eq!(entries.len(), 2);
    let edit = entries
        .iter()
        .find(|e| e.manager == "kubectl-edit")
        .unwrap();
    assert_eq!(
        encode(&edit.fields),
        json!({"f:data": {"f:j": {}, "f:k": {}}})
    );
    let create = entries
        .iter()
        .find(|e| e.manager == "kubectl-create")
        .unwrap();
    assert_eq!(encode(&create.fields), json!({"f:data": {}}));
}

#[test]
fn apply_conflicts_forces_and_removes_dropped_fields() {
    let mut entries = Vec::new();
    let config = json!({"apiVersion": "v1", "kind": "X", "metadata": {"name": "a"},
                        "data": {"a": "1", "b": "2"}});
    let live = apply(
        &mut entries,
        None,
        &config,
        &Plain,
        &me("ci", Operation::Apply),
        false,
    )
    .unwrap();
    assert_eq!(live["data"], json!({"a": "1", "b": "2"}));
    // Someone edits `a`.
    let mut edited = live.clone();
    edited["data"]["a"] = json!("9");
    record_update(
        &mut entries,
        Some(&live),
        &edited,
        &Plain,
        &me("kubectl-edit", Operation::Update),
    );
    // Re-applying the same value for `a` conflicts; the same value elsewhere does not.
    let conflicts = apply(
        &mut entries.clone(),
        Some(&edited),
        &config,
        &Plain,
        &me("ci", Operation::Apply),
        false,
    )
    .unwrap_err();
    assert_eq!(
        conflict_message(&conflicts),
        "Apply failed with 1 conflict: conflict with \"kubectl-edit\" using v1: .data.a"
    );
    let agreeing = json!({"apiVersion": "v1", "kind": "X", "metadata": {"name": "a"},
                          "data": {"a": "9", "b": "2"}});
    assert!(
        apply(
            &mut entries.clone(),
            Some(&edited),
            &agreeing,
            &Plain,
            &me("ci", Operation::Apply),
            false
        )
        .is_ok()
    );
    // Forced: `a` moves to the applier.
    let forced = apply(
        &mut entries,
        Some(&edited),
        &config,
        &Plain,
        &me("ci", Operation::Apply),
        true,
    )
    .unwrap();
    assert_eq!(forced["data"]["a"], "1");
    assert!(entries.iter().all(|e| e.manager == "ci"), "{entries:?}");
    // Dropping `b` from the configuration removes it.
    let smaller =
        json!({"apiVersion": "v1", "kind": "X", "metadata": {"name": "a"}, "data": {"a": "1"}});
    let after = apply(
        &mut entries,
        Some(&forced),
        &smaller,
        &Plain,
        &me("ci", Operation::Apply),
        false,
    )
    .unwrap();
    assert_eq!(after["data"], json!({"a": "1"}));
}

#[test]
fn associative_lists_merge_by_key_and_paths_print_like_kube() {
    let live = json!({"spec": {"ports": [{"port": 80, "protocol": "TCP", "name": "a"}]}});
    let config = json!({"spec": {"ports": [
        {"port": 80, "protocol": "TCP", "targetPort": 8080},
        {"port": 443, "protocol": "TCP"}]}});
    let merged = merge(&live, &config, &Plain);
    assert_eq!(
        merged["spec"]["ports"],
        json!([{"port": 80, "protocol": "TCP", "name": "a", "targetPort": 8080},
               {"port": 443, "protocol": "TCP"}])
    );
    let path = vec![
        Element::Field("spec".into()),
        Element::Field("ports".into()),
        Element::Key(r#"{"port":80,"protocol":"TCP"}"#.into()),
        Element::Field("name".into()),
    ];
    assert_eq!(
        path_string(&path),
        r#".spec.ports[port=80,protocol="TCP"].name"#
    );
    let finalizer = vec![
        Element::Field("metadata".into()),
        Element::Field("finalizers".into()),
        Element::Value("\"x\"".into()),
    ];
    assert_eq!(path_string(&finalizer), r#".metadata.finalizers[="x"]"#);
}
