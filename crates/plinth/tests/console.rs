//! The web console (issue #32) in headless Chromium: `tests/console/drive.py` signs in with a
//! token, finds a Deployment, follows its owner graph down to a pod, edits a label (server-side
//! apply) and finds the change in its history under the user's name, reads the timeline,
//! follows the pod's logs, runs a command in it over a WebSocket, and asks who may read pods.
//! Screenshots are kept in `target/tmp/console-screenshots/`.

#![allow(clippy::unwrap_used)]

mod common;

use std::process::Command;

use common::http::Http;
use common::{Backend, Plinth};

const SCREENSHOTS: &str = concat!(env!("CARGO_TARGET_TMPDIR"), "/console-screenshots");

#[test]
fn the_console_browses_edits_and_shows_history_logs_and_a_shell() {
    let config = tempfile::tempdir().unwrap();
    let tokens = config.path().join("tokens.csv");
    std::fs::write(
        &tokens,
        "alice-console-token,alice,u-alice,\"system:masters\"\n",
    )
    .unwrap();
    let plinth = Plinth::start_with(
        Backend::Embedded,
        &[
            "--node-name",
            "console-node",
            "--history-retention",
            "1h",
            "--token-auth-file",
            tokens.to_str().unwrap(),
        ],
    );
    plinth.kubectl(&[
        "create",
        "deployment",
        "web",
        "--image=busybox:1.36",
        "--",
        "sh",
        "-c",
        "i=0; while true; do echo line $i; i=$((i+1)); sleep 1; done",
    ]);
    plinth.kubectl(&["rollout", "status", "deploy/web", "--timeout=120s"]);
    plinth.kubectl(&["create", "serviceaccount", "pod-reader"]);
    plinth.kubectl(&[
        "create",
        "role",
        "read-pods",
        "--verb=get,list",
        "--resource=pods",
    ]);
    plinth.kubectl(&[
        "create",
        "rolebinding",
        "pod-reader",
        "--role=read-pods",
        "--serviceaccount=default:pod-reader",
    ]);
    // The page is for anyone (it holds no data), under a policy that keeps it to this server.
    let http = Http::new(&plinth);
    let page = http.request("GET", "/ui/", "", None, false);
    assert_eq!(page.code, 200);
    assert!(page.body.contains("app.js"));
    assert!(
        page.headers
            .to_lowercase()
            .contains("content-security-policy: default-src 'self'"),
        "{}",
        page.headers
    );
    assert_eq!(
        http.request("GET", "/ui/nothing-here.js", "", None, false)
            .code,
        404
    );
    assert_eq!(
        http.request("POST", "/ui/", "text/plain", Some(b"x"), false)
            .code,
        405
    );
    // Its data is not: without credentials the API answers 401.
    assert_eq!(
        http.request("GET", "/api/v1/pods", "", None, false).code,
        401
    );

    let _ = std::fs::remove_dir_all(SCREENSHOTS);
    std::fs::create_dir_all(SCREENSHOTS).unwrap();
    let out = Command::new("python3")
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/console/drive.py"
        ))
        .args([&http.base, "alice-console-token", "alice", SCREENSHOTS])
        .output()
        .expect("run python3");
    assert!(
        out.status.success(),
        "the console's browser test failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    for shot in [
        "01-sign-in",
        "02-deployments",
        "03-owner-graph",
        "04-history",
        "05-timeline",
        "06-logs",
        "07-exec",
        "08-who-can",
    ] {
        let bytes = std::fs::read(format!("{SCREENSHOTS}/{shot}.png")).unwrap();
        assert!(bytes.starts_with(b"\x89PNG"), "{shot} is a PNG");
    }
    // The console's edit is in the object's history under alice's name.
    let history = plinth.kubectl(&[
        "get",
        "--raw",
        "/apis/history.plinth.dev/v1alpha1/revisions/apis/apps/v1/namespaces/default/deployments/web?objects=false",
    ]);
    let history: serde_json::Value = serde_json::from_str(&history).unwrap();
    assert!(
        history["revisions"].as_array().unwrap().iter().any(|v| {
            v["provenance"]["user"] == "alice"
                && v["provenance"]["fieldManager"] == "plinth-console"
        }),
        "{history:#}"
    );
    assert_eq!(
        plinth.kubectl(&[
            "get",
            "deploy",
            "web",
            "-o",
            "jsonpath={.metadata.labels.tier}"
        ]),
        "frontend"
    );
}
