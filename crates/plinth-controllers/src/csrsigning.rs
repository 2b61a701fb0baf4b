//! The signer of `kubernetes.io/kube-apiserver-client` CertificateSigningRequests
//! (kube-controller-manager's `csrsigning`): an approved request, not yet signed nor failed, gets
//! a client certificate from the cluster CA in `status.certificate` — for its requested subject
//! (CN the user, O the groups), client authentication only, valid `spec.expirationSeconds`
//! (a year by default) — or a `Failed` condition saying why it cannot.

use plinth_core::At as _;
use std::sync::Arc;

use base64::Engine;
use futures::StreamExt;
use plinth_auth::pki::ClusterSigner;
use plinth_registry::{Client, Part, WriteOptions};
use plinth_types::certificates::csr::CLIENT_SIGNER;
use serde_json::{Value, json};
use tokio::sync::watch;

const GROUP: &str = "certificates.k8s.io";
const YEAR: i64 = 365 * 24 * 3600;

/// Starts the signer; it ends when `stopping` becomes true.
pub fn spawn_csr_signer(
    registry: Client,
    signer: Arc<ClusterSigner>,
    stopping: watch::Receiver<bool>,
) {
    tokio::spawn(run(registry, signer, stopping));
}

fn has(object: &Value, kind: &str) -> bool {
    object
        .at("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|c| {
            c.iter()
                .any(|c| c["type"] == kind && c["status"] != "False")
        })
}

async fn run(registry: Client, signer: Arc<ClusterSigner>, stopping: watch::Receiver<bool>) {
    loop {
        let Some((def, mut events)) = registry
            .watch_until_stopped(
                (GROUP, "certificatesigningrequests"),
                &stopping,
                "CSR signer",
            )
            .await
        else {
            return;
        };
        while let Some(event) = events.next().await {
            if !matches!(event.kind, "ADDED" | "MODIFIED") {
                continue;
            }
            let csr = event.object();
            let signed = csr
                .at("/status/certificate")
                .and_then(Value::as_str)
                .is_some_and(|c| !c.is_empty());
            if csr.at("/spec/signerName").and_then(Value::as_str) != Some(CLIENT_SIGNER)
                || !has(&csr, "Approved")
                || has(&csr, "Denied")
                || has(&csr, "Failed")
                || signed
            {
                continue;
            }
            let Some(name) = plinth_core::meta::name(&csr).map(str::to_owned) else {
                continue;
            };
            let outcome = sign(&signer, &csr);
            let written = registry
                .modify(
                    &def,
                    None,
                    &name,
                    Part::Status,
                    &WriteOptions::internal("kube-controller-manager"),
                    |current| {
                        if current
                            .at("/status/certificate")
                            .is_some_and(|c| !c.is_null())
                        {
                            return Ok(false);
                        }
                        match &outcome {
                            Ok(certificate) => {
                                current["status"]["certificate"] = json!(certificate)
                            }
                            Err(why) => {
                                let now = plinth_core::meta::format_time(plinth_registry::now());
                                let failed = json!({"type": "Failed", "status": "True",
                                    "reason": "SignerValidationFailure", "message": why,
                                    "lastUpdateTime": now, "lastTransitionTime": now});
                                match current
                                    .pointer_mut("/status/conditions")
                                    .and_then(Value::as_array_mut)
                                {
                                    Some(conditions) => conditions.push(failed),
                                    None => current["status"]["conditions"] = json!([failed]),
                                }
                            }
                        }
                        Ok(true)
                    },
                )
                .await;
            if let Err(e) = written {
                tracing::warn!(csr = %name, error = %e.message, "CSR signer: writing the outcome failed");
            }
        }
        if *stopping.borrow() {
            return;
        }
    }
}

/// The certificate (base64 of its PEM) for `csr`, or why not.
fn sign(signer: &ClusterSigner, csr: &Value) -> Result<String, String> {
    let usages: Vec<&str> = csr
        .at("/spec/usages")
        .and_then(Value::as_array)
        .map(|u| u.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    if !usages.contains(&"client auth") {
        return Err(
            "the kubernetes.io/kube-apiserver-client signer requires the \"client auth\" usage"
                .into(),
        );
    }
    if let Some(other) = usages.iter().find(|u| {
        !matches!(
            **u,
            "client auth" | "digital signature" | "key encipherment"
        )
    }) {
        return Err(format!("usage {other:?} is not allowed for this signer"));
    }
    let request = csr
        .at("/spec/request")
        .and_then(Value::as_str)
        .and_then(|r| base64::engine::general_purpose::STANDARD.decode(r).ok())
        .and_then(|b| String::from_utf8(b).ok())
        .ok_or("spec.request is not a PEM certificate request")?;
    let seconds = csr
        .at("/spec/expirationSeconds")
        .and_then(Value::as_i64)
        .unwrap_or(YEAR)
        .min(YEAR);
    let pem = signer.sign_client(&request, seconds)?;
    Ok(base64::engine::general_purpose::STANDARD.encode(pem))
}
