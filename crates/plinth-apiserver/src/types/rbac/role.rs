//! rbac.authorization.k8s.io/v1 Role: rules within a namespace.

use crate::resources::{NameRule, ResourceDef};
use crate::schema::top;

/// The `roles` resource.
pub fn resource() -> ResourceDef {
    ResourceDef::new(super::GROUP, "v1", "Role", "roles")
        .name_rule(NameRule::PathSegment)
        .schema(top(vec![("rules", super::rules_schema())]))
        .strategy(super::Roles { resource: "roles" })
}
