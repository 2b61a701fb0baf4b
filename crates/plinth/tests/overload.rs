//! Concurrency limits with per-user fair queuing: with one seat, while one user floods the
//! server, another user's requests (queued behind one request at most) and the
//! administrator's (never held) are all served; the seat gauge shows the one seat in use.
//! (The queue's own rules — the user holding fewest seats served first, a full queue answered
//! 429 with `Retry-After` — are tested deterministically in `http/inflight.rs`.)

#![allow(clippy::unwrap_used)]

mod common;

use common::http::Http;
use common::{Backend, Plinth};

fn gauge(text: &str, series: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
        .unwrap_or(0)
}

#[test]
fn while_one_user_floods_another_is_served() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens.csv");
    std::fs::write(&tokens, "flood-token,flood,uid-1\ncalm-token,calm,uid-2\n").unwrap();
    let plinth = Plinth::start_with(
        Backend::Embedded,
        &[
            "--token-auth-file",
            tokens.to_str().unwrap(),
            "--max-requests-inflight",
            "1",
        ],
    );
    for user in ["flood", "calm"] {
        plinth.kubectl(&[
            "create",
            "clusterrolebinding",
            &format!("{user}-views"),
            "--clusterrole=view",
            &format!("--user={user}"),
        ]);
    }
    let http = Http::new(&plinth);
    let flood = http.with_token("flood-token");
    let calm = http.with_token("calm-token");
    plinth.eventually("the bindings are in force", || {
        flood.get("/api/v1/namespaces").code == 200 && calm.get("/api/v1/namespaces").code == 200
    });
    // Something worth listing, so that the flood's requests overlap.
    for i in 0..300 {
        let body = format!(
            r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"c{i}"}},"data":{{"x":"{}"}}}}"#,
            "y".repeat(2048)
        );
        assert_eq!(
            http.post("/api/v1/namespaces/default/configmaps", body.as_bytes())
                .code,
            201
        );
    }
    let path = "/api/v1/namespaces/default/configmaps";
    let seats = "apiserver_current_inflight_requests{request_kind=\"readOnly\"}";
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|scope| {
        let floods: Vec<_> = (0..16)
            .map(|_| {
                scope.spawn(|| {
                    let mut codes = Vec::new();
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        codes.push(flood.get(path).code);
                    }
                    codes
                })
            })
            .collect();
        // While the flood holds the one seat and queues behind it, the other user and the
        // administrator are served, every time.
        let mut busy = 0;
        for _ in 0..20 {
            let metrics = http.get("/metrics").body;
            busy += usize::from(gauge(&metrics, seats) > 0);
            assert!(gauge(&metrics, seats) <= 1, "one seat: {metrics}");
            let served = calm.get(path);
            assert_eq!(served.code, 200, "{}", served.body);
            assert_eq!(http.get(path).code, 200);
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let codes: Vec<u16> = floods.into_iter().flat_map(|f| f.join().unwrap()).collect();
        // The flood is served or told to retry, never failed.
        assert!(codes.iter().all(|c| matches!(c, 200 | 429)), "{codes:?}");
        assert!(codes.contains(&200));
        assert!(
            busy > 0,
            "the flood never held the seat while it was looked at"
        );
    });
    // Once the flood is over, the same user is served again.
    assert_eq!(flood.get("/api/v1/namespaces/default/configmaps").code, 200);
}

#[test]
fn flow_control_objects_describe_the_queuing() {
    let plinth = Plinth::start(Backend::Embedded);
    let table = plinth.kubectl(&["get", "flowschemas"]);
    let header: Vec<&str> = table.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        [
            "NAME",
            "PRIORITYLEVEL",
            "MATCHINGPRECEDENCE",
            "DISTINGUISHERMETHOD",
            "AGE",
            "MISSINGPL"
        ]
    );
    let row = |table: &str, name: &str| -> Vec<String> {
        table
            .lines()
            .find(|l| l.split_whitespace().next() == Some(name))
            .unwrap_or_else(|| panic!("no {name} in {table}"))
            .split_whitespace()
            .map(str::to_owned)
            .collect()
    };
    let catch_all = row(&table, "catch-all");
    assert_eq!(catch_all[1..4], ["catch-all", "10000", "ByUser"]);
    assert_eq!(catch_all[5], "False");
    assert_eq!(row(&table, "exempt")[1..4], ["exempt", "1", "<none>"]);
    let levels = plinth.kubectl(&["get", "prioritylevelconfigurations"]);
    let limited = row(&levels, "catch-all");
    assert_eq!(limited[1], "Limited");
    // The queue length the server enforces per user, as the object says.
    assert_eq!(limited[5], "64");
    assert_eq!(
        row(&levels, "exempt")[1..6],
        ["Exempt", "<none>", "<none>", "<none>", "<none>"]
    );
    // A schema pointing at a level, and bad ones refused with kube's field paths.
    plinth.kubectl_with(
        &["apply", "-f", "-"],
        "apiVersion: flowcontrol.apiserver.k8s.io/v1\nkind: FlowSchema\nmetadata: {name: batch}\nspec:\n  priorityLevelConfiguration: {name: catch-all}\n  matchingPrecedence: 800\n  distinguisherMethod: {type: ByNamespace}\n  rules:\n  - subjects: [{kind: Group, group: {name: batch}}]\n    resourceRules: [{verbs: [list], apiGroups: [''], resources: [pods], namespaces: ['*']}]\n",
    );
    assert_eq!(
        plinth.kubectl(&[
            "get",
            "flowschema",
            "batch",
            "-o",
            "jsonpath={.spec.matchingPrecedence}"
        ]),
        "800"
    );
    let refused = plinth.kubectl_stdin(
        &["apply", "-f", "-"],
        "apiVersion: flowcontrol.apiserver.k8s.io/v1\nkind: FlowSchema\nmetadata: {name: broken}\nspec:\n  priorityLevelConfiguration: {name: ''}\n  matchingPrecedence: 20000\n  distinguisherMethod: {type: ByColour}\n  rules:\n  - subjects: [{kind: Robot}]\n",
    );
    assert!(!refused.status.success());
    let err = String::from_utf8_lossy(&refused.stderr);
    for expected in [
        "spec.priorityLevelConfiguration.name: Required value",
        "spec.matchingPrecedence: Invalid value: 20000: must be between 1 and 10000, inclusive",
        "spec.distinguisherMethod.type: Unsupported value: \"ByColour\": supported values: \"ByNamespace\", \"ByUser\"",
        "spec.rules[0].subjects[0].kind: Unsupported value: \"Robot\"",
        "spec.rules[0]: Required value: at least one of resourceRules and nonResourceRules has to be non-empty",
    ] {
        assert!(err.contains(expected), "missing {expected:?} in {err}");
    }
    assert_eq!(
        plinth
            .kubectl_output(&["get", "flowschema", "broken"])
            .status
            .code(),
        Some(1),
        "nothing stored"
    );
}
