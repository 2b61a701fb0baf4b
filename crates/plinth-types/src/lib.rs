//! The built-in types, one module per type, grouped by API group as kube-apiserver's
//! `pkg/registry` is. Each module gives its [`ResourceDef`](plinth_registry::resources::ResourceDef):
//! names, scope, shape, columns and its [`Strategy`](plinth_registry::strategy::Strategy).
//!
//! Registering a new built-in type is one file in its group plus one line in [`builtin`].

#![forbid(unsafe_code)]
#![warn(missing_docs)]
#![cfg_attr(not(test), warn(clippy::unwrap_used))]

pub mod admissionregistration;
pub mod apiextensions;
pub mod apiregistration;
pub mod apps;
pub mod authentication;
pub mod authorization;
pub mod autoscaling;
pub mod batch;
pub mod certificates;
pub mod coordination;
pub mod core;
pub mod discovery;
pub mod events;
pub mod flowcontrol;
pub mod metrics;
pub mod networking;
pub mod node;
pub mod policy;
pub mod rbac;
pub mod scheduling;
pub mod storage;
mod zero;

#[cfg(test)]
mod tests;

use plinth_registry::resources::ResourceDef;

/// The objects a new cluster starts with, as (group, version, plural, object): the default
/// StorageClass and the two system PriorityClasses. An object that exists already is kept.
pub fn bootstrap_objects() -> Vec<(&'static str, &'static str, &'static str, serde_json::Value)> {
    let mut objects = vec![(
        "storage.k8s.io",
        "v1",
        "storageclasses",
        storage::storageclass::standard(),
    )];
    for class in scheduling::priorityclass::system_classes() {
        objects.push(("scheduling.k8s.io", "v1", "priorityclasses", class));
    }
    objects
}

/// Every built-in resource.
pub fn builtin() -> Vec<ResourceDef> {
    vec![
        self::core::namespace::resource(),
        self::core::configmap::resource(),
        self::core::secret::resource(),
        self::core::serviceaccount::resource(),
        self::core::resourcequota::resource(),
        self::core::event::resource(),
        self::core::pod::resource(),
        self::core::pod::bindings(),
        self::core::node::resource(),
        self::core::podtemplate::resource(),
        self::core::replicationcontroller::resource(),
        self::core::componentstatus::resource(),
        self::core::service::resource(),
        self::core::endpoints::resource(),
        self::core::limitrange::resource(),
        self::core::persistentvolume::volumes(),
        self::core::persistentvolume::claims(),
        storage::storageclass::resource(),
        storage::csi::drivers(),
        storage::csi::nodes(),
        storage::csi::capacities(),
        storage::csi::attachments(),
        networking::ingress::resource(),
        networking::ingressclass::resource(),
        networking::networkpolicy::resource(),
        scheduling::priorityclass::resource(),
        node::runtimeclass::resource(),
        apps::deployment::resource(),
        apps::replicaset::resource(),
        apps::statefulset::resource(),
        apps::daemonset::resource(),
        apps::controllerrevision::resource(),
        batch::job::resource(),
        batch::cronjob::resource(),
        policy::poddisruptionbudget::resource(),
        autoscaling::hpa::v2(),
        autoscaling::hpa::v1(),
        discovery::endpointslice::resource(),
        events::event::resource(),
        coordination::lease::resource(),
        apiextensions::crd::resource(),
        rbac::role::resource(),
        rbac::clusterrole::resource(),
        rbac::rolebinding::resource(),
        rbac::clusterrolebinding::resource(),
        certificates::csr::resource(),
        flowcontrol::flowschema::resource(),
        flowcontrol::prioritylevel::resource(),
        admissionregistration::webhookconfiguration::mutating(),
        admissionregistration::webhookconfiguration::validating(),
        admissionregistration::policy::policies(),
        admissionregistration::policy::bindings(),
        apiregistration::apiservice::resource(),
    ]
    .into_iter()
    .chain(authorization::resources())
    .chain(authentication::resources())
    .chain(metrics::resources())
    .collect()
}
