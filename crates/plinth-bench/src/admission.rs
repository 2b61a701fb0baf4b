//! `plinth-bench admission`: what admission webhooks cost a write. A validating webhook that
//! allows everything is served here (plinth-runtime's server, a self-signed certificate); the
//! server is given 0, 1 and 5 configurations sending ConfigMap creates to it, and the creates'
//! latency (one client: p50/p99) and throughput (16 clients) are measured each time.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Client;
use kube::api::{Api, DeleteParams, PostParams};
use plinth_runtime::webhook::{AdmissionRequest, Validator, Verdict, WebhookServer, self_signed};
use serde_json::json;

use crate::common::{Error, percentile};

const LABEL: &str = "plinth-bench-admission";

/// Allows everything; counts calls.
struct Allow(Arc<AtomicU64>);

impl Validator<ConfigMap> for Allow {
    async fn validate(
        &self,
        _: &AdmissionRequest,
        _: Option<&ConfigMap>,
        _: Option<&ConfigMap>,
    ) -> Verdict {
        self.0.fetch_add(1, Ordering::Relaxed);
        Verdict::allow()
    }
}

fn configuration(i: usize, url: &str, ca: &[u8]) -> Result<ValidatingWebhookConfiguration, Error> {
    let bundle = base64_of(ca);
    Ok(serde_json::from_value(json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": format!("plinth-bench-{i}")},
        "webhooks": [{"name": format!("allow-{i}.bench.plinth.dev"),
            "clientConfig": {"url": url, "caBundle": bundle},
            "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["configmaps"]}],
            "objectSelector": {"matchLabels": {LABEL: "yes"}},
            "sideEffects": "None", "admissionReviewVersions": ["v1"]}]
    }))?)
}

/// Sleeps past any timeout.
struct Sleepy;

impl Validator<ConfigMap> for Sleepy {
    async fn validate(
        &self,
        _: &AdmissionRequest,
        _: Option<&ConfigMap>,
        _: Option<&ConfigMap>,
    ) -> Verdict {
        tokio::time::sleep(Duration::from_secs(5)).await;
        Verdict::allow()
    }
}

/// How long a create takes against a webhook that outlasts its 1 s timeout, under each
/// failure policy (kube's promise: refused or passed within the timeout, plus little).
async fn slow_webhook(client: &Client, url: &str, ca: &[u8], namespace: &str) -> Result<(), Error> {
    let configs: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    for policy in ["Fail", "Ignore"] {
        let mut config = configuration(99, url, ca)?;
        if let Some(hook) = config.webhooks.as_mut().and_then(|w| w.first_mut()) {
            hook.timeout_seconds = Some(1);
            hook.failure_policy = Some(policy.into());
            hook.object_selector =
                serde_json::from_value(json!({"matchLabels": {"plinth-bench-slow": "yes"}}))?;
        }
        let _ = configs
            .delete("plinth-bench-99", &DeleteParams::default())
            .await;
        configs.create(&PostParams::default(), &config).await?;
        let slow = |name: String| {
            let mut cm = config_map(&name);
            cm.metadata.labels = Some([("plinth-bench-slow".to_owned(), "yes".to_owned())].into());
            cm
        };
        // In force once a create takes the timeout (Fail: refused; Ignore: passed).
        let mut times = Vec::new();
        let started = Instant::now();
        for i in 0.. {
            if started.elapsed() > Duration::from_secs(60) {
                break;
            }
            let begun = Instant::now();
            let outcome = maps
                .create(
                    &PostParams::default(),
                    &slow(format!(
                        "slow-{}-{i}-{}",
                        policy.to_ascii_lowercase(),
                        crate::common::run_id()
                    )),
                )
                .await;
            let took = begun.elapsed();
            let answered = match (policy, &outcome) {
                ("Fail", Err(_)) | ("Ignore", Ok(_)) => took >= Duration::from_millis(900),
                _ => false,
            };
            if answered {
                times.push(took);
            }
            if times.len() == 5 {
                break;
            }
        }
        times.sort();
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        println!(
            "| slow webhook, timeoutSeconds 1, failurePolicy {policy} | {} | {:.0} ms min, {:.0} ms max ({} creates) |",
            if policy == "Fail" {
                "refused"
            } else {
                "created"
            },
            ms(times.first().copied().unwrap_or_default()),
            ms(times.last().copied().unwrap_or_default()),
            times.len()
        );
    }
    let _ = configs
        .delete("plinth-bench-99", &DeleteParams::default())
        .await;
    Ok(())
}

fn base64_of(bytes: &[u8]) -> String {
    base64::Engine::encode(&base64::engine::general_purpose::STANDARD, bytes)
}

fn config_map(name: &str) -> ConfigMap {
    let mut cm = ConfigMap::default();
    cm.metadata.name = Some(name.to_owned());
    cm.metadata.labels = Some([(LABEL.to_owned(), "yes".to_owned())].into());
    cm.data = Some([("payload".to_owned(), "a".repeat(1024))].into());
    cm
}

/// Runs it and prints one table.
///
/// # Errors
/// Any API or webhook-server failure.
pub(crate) async fn run(client: Client, requests: usize, counts: &[usize]) -> Result<(), Error> {
    let dir = tempfile::tempdir()?;
    let certificate = self_signed(dir.path(), &["127.0.0.1"])?;
    let calls = Arc::new(AtomicU64::new(0));
    let running = WebhookServer::new()
        .validator("/allow", Allow(calls.clone()))
        .validator("/sleep", Sleepy)
        .bind("127.0.0.1:0".parse()?, certificate.source.clone())
        .await?;
    let url = format!("https://{}/allow", running.local_addr);
    // A namespace of this run's own (an earlier run's may still be terminating).
    let namespace = format!("plinth-bench-admission-{}", crate::common::run_id());
    crate::common::ensure_namespace(&client, &namespace).await?;
    let configs: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), &namespace);
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!("| webhooks | create p50 | create p99 | creates/s (16 clients) |");
    println!("|---|---|---|---|");
    let mut installed = 0;
    for &count in counts {
        while installed < count {
            configs
                .create(
                    &PostParams::default(),
                    &configuration(installed, &url, &certificate.ca_pem)?,
                )
                .await?;
            installed += 1;
        }
        // In force once a create reaches all of them.
        let started = Instant::now();
        loop {
            let before = calls.load(Ordering::Relaxed);
            let probe = format!("probe-{count}-{}", crate::common::now_micros());
            maps.create(&PostParams::default(), &config_map(&probe))
                .await?;
            if calls.load(Ordering::Relaxed) - before == count as u64 {
                break;
            }
            if started.elapsed() > Duration::from_secs(30) {
                return Err(format!("{count} webhooks not in force after 30 s").into());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let mut times = Vec::with_capacity(requests);
        for i in 0..requests {
            let name = format!("seq-{count}-{i}-{}", crate::common::run_id());
            let begun = Instant::now();
            maps.create(&PostParams::default(), &config_map(&name))
                .await?;
            times.push(begun.elapsed());
        }
        times.sort();
        let done = Arc::new(AtomicU64::new(0));
        let window = Duration::from_secs(3);
        let until = Instant::now() + window;
        let mut tasks = Vec::new();
        for client_no in 0..16 {
            let (maps, done) = (maps.clone(), done.clone());
            tasks.push(tokio::spawn(async move {
                let mut i = 0;
                while Instant::now() < until {
                    let name = format!("par-{count}-{client_no}-{i}-{}", crate::common::run_id());
                    maps.create(&PostParams::default(), &config_map(&name))
                        .await?;
                    done.fetch_add(1, Ordering::Relaxed);
                    i += 1;
                }
                Ok::<(), Error>(())
            }));
        }
        for task in tasks {
            task.await??;
        }
        println!(
            "| {count} | {:.2} ms | {:.2} ms | {:.0} |",
            ms(percentile(&times, 0.5)),
            ms(percentile(&times, 0.99)),
            done.load(Ordering::Relaxed) as f64 / window.as_secs_f64()
        );
    }
    println!();
    println!("| case | outcome | create time |");
    println!("|---|---|---|");
    let sleepy = format!("https://{}/sleep", running.local_addr);
    slow_webhook(&client, &sleepy, &certificate.ca_pem, &namespace).await?;
    for i in 0..installed {
        let _ = configs
            .delete(&format!("plinth-bench-{i}"), &DeleteParams::default())
            .await;
    }
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client);
    let _ = namespaces
        .delete(&namespace, &DeleteParams::default())
        .await;
    running.shutdown().await;
    Ok(())
}
