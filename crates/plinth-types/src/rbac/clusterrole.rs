//! rbac.authorization.k8s.io/v1 ClusterRole: rules cluster-wide (paths too), or the union of
//! the ClusterRoles its `aggregationRule` selects (filled in by the aggregation controller).

use plinth_registry::resources::{NameRule, ResourceDef};
use plinth_registry::schema::{Schema, array, obj, top};

/// The `clusterroles` resource.
pub fn resource() -> ResourceDef {
    ResourceDef::new(super::GROUP, "v1", "ClusterRole", "clusterroles")
        .name_rule(NameRule::PathSegment)
        .cluster_scoped()
        .schema(top(vec![
            ("rules", super::rules_schema()),
            (
                "aggregationRule",
                obj(vec![("clusterRoleSelectors", array(Schema::Any))]),
            ),
        ]))
        .strategy(super::Roles {
            resource: "clusterroles",
        })
}
