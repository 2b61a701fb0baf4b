//! Raw HTTP against `plinth serve` (curl, with the server's CA and token): authentication,
//! hostile bodies, health, metrics, and the watch protocol's edges.

#![allow(clippy::unwrap_used)]

mod common;

use std::process::Command;

use common::http::{Http, Reply};
use common::{Backend, Plinth};
use serde_json::{Value, json};

fn status(reply: &Reply, code: u16, reason: &str) -> Value {
    assert_eq!(reply.code, code, "{}", reply.body);
    let status = reply.json();
    assert_eq!(
        (
            status["kind"].as_str(),
            status["reason"].as_str(),
            status["code"].as_u64()
        ),
        (Some("Status"), Some(reason), Some(u64::from(code))),
        "{status}"
    );
    status
}

const CM: &str = "/api/v1/namespaces/default/configmaps";

#[test]
fn authentication_health_and_version() {
    let plinth = Plinth::start(Backend::Embedded);
    let http = Http::new(&plinth);
    let denied = http.request("GET", "/api/v1/namespaces", "application/json", None, false);
    status(&denied, 401, "Unauthorized");
    for path in ["/healthz", "/livez", "/readyz"] {
        let ok = http.request("GET", path, "application/json", None, false);
        assert_eq!((ok.code, ok.body.as_str()), (200, "ok"), "{path}");
    }
    let version = http
        .request("GET", "/version", "application/json", None, false)
        .json();
    assert_eq!(
        (version["major"].as_str(), version["minor"].as_str()),
        (Some("1"), Some("32"))
    );
    let wrong = http.request("GET", "/api/v1/namespaces", "application/json", None, false);
    assert_eq!(wrong.code, 401);
}

#[test]
fn hostile_bodies_get_client_errors_and_change_nothing() {
    let plinth = Plinth::start(Backend::Embedded);
    let http = Http::new(&plinth);
    // The server writes the system namespaces' service accounts just after start; let it finish.
    plinth.eventually("the default service accounts", || {
        http.get("/api/v1/serviceaccounts").json()["items"]
            .as_array()
            .is_some_and(|i| i.len() == 4)
    });
    // What the refused requests could have written: the namespace's ConfigMaps, each at its
    // resourceVersion. (Not the list's resourceVersion: that is the store's revision, which
    // Leases and node status move every few seconds.)
    let before = http.get(CM).json()["items"].clone();

    status(
        &http.post(
            CM,
            br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x""#,
        ),
        400,
        "BadRequest",
    );
    status(&http.post(CM, b"[1,2,3]"), 400, "BadRequest");
    let deep = format!("{}1{}", "{\"a\":".repeat(300), "}".repeat(300));
    status(&http.post(CM, deep.as_bytes()), 400, "BadRequest");
    let big = format!(
        r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"big"}},"data":{{"a":"{}"}}}}"#,
        "a".repeat(4 << 20)
    );
    let too_large = status(&http.post(CM, big.as_bytes()), 413, "RequestEntityTooLarge");
    assert_eq!(
        too_large["message"],
        "Request entity too large: limit is 3145728"
    );
    let yaml = http.request(
        "POST",
        CM,
        "application/yaml",
        Some(b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: [unclosed\n"),
        true,
    );
    status(&yaml, 400, "BadRequest");
    let unsupported = http.request("POST", CM, "text/plain", Some(b"hello"), true);
    status(&unsupported, 415, "UnsupportedMediaType");
    let garbage_proto = http.request(
        "POST",
        CM,
        "application/vnd.kubernetes.protobuf",
        Some(b"k8s\0\xff\xfe"),
        true,
    );
    status(&garbage_proto, 400, "BadRequest");
    let wrong_type = status(
        &http.post(
            CM,
            br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"t"},"data":{"a":1}}"#,
        ),
        400,
        "BadRequest",
    );
    assert_eq!(
        wrong_type["message"],
        "ConfigMap in version \"v1\" cannot be handled as a ConfigMap: json: cannot unmarshal number into Go struct field ConfigMap.data[a] of type string"
    );
    let wrong_kind = status(
        &http.post(
            CM,
            br#"{"apiVersion":"v1","kind":"Secret","metadata":{"name":"k"}}"#,
        ),
        400,
        "BadRequest",
    );
    assert!(
        wrong_kind["message"]
            .as_str()
            .unwrap()
            .contains("does not match the expected kind (ConfigMap)")
    );
    let invalid = status(&http.post(CM, br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"ok","labels":{"bad key":"v"}},"data":{"bad key":"v"}}"#), 422, "Invalid");
    let causes = invalid["details"]["causes"].as_array().unwrap();
    assert_eq!(
        causes
            .iter()
            .map(|c| c["field"].as_str().unwrap())
            .collect::<Vec<_>>(),
        ["metadata.labels", "data"]
    );
    let no_name = status(
        &http.post(
            CM,
            br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{}}"#,
        ),
        422,
        "Invalid",
    );
    assert_eq!(
        no_name["message"],
        "ConfigMap \"\" is invalid: metadata.name: Required value: name or generateName is required"
    );
    let with_rv = status(&http.post(CM, br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"rv","resourceVersion":"5"}}"#), 400, "BadRequest");
    assert_eq!(
        with_rv["message"],
        "resourceVersion should not be set on objects to be created"
    );
    status(
        &http.request("PUT", CM, "application/json", Some(b"{}"), true),
        405,
        "MethodNotAllowed",
    );
    status(
        &http.get("/api/v1/namespaces/default/nothings"),
        404,
        "NotFound",
    );
    status(
        &http.get(&format!("{CM}?labelSelector=a%20in%20b")),
        400,
        "BadRequest",
    );
    status(&http.get(&format!("{CM}?limit=abc")), 400, "BadRequest");
    status(
        &http.get(&format!("{CM}?continue=garbage")),
        400,
        "BadRequest",
    );
    // A paginated list reads the token before the cache serves the page.
    status(
        &http.get(&format!("{CM}?limit=2&continue=garbage")),
        400,
        "BadRequest",
    );

    let after = http.get(CM).json();
    assert_eq!(after["items"], before, "no failed request wrote anything");
    // Only the namespace's CA bundle, which the root CA publisher keeps there.
    let names: Vec<&str> = after["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|i| i["metadata"]["name"].as_str())
        .collect();
    assert!(names.iter().all(|n| *n == "kube-root-ca.crt"), "{names:?}");
    // And the server is alive.
    assert_eq!(
        http.post(
            CM,
            br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"fine"}}"#
        )
        .code,
        201
    );
}

#[test]
fn metrics_count_requests_by_verb_resource_and_code() {
    let plinth = Plinth::start(Backend::Embedded);
    let http = Http::new(&plinth);
    http.get(CM);
    http.get(&format!("{CM}/missing"));
    let text = http.get("/metrics").body;
    assert!(
        text.contains("# TYPE apiserver_request_total counter"),
        "{text}"
    );
    assert!(
        text.contains(r#"apiserver_request_total{code="200",component="apiserver",group="",resource="configmaps",scope="namespace",subresource="",verb="LIST",version="v1"}"#),
        "{text}"
    );
    assert!(text.contains(r#"apiserver_request_total{code="404",component="apiserver",group="",resource="configmaps",scope="resource",subresource="",verb="GET",version="v1"} 1"#), "{text}");
    assert!(
        text.contains("apiserver_request_duration_seconds_bucket{"),
        "{text}"
    );
}

#[test]
fn watch_protocol_edges() {
    let plinth = Plinth::start(Backend::Embedded);
    let http = Http::new(&plinth);
    let created = http
        .post(
            CM,
            br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"w1"}}"#,
        )
        .json();
    let rv = created["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_owned();

    // Watch-list: initial ADDED events, then a bookmark marking their end, then live events.
    let list = http.get(&format!("{CM}?watch=1&sendInitialEvents=true&allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan&timeoutSeconds=1"));
    let events: Vec<Value> = list
        .body
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    // The namespace's CA bundle (published by the root CA publisher) may come first.
    let events: Vec<Value> = events
        .into_iter()
        .filter(|e| e["object"]["metadata"]["name"] != "kube-root-ca.crt")
        .collect();
    assert_eq!(events[0]["type"], "ADDED");
    assert_eq!(events[0]["object"]["metadata"]["name"], "w1");
    let bookmark = events
        .iter()
        .find(|e| e["type"] == "BOOKMARK")
        .expect("a bookmark");
    assert_eq!(
        bookmark["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"],
        "true"
    );
    assert_eq!(bookmark["object"]["kind"], "ConfigMap");
    let bookmark_rv: i64 = bookmark["object"]["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(bookmark_rv >= rv.parse::<i64>().unwrap());
    // sendInitialEvents without bookmarks is refused, as upstream does.
    status(
        &http.get(&format!(
            "{CM}?watch=1&sendInitialEvents=true&timeoutSeconds=1"
        )),
        422,
        "Invalid",
    );

    // A watch from a resourceVersion sees only later changes, and ends at timeoutSeconds.
    http.post(
        CM,
        br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"w2"}}"#,
    );
    // (The request returns at all only because the server ends the watch: without
    // timeoutSeconds it would last 30–60 minutes.)
    let later = http.get(&format!(
        "{CM}?watch=1&resourceVersion={rv}&timeoutSeconds=1"
    ));
    // (The root CA publisher's ConfigMap may land after `rv` too: it is not ours.)
    let names: Vec<Value> = later
        .body
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap()["object"]["metadata"]["name"].clone())
        .filter(|n| n != "kube-root-ca.crt")
        .collect();
    assert_eq!(names, [json!("w2")]);
    assert!(
        later
            .headers
            .to_ascii_lowercase()
            .contains("content-type: application/json")
    );
}

#[test]
fn paginated_lists_and_expired_continue_tokens() {
    let plinth = Plinth::start(Backend::Embedded);
    let http = Http::new(&plinth);
    for i in 0..7 {
        http.post(
            CM,
            format!(r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"p{i}"}}}}"#)
                .as_bytes(),
        );
    }
    let first = http.get(&format!("{CM}?limit=3")).json();
    assert_eq!(first["items"].as_array().unwrap().len(), 3);
    let token = first["metadata"]["continue"].as_str().unwrap().to_owned();
    // Writes after the first page do not show up in later pages.
    http.post(
        CM,
        br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"p99"}}"#,
    );
    let mut names: Vec<String> = first["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["metadata"]["name"].as_str().unwrap().to_owned())
        .collect();
    // kube's remainingItemCount: what follows each page but the last (7 + kube-root-ca.crt).
    assert_eq!(first["metadata"]["remainingItemCount"], 5);
    let mut next = Some(token);
    while let Some(token) = next {
        let page = http.get(&format!("{CM}?limit=3&continue={token}")).json();
        assert_eq!(
            page["metadata"]["resourceVersion"], first["metadata"]["resourceVersion"],
            "every page at the first page's revision"
        );
        let shown = names.len() + page["items"].as_array().unwrap().len();
        match page["metadata"].get("continue") {
            Some(_) => assert_eq!(page["metadata"]["remainingItemCount"], 8 - shown),
            None => assert!(page["metadata"].get("remainingItemCount").is_none()),
        }
        names.extend(
            page["items"]
                .as_array()
                .unwrap()
                .iter()
                .map(|i| i["metadata"]["name"].as_str().unwrap().to_owned()),
        );
        next = page["metadata"]["continue"].as_str().map(str::to_owned);
    }
    names.retain(|n| n != "kube-root-ca.crt");
    assert_eq!(names, ["p0", "p1", "p2", "p3", "p4", "p5", "p6"]);
    assert_eq!(
        http.get(&format!("{CM}?resourceVersion=999999999")).code,
        504
    );
}

#[test]
fn field_validation_dry_run_and_deletecollection() {
    let plinth = Plinth::start(Backend::Embedded);
    let http = Http::new(&plinth);
    let body = br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"warned"},"bogus":1}"#;
    let warned = http.post(&format!("{CM}?fieldValidation=Warn"), body);
    assert_eq!(warned.code, 201, "{}", warned.body);
    assert!(
        warned
            .headers
            .contains(r#"299 - "unknown field \"bogus\"""#),
        "{}",
        warned.headers
    );
    assert!(
        warned.json().get("bogus").is_none(),
        "unknown fields are dropped"
    );
    let ignored = http.post(
        &format!("{CM}?fieldValidation=Ignore"),
        &body.to_vec().replace_name("ignored"),
    );
    assert_eq!(ignored.code, 201);
    assert!(
        !ignored.headers.to_ascii_lowercase().contains("warning:"),
        "{}",
        ignored.headers
    );
    status(
        &http.post(&format!("{CM}?fieldValidation=Loose"), body),
        400,
        "BadRequest",
    );
    // Fields given twice: refused under Strict with the unknown ones, as kube's strict
    // decoder words them; a warning under Warn (the last value wins).
    let twice = br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"twice"},"bogus":1,"data":{"a":"1","a":"2"}}"#;
    let refused = http.post(&format!("{CM}?fieldValidation=Strict"), twice);
    let refused = status(&refused, 400, "BadRequest");
    assert_eq!(
        refused["message"],
        r#"ConfigMap in version "v1" cannot be handled as a ConfigMap: strict decoding error: unknown field "bogus", duplicate field "data.a""#
    );
    assert_eq!(http.get(&format!("{CM}/twice")).code, 404, "nothing stored");
    let warned = http.post(&format!("{CM}?fieldValidation=Warn"), twice);
    assert_eq!(warned.code, 201, "{}", warned.body);
    assert!(
        warned
            .headers
            .contains(r#"299 - "duplicate field \"data.a\"""#),
        "{}",
        warned.headers
    );
    assert_eq!(warned.json()["data"]["a"], "2");

    let dry = http.post(
        &format!("{CM}?dryRun=All"),
        br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"dry"}}"#,
    );
    assert_eq!(dry.code, 201);
    assert_eq!(dry.json()["metadata"]["name"], "dry");
    status(&http.get(&format!("{CM}/dry")), 404, "NotFound");
    let invalid_dry = http.post(
        &format!("{CM}?dryRun=All"),
        br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"Dry"}}"#,
    );
    status(&invalid_dry, 422, "Invalid");
    // A dry run of an existing object's copy (its resourceVersion kept, as controller-runtime's
    // dry-run client sends it) creates nothing and is not refused; a real create is.
    let copied = br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"dry-copy","resourceVersion":"7"}}"#;
    let dry_copy = http.post(&format!("{CM}?dryRun=All"), copied);
    assert_eq!(dry_copy.code, 201, "{}", dry_copy.body);
    status(&http.get(&format!("{CM}/dry-copy")), 404, "NotFound");
    status(&http.post(CM, copied), 400, "BadRequest");
    status(&http.get(&format!("{CM}/dry-copy")), 404, "NotFound");

    for (name, tier) in [("c1", "a"), ("c2", "a"), ("c3", "b")] {
        http.post(CM, format!(r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"{name}","labels":{{"tier":"{tier}"}}}}}}"#).as_bytes());
    }
    let deleted = http.request(
        "DELETE",
        &format!("{CM}?labelSelector=tier%3Da"),
        "application/json",
        None,
        true,
    );
    assert_eq!(deleted.code, 200, "{}", deleted.body);
    let left: Vec<Value> = http.get(&format!("{CM}?labelSelector=tier")).json()["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["metadata"]["name"].clone())
        .collect();
    assert_eq!(left, [json!("c3")]);
}

#[test]
fn periodic_bookmarks_and_openapi_v2() {
    let plinth = Plinth::start_with(Backend::Embedded, &["--watch-bookmark-interval", "1s"]);
    let http = Http::new(&plinth);
    let created = http
        .post(
            CM,
            br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"b1"}}"#,
        )
        .json();
    let rv = created["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_owned();
    let watched = http.get(&format!(
        "{CM}?watch=1&resourceVersion=0&allowWatchBookmarks=true&timeoutSeconds=3"
    ));
    let events: Vec<Value> = watched
        .body
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(events[0]["type"], "ADDED");
    let bookmark = events
        .iter()
        .find(|e| e["type"] == "BOOKMARK")
        .expect("a periodic bookmark within 3 s");
    assert_eq!(bookmark["object"]["kind"], "ConfigMap");
    let at: i64 = bookmark["object"]["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(at >= rv.parse::<i64>().unwrap());
    let without = http.get(&format!("{CM}?watch=1&resourceVersion=0&timeoutSeconds=2"));
    assert!(
        !without.body.contains("BOOKMARK"),
        "no bookmarks unless asked for"
    );

    let v2 = http.get("/openapi/v2").json();
    assert_eq!(v2["swagger"], "2.0");
    assert!(
        v2["definitions"]
            .as_object()
            .unwrap()
            .contains_key("io.k8s.api.core.v1.ConfigMap")
    );
}

trait ReplaceName {
    fn replace_name(self, name: &str) -> Vec<u8>;
}

impl ReplaceName for Vec<u8> {
    fn replace_name(self, name: &str) -> Vec<u8> {
        String::from_utf8(self)
            .unwrap()
            .replace("warned", name)
            .into_bytes()
    }
}

#[test]
fn sigterm_ends_open_watches_cleanly_and_exits_zero() {
    let mut plinth = Plinth::start(Backend::Embedded);
    let (base, token, ca) = {
        let http = Http::new(&plinth);
        (
            http.base.clone(),
            http.token.clone(),
            plinth.dir.path().join("ca.crt"),
        )
    };
    let mut watch = Command::new("curl")
        .args(["-s", "-N", "--cacert"])
        .arg(&ca)
        .args(["-H", &format!("Authorization: Bearer {token}")])
        .arg(format!("{base}{CM}?watch=1&timeoutSeconds=300"))
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(500));
    let status = plinth.terminate();
    assert!(
        status.success(),
        "plinth exits 0 on SIGTERM, got {status:?}"
    );
    let ended = watch.wait().unwrap();
    assert!(
        ended.success(),
        "the watch response ended cleanly (curl exit {ended:?})"
    );
}

/// The value of a counter line `name{labels} N` in a metrics text, 0 if absent.
fn counter(text: &str, series: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
        .unwrap_or(0)
}

/// Consistent lists (no resourceVersion) come from the watch cache once it has caught up with
/// the store — for a resource nobody writes to as well (progress notifications) — and see every
/// write acknowledged before them; so do paginated lists (kube-apiserver 1.32 reads storage
/// for those; 1.34 serves them from cache snapshots).
fn consistent_lists_from_the_watch_cache(plinth: &mut Plinth) {
    let http = Http::new(plinth);
    let secrets = "/api/v1/namespaces/default/secrets";
    let before = http.get("/metrics").body;
    for i in 0..20 {
        let created = http
            .post(
                CM,
                format!(r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"c{i}"}}}}"#)
                    .as_bytes(),
            )
            .json();
        let written: u64 = created["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap();
        // Read-your-writes on the written resource...
        let list = http.get(CM).json();
        let names: Vec<&str> = list["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| o["metadata"]["name"].as_str().unwrap())
            .collect();
        assert!(names.contains(&format!("c{i}").as_str()), "{names:?}");
        // ...and a quiet one is at least as new as the write.
        let quiet = http.get(secrets).json();
        let at: u64 = quiet["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap();
        assert!(
            at >= written,
            "secrets list at {at}, configmap written at {written}"
        );
    }
    let page = http.get(&format!("{CM}?limit=5")).json();
    assert_eq!(page["items"].as_array().unwrap().len(), 5);
    let after = http.get("/metrics").body;
    let cached = |text: &str, prefix: &str| {
        counter(
            text,
            &format!("apiserver_cache_list_total{{resource_prefix=\"{prefix}\"}}"),
        )
    };
    let stored = |text: &str, prefix: &str| {
        counter(
            text,
            &format!("apiserver_storage_list_total{{resource_prefix=\"{prefix}\"}}"),
        )
    };
    // From the cache — unless the store's progress reports cannot be trusted (etcd before
    // 3.4.31/3.5.13, as Debian's 3.4.23): then from storage, read-your-writes all the same.
    let from_cache = plinth
        .etcd_endpoint()
        .is_none_or(|endpoint| etcd_progress_is_reliable(&endpoint));
    let counted = |text: &str, prefix: &str, cache: bool| {
        if cache {
            cached(text, prefix)
        } else {
            stored(text, prefix)
        }
    };
    let source = |text: &str, prefix: &str| counted(text, prefix, from_cache);
    let other = |text: &str, prefix: &str| counted(text, prefix, !from_cache);
    let secrets_listed = source(&after, "/secrets") - source(&before, "/secrets");
    // The paginated list too: its pages come from the cache at the first page's revision
    // (from storage, as every page, when the cache is not used).
    let configmaps_listed = source(&after, "/configmaps") - source(&before, "/configmaps");
    if from_cache {
        assert_eq!(secrets_listed, 20, "{after}");
        assert_eq!(configmaps_listed, 21, "{after}");
        assert_eq!(
            other(&after, "/configmaps"),
            other(&before, "/configmaps"),
            "{after}"
        );
        assert_eq!(
            other(&after, "/secrets"),
            other(&before, "/secrets"),
            "{after}"
        );
    } else {
        // (Background controllers read storage too meanwhile: at least these.)
        assert!(secrets_listed >= 20, "{after}");
        assert!(configmaps_listed >= 21, "{after}");
    }
}

/// Whether the server's etcd reports watch progress reliably (it has the fix for etcd issue
/// 15220), as the etcd store judges it on connecting — what the server decided too.
fn etcd_progress_is_reliable(endpoint: &str) -> bool {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let store = plinth_store_etcd::EtcdStore::connect(&[endpoint], "/registry/")
            .await
            .unwrap();
        plinth_store::Store::progress_is_reliable(&store)
    })
}

/// Lists and watches served from the watch cache's encoded bytes answer exactly as the same
/// requests answered from storage (a paginated list decodes and encodes every object): plain
/// and label-selected, for a resource served in its stored form and for one that is not
/// (events.k8s.io Events over core/v1 storage), and watch events through label transitions.
fn cached_bytes_answer_as_storage_does(plinth: &mut Plinth) {
    let http = Http::new(plinth);
    for (name, tier) in [("a1", "a"), ("a2", "a"), ("b1", "b"), ("n1", "")] {
        let labels = if tier.is_empty() {
            json!({})
        } else {
            json!({"tier": tier})
        };
        let body = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "labels": labels},
            "data": {"text": "quote \" backslash \\ é \u{2028} <tag> &", "n": name}});
        assert_eq!(http.post(CM, body.to_string().as_bytes()).code, 201);
    }
    let core_events = "/api/v1/namespaces/default/events";
    let event = json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "e1"},
        "involvedObject": {"kind": "ConfigMap", "name": "a1", "namespace": "default"},
        "reason": "Checked", "message": "all good", "type": "Normal"});
    assert_eq!(
        http.post(core_events, event.to_string().as_bytes()).code,
        201
    );
    for path in [
        CM.to_owned(),
        format!("{CM}?labelSelector=tier%3Da"),
        format!("{CM}?labelSelector=tier"),
        format!("{CM}?labelSelector=tier%21%3Da"),
        core_events.to_owned(),
        "/apis/events.k8s.io/v1/namespaces/default/events".to_owned(),
        // Field selectors read the fields the cache extracted.
        format!("{CM}?fieldSelector=metadata.name%3Da1"),
        format!("{CM}?fieldSelector=metadata.name%21%3Da1&labelSelector=tier"),
        format!("{core_events}?fieldSelector=involvedObject.name%3Da1,reason%3DChecked"),
        format!("{core_events}?fieldSelector=type%21%3DWarning"),
        "/api/v1/namespaces?fieldSelector=status.phase%3DActive".to_owned(),
    ] {
        let cached = http.get(&path);
        assert_eq!(cached.code, 200, "{}", cached.body);
        // The concatenated bytes are the canonical encoding of the list they make.
        // kube's order: Go's struct order for built-in objects, sorted keys for the rest.
        let canonical = String::from_utf8(plinth_protobuf::to_json(&cached.json())).unwrap();
        assert_eq!(cached.body, canonical, "{path}");
        let sep = if path.contains('?') { '&' } else { '?' };
        // An exact list at the same revision reads storage.
        let rv = cached.json()["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .to_owned();
        let stored = http
            .get(&format!(
                "{path}{sep}resourceVersion={rv}&resourceVersionMatch=Exact"
            ))
            .json();
        assert_eq!(cached.json()["items"], stored["items"], "{path}");
        assert!(!stored["items"].as_array().unwrap().is_empty(), "{path}");
        // And a paginated one comes from the cache, page by page — compared with storage's
        // exact list at its own revision (the server's controllers may write in between).
        let paged = http.get(&format!("{path}{sep}limit=500")).json();
        let paged_rv = paged["metadata"]["resourceVersion"].as_str().unwrap();
        let stored_paged = http
            .get(&format!(
                "{path}{sep}resourceVersion={paged_rv}&resourceVersionMatch=Exact"
            ))
            .json();
        assert_eq!(paged["items"], stored_paged["items"], "{path}");
    }
    let none = http
        .get(&format!("{core_events}?fieldSelector=reason%3DOther"))
        .json();
    assert_eq!(none["items"], json!([]), "{none}");
    // A field that changes: the event leaves a field-selected watcher's selection.
    let events_rv = http.get(core_events).json()["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_owned();
    let reply = http.request(
        "PATCH",
        &format!("{core_events}/e1"),
        "application/merge-patch+json",
        Some(br#"{"reason": "Rechecked"}"#),
        true,
    );
    assert_eq!(reply.code, 200, "{}", reply.body);
    let watched = http.get(&format!(
        "{core_events}?watch=1&fieldSelector=reason%3DChecked&resourceVersion={events_rv}&timeoutSeconds=1"
    ));
    let event: Value = serde_json::from_str(watched.body.lines().next().unwrap()).unwrap();
    assert_eq!(
        (event["type"].as_str(), event["object"]["reason"].as_str()),
        (Some("DELETED"), Some("Rechecked")),
        "{}",
        watched.body
    );
    let modern = http
        .get("/apis/events.k8s.io/v1/namespaces/default/events")
        .json();
    assert_eq!(modern["items"][0]["note"], "all good", "{modern}");
    assert_eq!(modern["items"][0]["apiVersion"], "events.k8s.io/v1");

    // Label transitions, replayed from the cache's history to a label-selected watcher.
    let rv = http.get(CM).json()["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_owned();
    let relabel = |name: &str, tier: &str| {
        let patch = json!({"metadata": {"labels": {"tier": tier}}}).to_string();
        let reply = http.request(
            "PATCH",
            &format!("{CM}/{name}"),
            "application/merge-patch+json",
            Some(patch.as_bytes()),
            true,
        );
        assert_eq!(reply.code, 200, "{}", reply.body);
    };
    relabel("b1", "a"); // enters the selection: ADDED
    relabel("a1", "b"); // leaves it: DELETED
    relabel("a2", "a"); // no change: no event
    relabel("n1", "c"); // never selected: no event
    let patch = br#"{"data": {"n": "changed"}}"#;
    let reply = http.request(
        "PATCH",
        &format!("{CM}/a2"),
        "application/merge-patch+json",
        Some(patch),
        true,
    );
    assert_eq!(reply.code, 200);
    assert_eq!(
        http.request(
            "DELETE",
            &format!("{CM}/b1"),
            "application/json",
            None,
            true
        )
        .code,
        200
    );
    let watched = http.get(&format!(
        "{CM}?watch=1&labelSelector=tier%3Da&resourceVersion={rv}&timeoutSeconds=1"
    ));
    let events: Vec<(String, String)> = watched
        .body
        .lines()
        .map(|l| {
            let e: Value = serde_json::from_str(l).unwrap();
            (
                e["type"].as_str().unwrap().to_owned(),
                e["object"]["metadata"]["name"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let expected = [
        ("ADDED", "b1"),
        ("DELETED", "a1"),
        ("MODIFIED", "a2"),
        ("DELETED", "b1"),
    ];
    assert_eq!(
        events,
        expected.map(|(k, n)| (k.to_owned(), n.to_owned())),
        "{}",
        watched.body
    );

    // The cache reports its live objects and the bytes they hold: every ConfigMap, each at
    // least its JSON (the bytes lists are made of) and no more than a few times that.
    // Read between two lists at one revision, so that no write (the root CA publisher's, as
    // namespaces appear) falls between the list and the metrics.
    let (mut all, mut metrics) = (Value::Null, String::new());
    plinth.eventually("a list and the metrics at one revision", || {
        all = http.get("/api/v1/configmaps").json();
        metrics = http.get("/metrics").body;
        let again = http.get("/api/v1/configmaps").json();
        all["metadata"]["resourceVersion"] == again["metadata"]["resourceVersion"]
    });
    let items = all["items"].as_array().unwrap();
    let json_bytes: usize = items.iter().map(|i| i.to_string().len()).sum();
    let series = |name: &str| {
        usize::try_from(counter(
            &metrics,
            &format!("{name}{{resource_prefix=\"/configmaps\"}}"),
        ))
        .unwrap()
    };
    assert_eq!(
        series("plinth_watch_cache_objects"),
        items.len(),
        "{metrics}"
    );
    let bytes = series("plinth_watch_cache_bytes");
    assert!(
        bytes > json_bytes && bytes < 3 * json_bytes + 1024 * items.len(),
        "{bytes} bytes cached for {} objects of {json_bytes} bytes of JSON",
        items.len()
    );
}

/// A paginated list served from the watch cache shows its first page's revision on every
/// page, whatever changes meanwhile (deletes, updates, creates, label changes): its pages put
/// together equal storage's exact list at that revision, with and without a label selector.
fn cached_pages_show_one_revision(plinth: &mut Plinth) {
    let http = Http::new(plinth);
    let cm = |name: &str, tier: &str, value: &str| {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "labels": {"tier": tier}}, "data": {"v": value}})
        .to_string()
    };
    for i in 0..30 {
        let tier = if i % 3 == 0 { "a" } else { "b" };
        assert_eq!(
            http.post(CM, cm(&format!("k{i:02}"), tier, "old").as_bytes())
                .code,
            201
        );
    }
    for selector in ["", "&labelSelector=tier%3Da"] {
        let first = http.get(&format!("{CM}?limit=4{selector}"));
        assert_eq!(
            first.body,
            String::from_utf8(plinth_protobuf::to_json(&first.json())).unwrap(),
            "cached bytes, canonical"
        );
        let first = first.json();
        let revision = first["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .to_owned();
        // Changes after the first page, to objects of later pages.
        let merge = |name: &str, patch: Value| {
            http.request(
                "PATCH",
                &format!("{CM}/{name}"),
                "application/merge-patch+json",
                Some(patch.to_string().as_bytes()),
                true,
            )
        };
        let suffix = if selector.is_empty() { "x" } else { "y" };
        assert_eq!(
            http.request(
                "DELETE",
                &format!("{CM}/k{}", 27 - selector.len() / 20),
                "application/json",
                None,
                true
            )
            .code,
            200
        );
        assert_eq!(
            merge("k21", json!({"data": {"v": format!("new-{suffix}")}})).code,
            200
        );
        assert_eq!(
            merge("k24", json!({"metadata": {"labels": {"tier": "b"}}})).code,
            200
        );
        assert_eq!(
            merge("k25", json!({"metadata": {"labels": {"tier": "a"}}})).code,
            200
        );
        assert_eq!(
            http.post(CM, cm(&format!("k15{suffix}"), "a", "late").as_bytes())
                .code,
            201
        );
        let mut items: Vec<Value> = first["items"].as_array().unwrap().clone();
        let mut token = first["metadata"]["continue"].as_str().map(str::to_owned);
        let mut pages = 1;
        while let Some(t) = token {
            let page = http.get(&format!("{CM}?limit=4&continue={t}{selector}"));
            assert_eq!(page.code, 200, "{}", page.body);
            let page = page.json();
            assert_eq!(page["metadata"]["resourceVersion"], revision.as_str());
            // A count of what follows only when the list selects everything, as kube's.
            assert_eq!(
                page["metadata"].get("remainingItemCount").is_some(),
                selector.is_empty() && page["metadata"].get("continue").is_some(),
                "{page}"
            );
            items.extend(page["items"].as_array().unwrap().iter().cloned());
            token = page["metadata"]["continue"].as_str().map(str::to_owned);
            pages += 1;
        }
        assert!(pages > 1);
        let exact = http
            .get(&format!(
                "{CM}?resourceVersion={revision}&resourceVersionMatch=Exact{selector}"
            ))
            .json();
        let brief = |items: &[Value]| -> Vec<String> {
            items
                .iter()
                .map(|i| {
                    format!(
                        "{} {} {} {}",
                        i["metadata"]["name"],
                        i["data"]["v"],
                        i["metadata"]["labels"]["tier"],
                        i["metadata"]["resourceVersion"]
                    )
                })
                .collect()
        };
        let exact = exact["items"].as_array().unwrap();
        assert_eq!(brief(&items), brief(exact), "{selector}");
        assert_eq!(&items, exact, "{selector}");
    }
}

/// Events are kept in no watch cache (kube-apiserver's default): lists and watches of both
/// Event resources are served by storage — a watch without a resourceVersion starts with the
/// current Events as ADDED, one from a resourceVersion sees the changes after it, a watch-list
/// ends its initial Events with the bookmark, field selectors select — and the cache metrics
/// show no cache of them.
fn events_are_served_without_a_watch_cache(plinth: &mut Plinth) {
    let http = Http::new(plinth);
    let events = "/api/v1/namespaces/default/events";
    let event = |name: &str, about: &str| {
        json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": name},
            "involvedObject": {"kind": "ConfigMap", "name": about, "namespace": "default"},
            "reason": "Seen", "message": "seen", "type": "Normal"})
        .to_string()
    };
    for (name, about) in [("e1", "a"), ("e2", "b")] {
        let reply = http.post(events, event(name, about).as_bytes());
        assert_eq!(reply.code, 201, "{}", reply.body);
    }
    let lines = |reply: Reply| -> Vec<Value> {
        assert_eq!(reply.code, 200, "{}", reply.body);
        reply
            .body
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    };
    let brief = |events: &[Value]| -> Vec<String> {
        events
            .iter()
            .map(|e| {
                let name = e["object"]["metadata"]["name"].as_str().unwrap_or("");
                format!("{} {name}", e["type"].as_str().unwrap())
            })
            .collect()
    };
    let initial = lines(http.get(&format!("{events}?watch=1&timeoutSeconds=1")));
    assert_eq!(brief(&initial), ["ADDED e1", "ADDED e2"]);

    let list = http.get(events).json();
    let rv = list["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_owned();
    let reply = http.post(events, event("e3", "a").as_bytes());
    assert_eq!(reply.code, 201, "{}", reply.body);
    let reply = http.request(
        "DELETE",
        &format!("{events}/e1"),
        "application/json",
        None,
        true,
    );
    assert_eq!(reply.code, 200, "{}", reply.body);
    let later = lines(http.get(&format!(
        "{events}?watch=1&resourceVersion={rv}&timeoutSeconds=1"
    )));
    assert_eq!(brief(&later), ["ADDED e3", "DELETED e1"]);
    let about_a = lines(http.get(&format!(
        "{events}?watch=1&resourceVersion={rv}&timeoutSeconds=1&fieldSelector=involvedObject.name%3Da"
    )));
    assert_eq!(brief(&about_a), ["ADDED e3", "DELETED e1"]);
    let about_b = lines(http.get(&format!(
        "{events}?watch=1&resourceVersion={rv}&timeoutSeconds=1&fieldSelector=involvedObject.name%3Db"
    )));
    assert_eq!(brief(&about_b), Vec::<String>::new());

    // The newer form, watch-listed: its initial Events, then the bookmark at their revision.
    let newer = lines(http.get(
        "/apis/events.k8s.io/v1/namespaces/default/events?watch=1&sendInitialEvents=true\
         &allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan&timeoutSeconds=1\
         &fieldSelector=regarding.name%3Da",
    ));
    assert_eq!(brief(&newer), ["ADDED e3", "BOOKMARK "]);
    assert_eq!(newer[0]["object"]["regarding"]["name"], "a");
    assert_eq!(
        newer[1]["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"],
        "true"
    );
    let names = common::item_names;
    assert_eq!(names(&http.get(events).json()), ["e2", "e3"]);
    let page = http.get(&format!("{events}?limit=1")).json();
    assert_eq!(names(&page), ["e2"]);
    let token = page["metadata"]["continue"].as_str().unwrap();
    let rest = http
        .get(&format!("{events}?limit=1&continue={token}"))
        .json();
    assert_eq!(names(&rest), ["e3"]);
    assert_eq!(
        names(&http.get(&format!("{events}?resourceVersion=0")).json()),
        ["e2", "e3"]
    );

    let metrics = http.get("/metrics").body;
    assert!(
        metrics.contains("plinth_watch_cache_objects{resource_prefix=\"/configmaps\"}"),
        "{metrics}"
    );
    assert!(
        !metrics.contains("plinth_watch_cache_objects{resource_prefix=\"/events\"}"),
        "{metrics}"
    );
    assert!(
        counter(
            &metrics,
            "apiserver_storage_list_total{resource_prefix=\"/events\"}"
        ) >= 4,
        "{metrics}"
    );
    assert_eq!(
        counter(
            &metrics,
            "apiserver_cache_list_total{resource_prefix=\"/events\"}"
        ),
        0,
        "{metrics}"
    );
}

on_both_backends! {
    consistent_lists_from_the_watch_cache;
    events_are_served_without_a_watch_cache;
    cached_bytes_answer_as_storage_does;
    cached_pages_show_one_revision;
}

#[test]
fn delete_options_are_validated() {
    let plinth = Plinth::start(Backend::Embedded);
    let http = Http::new(&plinth);
    http.post(
        CM,
        br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"kept"}}"#,
    );
    let delete = |body: &str| {
        http.request(
            "DELETE",
            &format!("{CM}/kept"),
            "application/json",
            Some(body.as_bytes()),
            true,
        )
    };
    let reply = delete(r#"{"propagationPolicy":"Sideways"}"#);
    let body = status(&reply, 422, "Invalid");
    assert_eq!(
        body["message"],
        r#"DeleteOptions.meta.k8s.io "" is invalid: propagationPolicy: Unsupported value: "Sideways": supported values: "Foreground", "Background", "Orphan", "nil""#
    );
    let reply = delete(r#"{"propagationPolicy":"Orphan","orphanDependents":true}"#);
    let body = status(&reply, 422, "Invalid");
    assert_eq!(
        body["details"]["causes"][0]["message"],
        r#"Invalid value: "Orphan": orphanDependents and deletionPropagation cannot be both set"#
    );
    // Nothing was deleted by the refused requests.
    assert_eq!(http.get(&format!("{CM}/kept")).code, 200);
    // Orphan keeps the object (finalizer `orphan`) until the garbage collector has orphaned its
    // dependents; it has none, so it goes.
    let reply = delete(r#"{"propagationPolicy":"Orphan"}"#);
    assert_eq!(reply.code, 200, "{}", reply.body);
    assert_eq!(reply.json()["metadata"]["finalizers"], json!(["orphan"]));
    plinth.eventually("the orphaned owner to go", || {
        http.get(&format!("{CM}/kept")).code == 404
    });
}

#[test]
fn apply_patches_refuse_bad_input_and_change_nothing() {
    let plinth = Plinth::start(Backend::Embedded);
    let http = Http::new(&plinth);
    let apply = |query: &str, body: &str| {
        http.request(
            "PATCH",
            &format!("{CM}/applied{query}"),
            "application/apply-patch+yaml",
            Some(body.as_bytes()),
            true,
        )
    };
    let good = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: applied}\ndata: {a: b}\n";
    let body = status(&apply("", good), 422, "Invalid");
    assert_eq!(
        body["message"],
        r#"PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: is required for apply patch"#
    );
    let long = "m".repeat(129);
    status(
        &apply(&format!("?fieldManager={long}"), good),
        422,
        "Invalid",
    );
    status(
        &apply("?fieldManager=t", "apiVersion: [unclosed\n"),
        400,
        "BadRequest",
    );
    status(
        &apply(
            "?fieldManager=t",
            "kind: ConfigMap\nmetadata: {name: applied}\n",
        ),
        400,
        "BadRequest",
    );
    status(
        &apply(
            "?fieldManager=t",
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: applied, managedFields: [{manager: x}]}\n",
        ),
        400,
        "BadRequest",
    );
    status(
        &apply(
            "?fieldManager=t",
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: other}\n",
        ),
        400,
        "BadRequest",
    );
    // Undeclared fields under Strict: structured-merge-diff's words.
    let undeclared = status(
        &apply(
            "?fieldManager=t&fieldValidation=Strict",
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: applied, bogusMeta: 1}\nbogus: 1\n",
        ),
        400,
        "BadRequest",
    );
    assert_eq!(
        undeclared["message"],
        "failed to create typed patch object (/applied; /v1, Kind=ConfigMap): errors:\n  .bogus: field not declared in schema\n  .metadata.bogusMeta: field not declared in schema"
    );
    // Keys given twice under Strict: go-yaml's words, by line.
    let twice = status(
        &apply(
            "?fieldManager=t&fieldValidation=Strict",
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: applied}\ndata:\n  a: b\n  a: c\n",
        ),
        400,
        "BadRequest",
    );
    assert_eq!(
        twice["message"],
        "error strict decoding YAML: error converting YAML to JSON: yaml: unmarshal errors:\n  line 6: key \"a\" already set in map"
    );
    status(&http.get(&format!("{CM}/applied")), 404, "NotFound");
    // `force` belongs to apply patches only.
    assert_eq!(apply("?fieldManager=t", good).code, 201);
    let merge = http.request(
        "PATCH",
        &format!("{CM}/applied?force=true"),
        "application/merge-patch+json",
        Some(br#"{"data":{"a":"c"}}"#),
        true,
    );
    let body = status(&merge, 422, "Invalid");
    assert_eq!(
        body["message"],
        r#"PatchOptions.meta.k8s.io "" is invalid: force: Forbidden: may not be specified for non-apply patch"#
    );
    assert_eq!(http.get(&format!("{CM}/applied")).json()["data"]["a"], "b");
}

/// A request with a bad query: method, path, query, body, content type, the expected code, and
/// what the message must name.
type BadQuery<'a> = (
    &'a str,
    &'a str,
    &'a str,
    Option<&'a [u8]>,
    &'a str,
    u16,
    &'a str,
);

/// Every query parameter kube-apiserver accepts, given a value that does not parse (or options
/// that do not go together): a 4xx `Status` naming the parameter, and the object untouched —
/// not deleted, not changed, its resourceVersion the same.
#[test]
fn bad_query_parameters_are_refused_and_change_nothing() {
    let plinth = Plinth::start(Backend::Embedded);
    let http = Http::new(&plinth);
    let created = http.post(
        CM,
        br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"target"},"data":{"k":"v"}}"#,
    );
    assert_eq!(created.code, 201, "{}", created.body);
    let before = http.get(&format!("{CM}/target")).json();
    let one = format!("{CM}/target");
    let merge = br#"{"data":{"k":"changed"}}"#.as_slice();
    let put = serde_json::to_vec(&json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "target"}, "data": {"k": "changed"}})).unwrap();
    let post = br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"fresh"}}"#.as_slice();
    // (method, path, query, body, content type, code, the parameter the message names)
    let cases: Vec<BadQuery> = vec![
        (
            "DELETE",
            &one,
            "gracePeriodSeconds=soon",
            None,
            "application/json",
            400,
            "gracePeriodSeconds",
        ),
        (
            "DELETE",
            &one,
            "propagationPolicy=Sideways",
            None,
            "application/json",
            422,
            "propagationPolicy",
        ),
        (
            "DELETE",
            &one,
            "dryRun=Maybe",
            None,
            "application/json",
            400,
            "dryRun",
        ),
        (
            "DELETE",
            CM,
            "gracePeriodSeconds=soon",
            None,
            "application/json",
            400,
            "gracePeriodSeconds",
        ),
        (
            "DELETE",
            CM,
            "limit=abc",
            None,
            "application/json",
            400,
            "limit",
        ),
        (
            "DELETE",
            CM,
            "labelSelector=a+in+(",
            None,
            "application/json",
            400,
            "unable to parse requirement",
        ),
        (
            "GET",
            CM,
            "limit=abc",
            None,
            "application/json",
            400,
            "limit",
        ),
        (
            "GET",
            CM,
            "timeoutSeconds=x",
            None,
            "application/json",
            400,
            "timeoutSeconds",
        ),
        (
            "GET",
            CM,
            "watch=true&timeoutSeconds=x",
            None,
            "application/json",
            400,
            "timeoutSeconds",
        ),
        (
            "GET",
            CM,
            "resourceVersion=abc",
            None,
            "application/json",
            400,
            "resource version",
        ),
        (
            "GET",
            &one,
            "resourceVersion=abc",
            None,
            "application/json",
            400,
            "resource version",
        ),
        (
            "GET",
            CM,
            "resourceVersion=1&resourceVersionMatch=Sometimes",
            None,
            "application/json",
            400,
            "resourceVersionMatch",
        ),
        (
            "GET",
            CM,
            "resourceVersionMatch=Exact",
            None,
            "application/json",
            422,
            "resourceVersionMatch",
        ),
        (
            "GET",
            CM,
            "continue=not-a-token",
            None,
            "application/json",
            400,
            "continue",
        ),
        (
            "GET",
            CM,
            "fieldSelector=spec.x%3D1",
            None,
            "application/json",
            400,
            "spec.x",
        ),
        (
            "GET",
            CM,
            "watch=true&sendInitialEvents=true",
            None,
            "application/json",
            422,
            "allowWatchBookmarks",
        ),
        (
            "PATCH",
            &one,
            "dryRun=Maybe",
            Some(merge),
            "application/merge-patch+json",
            400,
            "dryRun",
        ),
        (
            "PATCH",
            &one,
            "fieldValidation=Loose",
            Some(merge),
            "application/merge-patch+json",
            400,
            "fieldValidation",
        ),
        (
            "PATCH",
            &one,
            "force=true",
            Some(merge),
            "application/merge-patch+json",
            422,
            "force",
        ),
        (
            "PUT",
            &one,
            "dryRun=Maybe",
            Some(&put),
            "application/json",
            400,
            "dryRun",
        ),
        (
            "PUT",
            &one,
            "fieldValidation=Loose",
            Some(&put),
            "application/json",
            400,
            "fieldValidation",
        ),
        (
            "POST",
            CM,
            "dryRun=Maybe",
            Some(post),
            "application/json",
            400,
            "dryRun",
        ),
        (
            "POST",
            CM,
            "fieldValidation=Loose",
            Some(post),
            "application/json",
            400,
            "fieldValidation",
        ),
    ];
    for (method, path, query, body, content_type, code, named) in cases {
        let reply = http.request(method, &format!("{path}?{query}"), content_type, body, true);
        assert_eq!(reply.code, code, "{method} ?{query}: {}", reply.body);
        let status = reply.json();
        assert_eq!(status["kind"], "Status", "{method} ?{query}: {status}");
        let message = status["message"].as_str().unwrap_or("");
        assert!(message.contains(named), "{method} ?{query}: {message}");
    }
    let after = http.get(&format!("{CM}/target")).json();
    assert_eq!(after, before, "the refused requests changed nothing");
    assert_eq!(
        http.get(&format!("{CM}/fresh")).code,
        404,
        "nothing was created"
    );
}

/// The data directory holds credentials and (embedded) every object, Secrets included: when
/// `plinth serve` creates it, it and every directory in it are the owner's alone (0700), and so
/// is every file (0600).
#[test]
fn the_data_directory_is_the_owners_alone() {
    use std::io::BufRead;
    use std::os::unix::fs::PermissionsExt;
    let temp = tempfile::tempdir().unwrap();
    let data = temp.path().join("fresh").join("data");
    let mut child = Command::new(env!("CARGO_BIN_EXE_plinth"))
        .args([
            "serve",
            "--pod-network=shared",
            "--listen",
            "127.0.0.1:0",
            "--data-dir",
        ])
        .arg(&data)
        .env("RUST_LOG", "warn")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    // Stopped by its PID whatever the test's outcome.
    let _server = common::Stopped(Some(child));
    let mut kubeconfig = String::new();
    std::io::BufReader::new(stdout)
        .read_line(&mut kubeconfig)
        .unwrap();
    let created = Command::new("kubectl")
        .args(["create", "secret", "generic", "s", "--from-literal=k=v"])
        .env("KUBECONFIG", kubeconfig.trim())
        .env("KUBECACHEDIR", temp.path().join("kube-cache"))
        .output()
        .unwrap();
    assert!(created.status.success(), "{created:?}");
    let mode =
        |path: &std::path::Path| std::fs::metadata(path).unwrap().permissions().mode() & 0o777;
    let mut pending = vec![data.clone()];
    let mut files = 0;
    while let Some(dir) = pending.pop() {
        assert_eq!(mode(&dir), 0o700, "{}", dir.display());
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                pending.push(path);
            } else {
                assert_eq!(mode(&path), 0o600, "{}", path.display());
                files += 1;
            }
        }
    }
    assert!(
        files >= 6,
        "credentials, kubeconfig and the store: {files} files"
    );
}

/// Logs written to a file (not a terminal) are plain lines, without colour codes.
#[test]
fn logs_to_a_file_carry_no_colour_codes() {
    use std::io::{BufRead, BufReader};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("stderr.log");
    let log = std::fs::File::create(&path).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_plinth"))
        .args([
            "serve",
            "--no-node",
            "--pod-network=shared",
            "--listen",
            "127.0.0.1:0",
            "--data-dir",
        ])
        .arg(dir.path().join("data"))
        .env("RUST_LOG", "info")
        .stdout(std::process::Stdio::piped())
        .stderr(log)
        .spawn()
        .unwrap();
    // The kubeconfig's path on stdout: the server is up, and has logged its start.
    let mut line = String::new();
    let started = BufReader::new(child.stdout.take().unwrap()).read_line(&mut line);
    // Stopped by its PID before anything is asserted.
    Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    let exited = child.wait().unwrap();
    started.unwrap();
    assert!(exited.success(), "{exited:?}");
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.contains("INFO"), "the log has lines: {text}");
    assert!(!text.contains('\u{1b}'), "no escape codes: {text:?}");
}

/// A continue token whose revision was compacted away is answered 410 with a token that
/// continues the list from the same key at the latest revision, as kube-apiserver answers
/// (the conformance suite's "continue listing … though the list is inconsistent").
#[test]
fn an_expired_continue_token_offers_an_inconsistent_continuation() {
    let plinth = Plinth::start_with(Backend::Embedded, &["--compaction-interval", "1s"]);
    let http = Http::new(&plinth);
    for i in 0..6 {
        let body =
            format!(r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"c{i}"}}}}"#);
        assert_eq!(http.post(CM, body.as_bytes()).code, 201);
    }
    let first = http.get(&format!("{CM}?limit=2")).json();
    let token = first["metadata"]["continue"].as_str().unwrap().to_owned();
    let mut expired = None;
    plinth.eventually("the first page's revision compacted away", || {
        // Writes move the revision on, so that compaction passes the first page's.
        http.post(
            CM,
            br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"generateName":"w-"}}"#,
        );
        let reply = http.get(&format!("{CM}?limit=2&continue={token}"));
        if reply.code == 410 {
            expired = Some(reply.json());
        }
        expired.is_some()
    });
    let expired = expired.unwrap();
    assert_eq!(expired["reason"], "Expired");
    let inconsistent = expired["metadata"]["continue"].as_str().unwrap();
    let next = http.get(&format!("{CM}?limit=2&continue={inconsistent}"));
    assert_eq!(next.code, 200, "{}", next.body);
    let next = next.json();
    assert_ne!(
        next["metadata"]["resourceVersion"],
        first["metadata"]["resourceVersion"]
    );
    let names: Vec<&str> = next["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["c2", "c3"], "the next page from the same key");
}

/// On etcd a watch from before the watch cache's window is served by replaying etcd only
/// within `--watch-replay-limit` revisions of the window; an older one gets the 410 kube-apiserver
/// answers every watch older than its cache with (etcd re-reads a lagging watcher's whole
/// backlog until it catches up: a million-revision replay kept it busy for minutes).
#[test]
fn watches_older_than_the_cache_and_the_replay_limit_get_410_on_etcd() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let etcd = runtime
        .block_on(plinth_store_etcd::testing::EtcdProcess::start())
        .expect("start etcd");
    drop(runtime);
    let mut plinth = Plinth::start_with(Backend::Etcd(etcd), &["--watch-replay-limit", "50"]);
    let rv = |http: &Http| -> i64 {
        let list: Value = serde_json::from_str(&http.get(CM).body).unwrap();
        list["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap()
    };
    let before = rv(&Http::new(&plinth));
    let http = Http::new(&plinth);
    let mut created = Vec::new();
    for i in 0..100 {
        let reply = http.post(
            CM,
            format!(r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"r{i:03}"}}}}"#)
                .as_bytes(),
        );
        assert_eq!(reply.code, 201, "{}", reply.body);
        let object: Value = serde_json::from_str(&reply.body).unwrap();
        created.push(
            object["metadata"]["resourceVersion"]
                .as_str()
                .unwrap()
                .to_owned(),
        );
    }
    drop(http);
    // A restarted server's cache begins at the revision it listed: everything above is older.
    plinth.kill_and_restart();
    let http = Http::new(&plinth);
    let now = rv(&http);
    assert!(now >= before + 100, "{before} → {now}");

    // Within the limit: replayed from etcd, the last three creates in order.
    let near = http.get(&format!(
        "{CM}?watch=1&resourceVersion={}&timeoutSeconds=2",
        created[96]
    ));
    assert_eq!(near.code, 200, "{}", near.body);
    let names: Vec<String> = near
        .body
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|e| e["type"] == "ADDED")
        .map(|e| e["object"]["metadata"]["name"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(names, ["r097", "r098", "r099"], "{}", near.body);

    // Beyond it: the watch starts and its one event is kube's 410.
    let far = http.get(&format!(
        "{CM}?watch=1&resourceVersion={before}&timeoutSeconds=2"
    ));
    assert_eq!(far.code, 200, "{}", far.body);
    let events: Vec<Value> = far
        .body
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(events.len(), 1, "{}", far.body);
    assert_eq!(events[0]["type"], "ERROR");
    let status = &events[0]["object"];
    assert_eq!(status["code"], 410, "{status}");
    assert_eq!(status["reason"], "Expired", "{status}");
    let message = status["message"].as_str().unwrap();
    assert!(
        message.starts_with(&format!("too old resource version: {before} (")),
        "{message}"
    );
    // kubectl relists and goes on (a watch from "now" on is served as ever).
    let out = plinth.kubectl(&["get", "configmap", "r000", "-o", "name"]);
    assert_eq!(out.trim(), "configmap/r000");
}
