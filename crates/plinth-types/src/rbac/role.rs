//! rbac.authorization.k8s.io/v1 Role: rules within a namespace.

use plinth_registry::resources::{NameRule, ResourceDef};
use plinth_registry::schema::top;

/// The `roles` resource.
pub fn resource() -> ResourceDef {
    ResourceDef::new(super::GROUP, "v1", "Role", "roles")
        .name_rule(NameRule::PathSegment)
        .schema(top(vec![("rules", super::rules_schema())]))
        .strategy(super::Roles { resource: "roles" })
}
