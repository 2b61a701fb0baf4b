//! core/v1 ServiceAccount.

use crate::resources::{ResourceDef, column, count};
use crate::schema::{Schema, array, obj, object_reference, top};
use crate::strategy::{FieldPath, ListMerge, Strategy};

/// The `serviceaccounts` resource.
pub fn resource() -> ResourceDef {
    ResourceDef::new("", "v1", "ServiceAccount", "serviceaccounts")
        .short_names(&["sa"])
        .columns(vec![column(
            "Secrets",
            "integer",
            "Number of secrets",
            0,
            |o, _| count(o, &["secrets"]),
        )])
        .schema(schema())
        .strategy(ServiceAccounts)
}

/// The shape of a ServiceAccount.
pub fn schema() -> Schema {
    top(vec![
        ("secrets", array(object_reference())),
        (
            "imagePullSecrets",
            array(obj(vec![("name", Schema::String)])),
        ),
        ("automountServiceAccountToken", Schema::Bool),
    ])
}

#[derive(Debug)]
struct ServiceAccounts;

impl Strategy for ServiceAccounts {
    fn lists(&self) -> &[(FieldPath, ListMerge)] {
        &[
            ("secrets", ListMerge::Keyed("name")),
            ("imagePullSecrets", ListMerge::Keyed("name")),
        ]
    }
}
