//! Admission webhooks end to end: `plinth serve` calls webhooks served by plinth-runtime's
//! webhook server (in this test process, over TLS with a CA of the test's own), and kubectl
//! sees what they decide — mutations, denials with the webhook's message, warnings,
//! reinvocation, failure policies with the webhook down or too slow, dry runs, and that a
//! webhook holding its request holds no other.

#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use common::{Backend, Plinth};
use k8s_openapi::api::core::v1::ConfigMap;
use plinth_runtime::webhook::{
    AdmissionRequest, Defaulter, TlsSource, Validator, Verdict, WebhookServer,
};

/// A CA and a serving certificate for 127.0.0.1 signed by it, written to `dir`.
fn certificates(dir: &std::path::Path) -> (String, std::path::PathBuf, std::path::PathBuf) {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "webhook test CA");
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let issuer = rcgen::Issuer::new(ca_params, &ca_key);
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(vec!["localhost".to_owned()]).unwrap();
    params
        .subject_alt_names
        .push(rcgen::SanType::IpAddress([127, 0, 0, 1].into()));
    let cert = params.signed_by(&key, &issuer).unwrap();
    let (cert_path, key_path) = (dir.join("tls.crt"), dir.join("tls.key"));
    std::fs::write(&cert_path, cert.pem()).unwrap();
    std::fs::write(&key_path, key.serialize_pem()).unwrap();
    (ca.pem(), cert_path, key_path)
}

/// Refuses ConfigMaps with a `forbidden` key; warns about ones with a `legacy` key.
struct Policy;
impl Validator<ConfigMap> for Policy {
    async fn validate(
        &self,
        _: &AdmissionRequest,
        object: Option<&ConfigMap>,
        _: Option<&ConfigMap>,
    ) -> Verdict {
        let data = object.and_then(|c| c.data.clone()).unwrap_or_default();
        if data.contains_key("forbidden") {
            return Verdict::deny("data.forbidden is not allowed here");
        }
        if data.contains_key("legacy") {
            return Verdict::allow()
                .with_warning("data.legacy is deprecated")
                .with_audit_annotation("legacy", "true");
        }
        Verdict::allow()
    }
}

/// Labels every ConfigMap with who created it (a default from the requesting user).
struct Owner;
impl Defaulter<ConfigMap> for Owner {
    async fn default(
        &self,
        request: &AdmissionRequest,
        object: &mut ConfigMap,
    ) -> Result<(), Verdict> {
        let labels = object.metadata.labels.get_or_insert_with(BTreeMap::new);
        labels
            .entry("created-by".into())
            .or_insert_with(|| request.user.username.replace(':', "."));
        Ok(())
    }
}

/// First of two mutating webhooks, reinvoked if needed: records how often it ran and what it
/// saw of the second's label.
struct First(Arc<AtomicUsize>);
impl Defaulter<ConfigMap> for First {
    async fn default(&self, _: &AdmissionRequest, object: &mut ConfigMap) -> Result<(), Verdict> {
        let calls = self.0.fetch_add(1, Ordering::SeqCst) + 1;
        let saw = object
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("second"))
            .cloned()
            .unwrap_or_else(|| "nothing".into());
        let annotations = object
            .metadata
            .annotations
            .get_or_insert_with(BTreeMap::new);
        annotations.insert("first-calls".into(), calls.to_string());
        annotations.insert("first-saw".into(), saw);
        Ok(())
    }
}

/// The second: adds a label the first should see on its reinvocation.
struct Second;
impl Defaulter<ConfigMap> for Second {
    async fn default(&self, _: &AdmissionRequest, object: &mut ConfigMap) -> Result<(), Verdict> {
        object
            .metadata
            .labels
            .get_or_insert_with(BTreeMap::new)
            .insert("second".into(), "was-here".into());
        Ok(())
    }
}

/// Answers only when the test lets it (or after `limit`); with `probed`, probes (`probe`) at
/// once, counted.
struct Held {
    entered: Arc<tokio::sync::Notify>,
    release: Arc<tokio::sync::Notify>,
    limit: std::time::Duration,
    probed: Option<Arc<AtomicUsize>>,
}
impl Validator<ConfigMap> for Held {
    async fn validate(
        &self,
        request: &AdmissionRequest,
        _: Option<&ConfigMap>,
        _: Option<&ConfigMap>,
    ) -> Verdict {
        if let Some(probed) = self.probed.as_ref().filter(|_| request.name == "probe") {
            probed.fetch_add(1, Ordering::SeqCst);
            return Verdict::allow();
        }
        self.entered.notify_one();
        let _ = tokio::time::timeout(self.limit, self.release.notified()).await;
        Verdict::allow()
    }
}

fn configuration(
    kind: &str,
    name: &str,
    hooks: &[(&str, &str, &str)],
    ca: &str,
    port: u16,
) -> String {
    let bundle = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, ca);
    let mut out = format!(
        "apiVersion: admissionregistration.k8s.io/v1\nkind: {kind}\nmetadata: {{name: {name}}}\nwebhooks:\n"
    );
    for (hook, path, extra) in hooks {
        out.push_str(&format!(
            "- name: {hook}\n  clientConfig: {{url: \"https://127.0.0.1:{port}{path}\", caBundle: {bundle}}}\n  rules: [{{operations: [CREATE, UPDATE], apiGroups: [\"\"], apiVersions: [v1], resources: [configmaps]}}]\n  objectSelector: {{matchLabels: {{hook: \"{name}\"}}}}\n  sideEffects: None\n  admissionReviewVersions: [v1]\n{extra}"
        ));
    }
    out
}

fn create(plinth: &Plinth, name: &str, label: &str, data: &[&str]) -> std::process::Output {
    let data: String = data.iter().map(|d| format!("  {d}: x\n")).collect();
    let data = if data.is_empty() {
        String::new()
    } else {
        format!("data:\n{data}")
    };
    plinth.kubectl_stdin(
        &["create", "-f", "-"],
        &format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  labels: {{hook: {label}}}\n{data}"),
    )
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Waits until a dry-run create of a ConfigMap labelled for `config` shows it in force
/// (`ready` judges kubectl's output).
fn wait_in_force(
    plinth: &Plinth,
    label: &str,
    data: &[&str],
    ready: impl Fn(&std::process::Output) -> bool,
) {
    let data: String = data.iter().map(|d| format!("  {d}: x\n")).collect();
    let data = if data.is_empty() {
        String::new()
    } else {
        format!("data:\n{data}")
    };
    let body = format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: probe\n  labels: {{hook: {label}}}\n{data}"
    );
    plinth.eventually(&format!("the {label} webhooks are in force"), || {
        ready(&plinth.kubectl_stdin(
            &["create", "--dry-run=server", "-o", "yaml", "-f", "-"],
            &body,
        ))
    });
}

#[test]
fn webhooks_mutate_deny_warn_and_fail_as_configured() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (ca, cert, key) = certificates(dir.path());
    let first_calls = Arc::new(AtomicUsize::new(0));
    let probed = Arc::new(AtomicUsize::new(0));
    let (entered, release) = (
        Arc::new(tokio::sync::Notify::new()),
        Arc::new(tokio::sync::Notify::new()),
    );
    let server = WebhookServer::new()
        .validator("/validate", Policy)
        .defaulter("/default", Owner)
        .defaulter("/first", First(first_calls.clone()))
        .defaulter("/second", Second)
        .validator(
            "/held",
            Held {
                entered: entered.clone(),
                release: release.clone(),
                limit: std::time::Duration::from_secs(60),
                probed: Some(probed.clone()),
            },
        )
        .validator(
            "/slow",
            Held {
                entered: Arc::new(tokio::sync::Notify::new()),
                release: Arc::new(tokio::sync::Notify::new()),
                limit: std::time::Duration::from_secs(5),
                probed: None,
            },
        );
    let running = runtime
        .block_on(server.bind(
            "127.0.0.1:0".parse().unwrap(),
            TlsSource::files(&cert, &key),
        ))
        .unwrap();
    let port = running.local_addr.port();
    // With an audit log: the webhooks' auditAnnotations land in it.
    let (plinth, _audit, log) = Plinth::start_audited(Backend::Embedded);

    // A validating and a mutating webhook.
    plinth.kubectl_with(
        &["apply", "-f", "-"],
        &configuration(
            "ValidatingWebhookConfiguration",
            "policy",
            &[("policy.plinth.test", "/validate", "")],
            &ca,
            port,
        ),
    );
    plinth.kubectl_with(
        &["apply", "-f", "-"],
        &configuration(
            "MutatingWebhookConfiguration",
            "policy",
            &[("owner.plinth.test", "/default", "")],
            &ca,
            port,
        ),
    );
    // kube's defaults are filled in.
    let stored = plinth.json(&["get", "validatingwebhookconfiguration", "policy"]);
    let hook = &stored["webhooks"][0];
    assert_eq!(hook["failurePolicy"], "Fail");
    assert_eq!(hook["matchPolicy"], "Equivalent");
    assert_eq!(hook["timeoutSeconds"], 10);
    assert_eq!(hook["rules"][0]["scope"], "*");
    assert_eq!(hook["namespaceSelector"], serde_json::json!({}));
    let table = plinth.kubectl(&["get", "validatingwebhookconfigurations"]);
    assert!(
        table
            .lines()
            .any(|l| l.split_whitespace().collect::<Vec<_>>()
                == ["policy", "1", l.split_whitespace().last().unwrap()]),
        "{table}"
    );
    wait_in_force(&plinth, "policy", &["forbidden"], |out| {
        !out.status.success()
    });

    let refused = create(&plinth, "bad", "policy", &["forbidden"]);
    assert!(!refused.status.success());
    assert!(
        stderr(&refused).contains("admission webhook \"policy.plinth.test\" denied the request: data.forbidden is not allowed here"),
        "{}",
        stderr(&refused)
    );
    assert!(
        stderr(&refused).contains("(Forbidden)"),
        "{}",
        stderr(&refused)
    );
    assert_eq!(
        plinth
            .kubectl_output(&["get", "configmap", "bad"])
            .status
            .code(),
        Some(1),
        "nothing stored"
    );
    let warned = create(&plinth, "old", "policy", &["legacy"]);
    assert!(warned.status.success(), "{}", stderr(&warned));
    assert!(
        stderr(&warned).contains("Warning: data.legacy is deprecated"),
        "{}",
        stderr(&warned)
    );
    let annotated = common::audit_events(&log)
        .into_iter()
        .find(|e| {
            e["stage"] == "ResponseComplete"
                && e["verb"] == "create"
                && e["annotations"].get("policy.plinth.test/legacy").is_some()
        })
        .expect("the create's audit event, annotated");
    assert_eq!(
        annotated["annotations"]["policy.plinth.test/legacy"], "true",
        "{annotated}"
    );
    let created = plinth.json(&["get", "configmap", "old"]);
    assert_eq!(
        created["metadata"]["labels"]["created-by"], "plinth-admin",
        "defaulted from the user"
    );
    // Updates go through them too; a refused update changes nothing.
    let refused = plinth.kubectl_output(&[
        "patch",
        "configmap",
        "old",
        "-p",
        r#"{"data":{"forbidden":"y"}}"#,
    ]);
    assert!(!refused.status.success());
    assert!(
        stderr(&refused).contains("denied the request"),
        "{}",
        stderr(&refused)
    );
    assert!(
        plinth.json(&["get", "configmap", "old"])["data"]
            .get("forbidden")
            .is_none()
    );
    // A dry run is admitted too (sideEffects: None), and stores nothing.
    let dry = plinth.kubectl_stdin(
        &["create", "--dry-run=server", "-o", "json", "-f", "-"],
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: dry, labels: {hook: policy}}\n",
    );
    assert!(dry.status.success(), "{}", stderr(&dry));
    let dry: serde_json::Value = serde_json::from_slice(&dry.stdout).unwrap();
    assert_eq!(dry["metadata"]["labels"]["created-by"], "plinth-admin");
    assert_eq!(
        plinth
            .kubectl_output(&["get", "configmap", "dry"])
            .status
            .code(),
        Some(1)
    );
    // Objects the selector does not pick are not sent.
    let other = create(&plinth, "unhooked", "nothing", &["forbidden"]);
    assert!(other.status.success(), "{}", stderr(&other));

    // matchConditions: only what they accept is sent (here, names under "checked-" created by
    // the administrator).
    plinth.kubectl_with(
        &["apply", "-f", "-"],
        &configuration(
            "ValidatingWebhookConfiguration",
            "conditional",
            &[(
                "conditional.plinth.test",
                "/validate",
                "  matchConditions:\n  - {name: checked, expression: \"object.metadata.name.startsWith('checked-')\"}\n  - {name: admin, expression: \"request.userInfo.username == 'plinth-admin' && oldObject == null\"}\n",
            )],
            &ca,
            port,
        ),
    );
    wait_in_force(&plinth, "conditional", &["forbidden"], |out| {
        // The probe is not "checked-": allowed whether or not the webhook is in force.
        out.status.success()
    });
    plinth.eventually("the conditional webhook is in force", || {
        !create(&plinth, "checked-probe", "conditional", &["forbidden"])
            .status
            .success()
    });
    let refused = create(&plinth, "checked-a", "conditional", &["forbidden"]);
    assert!(
        stderr(&refused).contains("denied the request"),
        "{}",
        stderr(&refused)
    );
    let passed = create(&plinth, "free-a", "conditional", &["forbidden"]);
    assert!(passed.status.success(), "not matched: {}", stderr(&passed));

    // Reinvocation: the first runs again after the second changed the object.
    plinth.kubectl_with(
        &["apply", "-f", "-"],
        &configuration(
            "MutatingWebhookConfiguration",
            "a-reinvoke",
            &[(
                "first.plinth.test",
                "/first",
                "  reinvocationPolicy: IfNeeded\n",
            )],
            &ca,
            port,
        )
        .replace("hook: \"a-reinvoke\"", "hook: \"reinvoke\""),
    );
    plinth.kubectl_with(
        &["apply", "-f", "-"],
        &configuration(
            "MutatingWebhookConfiguration",
            "b-reinvoke",
            &[("second.plinth.test", "/second", "")],
            &ca,
            port,
        )
        .replace("hook: \"b-reinvoke\"", "hook: \"reinvoke\""),
    );
    wait_in_force(&plinth, "reinvoke", &[], |out| {
        let text = String::from_utf8_lossy(&out.stdout);
        text.contains("second: was-here") && text.contains("first-saw: was-here")
    });
    first_calls.store(0, Ordering::SeqCst);
    let made = create(&plinth, "twice", "reinvoke", &[]);
    assert!(made.status.success(), "{}", stderr(&made));
    let twice = plinth.json(&["get", "configmap", "twice"]);
    assert_eq!(
        twice["metadata"]["annotations"]["first-calls"], "2",
        "{twice}"
    );
    assert_eq!(twice["metadata"]["annotations"]["first-saw"], "was-here");
    assert_eq!(first_calls.load(Ordering::SeqCst), 2);

    // Down: Fail refuses with kube's message, Ignore lets the write through.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let closed_port = closed.local_addr().unwrap().port();
    drop(closed);
    plinth.kubectl_with(
        &["apply", "-f", "-"],
        &configuration(
            "ValidatingWebhookConfiguration",
            "down-fail",
            &[("down.plinth.test", "/validate", "")],
            &ca,
            closed_port,
        ),
    );
    wait_in_force(&plinth, "down-fail", &[], |out| !out.status.success());
    let refused = create(&plinth, "down", "down-fail", &[]);
    assert!(!refused.status.success());
    let message = stderr(&refused);
    assert!(message.contains("(InternalError)"), "{message}");
    assert!(
        message.contains(&format!(
            "Internal error occurred: failed calling webhook \"down.plinth.test\": failed to call webhook: Post \"https://127.0.0.1:{closed_port}/validate?timeout=10s\""
        )),
        "{message}"
    );
    plinth.kubectl_with(
        &["apply", "-f", "-"],
        &configuration(
            "ValidatingWebhookConfiguration",
            "down-ignore",
            &[("down.plinth.test", "/validate", "  failurePolicy: Ignore\n")],
            &ca,
            closed_port,
        ),
    );
    let made = create(&plinth, "through", "down-ignore", &[]);
    assert!(made.status.success(), "{}", stderr(&made));

    // Too slow: past timeoutSeconds, Fail refuses and Ignore passes.
    plinth.kubectl_with(
        &["apply", "-f", "-"],
        &configuration(
            "ValidatingWebhookConfiguration",
            "slow-fail",
            &[("slow.plinth.test", "/slow", "  timeoutSeconds: 1\n")],
            &ca,
            port,
        ),
    );
    wait_in_force(&plinth, "slow-fail", &[], |out| !out.status.success());
    let refused = create(&plinth, "slow", "slow-fail", &[]);
    assert!(!refused.status.success());
    assert!(
        stderr(&refused).contains("context deadline exceeded"),
        "{}",
        stderr(&refused)
    );
    assert!(
        stderr(&refused).contains("/slow?timeout=1s"),
        "{}",
        stderr(&refused)
    );
    plinth.kubectl_with(
        &["apply", "-f", "-"],
        &configuration(
            "ValidatingWebhookConfiguration",
            "slow-ignore",
            &[(
                "slow.plinth.test",
                "/slow",
                "  timeoutSeconds: 1\n  failurePolicy: Ignore\n",
            )],
            &ca,
            port,
        ),
    );
    let made = create(&plinth, "slow-passed", "slow-ignore", &[]);
    assert!(made.status.success(), "{}", stderr(&made));

    // A webhook holding its request holds nothing else: other writes, and other ConfigMaps,
    // go through while it waits.
    plinth.kubectl_with(
        &["apply", "-f", "-"],
        &configuration(
            "ValidatingWebhookConfiguration",
            "held",
            &[("held.plinth.test", "/held", "  timeoutSeconds: 30\n")],
            &ca,
            port,
        ),
    );
    plinth.eventually("the held webhook is in force", || {
        plinth
            .kubectl_stdin(
                &["create", "--dry-run=server", "-f", "-"],
                "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: probe, labels: {hook: held}}\n",
            )
            .status
            .success()
            && probed.load(Ordering::SeqCst) > 0
    });
    let held = std::thread::spawn({
        let body =
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: held, labels: {hook: held}}\n"
                .to_owned();
        let kubeconfig = plinth.kubeconfig.clone();
        let cache = plinth.dir.path().join("kube-cache-held");
        move || {
            use std::io::Write;
            let mut child = std::process::Command::new("kubectl")
                .args(["create", "-f", "-"])
                .env("KUBECONFIG", &kubeconfig)
                .env("KUBECACHEDIR", &cache)
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap();
            child
                .stdin
                .take()
                .unwrap()
                .write_all(body.as_bytes())
                .unwrap();
            child.wait_with_output().unwrap()
        }
    });
    runtime.block_on(async {
        tokio::time::timeout(plinth_testenv::HANG_GUARD, entered.notified())
            .await
            .expect("the held create reaches its webhook (hang guard)");
    });
    // The held request is in the webhook now.
    plinth.kubectl(&[
        "create",
        "secret",
        "generic",
        "meanwhile",
        "--from-literal=k=v",
    ]);
    let other = create(&plinth, "meanwhile", "policy", &[]);
    assert!(other.status.success(), "{}", stderr(&other));
    assert!(
        !held.is_finished(),
        "the held create is still waiting for its webhook"
    );
    release.notify_one();
    let out = held.join().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    plinth.kubectl(&["get", "configmap", "held"]);

    runtime.block_on(running.shutdown());
}

#[test]
fn bad_configurations_are_refused_with_kubes_messages() {
    let plinth = Plinth::start(Backend::Embedded);
    let bad = "apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingWebhookConfiguration\nmetadata: {name: bad}\nwebhooks:\n- name: short\n  clientConfig: {url: \"http://127.0.0.1:1/x\"}\n  rules: [{operations: [PATCH], apiGroups: [\"\"], apiVersions: [v1], resources: [configmaps], scope: Everywhere}]\n  sideEffects: Some\n  timeoutSeconds: 31\n  admissionReviewVersions: [v2]\n  failurePolicy: Maybe\n- name: short\n  clientConfig: {}\n  admissionReviewVersions: [v1]\n  matchConditions: [{name: c, expression: \"object.metadata.name ==\"}, {name: c, expression: \"authorizer.allowed()\"}]\n";
    let out = plinth.kubectl_stdin(&["create", "-f", "-"], bad);
    assert!(!out.status.success());
    let message = stderr(&out);
    for expected in [
        "webhooks[0].name: Invalid value: \"short\": should be a domain with at least three segments separated by dots",
        "webhooks[0].clientConfig.url: Invalid value: \"http://127.0.0.1:1/x\": 'https' is the only allowed URL scheme",
        "webhooks[0].rules[0].operations[0]: Unsupported value: \"PATCH\"",
        "webhooks[0].rules[0].scope: Unsupported value: \"Everywhere\"",
        "webhooks[0].sideEffects: Unsupported value: \"Some\": supported values: \"None\", \"NoneOnDryRun\"",
        "webhooks[0].timeoutSeconds: Invalid value: 31: the timeout value must be between 1 and 30 seconds",
        "webhooks[0].admissionReviewVersions: Invalid value: [\"v2\"]: must include at least one of v1, v1beta1",
        "webhooks[0].failurePolicy: Unsupported value: \"Maybe\"",
        "webhooks[1].name: Duplicate value: \"short\"",
        "webhooks[1].clientConfig: Required value: exactly one of url or service is required",
        "webhooks[1].sideEffects: Required value: must specify one of None, NoneOnDryRun",
        "webhooks[1].matchConditions[0].expression: Invalid value: \"object.metadata.name ==\": compilation failed: ERROR: <input>:1:",
        "webhooks[1].matchConditions[1].name: Duplicate value: \"c\"",
        "webhooks[1].matchConditions[1].expression: Invalid value: \"authorizer.allowed()\": compilation failed: ERROR: <input>:1:1: undeclared reference to 'authorizer'",
    ] {
        assert!(
            message.contains(expected),
            "missing {expected:?} in {message}"
        );
    }
    assert_eq!(
        plinth
            .kubectl_output(&["get", "validatingwebhookconfiguration", "bad"])
            .status
            .code(),
        Some(1),
        "nothing stored"
    );
}

/// A webhook serving a self-signed `CA:TRUE` certificate that its caBundle holds is called, as
/// kube-apiserver (Go's crypto/x509) calls it; a caBundle without it, or a certificate for
/// another host, is still refused (and `failurePolicy: Fail` refuses the write).
#[test]
fn a_self_signed_ca_certificate_in_the_ca_bundle_serves_its_webhook() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (own, cert, key) = common::openssl_self_signed(dir.path(), "own", "IP:127.0.0.1");
    let (stranger, _, _) = common::openssl_self_signed(dir.path(), "stranger", "IP:127.0.0.1");
    let (elsewhere, other_cert, other_key) =
        common::openssl_self_signed(dir.path(), "elsewhere", "DNS:elsewhere.invalid");
    let serve = |cert: &std::path::Path, key: &std::path::Path| {
        runtime
            .block_on(
                WebhookServer::new()
                    .validator("/validate", Policy)
                    .bind("127.0.0.1:0".parse().unwrap(), TlsSource::files(cert, key)),
            )
            .unwrap()
    };
    let (right, wrong_host) = (serve(&cert, &key), serve(&other_cert, &other_key));
    let plinth = Plinth::start(Backend::Embedded);
    for (name, ca, port) in [
        ("selfsigned", &own, right.local_addr.port()),
        ("stranger", &stranger, right.local_addr.port()),
        ("elsewhere", &elsewhere, wrong_host.local_addr.port()),
    ] {
        let hook = format!("{name}.plinth.test");
        plinth.kubectl_with(
            &["apply", "-f", "-"],
            &configuration(
                "ValidatingWebhookConfiguration",
                name,
                &[(hook.as_str(), "/validate", "")],
                ca,
                port,
            ),
        );
    }
    // Trusted: the webhook answers (its denial, its allowance).
    wait_in_force(&plinth, "selfsigned", &["forbidden"], |out| {
        !out.status.success()
    });
    let refused = create(&plinth, "bad", "selfsigned", &["forbidden"]);
    assert!(
        stderr(&refused).contains(
            "admission webhook \"selfsigned.plinth.test\" denied the request: data.forbidden is not allowed here"
        ),
        "{}",
        stderr(&refused)
    );
    let allowed = create(&plinth, "good", "selfsigned", &[]);
    assert!(allowed.status.success(), "{}", stderr(&allowed));
    // Not trusted: the call fails, and so does the write.
    for name in ["stranger", "elsewhere"] {
        wait_in_force(&plinth, name, &[], |out| {
            !out.status.success() && stderr(out).contains("failed calling webhook")
        });
        let failed = create(&plinth, &format!("{name}-cm"), name, &[]);
        assert!(
            !failed.status.success()
                && stderr(&failed)
                    .contains(&format!("failed calling webhook \"{name}.plinth.test\"")),
            "{}",
            stderr(&failed)
        );
    }
    assert_eq!(
        plinth
            .kubectl(&["get", "configmaps", "-l", "hook", "-o", "name"])
            .trim(),
        "configmap/good"
    );
}
