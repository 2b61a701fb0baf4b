use super::*;

#[test]
fn targets_follow_kube_apiserver_paths() {
    assert_eq!(parse_target("/api"), Target::Api);
    assert_eq!(
        parse_target("/apis/coordination.k8s.io"),
        Target::Group("coordination.k8s.io".into())
    );
    let cm = parse_target("/api/v1/namespaces/default/configmaps/a");
    assert_eq!(
        cm,
        Target::Resource {
            group: "".into(),
            version: "v1".into(),
            namespace: Some("default".into()),
            resource: "configmaps".into(),
            name: Some("a".into()),
            subresource: None,
            tail: None,
        }
    );
    let ns_status = parse_target("/api/v1/namespaces/default/status");
    assert!(
        matches!(ns_status, Target::Resource { ref resource, ref name, ref subresource, .. }
        if resource == "namespaces" && name.as_deref() == Some("default") && subresource.as_deref() == Some("status"))
    );
    let proxied = parse_target("/api/v1/nodes/node-a/proxy/stats/summary");
    assert!(
        matches!(proxied, Target::Resource { ref resource, ref subresource, ref tail, .. }
        if resource == "nodes" && subresource.as_deref() == Some("proxy") && tail.as_deref() == Some("stats/summary"))
    );
    // A proxy's root with and without its slash, and a tail's trailing slash.
    let tail = |path: &str| match parse_target(path) {
        Target::Resource { tail, .. } => tail,
        _ => panic!("{path}"),
    };
    assert_eq!(tail("/api/v1/namespaces/a/pods/p/proxy"), None);
    assert_eq!(
        tail("/api/v1/namespaces/a/pods/p/proxy/"),
        Some(String::new())
    );
    assert_eq!(
        tail("/api/v1/namespaces/a/pods/p/proxy/x/"),
        Some("x/".into())
    );
    assert_eq!(
        tail("/api/v1/namespaces/a/pods/p/proxy/x/y"),
        Some("x/y".into())
    );
    let ns = parse_target("/api/v1/namespaces/default");
    assert!(
        matches!(ns, Target::Resource { ref resource, namespace: None, .. } if resource == "namespaces")
    );
    let leases = parse_target("/apis/coordination.k8s.io/v1/namespaces/x/leases");
    assert!(
        matches!(leases, Target::Resource { ref group, name: None, .. } if group == "coordination.k8s.io")
    );
    assert_eq!(parse_target("/nothing/here"), Target::NotFound);
}

#[test]
fn audit_ids_are_distinct_version_4_uuids() {
    let ids: std::collections::HashSet<String> =
        (0..10_000).map(|_| super::new_audit_id()).collect();
    assert_eq!(ids.len(), 10_000);
    for id in ids.iter().take(100) {
        let parsed = uuid::Uuid::parse_str(id).unwrap();
        assert_eq!(parsed.get_version_num(), 4, "{id}");
    }
}
