//! coordination.k8s.io/v1 Lease: no behaviour of its own.

use plinth_registry::resources::{ResourceDef, column, path_cell};
use plinth_registry::schema::{Schema, obj, top};

/// The `leases` resource.
pub fn resource() -> ResourceDef {
    ResourceDef::new("coordination.k8s.io", "v1", "Lease", "leases")
        .columns(vec![column(
            "Holder",
            "string",
            "The holder of the lease",
            0,
            path_cell("spec.holderIdentity"),
        )])
        .schema(schema())
}

/// The shape of a Lease.
pub fn schema() -> Schema {
    top(vec![(
        "spec",
        obj(vec![
            ("holderIdentity", Schema::String),
            ("leaseDurationSeconds", Schema::Int),
            ("acquireTime", Schema::String),
            ("renewTime", Schema::String),
            ("leaseTransitions", Schema::Int),
            ("strategy", Schema::String),
            ("preferredHolder", Schema::String),
        ]),
    )])
}
