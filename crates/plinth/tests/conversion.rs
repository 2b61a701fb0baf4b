//! CRD conversion webhooks end to end: a Widget CRD served in v1 (`size: 3`) and v2
//! (`size: "3Gi"`, the storage version) whose conversion webhook is plinth-runtime's hub and
//! spoke converter (in this test process, over TLS). Objects written in either version read
//! back in both — get, list, watch, kubectl — and are stored in v2; a patch in v1 lands in
//! v2; with the webhook gone, reads in v1 fail with kube's error while v2 still reads.

#![allow(clippy::unwrap_used)]

mod common;

use common::http::Http;
use common::{Backend, Plinth};
use plinth_runtime::webhook::{Converter, WebhookServer, self_signed};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

#[derive(Serialize, Deserialize, Clone)]
struct Meta {
    #[serde(rename = "apiVersion")]
    api_version: String,
    kind: String,
    metadata: Value,
}

#[derive(Serialize, Deserialize, Clone)]
struct WidgetV1 {
    #[serde(flatten)]
    meta: Meta,
    spec: SpecV1,
}

#[derive(Serialize, Deserialize, Clone)]
struct SpecV1 {
    size: i64,
}

#[derive(Serialize, Deserialize, Clone)]
struct WidgetV2 {
    #[serde(flatten)]
    meta: Meta,
    spec: SpecV2,
}

#[derive(Serialize, Deserialize, Clone)]
struct SpecV2 {
    size: String,
}

fn converter() -> Converter<WidgetV2> {
    Converter::new()
        .version("example.com/v2", |w: WidgetV2| w, WidgetV2::clone)
        .version(
            "example.com/v1",
            |w: WidgetV1| WidgetV2 {
                meta: w.meta,
                spec: SpecV2 {
                    size: format!("{}Gi", w.spec.size),
                },
            },
            |w: &WidgetV2| WidgetV1 {
                meta: w.meta.clone(),
                spec: SpecV1 {
                    size: w.spec.size.trim_end_matches("Gi").parse().unwrap_or(0),
                },
            },
        )
}

fn crd(url: &str, ca: &[u8]) -> String {
    let bundle = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, ca);
    format!(
        r#"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {{name: widgets.example.com}}
spec:
  group: example.com
  scope: Namespaced
  names: {{plural: widgets, singular: widget, kind: Widget}}
  conversion:
    strategy: Webhook
    webhook:
      conversionReviewVersions: [v1]
      clientConfig: {{url: "{url}", caBundle: {bundle}}}
  versions:
  - name: v2
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec: {{type: object, properties: {{size: {{type: string, pattern: "^[0-9]+Gi$"}}}}}}
  - name: v1
    served: true
    storage: false
    selectableFields: [{{jsonPath: .spec.size}}]
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec: {{type: object, properties: {{size: {{type: integer}}}}}}
"#
    )
}

/// Each watch event as `TYPE name`.
fn types_and_names(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .map(|e| {
            format!(
                "{} {}",
                e["type"].as_str().unwrap(),
                e["object"]["metadata"]["name"].as_str().unwrap()
            )
        })
        .collect()
}

#[test]
fn objects_read_and_write_in_every_version_through_the_webhook() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let certificate = self_signed(dir.path(), &["127.0.0.1"]).unwrap();
    let running = runtime
        .block_on(
            WebhookServer::new()
                .converter("/convert", converter())
                .bind("127.0.0.1:0".parse().unwrap(), certificate.source.clone()),
        )
        .unwrap();
    let url = format!("https://{}/convert", running.local_addr);
    let mut plinth = Plinth::start(Backend::Embedded);
    let manifest = plinth.dir.path().join("widgets.yaml");
    std::fs::write(&manifest, crd(&url, &certificate.ca_pem)).unwrap();
    plinth.install_crds(&[manifest], "60s");

    // Written in v1 and in v2.
    plinth.kubectl_with(
        &["apply", "-f", "-"],
        "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w1}\nspec: {size: 3}\n",
    );
    plinth.kubectl_with(
        &["apply", "-f", "-"],
        "apiVersion: example.com/v2\nkind: Widget\nmetadata: {name: w2, labels: {tier: gold}}\nspec: {size: 5Gi}\n",
    );
    let read = |plinth: &Plinth, version: &str, name: &str| {
        plinth.json(&["get", &format!("widgets.{version}.example.com"), name])
    };
    let w1 = read(&plinth, "v2", "w1");
    assert_eq!(w1["apiVersion"], "example.com/v2");
    assert_eq!(w1["spec"]["size"], "3Gi");
    let w2 = read(&plinth, "v1", "w2");
    assert_eq!(w2["apiVersion"], "example.com/v1");
    assert_eq!(w2["spec"]["size"], 5);
    // A field selector of v1 reads the converted objects (`3`), not the stored ones (`3Gi`):
    // in lists and in watches.
    let selected = plinth.kubectl(&[
        "get",
        "widgets.v1.example.com",
        "--field-selector=spec.size=3",
        "-o",
        "name",
    ]);
    assert_eq!(selected.trim(), "widget.example.com/w1");
    let http = Http::new(&plinth);
    let watched = http.get(
        "/apis/example.com/v1/namespaces/default/widgets?watch=1&fieldSelector=spec.size%3D3&timeoutSeconds=1",
    );
    let watched_events: Vec<Value> = watched
        .body
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .collect();
    let names = types_and_names(&watched_events);
    assert_eq!(names, ["ADDED w1"], "{}", watched.body);
    assert_eq!(w2["metadata"]["labels"]["tier"], "gold", "metadata kept");
    assert_eq!(read(&plinth, "v1", "w1")["spec"]["size"], 3, "round trip");
    // Lists, one review for all.
    let http = Http::new(&plinth);
    let list = http
        .get("/apis/example.com/v1/namespaces/default/widgets")
        .json();
    let sizes: Vec<&Value> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| &w["spec"]["size"])
        .collect();
    assert_eq!(sizes, [&json!(3), &json!(5)]);
    assert!(
        list["items"]
            .as_array()
            .unwrap()
            .iter()
            .all(|w| w["apiVersion"] == "example.com/v1")
    );
    let table = plinth.kubectl(&["get", "widgets.v1.example.com"]);
    assert!(table.contains("w1") && table.contains("w2"), "{table}");
    // Watches in v1 see v1 objects: the initial state, and a change made in v2 after the
    // list's resourceVersion.
    let events = |reply: common::http::Reply| -> Vec<Value> {
        reply
            .body
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    };
    let initial = events(
        http.get("/apis/example.com/v1/namespaces/default/widgets?watch=1&timeoutSeconds=1"),
    );
    assert!(
        initial
            .iter()
            .any(|e| e["type"] == "ADDED" && e["object"]["spec"]["size"] == 3),
        "{initial:?}"
    );
    let rv = list["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_owned();
    plinth.kubectl(&[
        "patch",
        "widgets.v2.example.com",
        "w2",
        "--type=merge",
        "-p",
        r#"{"spec":{"size":"6Gi"}}"#,
    ]);
    let later = events(http.get(&format!(
        "/apis/example.com/v1/namespaces/default/widgets?watch=1&resourceVersion={rv}&timeoutSeconds=1"
    )));
    assert!(
        later
            .iter()
            .any(|e| e["type"] == "MODIFIED" && e["object"]["spec"]["size"] == 6),
        "{later:?}"
    );
    assert!(
        initial
            .iter()
            .chain(&later)
            .all(|e| e["object"]["apiVersion"] == "example.com/v1"),
        "{initial:?} {later:?}"
    );
    // A patch in v1 applies to the v1 form and is stored in v2.
    plinth.kubectl(&[
        "patch",
        "widgets.v1.example.com",
        "w1",
        "--type=merge",
        "-p",
        r#"{"spec":{"size":7}}"#,
    ]);
    assert_eq!(read(&plinth, "v2", "w1")["spec"]["size"], "7Gi");
    // A watch from a list's resourceVersion (an informer's) with a field selector: an object
    // the list showed leaves as DELETED when it stops matching, one that starts matching
    // arrives as ADDED (kube's conformance test of selectable fields, through its informers).
    plinth.kubectl_with(
        &["apply", "-f", "-"],
        "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w5}\nspec: {size: 1}\n",
    );
    let listed = http
        .get("/apis/example.com/v1/namespaces/default/widgets?fieldSelector=spec.size%3D6")
        .json();
    let names = |items: &Value| -> Vec<String> {
        items
            .as_array()
            .unwrap()
            .iter()
            .map(|w| w["metadata"]["name"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(names(&listed["items"]), ["w2"], "{listed}");
    for (version, name, size) in [("v2", "w2", r#""9Gi""#), ("v1", "w5", "6")] {
        plinth.kubectl(&[
            "patch",
            &format!("widgets.{version}.example.com"),
            name,
            "--type=merge",
            "-p",
            &format!(r#"{{"spec":{{"size":{size}}}}}"#),
        ]);
    }
    let rv = listed["metadata"]["resourceVersion"].as_str().unwrap();
    let selected = events(http.get(&format!(
        "/apis/example.com/v1/namespaces/default/widgets?watch=1&resourceVersion={rv}&fieldSelector=spec.size%3D6&timeoutSeconds=1"
    )));
    let seen = types_and_names(&selected);
    assert_eq!(seen, ["DELETED w2", "ADDED w5"], "{selected:?}");
    // v1's schema is enforced on v1 writes, v2's on what is stored.
    let refused = plinth.kubectl_stdin(
        &["apply", "-f", "-"],
        "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w3}\nspec: {size: big}\n",
    );
    assert!(!refused.status.success());
    let stored = plinth.json(&["get", "crd", "widgets.example.com"]);
    assert_eq!(stored["status"]["storedVersions"], json!(["v2"]));

    // The webhook gone: v1 cannot be read (kube's error), v2 — the stored form — still can.
    runtime.block_on(running.shutdown());
    let failed = http.get("/apis/example.com/v1/namespaces/default/widgets/w1");
    assert_eq!(failed.code, 500, "{}", failed.body);
    let status = failed.json();
    assert_eq!(status["reason"], "InternalError");
    let message = status["message"].as_str().unwrap();
    assert!(
        message.starts_with(
            "Internal error occurred: conversion webhook for example.com/v2, Kind=Widget failed: Post \""
        ),
        "{message}"
    );
    assert_eq!(read(&plinth, "v2", "w1")["spec"]["size"], "7Gi");
    // A write in v1 is refused and changes nothing.
    let refused = plinth.kubectl_stdin(
        &["apply", "-f", "-"],
        "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w4}\nspec: {size: 1}\n",
    );
    assert!(!refused.status.success());
    assert_eq!(
        plinth
            .kubectl_output(&["get", "widgets.v2.example.com", "w4"])
            .status
            .code(),
        Some(1)
    );
    // Stored in the storage version.
    let raw = plinth
        .read_while_down("/example.com/widgets/default/w1")
        .unwrap();
    let stored: Value = serde_json::from_slice(&raw).unwrap();
    assert_eq!(stored["apiVersion"], "example.com/v2");
    assert_eq!(stored["spec"]["size"], "7Gi");
}

#[test]
fn bad_conversion_settings_are_refused_with_kubes_messages() {
    let plinth = Plinth::start(Backend::Embedded);
    let crd = |conversion: &str| {
        format!(
            "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata: {{name: gizmos.example.com}}\nspec:\n  group: example.com\n  scope: Namespaced\n  names: {{plural: gizmos, kind: Gizmo}}\n  conversion: {conversion}\n  versions:\n  - {{name: v1, served: true, storage: true, schema: {{openAPIV3Schema: {{type: object}}}}}}\n"
        )
    };
    for (conversion, expected) in [
        (
            "{strategy: Webhook}",
            "spec.conversion.webhook: Required value: required when strategy is set to Webhook",
        ),
        (
            "{strategy: Webhook, webhook: {clientConfig: {url: \"http://x\"}, conversionReviewVersions: [v3]}}",
            "spec.conversion.webhook.clientConfig.url: Invalid value: \"http://x\": 'https' is the only allowed URL scheme",
        ),
        (
            "{strategy: Webhook, webhook: {clientConfig: {url: \"https://x\"}, conversionReviewVersions: [v3]}}",
            "spec.conversion.webhook.conversionReviewVersions: Invalid value: [\"v3\"]: must include at least one of v1, v1beta1",
        ),
        (
            "{strategy: None, webhook: {clientConfig: {url: \"https://x\"}, conversionReviewVersions: [v1]}}",
            "spec.conversion.webhook: Forbidden: should not be set when strategy is not set to Webhook",
        ),
        (
            "{strategy: Sometimes}",
            "spec.conversion.strategy: Unsupported value: \"Sometimes\": supported values: \"None\", \"Webhook\"",
        ),
    ] {
        let out = plinth.kubectl_stdin(&["create", "-f", "-"], &crd(conversion));
        assert!(!out.status.success(), "{conversion}");
        let message = String::from_utf8_lossy(&out.stderr);
        assert!(
            message.contains(expected),
            "{conversion}: missing {expected:?} in {message}"
        );
    }
    assert_eq!(
        plinth
            .kubectl_output(&["get", "crd", "gizmos.example.com"])
            .status
            .code(),
        Some(1),
        "nothing stored"
    );
}

/// A conversion webhook serving a self-signed `CA:TRUE` certificate (as `openssl req -x509`
/// makes it, and kopf generates) that the CRD's caBundle holds is called, as kube-apiserver
/// (Go's crypto/x509) calls it.
#[test]
fn a_self_signed_ca_certificate_in_the_ca_bundle_serves_conversion() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (pem, cert, key) = common::openssl_self_signed(dir.path(), "converter", "IP:127.0.0.1");
    let running = runtime
        .block_on(
            WebhookServer::new()
                .converter("/convert", converter())
                .bind(
                    "127.0.0.1:0".parse().unwrap(),
                    plinth_runtime::webhook::TlsSource::files(&cert, &key),
                ),
        )
        .unwrap();
    let url = format!("https://{}/convert", running.local_addr);
    let mut plinth = Plinth::start(Backend::Embedded);
    let manifest = plinth.dir.path().join("widgets.yaml");
    std::fs::write(&manifest, crd(&url, pem.as_bytes())).unwrap();
    plinth.install_crds(&[manifest], "60s");
    plinth.kubectl_with(
        &["apply", "-f", "-"],
        "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w1}\nspec: {size: 7}\n",
    );
    let stored = plinth.json(&["get", "widgets.v2.example.com", "w1"]);
    assert_eq!(stored["spec"]["size"], "7Gi", "{stored}");
    let back = plinth.json(&["get", "widgets.v1.example.com", "w1"]);
    assert_eq!(back["spec"]["size"], 7, "{back}");
    plinth.stop();
}
