//! `/healthz`, `/livez` and `/readyz` answer as kube-apiserver's: named checks, `?verbose`,
//! `?exclude`, one check alone; with etcd down, `/readyz` fails on its `etcd` check (a load
//! balancer drops the server) and recovers when etcd is back.

#![allow(clippy::unwrap_used)]

mod common;

use common::Plinth;

/// `kubectl get --raw path`: its status and text (kubectl prints a failed answer's body in
/// its error).
fn raw(plinth: &Plinth, path: &str) -> (bool, String) {
    let out = plinth.kubectl_output(&["get", "--raw", path]);
    let text = if out.status.success() {
        String::from_utf8_lossy(&out.stdout).into_owned()
    } else {
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    (out.status.success(), text)
}

#[test]
fn health_endpoints_name_their_checks_and_readyz_follows_etcd() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let mut plinth = runtime.block_on(Plinth::start_etcd());
    for endpoint in ["/healthz", "/livez", "/readyz"] {
        assert_eq!(
            raw(&plinth, endpoint),
            (true, "ok".to_owned()),
            "{endpoint}"
        );
    }
    assert_eq!(
        raw(&plinth, "/readyz?verbose").1,
        "[+]ping ok\n[+]log ok\n[+]etcd ok\n[+]shutdown ok\nreadyz check passed\n"
    );
    assert_eq!(
        raw(&plinth, "/livez?verbose&exclude=etcd&exclude=nope").1,
        "[+]ping ok\n[+]log ok\n[+]etcd excluded: ok\nwarn: some health checks cannot be excluded: no matches for \"nope\"\nlivez check passed\n"
    );
    assert_eq!(raw(&plinth, "/readyz/etcd"), (true, "ok".to_owned()));
    let (ok, text) = raw(&plinth, "/readyz/nope");
    assert!(!ok && text.contains("NotFound"), "{text}");

    // etcd goes: readiness fails on etcd (ping and log still pass), and comes back with it.
    plinth.etcd_mut().unwrap().kill();
    plinth.eventually("readyz fails on etcd", || {
        let (ok, text) = raw(&plinth, "/readyz");
        !ok && text.contains("[-]etcd failed: reason withheld")
            && text.contains("[+]ping ok")
            && text.contains("readyz check failed")
    });
    let (ok, text) = raw(&plinth, "/readyz/etcd");
    assert!(!ok && text.contains("internal server error"), "{text}");
    runtime
        .block_on(plinth.etcd_mut().unwrap().restart())
        .unwrap();
    plinth.eventually("readyz passes again", || {
        raw(&plinth, "/readyz") == (true, "ok".to_owned())
    });
}

#[test]
fn readyz_follows_the_quorum_of_a_three_member_etcd() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let mut etcd = runtime
        .block_on(plinth_store_etcd::testing::EtcdCluster::start(3))
        .unwrap();
    let plinth = Plinth::start(common::Backend::SharedEtcd(etcd.endpoints_flag()));
    assert!(raw(&plinth, "/readyz").0);
    // One member of three down: quorum holds, the server stays ready and serves.
    etcd.members[0].kill();
    for i in 0..5 {
        let (ready, text) = raw(&plinth, "/readyz?verbose");
        assert!(ready, "check {i} with one member down: {text}");
        plinth.kubectl(&["create", "configmap", &format!("one-down-{i}")]);
    }
    // Two down: no quorum, no reads — `etcd` fails, and the server is not ready.
    etcd.members[1].kill();
    plinth.eventually("readyz to fail without quorum", || {
        let (ready, text) = raw(&plinth, "/readyz?verbose");
        !ready && text.contains("[-]etcd failed")
    });
    // Both back: ready again, and what was written with one member down is there.
    etcd.members[0].respawn().unwrap();
    etcd.members[1].respawn().unwrap();
    runtime.block_on(etcd.members[0].wait_ready()).unwrap();
    runtime.block_on(etcd.members[1].wait_ready()).unwrap();
    plinth.eventually("readyz with quorum back", || raw(&plinth, "/readyz").0);
    for i in 0..5 {
        plinth.kubectl(&["get", "configmap", &format!("one-down-{i}")]);
    }
}
