//! The operator's webhooks deployed the in-cluster way, as kubebuilder projects deploy theirs:
//! `tenant-operator webhook` as a Deployment's pod (in a network namespace of its own) behind a
//! Service, the webhook configurations and the CRD's conversion naming that Service
//! (`clientConfig.service`), the CA written in by the server. The API server calls the
//! Service's endpoints with the TLS name `tenant-webhook.tenant-system.svc`: Tenants are
//! defaulted, validated and converted; with the pod gone (`failurePolicy: Fail`) writes and
//! converted reads are refused with kube's messages.

#![allow(clippy::unwrap_used)]

use std::process::Command;

use plinth_testenv::Served;

const DEPLOYED: &str = r#"
apiVersion: v1
kind: Namespace
metadata: {name: tenant-system}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: tenant-webhook, namespace: tenant-system}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: tenant-webhook}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: cluster-admin}
subjects: [{kind: ServiceAccount, name: tenant-webhook, namespace: tenant-system}]
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: tenant-webhook, namespace: tenant-system}
spec:
  replicas: 1
  selector: {matchLabels: {app: tenant-webhook}}
  template:
    metadata: {labels: {app: tenant-webhook}}
    spec:
      serviceAccountName: tenant-webhook
      containers:
      - name: webhook
        image: example.com/tenant-operator:0.1.0
        args: [webhook, --bind-address=0.0.0.0:9443, --cert-dir=/tmp/certs, --service=tenant-system/tenant-webhook]
        ports: [{name: https, containerPort: 9443}]
        readinessProbe: {tcpSocket: {port: https}, periodSeconds: 1}
---
apiVersion: v1
kind: Service
metadata: {name: tenant-webhook, namespace: tenant-system}
spec:
  selector: {app: tenant-webhook}
  ports: [{name: https, port: 443, targetPort: https}]
"#;

fn tenant(name: &str, owners: &str) -> String {
    format!(
        "apiVersion: platform.plinth.dev/v1alpha1\nkind: Tenant\nmetadata: {{name: {name}}}\nspec: {{owners: {owners}}}\n"
    )
}

fn operator(args: &[&str]) -> Vec<u8> {
    let out = Command::new(env!("CARGO_BIN_EXE_tenant-operator"))
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

#[test]
fn webhooks_behind_a_service_default_validate_and_convert() {
    if let Err(e) = tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(plinth_net_available())
    {
        panic!("this test needs network namespaces (root, ip, nft): {e}");
    }
    let server = Served::start(
        plinth_testenv::plinth_binary(env!("CARGO_BIN_EXE_tenant-operator"), env!("CARGO")),
        "tenant-in-cluster",
        &[(
            "example.com/tenant-operator:*",
            env!("CARGO_BIN_EXE_tenant-operator"),
        )],
        true,
    );
    let service = "tenant-system/tenant-webhook:443";
    server.ok_input(
        &["apply", "-f", "-"],
        &operator(&["crd", "--conversion-service", service]),
    );
    server.ok_input(
        &[
            "wait",
            "--for=condition=Established",
            "crd/tenants.platform.plinth.dev",
            "--timeout=60s",
        ],
        b"",
    );
    server.ok_input(
        &["apply", "-f", "-"],
        &operator(&["webhook-config", "--service", service]),
    );
    server.ok_input(&["apply", "-f", "-"], DEPLOYED.as_bytes());
    server.ok_input(
        &[
            "-n",
            "tenant-system",
            "rollout",
            "status",
            "deployment/tenant-webhook",
            "--timeout=180s",
        ],
        b"",
    );
    let config = server.ok_input(
        &[
            "get",
            "validatingwebhookconfiguration",
            "tenant-operator",
            "-o",
            "jsonpath={.webhooks[0].clientConfig.service}",
        ],
        b"",
    );
    assert!(config.contains(r#""name":"tenant-webhook""#), "{config}");

    // In force once a dry run is defaulted (the CA written in by the pod).
    plinth_testenv::eventually_blocking("the webhooks are in force", || {
        let out = server.kubectl_input(
            &[
                "create",
                "--dry-run=server",
                "-o",
                "jsonpath={.spec.owners}",
                "-f",
                "-",
            ],
            tenant("probe", "[]").as_bytes(),
        );
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains("plinth-admin")
    });
    server.ok_input(&["create", "-f", "-"], tenant("acme", "[]").as_bytes());
    let refused = server.refused(
        &["create", "-f", "-"],
        tenant("bad", "[\"bad owner\"]").as_bytes(),
    );
    assert!(
        refused.contains("admission webhook \"validate.tenants.platform.plinth.dev\" denied the request: Tenant is invalid: spec.owners[0]: Invalid value: \"bad owner\""),
        "{refused}"
    );
    // Stored in v1beta1, read in v1alpha1 through the conversion webhook.
    let beta = server.ok_input(
        &[
            "get",
            "tenants.v1beta1.platform.plinth.dev",
            "acme",
            "-o",
            "jsonpath={.spec.owners}",
        ],
        b"",
    );
    assert_eq!(beta, r#"[{"name":"plinth-admin","role":"owner"}]"#);
    let alpha = server.ok_input(
        &[
            "get",
            "tenants.v1alpha1.platform.plinth.dev",
            "acme",
            "-o",
            "jsonpath={.spec.owners}",
        ],
        b"",
    );
    assert_eq!(alpha, r#"["plinth-admin"]"#);

    // The pod gone: no endpoints, and failurePolicy Fail refuses writes; reads that need the
    // conversion webhook fail with its error.
    server.ok_input(
        &[
            "-n",
            "tenant-system",
            "scale",
            "deployment/tenant-webhook",
            "--replicas=0",
        ],
        b"",
    );
    plinth_testenv::eventually_blocking("the Service has no endpoints", || {
        server
            .ok_input(
                &[
                    "-n",
                    "tenant-system",
                    "get",
                    "endpoints",
                    "tenant-webhook",
                    "-o",
                    "jsonpath={.subsets}",
                ],
                b"",
            )
            .trim()
            .is_empty()
    });
    let refused = server.refused(&["create", "-f", "-"], tenant("late", "[ann]").as_bytes());
    assert!(
        refused.contains(
            "Internal error occurred: failed calling webhook \"default.tenants.platform.plinth.dev\": failed to call webhook: Post \"https://tenant-webhook.tenant-system.svc:443/"
        ) && refused.contains("no endpoints available for service \"tenant-webhook\""),
        "{refused}"
    );
    let refused = server.refused(
        &["get", "tenants.v1alpha1.platform.plinth.dev", "acme"],
        b"",
    );
    assert!(
        refused.contains("conversion webhook for platform.plinth.dev/v1beta1, Kind=Tenant failed: Post \"https://tenant-webhook.tenant-system.svc:443/")
            && refused.contains("no endpoints available for service \"tenant-webhook\""),
        "{refused}"
    );
    let listed = server.ok_input(
        &["get", "tenants.v1beta1.platform.plinth.dev", "-o", "name"],
        b"",
    );
    assert_eq!(
        listed.trim(),
        "tenant.platform.plinth.dev/acme",
        "nothing refused was stored"
    );
}

/// Whether this machine lets the agent make network namespaces.
async fn plinth_net_available() -> Result<(), String> {
    plinth_net::host::available().await
}
