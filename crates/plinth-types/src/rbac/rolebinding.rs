//! rbac.authorization.k8s.io/v1 RoleBinding: grants a Role or ClusterRole within its
//! namespace.

use plinth_registry::resources::{NameRule, ResourceDef, column};
use plinth_registry::schema::top;

/// The `rolebindings` resource.
pub fn resource() -> ResourceDef {
    ResourceDef::new(super::GROUP, "v1", "RoleBinding", "rolebindings")
        .name_rule(NameRule::PathSegment)
        .columns(vec![column(
            "Role",
            "string",
            "The role this binding grants",
            0,
            super::role_cell,
        )])
        .schema(top(super::binding_schema()))
        .strategy(super::Bindings {
            resource: "rolebindings",
        })
}
