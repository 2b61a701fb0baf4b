//! The tenant operator's admission webhooks: a defaulter (a Tenant without owners gets the
//! user who created it) and a validator (owners non-empty and well-formed; a name that makes a
//! valid namespace), and the configurations that send Tenants to them.

use plinth_runtime::webhook::{
    AdmissionRequest, Converter, Defaulter, Validator, Verdict, WebhookEndpoint, WebhookServer,
    WebhookTarget,
};
use serde_json::Value;

use crate::Tenant;

/// Where the defaulter is served.
pub const DEFAULT_PATH: &str = "/default-platform-plinth-dev-v1alpha1-tenant";
/// Where the validator is served.
pub const VALIDATE_PATH: &str = "/validate-platform-plinth-dev-v1alpha1-tenant";
/// The name of both webhook configurations.
pub const CONFIGURATION: &str = "tenant-operator";
/// Where conversion is served.
pub const CONVERT_PATH: &str = "/convert";
/// Where v1alpha1 keeps the roles of owners (v1beta1's) it cannot say, for the way back.
pub const ROLES_ANNOTATION: &str = "platform.plinth.dev/owner-roles";

/// Fills in the owners of a Tenant that names none: the user creating it.
#[derive(Debug)]
pub struct DefaultOwner;

impl Defaulter<Tenant> for DefaultOwner {
    async fn default(
        &self,
        request: &AdmissionRequest,
        tenant: &mut Tenant,
    ) -> Result<(), Verdict> {
        if tenant.spec.owners.is_empty() && request.operation == "CREATE" {
            tenant.spec.owners.push(request.user.username.clone());
        }
        Ok(())
    }
}

/// Refuses Tenants without owners, with malformed owners, or with a name too long for
/// their namespace.
#[derive(Debug)]
pub struct ValidTenant;

/// Why `tenant` is refused, if it is.
pub fn problems(tenant: &Tenant) -> Vec<String> {
    let mut out = Vec::new();
    if tenant.spec.owners.is_empty() {
        out.push("spec.owners: Required value: a tenant needs at least one owner".to_owned());
    }
    for (i, owner) in tenant.spec.owners.iter().enumerate() {
        if owner.trim().is_empty() || owner.chars().any(char::is_whitespace) || owner.len() > 253 {
            out.push(format!(
                "spec.owners[{i}]: Invalid value: {owner:?}: must be a user name without whitespace, at most 253 characters"
            ));
        }
    }
    let name = tenant.metadata.name.as_deref().unwrap_or("");
    let namespace = crate::namespace_of(name);
    let label_ok = namespace.len() <= 63
        && namespace
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !namespace.ends_with('-');
    if !label_ok {
        out.push(format!(
            "metadata.name: Invalid value: {name:?}: its namespace {namespace:?} must be a DNS-1123 label (at most 63 characters)"
        ));
    }
    out
}

impl Validator<Tenant> for ValidTenant {
    async fn validate(
        &self,
        _: &AdmissionRequest,
        tenant: Option<&Tenant>,
        _: Option<&Tenant>,
    ) -> Verdict {
        let Some(tenant) = tenant else {
            return Verdict::allow();
        };
        let problems = problems(tenant);
        if problems.is_empty() {
            Verdict::allow()
        } else {
            Verdict::deny(format!("Tenant is invalid: {}", problems.join(", ")))
                .with_code(422, "Invalid")
        }
    }
}

/// v1alpha1 → v1beta1: each owner becomes `{name, role}`, the role from the annotation a
/// conversion down left, else `owner`.
pub fn to_v1beta1(tenant: Tenant) -> crate::v1beta1::Tenant {
    let mut metadata = tenant.metadata;
    let roles: std::collections::BTreeMap<String, String> = metadata
        .annotations
        .as_mut()
        .and_then(|a| a.remove(ROLES_ANNOTATION))
        .and_then(|r| serde_json::from_str(&r).ok())
        .unwrap_or_default();
    if metadata
        .annotations
        .as_ref()
        .is_some_and(std::collections::BTreeMap::is_empty)
    {
        metadata.annotations = None;
    }
    let owners = tenant
        .spec
        .owners
        .into_iter()
        .map(|name| crate::v1beta1::Owner {
            role: roles.get(&name).cloned().unwrap_or_else(|| "owner".into()),
            name,
        })
        .collect();
    crate::v1beta1::Tenant {
        metadata,
        spec: crate::v1beta1::TenantSpec {
            owners,
            config: tenant.spec.config,
        },
        status: tenant.status,
    }
}

/// v1beta1 → v1alpha1: owners' names; roles other than `owner` kept in an annotation.
pub fn to_v1alpha1(tenant: &crate::v1beta1::Tenant) -> Tenant {
    let mut metadata = tenant.metadata.clone();
    let roles: std::collections::BTreeMap<&str, &str> = tenant
        .spec
        .owners
        .iter()
        .filter(|o| o.role != "owner")
        .map(|o| (o.name.as_str(), o.role.as_str()))
        .collect();
    if !roles.is_empty() {
        metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(
                ROLES_ANNOTATION.into(),
                serde_json::to_string(&roles).unwrap_or_default(),
            );
    }
    Tenant {
        metadata,
        spec: crate::TenantSpec {
            owners: tenant.spec.owners.iter().map(|o| o.name.clone()).collect(),
            config: tenant.spec.config.clone(),
        },
        status: tenant.status.clone(),
    }
}

/// The hub-and-spoke converter: v1beta1 the hub.
pub fn converter() -> Converter<crate::v1beta1::Tenant> {
    Converter::new()
        .version(
            "platform.plinth.dev/v1beta1",
            |t: crate::v1beta1::Tenant| t,
            crate::v1beta1::Tenant::clone,
        )
        .version("platform.plinth.dev/v1alpha1", to_v1beta1, to_v1alpha1)
}

/// The webhook server with every handler.
pub fn server() -> WebhookServer {
    WebhookServer::new()
        .defaulter(DEFAULT_PATH, DefaultOwner)
        .validator(VALIDATE_PATH, ValidTenant)
        .converter(CONVERT_PATH, converter())
}

/// The Mutating- and ValidatingWebhookConfiguration sending tenants creates and updates
/// to `server` (a URL such as `https://host:port`, or a Service); `caBundle` left for the
/// server to fill in.
pub fn configurations<'a>(server: impl Into<WebhookEndpoint<'a>>) -> Vec<Value> {
    let target = WebhookTarget {
        group: "platform.plinth.dev",
        version: "v1alpha1",
        resource: "tenants",
        scope: "Cluster",
    };
    plinth_runtime::webhook::configurations(
        CONFIGURATION,
        server,
        target,
        DEFAULT_PATH,
        VALIDATE_PATH,
    )
}
