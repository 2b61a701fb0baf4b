//! storage.k8s.io/v1's CSI types — CSIDriver, CSINode, CSIStorageCapacity, VolumeAttachment:
//! stored, defaulted and validated as kube does. Plinth's own provisioner does not use CSI;
//! these are here for the drivers, charts and tools that write and read them.

use plinth_core::Cause;
use plinth_core::selector::LabelSelector;
use plinth_core::validation::{dns1123_subdomain, qualified_name};
use serde_json::{Value, json};

use crate::apps::{label_selector, selector_go};
use plinth_registry::resources::{ResourceDef, column};
use plinth_registry::schema::{Schema, array, obj, strings, top};
use plinth_registry::strategy::Strategy;

/// The `csidrivers` resource.
pub fn drivers() -> ResourceDef {
    let flag = |field: &'static str, default: bool| {
        move |o: &Value, _: i64| json!(o["spec"][field].as_bool().unwrap_or(default))
    };
    ResourceDef::new("storage.k8s.io", "v1", "CSIDriver", "csidrivers")
        .cluster_scoped()
        .columns(vec![
            column("AttachRequired", "boolean", "attachRequired indicates this CSI volume driver requires an attach operation (because it implements the CSI ControllerPublishVolume() method), and that the Kubernetes attach detach controller should call the attach volume interface which checks the volumeattachment status and waits until the volume is attached before proceeding to mounting. The CSI external-attacher coordinates with CSI volume driver and updates the volumeattachment status when the attach operation is complete. If the value is specified to false, the attach operation will be skipped. Otherwise the attach operation will be called.\n\nThis field is immutable.", 0, flag("attachRequired", true)),
            column("PodInfoOnMount", "boolean", "podInfoOnMount indicates this CSI volume driver requires additional pod information (like podName, podUID, etc.) during mount operations, if set to true. If set to false, pod information will not be passed on mount. Default is false.", 0, flag("podInfoOnMount", false)),
            column("StorageCapacity", "boolean", "storageCapacity indicates that the CSI volume driver wants pod scheduling to consider the storage capacity that the driver deployment will report by creating CSIStorageCapacity objects with capacity information, if set to true.", 0, flag("storageCapacity", false)),
            column("TokenRequests", "string", "tokenRequests indicates the CSI driver needs pods' service account tokens it is mounting volume for to do necessary authentication.", 0, |o, _| {
                match o.pointer("/spec/tokenRequests").and_then(Value::as_array) {
                    None => json!("<unset>"),
                    Some(requests) => json!(requests.iter().map(|t| t["audience"].as_str().unwrap_or("")).collect::<Vec<_>>().join(",")),
                }
            }),
            column("RequiresRepublish", "boolean", "requiresRepublish indicates the CSI driver wants `NodePublishVolume` being periodically called to reflect any possible change in the mounted volume.", 0, flag("requiresRepublish", false)),
            column("Modes", "string", "volumeLifecycleModes defines what kind of volumes this CSI volume driver supports.", 0, |o, _| {
                let modes: Vec<&str> = o.pointer("/spec/volumeLifecycleModes").and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str).collect();
                json!(if modes.is_empty() { "<none>".to_owned() } else { modes.join(",") })
            }),
        ])
        .schema(top(vec![(
            "spec",
            obj(vec![
                ("attachRequired", Schema::Bool),
                ("podInfoOnMount", Schema::Bool),
                ("volumeLifecycleModes", array(Schema::String)),
                ("storageCapacity", Schema::Bool),
                ("fsGroupPolicy", Schema::String),
                ("tokenRequests", array(obj(vec![("audience", Schema::String), ("expirationSeconds", Schema::Int)]))),
                ("requiresRepublish", Schema::Bool),
                ("seLinuxMount", Schema::Bool),
                ("nodeAllocatableUpdatePeriodSeconds", Schema::Int),
            ]),
        )]))
        .strategy(Drivers)
}

#[derive(Debug)]
struct Drivers;

impl Strategy for Drivers {
    fn prepare_create(&self, object: &mut Value) {
        default_driver(object);
    }

    fn prepare_update(&self, object: &mut Value, _old: &Value) {
        default_driver(object);
    }

    fn validate(&self, object: &Value, old: Option<&Value>) -> Vec<Cause> {
        let spec = &object["spec"];
        let mut causes = Vec::new();
        for (field, path) in [
            ("attachRequired", "spec.attachedRequired"),
            ("podInfoOnMount", "spec.podInfoOnMount"),
            ("storageCapacity", "spec.storageCapacity"),
            ("seLinuxMount", "spec.seLinuxMount"),
        ] {
            if spec[field].is_null() {
                causes.push(Cause::required(path, ""));
            }
        }
        if let Some(policy) = spec["fsGroupPolicy"].as_str()
            && !["File", "None", "ReadWriteOnceWithFSType"].contains(&policy)
        {
            causes.push(Cause::not_supported(
                "spec.fsGroupPolicy",
                &json!(policy),
                &["File", "None", "ReadWriteOnceWithFSType"],
            ));
        }
        let mut audiences = std::collections::HashSet::new();
        for (i, request) in spec["tokenRequests"]
            .as_array()
            .into_iter()
            .flatten()
            .enumerate()
        {
            let audience = request["audience"].as_str().unwrap_or("");
            if !audiences.insert(audience) {
                causes.push(Cause::duplicate(
                    format!("spec.tokenRequests[{i}].audience"),
                    audience,
                ));
                continue;
            }
            if let Some(seconds) = request["expirationSeconds"].as_i64() {
                let path = format!("spec.tokenRequests[{i}].expirationSeconds");
                if seconds < 600 {
                    causes.push(Cause::invalid(
                        path.clone(),
                        &json!(seconds),
                        "may not specify a duration less than 10 minutes",
                    ));
                }
                if seconds > 1 << 32 {
                    causes.push(Cause::invalid(
                        path,
                        &json!(seconds),
                        "may not specify a duration larger than 2^32 seconds",
                    ));
                }
            }
        }
        for mode in spec["volumeLifecycleModes"]
            .as_array()
            .into_iter()
            .flatten()
        {
            if !matches!(mode.as_str(), Some("Persistent" | "Ephemeral")) {
                causes.push(Cause::not_supported(
                    "spec.volumeLifecycleModes",
                    mode,
                    &["Persistent", "Ephemeral"],
                ));
            }
        }
        if let Some(old) = old {
            if old["spec"]["attachRequired"] != spec["attachRequired"] {
                causes.push(Cause::immutable(
                    "spec.attachedRequired",
                    &spec["attachRequired"],
                ));
            }
            if old["spec"]["volumeLifecycleModes"] != spec["volumeLifecycleModes"] {
                causes.push(Cause::immutable(
                    "spec.volumeLifecycleModes",
                    &spec["volumeLifecycleModes"],
                ));
            }
        }
        causes
    }
}

fn default_driver(object: &mut Value) {
    let Some(spec) = object.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    for (field, value) in [
        ("attachRequired", json!(true)),
        ("podInfoOnMount", json!(false)),
        ("storageCapacity", json!(false)),
        ("fsGroupPolicy", json!("ReadWriteOnceWithFSType")),
        ("requiresRepublish", json!(false)),
        ("seLinuxMount", json!(false)),
    ] {
        spec.entry(field).or_insert(value);
    }
    if spec
        .get("volumeLifecycleModes")
        .and_then(Value::as_array)
        .is_none_or(Vec::is_empty)
    {
        spec.insert("volumeLifecycleModes".into(), json!(["Persistent"]));
    }
}

/// A CSI driver's name (`spec.attacher`, a CSINode's driver).
fn driver_name(name: &str, path: &str) -> Vec<Cause> {
    let mut causes = Vec::new();
    if name.is_empty() {
        causes.push(Cause::required(path, ""));
    }
    if name.len() > 63 {
        causes.push(Cause::too_long(path, 63));
    }
    for msg in dns1123_subdomain(&name.to_lowercase()) {
        causes.push(Cause::invalid(path, &json!(name), &msg));
    }
    causes
}

/// The `csinodes` resource.
pub fn nodes() -> ResourceDef {
    ResourceDef::new("storage.k8s.io", "v1", "CSINode", "csinodes")
        .cluster_scoped()
        .columns(vec![column(
            "Drivers",
            "integer",
            "Drivers indicates the number of CSI drivers registered on the node",
            0,
            |o, _| {
                json!(
                    o.pointer("/spec/drivers")
                        .and_then(Value::as_array)
                        .map_or(0, Vec::len)
                )
            },
        )])
        .schema(top(vec![(
            "spec",
            obj(vec![(
                "drivers",
                array(obj(vec![
                    ("name", Schema::String),
                    ("nodeID", Schema::String),
                    ("topologyKeys", array(Schema::String)),
                    ("allocatable", obj(vec![("count", Schema::Int)])),
                ])),
            )]),
        )]))
        .strategy(Nodes)
}

#[derive(Debug)]
struct Nodes;

impl Strategy for Nodes {
    fn validate(&self, object: &Value, old: Option<&Value>) -> Vec<Cause> {
        let mut causes = Vec::new();
        let drivers = object
            .pointer("/spec/drivers")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or_default();
        let mut names = std::collections::HashSet::new();
        for (i, driver) in drivers.iter().enumerate() {
            let path = format!("spec.drivers[{i}]");
            let name = driver["name"].as_str().unwrap_or("");
            causes.extend(driver_name(name, &format!("{path}.name")));
            let node_id = driver["nodeID"].as_str().unwrap_or("");
            if node_id.is_empty() {
                causes.push(Cause::required(format!("{path}.nodeID"), ""));
            }
            if node_id.len() > 192 {
                causes.push(Cause::invalid(
                    format!("{path}.nodeID"),
                    &json!(node_id),
                    "must be 192 characters or less",
                ));
            }
            if let Some(count) = driver.pointer("/allocatable/count").and_then(Value::as_i64)
                && count < 0
            {
                causes.push(Cause::invalid(
                    format!("{path}.allocatable.count"),
                    &json!(count),
                    "must be greater than or equal to 0",
                ));
            }
            if !names.insert(name) {
                causes.push(Cause::duplicate(format!("{path}.name"), name));
            }
            let mut keys = std::collections::HashSet::new();
            for key in driver["topologyKeys"].as_array().into_iter().flatten() {
                let key = key.as_str().unwrap_or("");
                if key.is_empty() {
                    causes.push(Cause::required(path.clone(), ""));
                }
                if !keys.insert(key) {
                    causes.push(Cause::duplicate(path.clone(), key));
                }
                for msg in qualified_name(key) {
                    causes.push(Cause::invalid(path.clone(), &json!(key), &msg));
                }
            }
        }
        if let Some(old) = old {
            for before in old
                .pointer("/spec/drivers")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                for after in drivers {
                    if before["name"] == after["name"] && before != after {
                        causes.push(Cause::invalid("CSINodeDriver", after, "field is immutable"));
                    }
                }
            }
        }
        causes
    }
}

/// The `csistoragecapacities` resource.
pub fn capacities() -> ResourceDef {
    ResourceDef::new("storage.k8s.io", "v1", "CSIStorageCapacity", "csistoragecapacities")
        .no_age_column()
        .columns(vec![
            column("StorageClassName", "string", "storageClassName represents the name of the StorageClass that the reported capacity applies to. It must meet the same requirements as the name of a StorageClass object (non-empty, DNS subdomain). If that object no longer exists, the CSIStorageCapacity object is obsolete and should be removed by its creator. This field is immutable.", 0, |o, _| o["storageClassName"].clone()),
            column("Capacity", "string", "capacity is the value reported by the CSI driver in its GetCapacityResponse for a GetCapacityRequest with topology and parameters that match the previous fields.\n\nThe semantic is currently (CSI spec 1.2) defined as: The available capacity, in bytes, of the storage that can be used to provision volumes. If not set, that information is currently unavailable.", 0, |o, _| match &o["capacity"] {
                Value::String(s) => json!(s),
                Value::Number(n) => json!(n.to_string()),
                _ => json!("<unset>"),
            }),
        ])
        .schema(top(vec![
            ("nodeTopology", label_selector()),
            ("storageClassName", Schema::String),
            ("capacity", Schema::Any),
            ("maximumVolumeSize", Schema::Any),
        ]))
        .strategy(Capacities)
}

#[derive(Debug)]
struct Capacities;

impl Strategy for Capacities {
    fn validate(&self, object: &Value, old: Option<&Value>) -> Vec<Cause> {
        let mut causes = Vec::new();
        if let Some(topology) = object.get("nodeTopology").filter(|t| !t.is_null())
            && let Err(e) = LabelSelector::from_object(topology)
        {
            causes.push(Cause::invalid(
                "nodeTopology",
                &json!(selector_go(topology)),
                &format!("invalid label selector: {e}"),
            ));
        }
        let class = object["storageClassName"].as_str().unwrap_or("");
        for msg in dns1123_subdomain(class) {
            causes.push(Cause::invalid("storageClassName", &json!(class), &msg));
        }
        for field in ["capacity", "maximumVolumeSize"] {
            if let Some(quantity) = object.get(field).filter(|q| !q.is_null()) {
                let text = quantity
                    .as_str()
                    .map(str::to_owned)
                    .unwrap_or_else(|| quantity.to_string());
                match plinth_core::quantity::parse(&text) {
                    None => causes.push(Cause::invalid(
                        field,
                        quantity,
                        plinth_core::quantity::INVALID,
                    )),
                    Some(v) if v < 0.0 && field == "capacity" => causes.push(Cause::invalid(
                        field,
                        quantity,
                        "must be greater than or equal to 0",
                    )),
                    Some(_) => {}
                }
            }
        }
        if let Some(old) = old {
            if old["nodeTopology"] != object["nodeTopology"] {
                causes.push(Cause::invalid(
                    "nodeTopology",
                    &object["nodeTopology"],
                    "field is immutable",
                ));
            }
            if old["storageClassName"] != object["storageClassName"] {
                causes.push(Cause::invalid(
                    "storageClassName",
                    &json!(class),
                    "field is immutable",
                ));
            }
        }
        causes
    }
}

/// The `volumeattachments` resource.
pub fn attachments() -> ResourceDef {
    ResourceDef::new("storage.k8s.io", "v1", "VolumeAttachment", "volumeattachments")
        .cluster_scoped()
        .with_status()
        .columns(vec![
            column("Attacher", "string", "attacher indicates the name of the volume driver that MUST handle this request. This is the name returned by GetPluginName().", 0, |o, _| o["spec"]["attacher"].clone()),
            column("PV", "string", "persistentVolumeName represents the name of the persistent volume to attach.", 0, |o, _| json!(o.pointer("/spec/source/persistentVolumeName").and_then(Value::as_str).unwrap_or(""))),
            column("Node", "string", "nodeName represents the node that the volume should be attached to.", 0, |o, _| o["spec"]["nodeName"].clone()),
            column("Attached", "boolean", "attached indicates the volume is successfully attached. This field must only be set by the entity completing the attach operation, i.e. the external-attacher.", 0, |o, _| json!(o.pointer("/status/attached") == Some(&json!(true)))),
        ])
        .schema(top(vec![
            (
                "spec",
                obj(vec![
                    ("attacher", Schema::String),
                    ("source", obj(vec![("persistentVolumeName", Schema::String), ("inlineVolumeSpec", Schema::Any)])),
                    ("nodeName", Schema::String),
                ]),
            ),
            (
                "status",
                obj(vec![
                    ("attached", Schema::Bool),
                    ("attachmentMetadata", strings()),
                    ("attachError", obj(vec![("time", Schema::String), ("message", Schema::String), ("errorCode", Schema::Int)])),
                    ("detachError", obj(vec![("time", Schema::String), ("message", Schema::String), ("errorCode", Schema::Int)])),
                ]),
            ),
        ]))
        .strategy(Attachments)
}

#[derive(Debug)]
struct Attachments;

impl Strategy for Attachments {
    fn validate(&self, object: &Value, old: Option<&Value>) -> Vec<Cause> {
        let spec = &object["spec"];
        let mut causes = Vec::new();
        let attacher = spec["attacher"].as_str().unwrap_or("");
        if attacher.is_empty() {
            causes.push(Cause::required("spec.attacher", ""));
        }
        let source = &spec["source"];
        let pv = source.get("persistentVolumeName").filter(|v| !v.is_null());
        let inline = source.get("inlineVolumeSpec").filter(|v| !v.is_null());
        match (pv, inline) {
            (None, None) => causes.push(Cause::required(
                "spec.source",
                "must specify exactly one of inlineVolumeSpec and persistentVolumeName",
            )),
            (Some(_), Some(_)) => causes.push(Cause::forbidden(
                "spec.source",
                "must specify exactly one of inlineVolumeSpec and persistentVolumeName",
            )),
            (Some(name), None) if name.as_str().is_none_or(str::is_empty) => {
                causes.push(Cause::required(
                    "spec.source.persistentVolumeName",
                    "must specify non empty persistentVolumeName",
                ));
            }
            _ => {}
        }
        let node = spec["nodeName"].as_str().unwrap_or("");
        for msg in dns1123_subdomain(node) {
            causes.push(Cause::invalid("spec.nodeName", &json!(node), &msg));
        }
        let metadata_size: usize = object
            .pointer("/status/attachmentMetadata")
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
            .map(|(k, v)| k.len() + v.as_str().map_or(0, str::len))
            .sum();
        if metadata_size > 256 * 1024 {
            causes.push(Cause::too_long("status.attachmentMetadata", 262144));
        }
        if !attacher.is_empty() {
            causes.extend(driver_name(attacher, "spec.attacher"));
        }
        if let Some(name) = pv.and_then(Value::as_str).filter(|n| !n.is_empty()) {
            for msg in dns1123_subdomain(name) {
                causes.push(Cause::invalid(
                    "spec.source.persistentVolumeName",
                    &json!(name),
                    &msg,
                ));
            }
        }
        if let Some(old) = old
            && old["spec"] != *spec
        {
            causes.push(Cause::invalid("spec", spec, "field is immutable"));
        }
        causes
    }
}
