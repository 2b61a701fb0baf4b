//! cert-manager's cainjector, as one call: the CA that signed the webhook server's certificate
//! written into the `caBundle` of the configurations and CRDs that call it.

use k8s_openapi::ByteString;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, PostParams};

/// An object whose webhooks should trust the CA.
///
/// # Example
///
/// ```no_run
/// use plinth_runtime::webhook::CaTarget;
/// // What cert-manager's `cert-manager.io/inject-ca-from` annotation would name.
/// let targets = [
///     CaTarget::Validating("my-operator-validating".into()),
///     CaTarget::Mutating("my-operator-defaulting".into()),
///     CaTarget::Conversion("widgets.example.com".into()),
/// ];
/// ```
#[derive(Clone, Debug)]
pub enum CaTarget {
    /// Every webhook of this MutatingWebhookConfiguration.
    Mutating(String),
    /// Every webhook of this ValidatingWebhookConfiguration.
    Validating(String),
    /// The conversion webhook of this CRD.
    Conversion(String),
}

/// Attempts per object when it changes between the read and the write.
const ATTEMPTS: usize = 5;

/// How long a target that does not exist yet is waited for (the configurations are often
/// applied with, or just after, the Deployment of the server that writes into them).
const MISSING_FOR: std::time::Duration = std::time::Duration::from_secs(30);

/// Writes `ca_pem` into each target's `caBundle`, retrying on conflicts and waiting up to
/// 30 s for a target that does not exist yet.
///
/// # Errors
/// A target that cannot be read or written.
///
/// # Example
///
/// ```
/// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
/// use plinth_runtime::webhook::{inject_ca_bundle, issue, CaTarget};
/// let env = plinth_testenv::TestEnv::start().await?;
/// let configurations: kube::Api<ValidatingWebhookConfiguration> = kube::Api::all(env.client());
/// let configuration: ValidatingWebhookConfiguration = serde_json::from_value(serde_json::json!({
///     "metadata": {"name": "widgets"},
///     "webhooks": [{
///         "name": "widgets.example.com",
///         "clientConfig": {"url": "https://127.0.0.1:9443/validate"},
///         "rules": [{"operations": ["CREATE"], "apiGroups": ["example.com"],
///                    "apiVersions": ["v1"], "resources": ["widgets"]}],
///         "sideEffects": "None", "admissionReviewVersions": ["v1"]
///     }]
/// }))?;
/// configurations.create(&Default::default(), &configuration).await?;
/// let issued = issue(&["127.0.0.1"])?;
/// inject_ca_bundle(&env.client(), issued.ca.as_bytes(), &[CaTarget::Validating("widgets".into())]).await?;
/// let written = configurations.get("widgets").await?;
/// let bundle = written.webhooks.unwrap()[0].client_config.ca_bundle.clone().unwrap();
/// assert_eq!(bundle.0, issued.ca.as_bytes());
/// # Ok(()) }
/// ```
pub async fn inject_ca_bundle(
    client: &kube::Client,
    ca_pem: &[u8],
    targets: &[CaTarget],
) -> Result<(), kube::Error> {
    let bundle = ByteString(ca_pem.to_vec());
    for target in targets {
        let waiting_since = std::time::Instant::now();
        let mut attempt = 0;
        loop {
            attempt += 1;
            let written = match target {
                CaTarget::Mutating(name) => {
                    set_webhooks_bundle(client, "MutatingWebhookConfiguration", name, &bundle).await
                }
                CaTarget::Validating(name) => {
                    set_webhooks_bundle(client, "ValidatingWebhookConfiguration", name, &bundle)
                        .await
                }
                CaTarget::Conversion(name) => {
                    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
                    let mut object = api.get(name).await?;
                    if let Some(config) = object
                        .spec
                        .conversion
                        .as_mut()
                        .and_then(|c| c.webhook.as_mut())
                        .and_then(|w| w.client_config.as_mut())
                    {
                        config.ca_bundle = Some(bundle.clone());
                    }
                    api.replace(name, &PostParams::default(), &object)
                        .await
                        .map(drop)
                }
            };
            match written {
                Ok(()) => break,
                Err(kube::Error::Api(status)) if status.code == 409 && attempt < ATTEMPTS => {}
                Err(kube::Error::Api(status))
                    if status.code == 404 && waiting_since.elapsed() < MISSING_FOR =>
                {
                    // Conflicts are counted from the object's first read.
                    attempt = 0;
                    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
                }
                Err(e) => return Err(e),
            }
        }
    }
    Ok(())
}

/// Sets the `caBundle` of every webhook of the `kind` configuration `name`.
async fn set_webhooks_bundle(
    client: &kube::Client,
    kind: &str,
    name: &str,
    bundle: &ByteString,
) -> Result<(), kube::Error> {
    let gvk = GroupVersionKind::gvk("admissionregistration.k8s.io", "v1", kind);
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &ApiResource::from_gvk(&gvk));
    let mut object = api.get(name).await?;
    let encoded = serde_json::to_value(bundle).unwrap_or_default();
    for hook in object
        .data
        .get_mut("webhooks")
        .and_then(serde_json::Value::as_array_mut)
        .into_iter()
        .flatten()
    {
        if let Some(config) = hook
            .get_mut("clientConfig")
            .and_then(serde_json::Value::as_object_mut)
        {
            config.insert("caBundle".into(), encoded.clone());
        }
    }
    api.replace(name, &PostParams::default(), &object)
        .await
        .map(drop)
}
