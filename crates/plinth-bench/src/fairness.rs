//! `plinth-bench fairness`: one user floods the server with lists from many concurrent
//! clients (far past its in-flight limit) while another user reads one object at a time; the
//! other user's latency (p50/p99/max) and refusals show whether the flood starves it. Both
//! users are bearer tokens the server knows (a `--token-auth-file`); the administrator's
//! kubeconfig binds them to `view` and fills a namespace first.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Client;
use kube::api::{Api, ListParams, PostParams};

use crate::common::{Error, percentile};

const NAMESPACE: &str = "plinth-bench-fairness";

/// A client of the admin's server as the holder of `token`.
fn as_user(admin: &kube::Config, token: &str) -> Result<Client, Error> {
    let mut config = admin.clone();
    config.auth_info = kube::config::AuthInfo {
        token: Some(token.to_owned().into()),
        ..kube::config::AuthInfo::default()
    };
    Ok(Client::try_from(config)?)
}

async fn bind_view(admin: &Client, user: &str) -> Result<(), Error> {
    use k8s_openapi::api::rbac::v1::{ClusterRoleBinding, RoleRef, Subject};
    let api: Api<ClusterRoleBinding> = Api::all(admin.clone());
    let binding = ClusterRoleBinding {
        metadata: kube::api::ObjectMeta {
            name: Some(format!("plinth-bench-{user}")),
            ..Default::default()
        },
        role_ref: RoleRef {
            api_group: "rbac.authorization.k8s.io".into(),
            kind: "ClusterRole".into(),
            name: "view".into(),
        },
        subjects: Some(vec![Subject {
            api_group: Some("rbac.authorization.k8s.io".into()),
            kind: "User".into(),
            name: user.to_owned(),
            namespace: None,
        }]),
    };
    match api.create(&PostParams::default(), &binding).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Runs it and prints one table.
///
/// # Errors
/// Any API failure other than the 429s being counted.
pub(crate) async fn run(
    admin_config: kube::Config,
    (flood_user, flood_token): (&str, &str),
    (other_user, other_token): (&str, &str),
    clients: usize,
    seconds: u64,
) -> Result<(), Error> {
    let admin = Client::try_from(admin_config.clone())?;
    crate::common::ensure_namespace(&admin, NAMESPACE).await?;
    bind_view(&admin, flood_user).await?;
    bind_view(&admin, other_user).await?;
    let configs: Api<ConfigMap> = Api::namespaced(admin.clone(), NAMESPACE);
    for i in 0..100 {
        let mut cm = ConfigMap::default();
        cm.metadata.name = Some(format!("fair-{i:03}"));
        cm.data = Some([("payload".to_owned(), "f".repeat(1024))].into());
        match configs.create(&PostParams::default(), &cm).await {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 409 => {}
            Err(e) => return Err(e.into()),
        }
    }
    let flood: Api<ConfigMap> = Api::namespaced(as_user(&admin_config, flood_token)?, NAMESPACE);
    let other: Api<ConfigMap> = Api::namespaced(as_user(&admin_config, other_token)?, NAMESPACE);
    // The bindings reach the authorizer through its watch.
    let started = Instant::now();
    while other.get("fair-000").await.is_err() || flood.get("fair-000").await.is_err() {
        if started.elapsed() > Duration::from_secs(30) {
            return Err(
                "the benchmark users are not authorized (is --token-auth-file set?)".into(),
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let sample = |api: Api<ConfigMap>, until: Instant| async move {
        let (mut times, mut refused) = (Vec::new(), 0u64);
        while Instant::now() < until {
            let begun = Instant::now();
            match api.get("fair-000").await {
                Ok(_) => times.push(begun.elapsed()),
                Err(kube::Error::Api(status)) if status.code == 429 => refused += 1,
                Err(e) => return Err::<_, Error>(e.into()),
            }
        }
        times.sort();
        Ok((times, refused))
    };
    let (quiet, _) = sample(other.clone(), Instant::now() + Duration::from_secs(2)).await?;

    let stop = Arc::new(AtomicBool::new(false));
    let (served, refused) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let mut floods = Vec::new();
    for _ in 0..clients {
        let (flood, stop, served, refused) =
            (flood.clone(), stop.clone(), served.clone(), refused.clone());
        floods.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                match flood.list(&ListParams::default()).await {
                    Ok(_) => {
                        served.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(kube::Error::Api(status)) if status.code == 429 => {
                        refused.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(e) => return Err::<(), Error>(e.into()),
                }
            }
            Ok(())
        }));
    }
    // Let the flood build up, then measure the other user under it.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (busy, other_refused) =
        sample(other, Instant::now() + Duration::from_secs(seconds)).await?;
    stop.store(true, Ordering::Relaxed);
    for flood in floods {
        flood.await??;
    }
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let row = |times: &[Duration]| {
        format!(
            "{:.2} / {:.2} / {:.2} ms ({} reads)",
            ms(percentile(times, 0.5)),
            ms(percentile(times, 0.99)),
            ms(times.last().copied().unwrap_or_default()),
            times.len()
        )
    };
    println!("| measurement | result |");
    println!("|---|---|");
    println!(
        "| {other_user}'s GET, no flood: p50 / p99 / max | {} |",
        row(&quiet)
    );
    println!(
        "| {other_user}'s GET while {flood_user} floods with {clients} clients: p50 / p99 / max | {} |",
        row(&busy)
    );
    println!("| {other_user}'s requests refused (429) during the flood | {other_refused} |");
    println!(
        "| {flood_user}'s lists during the flood: served / refused (429) | {} / {} |",
        served.load(Ordering::Relaxed),
        refused.load(Ordering::Relaxed)
    );
    Ok(())
}
