//! Streamed lists (issue #30): a list from the watch cache is written as it is produced (in
//! JSON and in protobuf), and clients that stop reading in the middle leave nothing behind on
//! the server.

#![allow(clippy::unwrap_used)]

mod common;

use std::process::Command;

use common::http::Http;
use common::{Backend, Plinth};
use prost::Message as _;

/// The server's TCP sockets that are not listening (its connections), by `ss`.
fn connections(pid: u32) -> usize {
    let out = Command::new("ss").args(["-tanpH"]).output().unwrap();
    let owner = format!("pid={pid},");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains(&owner) && !l.starts_with("LISTEN"))
        .count()
}

#[test]
fn a_streamed_list_is_whole_and_clients_leaving_mid_list_leave_nothing_behind() {
    let plinth = Plinth::start(Backend::Embedded);
    let http = Http::new(&plinth);
    // 1,500 ConfigMaps of 8 KiB: a 12 MB list, more than the sockets' buffers hold.
    let value = "v".repeat(8 * 1024);
    let items: Vec<String> = (0..1500)
        .map(|i| {
            format!(
                r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"big-{i:04}"}},"data":{{"value":"{value}"}}}}"#
            )
        })
        .collect();
    let manifest = format!(
        r#"{{"apiVersion":"v1","kind":"List","items":[{}]}}"#,
        items.join(",")
    );
    plinth.kubectl_with(&["create", "-f", "-"], &manifest);

    // Whole: every item, in order, each as a GET answers it.
    let list = http.get("/api/v1/namespaces/default/configmaps");
    assert_eq!(list.code, 200);
    let body = list.json();
    let names: Vec<&str> = body["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|i| i["metadata"]["name"].as_str())
        .filter(|n| n.starts_with("big-"))
        .collect();
    assert_eq!(names.len(), 1500);
    assert!(names.windows(2).all(|w| w[0] < w[1]));
    let one = http
        .get("/api/v1/namespaces/default/configmaps/big-0042")
        .json();
    let listed = body["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["metadata"]["name"] == "big-0042")
        .unwrap();
    assert_eq!(listed["data"], one["data"]);
    assert_eq!(
        listed["metadata"]["resourceVersion"],
        one["metadata"]["resourceVersion"]
    );

    // The same list in protobuf (streamed from the cached messages): every item, in order,
    // as in JSON — decoded with the Kubernetes protobuf bindings.
    // (At the JSON list's revision: a write elsewhere since — a Lease renewed — moves the
    // revision a consistent list answers at.)
    let proto = http.get_as(
        &format!(
            "/api/v1/namespaces/default/configmaps?resourceVersion={}&resourceVersionMatch=Exact",
            body["metadata"]["resourceVersion"].as_str().unwrap()
        ),
        "application/vnd.kubernetes.protobuf",
    );
    assert_eq!(proto.code, 200);
    let rest = proto
        .bytes
        .strip_prefix(b"k8s\0")
        .expect("the k8s\\0 magic");
    let unknown = k8s_pb::apimachinery::pkg::runtime::Unknown::decode(rest).unwrap();
    let type_meta = unknown.type_meta.unwrap();
    assert_eq!(type_meta.kind.as_deref(), Some("ConfigMapList"));
    let decoded =
        k8s_pb::api::core::v1::ConfigMapList::decode(unknown.raw.unwrap().as_slice()).unwrap();
    assert_eq!(
        decoded.metadata.unwrap().resource_version.as_deref(),
        body["metadata"]["resourceVersion"].as_str()
    );
    let all_names: Vec<&str> = body["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|i| i["metadata"]["name"].as_str())
        .collect();
    let proto_names: Vec<&str> = decoded
        .items
        .iter()
        .filter_map(|i| i.metadata.as_ref()?.name.as_deref())
        .collect();
    assert_eq!(proto_names, all_names);
    let item = decoded
        .items
        .iter()
        .find(|i| i.metadata.as_ref().and_then(|m| m.name.as_deref()) == Some("big-0042"))
        .unwrap();
    assert_eq!(
        item.data.get("value").map(String::as_str),
        one["data"]["value"].as_str()
    );

    // Clients that read 64 KiB of it and hang up, in JSON and in protobuf: the server's
    // connections end too.
    let pid = plinth.pid().unwrap();
    let before = connections(pid);
    for i in 0..20 {
        let accept = if i % 2 == 0 {
            "application/json"
        } else {
            "application/vnd.kubernetes.protobuf"
        };
        let status = Command::new("sh")
            .arg("-c")
            .arg(format!(
                "curl -s --http1.1 --cacert '{}' -H 'Authorization: Bearer {}' -H 'Accept: {accept}' '{}/api/v1/namespaces/default/configmaps' | head -c 65536 > /dev/null",
                plinth.dir.path().join("ca.crt").display(),
                http.token,
                http.base,
            ))
            .status()
            .unwrap();
        assert!(status.success());
    }
    plinth.eventually("the abandoned lists' connections are closed", || {
        connections(pid) <= before
    });
    // And the server lists on.
    let again = http.get("/api/v1/namespaces/default/configmaps?limit=10");
    assert_eq!(again.code, 200);
    assert_eq!(again.json()["items"].as_array().unwrap().len(), 10);
}
