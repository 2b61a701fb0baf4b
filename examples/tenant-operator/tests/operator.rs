//! The tenant operator end to end on an in-process Plinth: it creates and repairs a tenant's
//! objects, reports status, archives deleted tenants; and, as processes, exactly one of two
//! `--leader-elect` instances works, a standby takes over after a SIGKILL within the lease
//! duration and at once after a SIGTERM; its metrics are served.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, ServiceAccount};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use plinth_testenv::{TestEnv, eventually};
use serde_json::json;
use tenant_operator::{Tenant, TenantSpec};

fn tenant(name: &str, tier: &str) -> Tenant {
    Tenant::new(
        name,
        TenantSpec {
            owners: vec!["ann".into()],
            config: BTreeMap::from([("tier".into(), tier.into())]),
        },
    )
}

async fn config(client: &kube::Client, tenant: &str) -> Option<BTreeMap<String, String>> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &format!("tenant-{tenant}"));
    api.get_opt("tenant-config")
        .await
        .ok()
        .flatten()
        .map(|c| c.data.unwrap_or_default())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operator_creates_repairs_reports_and_archives() {
    // ANCHOR: test
    let env = TestEnv::start().await.unwrap();
    env.install_crd(&tenant_operator::crd()).await.unwrap();
    let client = env.client();
    let archive = tempfile_dir();
    let context = tenant_operator::Context {
        client: client.clone(),
        archive_dir: archive.clone(),
        recorder: plinth_runtime::helpers::EventRecorder::new(
            client.clone(),
            "platform.plinth.dev/tenant-operator",
            "test",
        ),
    };
    let mut manager = plinth_runtime::Manager::new();
    tenant_operator::register(&mut manager, context).unwrap();
    let (stop, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(manager.run(async {
        let _ = stop_rx.await;
    }));
    let tenants: Api<Tenant> = Api::all(client.clone());
    tenants
        .create(&PostParams::default(), &tenant("acme", "gold"))
        .await
        .unwrap();
    let gold = Some(BTreeMap::from([("tier".to_owned(), "gold".to_owned())]));
    eventually("the tenant's objects", || async {
        config(&client, "acme").await == gold
    })
    .await;
    // ANCHOR_END: test
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), "tenant-acme");
    let admin = accounts.get("tenant-admin").await.unwrap();
    assert_eq!(admin.metadata.owner_references.unwrap()[0].kind, "Tenant");
    eventually("the status", || async {
        let status = tenants
            .get("acme")
            .await
            .unwrap()
            .status
            .unwrap_or_default();
        status.phase.as_deref() == Some("Active")
            && status.namespace.as_deref() == Some("tenant-acme")
            && status.observed_generation == Some(1)
            && status
                .conditions
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True")
    })
    .await;

    // Deleted: it comes back. Edited: it is restored.
    let configs: Api<ConfigMap> = Api::namespaced(client.clone(), "tenant-acme");
    configs
        .delete("tenant-config", &DeleteParams::default())
        .await
        .unwrap();
    eventually("the ConfigMap to come back", || async {
        config(&client, "acme").await == gold
    })
    .await;
    configs
        .patch(
            "tenant-config",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"tier": "free"}})),
        )
        .await
        .unwrap();
    eventually("the ConfigMap to be restored", || async {
        config(&client, "acme").await == gold
    })
    .await;
    // A spec change flows to the ConfigMap and to observedGeneration.
    tenants
        .patch(
            "acme",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"config": {"tier": "silver"}}})),
        )
        .await
        .unwrap();
    eventually("the new config", || async {
        config(&client, "acme").await
            == Some(BTreeMap::from([("tier".to_owned(), "silver".to_owned())]))
            && tenants
                .get("acme")
                .await
                .unwrap()
                .status
                .unwrap_or_default()
                .observed_generation
                == Some(2)
    })
    .await;

    // Deleted: archived by the finalizer, its namespace collected.
    tenants
        .delete("acme", &DeleteParams::default())
        .await
        .unwrap();
    eventually("the tenant to go", || async {
        tenants.get_opt("acme").await.unwrap().is_none()
    })
    .await;
    let record: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(archive.join("acme.json")).unwrap()).unwrap();
    assert_eq!(record["spec"]["config"]["tier"], "silver");
    let namespaces: Api<Namespace> = Api::all(client.clone());
    eventually("the namespace to be collected", || async {
        match namespaces.get_opt("tenant-acme").await.unwrap() {
            None => true,
            Some(ns) => ns.metadata.deletion_timestamp.is_some(),
        }
    })
    .await;
    stop.send(()).unwrap();
    running.await.unwrap().unwrap();
    env.stop().await;
}

fn tempfile_dir() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "tenant-archive-{}-{}",
        std::process::id(),
        rand_suffix()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn rand_suffix() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

struct Operator {
    child: Child,
    metrics: u16,
}

impl Drop for Operator {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_operator(env: &TestEnv, archive: &std::path::Path) -> Operator {
    let (metrics, health) = (plinth_testenv::free_port(), plinth_testenv::free_port());
    let child = Command::new(env!("CARGO_BIN_EXE_tenant-operator"))
        .args(["run", "--leader-elect"])
        .arg(format!("--metrics-bind-address=127.0.0.1:{metrics}"))
        .arg(format!("--health-probe-bind-address=127.0.0.1:{health}"))
        .arg("--archive-dir")
        .arg(archive)
        .env("KUBECONFIG", env.kubeconfig())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    Operator { child, metrics }
}

async fn leading(operator: &Operator) -> bool {
    plinth_testenv::scrape(operator.metrics, "/metrics")
        .await
        .contains("leader_election_master_status{name=\"tenant-operator\"} 1")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_processes_one_leader_sigkill_and_sigterm_handover() {
    let env = TestEnv::start().await.unwrap();
    env.install_crd(&tenant_operator::crd()).await.unwrap();
    let archive = tempfile_dir();
    let first = start_operator(&env, &archive);
    eventually("the first operator to lead", || leading(&first)).await;
    let second = start_operator(&env, &archive);
    eventually("the second operator to serve metrics", || async {
        plinth_testenv::scrape(second.metrics, "/metrics")
            .await
            .contains("leader_election_master_status")
    })
    .await;
    assert!(!leading(&second).await, "exactly one leader");

    // Only the leader reconciles.
    let client = env.client();
    let tenants: Api<Tenant> = Api::all(client.clone());
    tenants
        .create(&PostParams::default(), &tenant("one", "gold"))
        .await
        .unwrap();
    eventually("the leader to reconcile", || async {
        config(&client, "one").await.is_some()
    })
    .await;
    let reconciled = |text: &str| {
        text.contains(
            "controller_runtime_reconcile_total{controller=\"tenant\",result=\"success\"}",
        )
    };
    assert!(reconciled(
        &plinth_testenv::scrape(first.metrics, "/metrics").await
    ));
    assert!(
        !reconciled(&plinth_testenv::scrape(second.metrics, "/metrics").await),
        "the standby reconciles nothing"
    );

    // SIGKILL the leader: the standby takes over once the lease expires (15 s).
    let mut first = first;
    first.child.kill().unwrap();
    first.child.wait().unwrap();
    eventually("the standby to lead", || leading(&second)).await;
    tenants
        .create(&PostParams::default(), &tenant("two", "gold"))
        .await
        .unwrap();
    eventually("the new leader to reconcile", || async {
        config(&client, "two").await.is_some()
    })
    .await;

    // SIGTERM the leader: it releases the lease, so a new standby leads at once.
    let third = start_operator(&env, &archive);
    eventually("the third operator to start", || async {
        plinth_testenv::scrape(third.metrics, "/metrics")
            .await
            .contains("leader_election_master_status")
    })
    .await;
    let mut second = second;
    Command::new("kill")
        .args(["-TERM", &second.child.id().to_string()])
        .status()
        .unwrap();
    let status = second.child.wait().unwrap();
    assert!(status.success(), "SIGTERM exits cleanly: {status}");
    let leases: Api<Lease> = Api::namespaced(client.clone(), "default");
    let lease = leases.get("tenant-operator").await.unwrap().spec.unwrap();
    assert!(
        lease.holder_identity.is_none()
            || lease.holder_identity.as_deref()
                != Some(&format!("tenant-operator-{}", second.child.id())),
        "released: {lease:?}"
    );
    eventually("the third operator to lead", || leading(&third)).await;
    drop(third);
    env.stop().await;
}

/// The operator as a process against `plinth serve` as a process: the CRD it prints installs,
/// a tenant gets its objects and status, and its deletion is archived.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operator_process_against_plinth_serve() {
    use std::io::BufRead;

    let dir = tempfile_dir();
    let mut server = Command::new(plinth_testenv::plinth_binary(
        env!("CARGO_BIN_EXE_tenant-operator"),
        env!("CARGO"),
    ))
    .args([
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--pod-network=shared",
        "--data-dir",
    ])
    .arg(dir.join("plinth"))
    .stdout(Stdio::piped())
    .stderr(Stdio::inherit())
    .spawn()
    .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(server.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let kubeconfig = std::path::PathBuf::from(line.trim());
    let settings = kube::Config::from_custom_kubeconfig(
        kube::config::Kubeconfig::read_from(&kubeconfig).unwrap(),
        &kube::config::KubeConfigOptions::default(),
    )
    .await
    .unwrap();
    let client = kube::Client::try_from(settings).unwrap();

    // `tenant-operator crd` is what users apply.
    let crd = Command::new(env!("CARGO_BIN_EXE_tenant-operator"))
        .arg("crd")
        .output()
        .unwrap();
    assert!(crd.status.success());
    let crd: k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition =
        serde_norway::from_slice(&crd.stdout).unwrap();
    let crds: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
        Api::all(client.clone());
    crds.create(&PostParams::default(), &crd).await.unwrap();

    // The operator runs as its own ServiceAccount, with exactly the RBAC `tenant-operator
    // rbac` prints, through a token kubectl creates for it.
    let kubectl = |args: &[&str], input: Option<&[u8]>| {
        use std::io::Write;
        let mut child = Command::new("kubectl")
            .args(args)
            .env("KUBECONFIG", &kubeconfig)
            .env("KUBECACHEDIR", dir.join("kube-cache"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(input.unwrap_or_default()).unwrap();
        drop(stdin);
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "kubectl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    kubectl(&["create", "namespace", "tenant-system"], None);
    let rbac = Command::new(env!("CARGO_BIN_EXE_tenant-operator"))
        .args(["rbac", "--namespace", "tenant-system"])
        .output()
        .unwrap();
    assert!(rbac.status.success());
    kubectl(&["apply", "-f", "-"], Some(&rbac.stdout));
    let token = kubectl(
        &[
            "-n",
            "tenant-system",
            "create",
            "token",
            "tenant-operator",
            "--duration=2h",
        ],
        None,
    );
    let admin = std::fs::read_to_string(&kubeconfig).unwrap();
    let operator_config: String = admin
        .lines()
        .map(|l| match l.trim_start().strip_prefix("token: ") {
            Some(_) => format!("    token: {}", token.trim()),
            None => l.to_owned(),
        })
        .collect::<Vec<_>>()
        .join("\n");
    let operator_kubeconfig = dir.join("operator-kubeconfig");
    std::fs::write(&operator_kubeconfig, operator_config).unwrap();
    let account = "system:serviceaccount:tenant-system:tenant-operator";
    let can_i = |args: &[&str]| {
        let mut full = vec!["auth", "can-i", "--as", account];
        full.extend(args);
        let out = Command::new("kubectl")
            .args(&full)
            .env("KUBECONFIG", &kubeconfig)
            .env("KUBECACHEDIR", dir.join("kube-cache"))
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).trim() == "yes"
    };
    eventually("the operator's RBAC is in force", || async {
        can_i(&[
            "patch",
            "tenants.platform.plinth.dev",
            "--subresource=status",
        ])
    })
    .await;
    assert!(!can_i(&["list", "secrets", "-A"]), "no more than it needs");
    assert!(!can_i(&["create", "clusterrolebindings"]));
    assert!(!can_i(&["create", "leases", "-n", "default"]));

    let archive = dir.join("archive");
    let (metrics, health) = (plinth_testenv::free_port(), plinth_testenv::free_port());
    let mut operator = Command::new(env!("CARGO_BIN_EXE_tenant-operator"))
        .arg("run")
        .arg("--leader-elect")
        .arg("--leader-election-namespace=tenant-system")
        .arg(format!("--metrics-bind-address=127.0.0.1:{metrics}"))
        .arg(format!("--health-probe-bind-address=127.0.0.1:{health}"))
        .arg("--archive-dir")
        .arg(&archive)
        .env("KUBECONFIG", &operator_kubeconfig)
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let tenants: Api<Tenant> = Api::all(client.clone());
    let mut created = false;
    for _ in 0..100 {
        if tenants
            .create(&PostParams::default(), &tenant("proc", "gold"))
            .await
            .is_ok()
        {
            created = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(created, "the Tenant endpoint is served");
    eventually("the tenant's objects and status", || async {
        config(&client, "proc").await.is_some()
            && tenants
                .get("proc")
                .await
                .unwrap()
                .status
                .unwrap_or_default()
                .phase
                .as_deref()
                == Some("Active")
    })
    .await;
    // It leads through its Lease in its own namespace.
    let leases: Api<Lease> = Api::namespaced(client.clone(), "tenant-system");
    let lease = leases.get("tenant-operator").await.unwrap();
    assert!(lease.spec.unwrap().holder_identity.is_some());
    tenants
        .delete("proc", &DeleteParams::default())
        .await
        .unwrap();
    eventually("the archive record", || async {
        archive.join("proc.json").exists()
    })
    .await;
    Command::new("kill")
        .args(["-TERM", &operator.id().to_string()])
        .status()
        .unwrap();
    assert!(operator.wait().unwrap().success());
    Command::new("kill")
        .args(["-TERM", &server.id().to_string()])
        .status()
        .unwrap();
    assert!(server.wait().unwrap().success());
}

/// Kills a child process by its PID when dropped (a test that fails midway leaves nothing).
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The operator's admission webhooks as their own process (`tenant-operator webhook`, with
/// a certificate it makes and a CA it writes into its configurations), against `plinth serve`,
/// through kubectl: a Tenant without owners gets its creator, a bad one is refused with the
/// webhook's message, and with the webhook gone (failurePolicy Fail) Tenants cannot be
/// written.
#[test]
fn the_webhooks_default_and_validate_tenants() {
    use std::io::{BufRead, Write};

    let dir = tempfile_dir();
    let mut server = Command::new(plinth_testenv::plinth_binary(
        env!("CARGO_BIN_EXE_tenant-operator"),
        env!("CARGO"),
    ))
    .args([
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--pod-network=shared",
        "--data-dir",
    ])
    .arg(dir.join("plinth"))
    .stdout(Stdio::piped())
    .stderr(Stdio::inherit())
    .spawn()
    .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(server.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let _server = Killed(server);
    let kubeconfig = std::path::PathBuf::from(line.trim());
    let kubectl = |args: &[&str], input: Option<&[u8]>| {
        let mut child = Command::new("kubectl")
            .args(args)
            .env("KUBECONFIG", &kubeconfig)
            .env("KUBECACHEDIR", dir.join("kube-cache"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(input.unwrap_or_default()).unwrap();
        drop(stdin);
        child.wait_with_output().unwrap()
    };
    let ok = |out: std::process::Output| {
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let operator = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_tenant-operator"))
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success());
        out.stdout
    };
    // Both versions, stored in v1beta1, converted by the same webhook server.
    let port = plinth_testenv::free_port();
    let url = format!("https://127.0.0.1:{port}");
    ok(kubectl(
        &["apply", "-f", "-"],
        Some(&operator(&["crd", "--conversion-url", &url])),
    ));
    ok(kubectl(
        &[
            "wait",
            "--for=condition=Established",
            "crd/tenants.platform.plinth.dev",
        ],
        None,
    ));
    ok(kubectl(
        &["apply", "-f", "-"],
        Some(&operator(&["webhook-config", "--url", &url])),
    ));
    let mut webhook = Command::new(env!("CARGO_BIN_EXE_tenant-operator"))
        .args([
            "webhook",
            "--bind-address",
            &format!("127.0.0.1:{port}"),
            "--cert-dir",
        ])
        .arg(dir.join("certs"))
        .env("KUBECONFIG", &kubeconfig)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut ready = String::new();
    std::io::BufReader::new(webhook.stdout.take().unwrap())
        .read_line(&mut ready)
        .unwrap();
    assert_eq!(ready.trim(), url, "the webhook serves, its CA written");
    let webhook = Killed(webhook);
    for kind in [
        "mutatingwebhookconfiguration",
        "validatingwebhookconfiguration",
    ] {
        let bundle = ok(kubectl(
            &[
                "get",
                kind,
                "tenant-operator",
                "-o",
                "jsonpath={.webhooks[0].clientConfig.caBundle}",
            ],
            None,
        ));
        let pem = base64_decode(&bundle);
        assert_eq!(
            pem,
            std::fs::read(dir.join("certs/ca.crt")).unwrap(),
            "{kind}"
        );
    }
    let conversion_bundle = ok(kubectl(
        &[
            "get",
            "crd",
            "tenants.platform.plinth.dev",
            "-o",
            "jsonpath={.spec.conversion.webhook.clientConfig.caBundle}",
        ],
        None,
    ));
    assert_eq!(
        base64_decode(&conversion_bundle),
        std::fs::read(dir.join("certs/ca.crt")).unwrap(),
        "the CRD's conversion webhook trusts it too"
    );
    let tenant = |name: &str, owners: &str| {
        format!(
            "apiVersion: platform.plinth.dev/v1alpha1\nkind: Tenant\nmetadata: {{name: {name}}}\nspec: {{owners: {owners}}}\n"
        )
    };
    // The configurations with the CA are in force once a dry run is defaulted.
    plinth_testenv::eventually_blocking("the webhooks are in force", || {
        let out = kubectl(
            &[
                "create",
                "--dry-run=server",
                "-o",
                "jsonpath={.spec.owners}",
                "-f",
                "-",
            ],
            Some(tenant("probe", "[]").as_bytes()),
        );
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains("plinth-admin")
    });
    ok(kubectl(
        &["create", "-f", "-"],
        Some(tenant("acme", "[]").as_bytes()),
    ));
    let owners = ok(kubectl(
        &[
            "get",
            "tenants.v1alpha1.platform.plinth.dev",
            "acme",
            "-o",
            "jsonpath={.spec.owners}",
        ],
        None,
    ));
    assert_eq!(owners, r#"["plinth-admin"]"#, "defaulted to the creator");
    // As another user (impersonated), that user.
    ok(kubectl(
        &[
            "--as=carol",
            "--as-group=system:masters",
            "create",
            "-f",
            "-",
        ],
        Some(tenant("carols", "[]").as_bytes()),
    ));
    let owners = ok(kubectl(
        &[
            "get",
            "tenants.v1alpha1.platform.plinth.dev",
            "carols",
            "-o",
            "jsonpath={.spec.owners}",
        ],
        None,
    ));
    assert_eq!(owners, r#"["carol"]"#);
    // Given owners are kept; bad ones refused with the webhook's message.
    ok(kubectl(
        &["create", "-f", "-"],
        Some(tenant("given", "[ann]").as_bytes()),
    ));
    let refused = kubectl(
        &["create", "-f", "-"],
        Some(tenant("bad", "[\"bad owner\"]").as_bytes()),
    );
    assert!(!refused.status.success());
    let message = String::from_utf8_lossy(&refused.stderr);
    // 422 Invalid, as the webhook answered: kubectl's wording for it.
    assert!(message.contains("The request is invalid"), "{message}");
    assert!(
        message.contains("admission webhook \"validate.tenants.platform.plinth.dev\" denied the request: Tenant is invalid: spec.owners[0]: Invalid value: \"bad owner\""),
        "{message}"
    );
    let long = "x".repeat(60);
    let refused = kubectl(
        &["create", "-f", "-"],
        Some(tenant(&long, "[ann]").as_bytes()),
    );
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("must be a DNS-1123 label"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
    let listed = ok(kubectl(&["get", "tenants", "-o", "name"], None));
    assert_eq!(
        listed.lines().collect::<Vec<_>>(),
        [
            "tenant.platform.plinth.dev/acme",
            "tenant.platform.plinth.dev/carols",
            "tenant.platform.plinth.dev/given",
        ],
        "the refused ones were not stored"
    );
    // Conversion: v1alpha1 objects read in v1beta1 (owners with roles), v1beta1 ones in
    // v1alpha1 (roles kept in an annotation for the way back), lists in both; stored in
    // v1beta1; a v1beta1 create defaulted and validated through the v1alpha1 webhooks.
    let beta = ok(kubectl(
        &[
            "get",
            "tenants.v1beta1.platform.plinth.dev",
            "acme",
            "-o",
            "jsonpath={.spec.owners}",
        ],
        None,
    ));
    assert_eq!(beta, r#"[{"name":"plinth-admin","role":"owner"}]"#);
    ok(kubectl(
        &["create", "-f", "-"],
        Some(b"apiVersion: platform.plinth.dev/v1beta1\nkind: Tenant\nmetadata: {name: beta}\nspec: {owners: [{name: bob, role: admin}]}\n"),
    ));
    let alpha: serde_json::Value = serde_json::from_str(&ok(kubectl(
        &[
            "get",
            "tenants.v1alpha1.platform.plinth.dev",
            "beta",
            "-o",
            "json",
        ],
        None,
    )))
    .unwrap();
    assert_eq!(alpha["spec"]["owners"], json!(["bob"]));
    assert_eq!(
        alpha["metadata"]["annotations"]["platform.plinth.dev/owner-roles"],
        r#"{"bob":"admin"}"#
    );
    let beta = ok(kubectl(
        &[
            "get",
            "tenants.v1beta1.platform.plinth.dev",
            "beta",
            "-o",
            "jsonpath={.spec.owners}",
        ],
        None,
    ));
    assert_eq!(
        beta, r#"[{"name":"bob","role":"admin"}]"#,
        "the role survives"
    );
    ok(kubectl(
        &["create", "-f", "-"],
        Some(b"apiVersion: platform.plinth.dev/v1beta1\nkind: Tenant\nmetadata: {name: beta-defaulted}\nspec: {owners: []}\n"),
    ));
    let defaulted = ok(kubectl(
        &[
            "get",
            "tenants.v1beta1.platform.plinth.dev",
            "beta-defaulted",
            "-o",
            "jsonpath={.spec.owners}",
        ],
        None,
    ));
    assert_eq!(defaulted, r#"[{"name":"plinth-admin","role":"owner"}]"#);
    let refused = kubectl(
        &["create", "-f", "-"],
        Some(b"apiVersion: platform.plinth.dev/v1beta1\nkind: Tenant\nmetadata: {name: beta-bad}\nspec: {owners: [{name: \"bad owner\", role: owner}]}\n"),
    );
    assert!(
        !refused.status.success(),
        "validated through the v1alpha1 webhook"
    );
    let alpha_list: serde_json::Value = serde_json::from_str(&ok(kubectl(
        &["get", "tenants.v1alpha1.platform.plinth.dev", "-o", "json"],
        None,
    )))
    .unwrap();
    assert!(
        alpha_list["items"]
            .as_array()
            .unwrap()
            .iter()
            .all(|t| t["apiVersion"] == "platform.plinth.dev/v1alpha1"
                && t["spec"]["owners"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .all(serde_json::Value::is_string)),
        "{alpha_list}"
    );
    let table = ok(kubectl(
        &["get", "tenants.v1alpha1.platform.plinth.dev"],
        None,
    ));
    assert!(table.contains("beta") && table.contains("acme"), "{table}");
    let stored = ok(kubectl(
        &[
            "get",
            "crd",
            "tenants.platform.plinth.dev",
            "-o",
            "jsonpath={.status.storedVersions}",
        ],
        None,
    ));
    assert_eq!(stored, r#"["v1beta1"]"#);
    // Updates are validated too.
    let refused = kubectl(
        &[
            "patch",
            "tenant",
            "given",
            "--type=merge",
            "-p",
            r#"{"spec":{"owners":[]}}"#,
        ],
        None,
    );
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("a tenant needs at least one owner"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
    // The webhook gone: failurePolicy Fail refuses Tenant writes.
    drop(webhook);
    let refused = kubectl(
        &["create", "-f", "-"],
        Some(tenant("later", "[ann]").as_bytes()),
    );
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr)
            .contains("failed calling webhook \"default.tenants.platform.plinth.dev\""),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
}

fn base64_decode(text: &str) -> Vec<u8> {
    base64::Engine::decode(&base64::engine::general_purpose::STANDARD, text.trim()).unwrap()
}
