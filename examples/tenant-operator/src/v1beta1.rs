//! The Tenant's second version: owners with roles (`owners: [{name, role}]` where v1alpha1
//! has `owners: [name]`). The storage version once conversion is on; the operator itself
//! keeps reading v1alpha1, converted by its webhook.

use std::collections::BTreeMap;

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// An owner and what they may do.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct Owner {
    /// The user name.
    pub name: String,
    /// `owner` (v1alpha1's only kind) or `admin`, `viewer`, …
    pub role: String,
}

/// What a tenant asks for (v1beta1).
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, JsonSchema)]
#[kube(
    group = "platform.plinth.dev",
    version = "v1beta1",
    kind = "Tenant",
    status = "crate::TenantStatus",
    shortname = "tn",
    printcolumn = r#"{"name":"Namespace","type":"string","jsonPath":".status.namespace"}"#,
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#
)]
pub struct TenantSpec {
    /// The tenant's owners.
    #[serde(default)]
    pub owners: Vec<Owner>,
    /// Configuration handed to the tenant's workloads.
    #[serde(default)]
    pub config: BTreeMap<String, String>,
}
