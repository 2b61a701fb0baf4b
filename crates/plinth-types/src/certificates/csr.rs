//! certificates.k8s.io/v1 CertificateSigningRequest: a request for a certificate, stamped with
//! its requester, approved or denied through `/approval` by whoever may `approve` for its
//! signer, and signed through `/status` (for `kubernetes.io/kube-apiserver-client`, by the
//! signing controller in `plinth-controllers`).

use plinth_core::{ApiError, Cause, GroupResource};
use serde_json::{Value, json};

use plinth_registry::Requester;
use plinth_registry::authz::Attributes;
use plinth_registry::authz::Decision;
use plinth_registry::resources::{ResourceDef, column, path_cell};
use plinth_registry::schema::{Schema, array, obj, top};
use plinth_registry::strategy::Strategy;

/// The signer that issues client certificates for this API server.
pub const CLIENT_SIGNER: &str = "kubernetes.io/kube-apiserver-client";
const GROUP: &str = "certificates.k8s.io";

/// The `certificatesigningrequests` resource.
pub fn resource() -> ResourceDef {
    ResourceDef::new(
        GROUP,
        "v1",
        "CertificateSigningRequest",
        "certificatesigningrequests",
    )
    .cluster_scoped()
    .short_names(&["csr"])
    .with_status()
    .selectable(&["spec.signerName"])
    .field_labels(&[
        ("metadata.name", "metadata.name"),
        ("spec.signerName", "spec.signerName"),
    ])
    .field_subresource(
        "approval",
        "/status/conditions",
        &["get", "patch", "update"],
    )
    .columns(vec![
        column(
            "SignerName",
            "string",
            "The signer",
            0,
            path_cell("spec.signerName"),
        ),
        column(
            "Requestor",
            "string",
            "Who asked",
            0,
            path_cell("spec.username"),
        ),
        column(
            "Condition",
            "string",
            "Approval and signing",
            0,
            condition_cell,
        ),
    ])
    .schema(top(vec![
        (
            "spec",
            obj(vec![
                ("request", Schema::Bytes),
                ("signerName", Schema::String),
                ("expirationSeconds", Schema::Int),
                ("usages", array(Schema::String)),
                ("username", Schema::String),
                ("uid", Schema::String),
                ("groups", array(Schema::String)),
                ("extra", Schema::Map(Box::new(array(Schema::String)))),
            ]),
        ),
        (
            "status",
            obj(vec![
                (
                    "conditions",
                    array(obj(vec![
                        ("type", Schema::String),
                        ("status", Schema::String),
                        ("reason", Schema::String),
                        ("message", Schema::String),
                        ("lastUpdateTime", Schema::String),
                        ("lastTransitionTime", Schema::String),
                    ])),
                ),
                ("certificate", Schema::Bytes),
            ]),
        ),
    ]))
    .strategy(CertificateSigningRequests)
}

/// `Approved,Issued`, `Pending`, `Denied`, as kubectl shows them.
fn condition_cell(object: &Value, _now: i64) -> Value {
    let mut shown: Vec<String> = object
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .map(|c| {
            c.iter()
                .filter(|c| c["status"] != "False")
                .filter_map(|c| c["type"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    if object
        .pointer("/status/certificate")
        .and_then(Value::as_str)
        .is_some_and(|c| !c.is_empty())
    {
        shown.push("Issued".into());
    }
    Value::String(if shown.is_empty() {
        "Pending".into()
    } else {
        shown.join(",")
    })
}

const USAGES: &[&str] = &[
    "signing",
    "digital signature",
    "content commitment",
    "key encipherment",
    "key agreement",
    "data encipherment",
    "cert sign",
    "crl sign",
    "encipher only",
    "decipher only",
    "any",
    "server auth",
    "client auth",
    "code signing",
    "email protection",
    "s/mime",
    "ipsec end system",
    "ipsec tunnel",
    "ipsec user",
    "timestamping",
    "ocsp signing",
    "microsoft sgc",
    "netscape sgc",
];

#[derive(Debug)]
struct CertificateSigningRequests;

fn conditions(object: &Value) -> Vec<Value> {
    object
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

impl Strategy for CertificateSigningRequests {
    /// kube's status strategy: the request's status and metadata, the stored spec, and the
    /// stored `Approved`/`Denied` conditions (only `/approval` changes those).
    fn merge_status(&self, current: &Value, new: &Value) -> Option<Value> {
        let mut merged = plinth_registry::strategy::with_stored_spec(current, new);
        // kube's preserveConditionInstances: the stored Approved and Denied conditions stay,
        // each in the place the request gives its kind (where it names as many); otherwise
        // they stay as stored, after the request's other conditions.
        let mut kept = conditions(&merged);
        let stored = conditions(current);
        for kind in ["Approved", "Denied"] {
            let old: Vec<&Value> = stored.iter().filter(|c| c["type"] == kind).collect();
            let places: Vec<usize> = (0..kept.len())
                .filter(|i| kept[*i]["type"] == kind)
                .collect();
            if old.len() == places.len() {
                for (place, condition) in places.into_iter().zip(old) {
                    kept[place] = condition.clone();
                }
            } else {
                kept.retain(|c| c["type"] != kind);
                kept.extend(old.into_iter().cloned());
            }
        }
        if !merged["status"].is_object() {
            merged["status"] = json!({});
        }
        if kept.is_empty() {
            if let Some(status) = merged["status"].as_object_mut() {
                status.remove("conditions");
            }
        } else {
            merged["status"]["conditions"] = json!(kept);
        }
        Some(merged)
    }

    fn stamp(&self, object: &mut Value, requester: &Requester) {
        let user = &requester.user;
        if let Some(spec) = object.get_mut("spec").and_then(Value::as_object_mut) {
            spec.insert("username".into(), json!(user.name));
            spec.insert("groups".into(), json!(user.groups));
            if user.uid.is_empty() {
                spec.remove("uid");
            } else {
                spec.insert("uid".into(), json!(user.uid));
            }
            if user.extra.is_empty() {
                spec.remove("extra");
            } else {
                spec.insert("extra".into(), json!(user.extra));
            }
        }
    }

    fn prepare_create(&self, object: &mut Value) {
        if let Some(map) = object.as_object_mut() {
            map.remove("status");
        }
    }

    fn validate(&self, object: &Value, old: Option<&Value>) -> Vec<Cause> {
        let mut causes = Vec::new();
        let spec = object.get("spec").unwrap_or(&Value::Null);
        let request = spec.get("request").and_then(Value::as_str).unwrap_or("");
        let pem = base64::Engine::decode(&base64::engine::general_purpose::STANDARD, request)
            .ok()
            .and_then(|b| String::from_utf8(b).ok());
        let parses = pem.as_deref().is_some_and(|pem| {
            rcgen::CertificateSigningRequestParams::from_pem(pem).is_ok()
                || pem.contains("BEGIN CERTIFICATE REQUEST")
        });
        if request.is_empty() {
            causes.push(Cause::required("spec.request", ""));
        } else if !parses {
            causes.push(Cause::invalid(
                "spec.request",
                &json!([]),
                "PEM block type must be CERTIFICATE REQUEST",
            ));
        }
        let signer = spec.get("signerName").and_then(Value::as_str).unwrap_or("");
        if signer.is_empty() {
            causes.push(Cause::required("spec.signerName", ""));
        } else if !signer.contains('/') {
            causes.push(Cause::invalid(
                "spec.signerName",
                &json!(signer),
                "must be a fully qualified domain and path of the form 'example.com/signer-name'",
            ));
        }
        let usages = spec
            .get("usages")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or_default();
        if usages.is_empty() {
            causes.push(Cause::required("spec.usages", ""));
        }
        for (i, usage) in usages.iter().enumerate() {
            let text = usage.as_str().unwrap_or("");
            if !USAGES.contains(&text) {
                causes.push(Cause::not_supported(
                    format!("spec.usages[{i}]"),
                    &json!(text),
                    USAGES,
                ));
            }
        }
        if let Some(seconds) = spec.get("expirationSeconds").and_then(Value::as_i64)
            && seconds < 600
        {
            causes.push(Cause::invalid(
                "spec.expirationSeconds",
                &json!(seconds),
                "may not specify a duration less than 600 seconds (10 minutes)",
            ));
        }
        let conditions = conditions(object);
        let has = |kind: &str| {
            conditions
                .iter()
                .any(|c| c["type"] == kind && c["status"] != "False")
        };
        if has("Approved") && has("Denied") {
            causes.push(Cause::invalid(
                "status.conditions",
                &json!(conditions),
                "Approved and Denied conditions are mutually exclusive",
            ));
        }
        if let Some(old) = old {
            if old.get("spec") != object.get("spec") {
                causes.push(Cause::invalid(
                    "spec",
                    object.get("spec").unwrap_or(&Value::Null),
                    "field is immutable",
                ));
            }
            let before = self::conditions(old);
            for kind in ["Approved", "Denied"] {
                let was = before.iter().any(|c| c["type"] == kind);
                if was && !conditions.iter().any(|c| c["type"] == kind) {
                    causes.push(Cause::forbidden(
                        "status.conditions",
                        &format!("updates may not remove a condition of type {kind:?}"),
                    ));
                }
            }
        }
        causes
    }

    fn admit(
        &self,
        object: &Value,
        old: Option<&Value>,
        requester: &Requester,
    ) -> Result<(), ApiError> {
        let Some(old) = old else { return Ok(()) };
        let decided = |v: &Value| {
            conditions(v)
                .into_iter()
                .filter(|c| matches!(c["type"].as_str(), Some("Approved" | "Denied")))
                .collect::<Vec<_>>()
        };
        if decided(object) == decided(old) {
            return Ok(());
        }
        // Approving or denying needs `approve` on the signer (kube's signers resource).
        let signer = object
            .pointer("/spec/signerName")
            .and_then(Value::as_str)
            .unwrap_or("");
        let domain = signer.split('/').next().unwrap_or("");
        let may = |name: &str| {
            let attributes = Attributes::check("approve", GROUP, "signers", "", name);
            matches!(
                requester.authorizer.authorize(&requester.user, &attributes),
                Decision::Allow(_)
            )
        };
        if may(signer) || may(&format!("{domain}/*")) {
            return Ok(());
        }
        let name = plinth_core::meta::name(object).unwrap_or("");
        Err(ApiError::forbidden(
            Some(&GroupResource::new(GROUP, "certificatesigningrequests")),
            name,
            &format!("user not permitted to approve requests with signerName {signer:?}"),
        ))
    }
}
