//! Concurrency limits: past `--max-requests-inflight`, requests are refused at once with 429
//! and `Retry-After`, as kube-apiserver refuses them; administrators (`system:masters`) and
//! watches are never refused.

#![allow(clippy::unwrap_used)]

mod common;

use common::http::Http;
use common::{Backend, Plinth};

#[test]
fn past_the_inflight_limit_requests_get_429_with_retry_after() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens.csv");
    std::fs::write(&tokens, "flood-token,flood,uid-1\n").unwrap();
    let plinth = Plinth::start_with(
        Backend::Embedded,
        &[
            "--token-auth-file",
            tokens.to_str().unwrap(),
            "--max-requests-inflight",
            "1",
        ],
    );
    plinth.kubectl(&[
        "create",
        "clusterrolebinding",
        "flood-views",
        "--clusterrole=view",
        "--user=flood",
    ]);
    let http = Http::new(&plinth);
    let flood = http.with_token("flood-token");
    plinth.eventually("the binding is in force", || {
        flood.get("/api/v1/namespaces").code == 200
    });
    // Something worth listing, so that requests overlap.
    for i in 0..200 {
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
    let mut refused = None;
    plinth.eventually("a request past the limit is refused", || {
        let replies: Vec<_> = std::thread::scope(|scope| {
            let workers: Vec<_> = (0..12)
                .map(|i| {
                    let (flood, http) = (&flood, &http);
                    scope.spawn(move || {
                        let path = "/api/v1/namespaces/default/configmaps";
                        // Every fourth request is the administrator's: never refused.
                        let admin = i % 4 == 0;
                        let reply = if admin {
                            http.get(path)
                        } else {
                            flood.get(path)
                        };
                        (admin, reply)
                    })
                })
                .collect();
            workers.into_iter().map(|w| w.join().unwrap()).collect()
        });
        for (admin, reply) in &replies {
            assert!(
                reply.code == 200 || (reply.code == 429 && !admin),
                "admin {admin}: {} {}",
                reply.code,
                reply.body
            );
        }
        refused = replies
            .into_iter()
            .find(|(_, r)| r.code == 429)
            .map(|(_, r)| r);
        refused.is_some()
    });
    let refused = refused.unwrap();
    assert_eq!(refused.json()["reason"], "TooManyRequests");
    assert_eq!(
        refused.json()["message"],
        "Too many requests, please try again later."
    );
    assert!(
        refused
            .headers
            .to_ascii_lowercase()
            .contains("retry-after: 1"),
        "{}",
        refused.headers
    );
    // Once the flood is over, the same user is served again.
    assert_eq!(
        flood
            .get("/api/v1/namespaces/default/configmaps?limit=1")
            .code,
        200
    );
}
