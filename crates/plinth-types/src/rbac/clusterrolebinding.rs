//! rbac.authorization.k8s.io/v1 ClusterRoleBinding: grants a ClusterRole everywhere.

use plinth_registry::resources::{NameRule, ResourceDef, column};
use plinth_registry::schema::top;

/// The `clusterrolebindings` resource.
pub fn resource() -> ResourceDef {
    ResourceDef::new(
        super::GROUP,
        "v1",
        "ClusterRoleBinding",
        "clusterrolebindings",
    )
    .name_rule(NameRule::PathSegment)
    .cluster_scoped()
    .columns(vec![column(
        "Role",
        "string",
        "The role this binding grants",
        0,
        super::role_cell,
    )])
    .schema(top(super::binding_schema()))
    .strategy(super::Bindings {
        resource: "clusterrolebindings",
    })
}
