//! `plinth-bench ha`: a control plane of `servers` Plinth servers (sharing one set of
//! credential files) on a three-member etcd, all started here on loopback: creates/s with the
//! clients spread over the servers, watch latency with the writes through one server and the
//! watchers spread over all, and — with several servers — the controllers' failover: the
//! Lease holder is SIGKILLed and the time until another server holds the Lease, and until its
//! garbage collector has removed the dependent of an owner deleted at the kill, is taken.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, PostParams};
use kube::core::DynamicObject;
use kube::{Client, Config};
use plinth_store_etcd::testing::EtcdCluster;

use crate::common::{Error, percentile};
use crate::load::{creates, install_crd, remove_crd, resource};

/// The files that make a server one of the control plane.
const CREDENTIALS: [&str; 4] = ["ca.crt", "ca.key", "admin.token", "sa.key"];
const NAMESPACE: &str = "plinth-bench-ha";

/// One `plinth serve`, stopped (SIGKILL, by its pid) when dropped.
struct Server {
    child: Option<Child>,
    dir: tempfile::TempDir,
    client: Client,
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

async fn launch(binary: &Path, dir: &Path, etcd: &str) -> Result<(Child, Client), Error> {
    let mut child = Command::new(binary)
        .args([
            "serve",
            "--no-node",
            "--listen",
            "127.0.0.1:0",
            "--data-dir",
        ])
        .arg(dir)
        .args(["--etcd-servers", etcd])
        .env("RUST_LOG", "error")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()?;
    let mut line = String::new();
    if let Some(stdout) = child.stdout.take() {
        BufReader::new(stdout).read_line(&mut line)?;
    }
    let kubeconfig = kube::config::Kubeconfig::read_from(line.trim())?;
    let config =
        Config::from_custom_kubeconfig(kubeconfig, &kube::config::KubeConfigOptions::default())
            .await?;
    Ok((child, Client::try_from(config)?))
}

async fn start(binary: &Path, etcd: &str, first: Option<&Path>) -> Result<Server, Error> {
    let dir = tempfile::tempdir()?;
    if let Some(first) = first {
        for file in CREDENTIALS {
            std::fs::copy(first.join(file), dir.path().join(file))?;
        }
    }
    let (child, client) = launch(binary, dir.path(), etcd).await?;
    Ok(Server {
        child: Some(child),
        dir,
        client,
    })
}

/// Which server holds the controllers' Lease, as `client` sees it.
async fn holder(client: &Client, servers: &[Server]) -> Option<usize> {
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-system");
    let lease = leases.get("kube-controller-manager").await.ok()?;
    let identity = lease.spec?.holder_identity?;
    servers.iter().position(|s| {
        std::fs::canonicalize(s.dir.path())
            .is_ok_and(|dir| identity.ends_with(&format!("_{}", dir.display())))
    })
}

fn ms(d: Duration) -> String {
    format!("{:.0} ms", d.as_secs_f64() * 1e3)
}

/// Runs the measurements; prints a Markdown table.
pub(crate) async fn run(
    binary: PathBuf,
    count: usize,
    seconds: u64,
    failovers: usize,
) -> Result<(), Error> {
    let etcd = EtcdCluster::start(3).await?;
    let endpoints = etcd.endpoints_flag();
    let mut servers = vec![start(&binary, &endpoints, None).await?];
    let first = servers[0].dir.path().to_owned();
    for _ in 1..count {
        servers.push(start(&binary, &endpoints, Some(&first)).await?);
    }
    install_crd(&servers[0].client).await?;
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> =
        Api::all(servers[0].client.clone());
    let ns: k8s_openapi::api::core::v1::Namespace =
        serde_json::from_value(serde_json::json!({"metadata": {"name": NAMESPACE}}))?;
    let _ = namespaces.create(&PostParams::default(), &ns).await;
    let apis: Vec<Api<DynamicObject>> = servers
        .iter()
        .map(|s| Api::namespaced_with(s.client.clone(), NAMESPACE, &resource()))
        .collect();
    // Every server serves the CRD before it is loaded.
    for api in &apis {
        let deadline = Instant::now() + Duration::from_secs(30);
        while api.list(&Default::default()).await.is_err() {
            if Instant::now() > deadline {
                return Err("a server never served the benchmark CRD".into());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    let mut rows = Vec::new();
    for clients in [16, 64] {
        let rate = creates(
            &apis,
            clients,
            Duration::from_secs(seconds),
            &format!("ha{clients}"),
        )
        .await?;
        eprintln!("creates, {clients} clients over {count} server(s): {rate:.0}/s");
        rows.push((
            format!("creates/s, 1 KiB custom resource, {clients} clients over {count} server(s)"),
            format!("{rate:.0}"),
        ));
    }
    let (p50, p99) = crate::load::watch_latency_across(&apis[0], &apis, 100, 100).await?;
    rows.push((
        format!("watch latency p50 / p99, 100 watchers over {count} server(s), writes through one"),
        format!(
            "{:.2} ms / {:.2} ms",
            p50.as_secs_f64() * 1e3,
            p99.as_secs_f64() * 1e3
        ),
    ));
    remove_crd(&servers[0].client).await;

    let (mut leases, mut collected) = (Vec::new(), Vec::new());
    for round in 0..failovers.min(if count > 1 { usize::MAX } else { 0 }) {
        let deadline = Instant::now() + Duration::from_secs(60);
        let victim = loop {
            if let Some(victim) = holder(&servers[0].client, &servers).await {
                break victim;
            }
            if Instant::now() > deadline {
                return Err("no server holds the controllers' Lease".into());
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        let other = servers[(victim + 1) % count].client.clone();
        let maps: Api<ConfigMap> = Api::namespaced(other.clone(), NAMESPACE);
        let owner: ConfigMap = serde_json::from_value(
            serde_json::json!({"metadata": {"name": format!("owner-{round}")}}),
        )?;
        let owner = maps.create(&PostParams::default(), &owner).await?;
        let dependent: ConfigMap = serde_json::from_value(serde_json::json!({"metadata": {
            "name": format!("dependent-{round}"),
            "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap",
                "name": format!("owner-{round}"), "uid": owner.metadata.uid}]}}))?;
        maps.create(&PostParams::default(), &dependent).await?;
        if let Some(mut child) = servers[victim].child.take() {
            child.kill()?;
            child.wait()?;
        }
        let killed = Instant::now();
        maps.delete(&format!("owner-{round}"), &DeleteParams::background())
            .await?;
        let (mut lease_at, mut gc_at) = (None, None);
        while lease_at.is_none() || gc_at.is_none() {
            if killed.elapsed() > Duration::from_secs(120) {
                return Err("the controllers did not fail over within 120 s".into());
            }
            if lease_at.is_none() && holder(&other, &servers).await.is_some_and(|h| h != victim) {
                lease_at = Some(killed.elapsed());
            }
            if gc_at.is_none() && maps.get_opt(&format!("dependent-{round}")).await?.is_none() {
                gc_at = Some(killed.elapsed());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let (lease_at, gc_at) = (lease_at.unwrap_or_default(), gc_at.unwrap_or_default());
        eprintln!("failover {round}: lease {lease_at:?}, dependent collected {gc_at:?}");
        leases.push(lease_at);
        collected.push(gc_at);
        let (child, client) = launch(&binary, servers[victim].dir.path(), &endpoints).await?;
        servers[victim].child = Some(child);
        servers[victim].client = client;
    }
    if !leases.is_empty() {
        leases.sort();
        collected.sort();
        rows.push((
            format!(
                "controllers' failover after SIGKILL, {} rounds: Lease taken over p50 / max",
                leases.len()
            ),
            format!(
                "{} / {}",
                ms(percentile(&leases, 0.5)),
                ms(*leases.last().unwrap_or(&Duration::ZERO))
            ),
        ));
        rows.push((
            "… until the new leader's garbage collector removed a dependent, p50 / max".to_owned(),
            format!(
                "{} / {}",
                ms(percentile(&collected, 0.5)),
                ms(*collected.last().unwrap_or(&Duration::ZERO))
            ),
        ));
    }
    println!("| measurement | result |");
    println!("|---|---|");
    for (what, value) in rows {
        println!("| {what} | {value} |");
    }
    drop(servers);
    drop(etcd);
    Ok(())
}
