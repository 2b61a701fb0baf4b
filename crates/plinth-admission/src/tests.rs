//! Each admission plugin on its own: objects held in memory behind [`Objects`] (what a
//! lister over the watch cache gives a plugin), no registry, no storage, no HTTP.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use plinth_core::{ApiError, StatusReason};
use serde_json::{Value, json};

use super::{Admission, Operation, Request, policy, quota};
use plinth_registry::admit::Admit;
use plinth_registry::resources::{Objects, ResourceDef, Resources};
use plinth_registry::user::User;
use plinth_registry::{DeleteOptions, ListOptions, Part, WriteOptions};

/// Objects in memory, by storage key: a lister and a writer, nothing more.
struct Memory {
    resources: Resources,
    objects: Mutex<BTreeMap<String, Value>>,
    /// How many writes went through [`Objects::modify`].
    writes: Mutex<usize>,
}

impl Memory {
    fn with(objects: &[Value]) -> Self {
        let memory = Self {
            resources: Resources::with(plinth_types::builtin()),
            objects: Mutex::default(),
            writes: Mutex::default(),
        };
        for object in objects {
            memory.put(object.clone());
        }
        memory
    }

    fn def_of(&self, object: &Value) -> Arc<ResourceDef> {
        let api_version = object["apiVersion"].as_str().unwrap_or("");
        let kind = object["kind"].as_str().unwrap_or("");
        self.resources
            .all()
            .into_iter()
            .find(|d| d.group_version.api_version() == api_version && d.kind == kind)
            .unwrap_or_else(|| panic!("{api_version} {kind} is not served"))
    }

    fn put(&self, object: Value) {
        let def = self.def_of(&object);
        let key = def.key(
            plinth_core::meta::namespace(&object),
            plinth_core::meta::name(&object).unwrap_or(""),
        );
        self.objects.lock().unwrap().insert(key, object);
    }

    fn read(&self, def: &ResourceDef, namespace: Option<&str>, name: &str) -> Option<Value> {
        let key = def.key(namespace, name);
        self.objects.lock().unwrap().get(&key).cloned()
    }
}

#[async_trait::async_trait]
impl plinth_registry::services::ServiceResolver for Memory {
    async fn resolve(
        &self,
        namespace: &str,
        name: &str,
        port: u16,
    ) -> Result<std::net::SocketAddr, plinth_registry::services::Unresolved> {
        let def = |plural| self.resources.get("", "v1", plural);
        let read = |plural| def(plural).and_then(|d| self.read(&d, Some(namespace), name));
        plinth_registry::services::endpoint_of(
            name,
            read("services").as_ref(),
            read("endpoints").as_ref(),
            port,
        )
    }
}

#[async_trait::async_trait]
impl Objects for Memory {
    fn resource(&self, group: &str, version: &str, plural: &str) -> Option<Arc<ResourceDef>> {
        self.resources.get(group, version, plural)
    }

    fn resources(&self) -> Vec<Arc<ResourceDef>> {
        self.resources.all()
    }

    fn cached(
        &self,
        def: &ResourceDef,
        namespace: Option<&str>,
        name: &str,
    ) -> Option<Option<Value>> {
        Some(self.read(def, namespace, name))
    }

    async fn get(
        &self,
        def: &ResourceDef,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Value, ApiError> {
        self.read(def, namespace, name)
            .ok_or_else(|| ApiError::not_found(&def.group_resource(), name))
    }

    async fn list(
        &self,
        def: &ResourceDef,
        namespace: Option<&str>,
        options: &ListOptions,
    ) -> Result<Value, ApiError> {
        let prefix = match namespace {
            Some(ns) => format!("{}{ns}/", def.key_prefix()),
            None => def.key_prefix(),
        };
        let items: Vec<Value> = self
            .objects
            .lock()
            .unwrap()
            .range(prefix.clone()..)
            .take_while(|(k, _)| k.starts_with(&prefix))
            .map(|(_, v)| v.clone())
            .filter(|v| options.labels.matches(&plinth_core::meta::labels(v)))
            .collect();
        Ok(json!({"items": items}))
    }

    async fn modify(
        &self,
        def: &ResourceDef,
        namespace: Option<&str>,
        name: &str,
        _part: Part,
        _options: &WriteOptions,
        change: &(dyn for<'v> Fn(&'v mut Value) -> Result<bool, ApiError> + Sync),
    ) -> Result<Option<Value>, ApiError> {
        let mut object = self
            .read(def, namespace, name)
            .ok_or_else(|| ApiError::not_found(&def.group_resource(), name))?;
        if !change(&mut object)? {
            return Ok(None);
        }
        *self.writes.lock().unwrap() += 1;
        self.put(object.clone());
        Ok(Some(object))
    }

    async fn delete(
        &self,
        def: &ResourceDef,
        namespace: Option<&str>,
        name: &str,
        _options: &DeleteOptions,
    ) -> Result<(), ApiError> {
        let key = def.key(namespace, name);
        self.objects
            .lock()
            .unwrap()
            .remove(&key)
            .map(drop)
            .ok_or_else(|| ApiError::not_found(&def.group_resource(), name))
    }
}

fn namespace(name: &str, labels: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}})
}

fn config_map(namespace: &str, name: &str, data: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": name, "namespace": namespace}, "data": data})
}

/// A create of `object` by `user`, as the registry hands it to admission.
fn create<'a>(def: &'a ResourceDef, object: &'a Value, user: &'a User) -> Request<'a> {
    Request {
        operation: Operation::Create,
        def,
        subresource: "",
        namespace: plinth_core::meta::namespace(object),
        name: plinth_core::meta::name(object).unwrap_or(""),
        namespace_object: None,
        user,
        dry_run: false,
        options: json!({"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"}),
    }
}

fn configmaps() -> Arc<ResourceDef> {
    Arc::new(plinth_types::core::configmap::resource())
}

#[tokio::test]
async fn quota_counts_creates_and_refuses_past_hard_with_kubes_message() {
    let objects = Memory::with(&[
        namespace("team", json!({})),
        json!({"apiVersion": "v1", "kind": "ResourceQuota",
               "metadata": {"name": "small", "namespace": "team"},
               "spec": {"hard": {"count/configmaps": "2"}},
               "status": {"hard": {"count/configmaps": "2"}, "used": {"count/configmaps": "1"}}}),
    ]);
    let (def, ledger, user) = (
        configmaps(),
        quota::Ledger::default(),
        User::new("alice", &[]),
    );

    let first = config_map("team", "a", json!({}));
    quota::admit(
        &objects,
        &ledger,
        &create(&def, &first, &user),
        Some(&first),
        None,
    )
    .await
    .expect("one place is left");
    let quota = objects
        .read(
            &objects.def_of(&json!({"apiVersion": "v1", "kind": "ResourceQuota"})),
            Some("team"),
            "small",
        )
        .unwrap();
    assert_eq!(quota["status"]["used"]["count/configmaps"], "2");
    assert!(
        ledger.counted_at("team", "small").is_some(),
        "the controller is told"
    );

    let second = config_map("team", "b", json!({}));
    let refused = quota::admit(
        &objects,
        &ledger,
        &create(&def, &second, &user),
        Some(&second),
        None,
    )
    .await
    .expect_err("the quota is full");
    assert_eq!(refused.reason, StatusReason::Forbidden);
    assert_eq!(
        refused.message,
        "configmaps \"b\" is forbidden: exceeded quota: small, requested: count/configmaps=1, used: count/configmaps=2, limited: count/configmaps=2"
    );
    assert_eq!(
        *objects.writes.lock().unwrap(),
        1,
        "a refusal writes nothing"
    );

    // Elsewhere, and on a dry run, nothing is counted.
    let other = config_map("free", "c", json!({}));
    quota::admit(
        &objects,
        &ledger,
        &create(&def, &other, &user),
        Some(&other),
        None,
    )
    .await
    .expect("no quota in that namespace");
    assert_eq!(*objects.writes.lock().unwrap(), 1);
}

#[tokio::test]
async fn quota_without_a_counted_hard_limit_is_status_unknown() {
    let objects = Memory::with(&[json!({"apiVersion": "v1", "kind": "ResourceQuota",
        "metadata": {"name": "new", "namespace": "team"},
        "spec": {"hard": {"configmaps": "5"}}})]);
    let (def, ledger, user) = (
        configmaps(),
        quota::Ledger::default(),
        User::new("alice", &[]),
    );
    let object = config_map("team", "a", json!({}));
    let refused = quota::admit(
        &objects,
        &ledger,
        &create(&def, &object, &user),
        Some(&object),
        None,
    )
    .await
    .expect_err("the controller has not counted yet");
    assert_eq!(
        refused.message,
        "configmaps \"a\" is forbidden: status unknown for quota: new, resource: configmaps"
    );
}

fn policy_objects(with_param: bool) -> Memory {
    let mut objects = vec![
        namespace("team", json!({"env": "prod"})),
        json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
               "metadata": {"name": "max-keys"},
               "spec": {"failurePolicy": "Fail",
                        "paramKind": {"apiVersion": "v1", "kind": "ConfigMap"},
                        "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                            "operations": ["CREATE"], "resources": ["configmaps"]}]},
                        "validations": [{
                            "expression": "size(object.data) <= int(params.data.max)",
                            "messageExpression": "'at most ' + params.data.max + ' keys in ' + namespaceObject.metadata.name"}]}}),
        json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
               "metadata": {"name": "max-keys"},
               "spec": {"policyName": "max-keys", "validationActions": ["Deny"],
                        "paramRef": {"name": "limits", "namespace": "policy", "parameterNotFoundAction": "Deny"},
                        "matchResources": {"namespaceSelector": {"matchLabels": {"env": "prod"}}}}}),
    ];
    if with_param {
        objects.push(config_map("policy", "limits", json!({"max": "1"})));
    }
    Memory::with(&objects)
}

fn admission_with_policies(objects: &Memory) -> Admission {
    let admission = Admission::default();
    let mut policies = policy::Policies::default();
    let all = objects.objects.lock().unwrap().clone();
    for object in all.values() {
        match object["kind"].as_str() {
            Some("ValidatingAdmissionPolicy") => {
                let policy = policy::Policy::parse(object).expect("the policy compiles");
                let name = plinth_core::meta::name(object).unwrap_or("").to_owned();
                policies.policies.insert(name, Arc::new(policy));
            }
            Some("ValidatingAdmissionPolicyBinding") => policies
                .bindings
                .push(Arc::new(policy::Binding::parse(object).expect("a binding"))),
            _ => {}
        }
    }
    admission.set_policies(policies);
    admission
}

#[tokio::test]
async fn a_policy_reads_its_params_and_namespace_through_the_listers() {
    let objects = policy_objects(true);
    let admission = admission_with_policies(&objects);
    let (def, user) = (configmaps(), User::new("alice", &[]));

    let small = config_map("team", "small", json!({"a": "1"}));
    Admit::validate(
        &admission,
        &objects,
        &create(&def, &small, &user),
        Some(&small),
        None,
    )
    .await
    .expect("within the param's limit");

    let big = config_map("team", "big", json!({"a": "1", "b": "2"}));
    let refused = Admit::validate(
        &admission,
        &objects,
        &create(&def, &big, &user),
        Some(&big),
        None,
    )
    .await
    .expect_err("over the limit");
    assert_eq!(refused.reason, StatusReason::Invalid);
    assert_eq!(refused.code(), 422);
    // kube's shape: admission's Forbidden message and details, the policy's reason.
    let denial = "ValidatingAdmissionPolicy 'max-keys' with binding 'max-keys' denied request: at most 1 keys in team";
    assert_eq!(
        refused.message,
        format!("configmaps \"big\" is forbidden: {denial}")
    );
    assert_eq!(refused.details.kind.as_deref(), Some("configmaps"));
    assert_eq!(refused.details.name.as_deref(), Some("big"));
    assert_eq!(refused.details.causes.len(), 1);
    assert_eq!(refused.details.causes[0].message, denial);
    assert_eq!(refused.details.causes[0].field, "");

    // The namespace selector is matched against the namespace's labels: elsewhere, no policy.
    let elsewhere = config_map("dev", "big", json!({"a": "1", "b": "2"}));
    Admit::validate(
        &admission,
        &objects,
        &create(&def, &elsewhere, &user),
        Some(&elsewhere),
        None,
    )
    .await
    .expect("the binding selects prod namespaces only");
}

#[tokio::test]
async fn a_policy_whose_param_is_missing_denies_as_its_binding_says() {
    let objects = policy_objects(false);
    let admission = admission_with_policies(&objects);
    let (def, user) = (configmaps(), User::new("alice", &[]));
    let object = config_map("team", "a", json!({}));
    let refused = Admit::validate(
        &admission,
        &objects,
        &create(&def, &object, &user),
        Some(&object),
        None,
    )
    .await
    .expect_err("parameterNotFoundAction: Deny");
    assert!(
        refused
            .message
            .contains("no params found for policy binding with `Deny` parameterNotFoundAction"),
        "{}",
        refused.message
    );
}

#[tokio::test]
async fn limit_ranger_gives_a_new_pods_containers_the_namespaces_defaults() {
    let objects = Memory::with(&[json!({"apiVersion": "v1", "kind": "LimitRange",
        "metadata": {"name": "defaults", "namespace": "team"},
        "spec": {"limits": [{"type": "Container",
            "default": {"memory": "256Mi"}, "defaultRequest": {"cpu": "100m", "memory": "128Mi"}}]}})]);
    let mut pod = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p", "namespace": "team"},
        "spec": {"containers": [
            {"name": "a", "image": "busybox"},
            {"name": "b", "image": "busybox", "resources": {"requests": {"cpu": "1"}}}]}});
    plinth_types::core::limitrange::admit(&objects, &mut pod)
        .await
        .expect("LimitRanger admits");
    let containers = &pod["spec"]["containers"];
    assert_eq!(containers[0]["resources"]["limits"]["memory"], "256Mi");
    assert_eq!(containers[0]["resources"]["requests"]["cpu"], "100m");
    assert_eq!(
        containers[1]["resources"]["requests"]["cpu"], "1",
        "a given request stays"
    );
    assert_eq!(containers[1]["resources"]["requests"]["memory"], "128Mi");

    // A namespace without LimitRanges changes nothing.
    let mut elsewhere = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p", "namespace": "free"},
        "spec": {"containers": [{"name": "a", "image": "busybox"}]}});
    let before = elsewhere.clone();
    plinth_types::core::limitrange::admit(&objects, &mut elsewhere)
        .await
        .expect("nothing to apply");
    assert_eq!(elsewhere, before);
}

#[tokio::test]
async fn webhooks_are_matched_on_the_namespaces_labels_read_once() {
    // A mutating webhook that selects prod namespaces, pointing nowhere: a write that it
    // matches fails to call it (failurePolicy: Fail), one that it does not goes through.
    let objects = Memory::with(&[
        namespace("prod", json!({"env": "prod"})),
        namespace("dev", json!({})),
    ]);
    let admission = Admission::default();
    admission.set(
        true,
        super::webhook::parse(
            &json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
                    "metadata": {"name": "m"},
                    "webhooks": [{"name": "m.example.com", "failurePolicy": "Fail", "sideEffects": "None",
                                  "admissionReviewVersions": ["v1"], "timeoutSeconds": 1,
                                  "clientConfig": {"url": "https://127.0.0.1:9/none"},
                                  "namespaceSelector": {"matchLabels": {"env": "prod"}},
                                  "rules": [{"apiGroups": [""], "apiVersions": ["v1"],
                                             "operations": ["CREATE"], "resources": ["configmaps"]}]}]}),
            true,
        ),
    );
    let (def, user) = (configmaps(), User::new("alice", &[]));
    let unchanged = config_map("dev", "a", json!({}));
    let mut dev = unchanged.clone();
    let request = create(&def, &unchanged, &user);
    Admit::mutate(&admission, &objects, &request, &mut dev, None)
        .await
        .expect("not selected: not called");
    assert_eq!(dev, unchanged);

    let sent = config_map("prod", "a", json!({}));
    let mut prod = sent.clone();
    let request = create(&def, &sent, &user);
    let failed = Admit::mutate(&admission, &objects, &request, &mut prod, None)
        .await
        .expect_err("selected: called, and nothing answers");
    assert!(
        failed
            .message
            .contains("failed calling webhook \"m.example.com\""),
        "{}",
        failed.message
    );
}

fn pod(spec: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"},
        "spec": spec})
}

#[tokio::test]
async fn priority_gives_pods_their_class_value_or_the_default_and_refuses_unknown_classes() {
    use plinth_types::scheduling::priorityclass::admit_pod;
    let class = |name: &str, value: i64, default: bool| {
        json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
            "metadata": {"name": name}, "value": value, "globalDefault": default,
            "preemptionPolicy": "Never"})
    };
    let objects = Memory::with(&[class("high", 1000, false)]);
    let mut named = pod(json!({"priorityClassName": "high", "containers": []}));
    admit_pod(&objects, &mut named).await.unwrap();
    assert_eq!(named["spec"]["priority"], 1000);
    assert_eq!(named["spec"]["preemptionPolicy"], "Never");
    let mut plain = pod(json!({"containers": []}));
    admit_pod(&objects, &mut plain).await.unwrap();
    assert_eq!(plain["spec"]["priority"], 0);
    assert_eq!(plain["spec"]["preemptionPolicy"], "PreemptLowerPriority");
    let mut unknown = pod(json!({"priorityClassName": "nope"}));
    let refused = admit_pod(&objects, &mut unknown).await.unwrap_err();
    assert_eq!(refused.reason, StatusReason::Forbidden);
    assert_eq!(
        refused.message,
        "pods \"p\" is forbidden: no PriorityClass with name nope was found"
    );
    let mut given = pod(json!({"priorityClassName": "high", "priority": 3}));
    assert!(admit_pod(&objects, &mut given).await.is_err());
    // A global default (the lowest of several) is given to pods that name no class.
    let objects = Memory::with(&[class("b", 20, true), class("a", 10, true)]);
    let mut defaulted = pod(json!({}));
    admit_pod(&objects, &mut defaulted).await.unwrap();
    assert_eq!(defaulted["spec"]["priorityClassName"], "a");
    assert_eq!(defaulted["spec"]["priority"], 10);
}

#[tokio::test]
async fn runtime_class_gives_overhead_selector_and_tolerations_and_refuses_conflicts() {
    use plinth_types::node::runtimeclass::admit_pod;
    let objects = Memory::with(&[
        json!({"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass",
        "metadata": {"name": "boxed"}, "handler": "runsc",
        "overhead": {"podFixed": {"cpu": "250m"}},
        "scheduling": {"nodeSelector": {"sandbox": "yes"},
            "tolerations": [{"key": "sandbox", "operator": "Exists"}]}}),
    ]);
    let mut boxed = pod(json!({"runtimeClassName": "boxed", "nodeSelector": {"disk": "ssd"}}));
    admit_pod(&objects, &mut boxed).await.unwrap();
    assert_eq!(boxed["spec"]["overhead"], json!({"cpu": "250m"}));
    assert_eq!(
        boxed["spec"]["nodeSelector"],
        json!({"disk": "ssd", "sandbox": "yes"})
    );
    assert_eq!(
        boxed["spec"]["tolerations"],
        json!([{"key": "sandbox", "operator": "Exists"}])
    );
    // The same overhead written differently is the same overhead.
    let mut same = pod(json!({"runtimeClassName": "boxed", "overhead": {"cpu": "0.25"}}));
    admit_pod(&objects, &mut same).await.unwrap();
    let mut other = pod(json!({"runtimeClassName": "boxed", "overhead": {"cpu": "1"}}));
    assert!(admit_pod(&objects, &mut other).await.is_err());
    let mut conflict = pod(json!({"runtimeClassName": "boxed", "nodeSelector": {"sandbox": "no"}}));
    let refused = admit_pod(&objects, &mut conflict).await.unwrap_err();
    assert!(refused.message.contains("conflict: runtimeClass.scheduling.nodeSelector[sandbox] = yes; pod.spec.nodeSelector[sandbox] = no"), "{}", refused.message);
    let mut missing = pod(json!({"runtimeClassName": "gone"}));
    assert!(admit_pod(&objects, &mut missing).await.is_err());
    let mut stray = pod(json!({"overhead": {"cpu": "1"}}));
    assert!(admit_pod(&objects, &mut stray).await.is_err());
}

#[tokio::test]
async fn default_ingress_class_goes_to_ingresses_that_name_none() {
    let objects = Memory::with(&[
        json!({"apiVersion": "networking.k8s.io/v1", "kind": "IngressClass",
            "metadata": {"name": "old", "creationTimestamp": "2026-01-01T00:00:00Z",
                "annotations": {"ingressclass.kubernetes.io/is-default-class": "true"}},
            "spec": {"controller": "example.com/a"}}),
        json!({"apiVersion": "networking.k8s.io/v1", "kind": "IngressClass",
            "metadata": {"name": "new", "creationTimestamp": "2026-06-01T00:00:00Z",
                "annotations": {"ingressclass.kubernetes.io/is-default-class": "true"}},
            "spec": {"controller": "example.com/b"}}),
    ]);
    let def = objects
        .resource("networking.k8s.io", "v1", "ingresses")
        .unwrap();
    let default_class = def.allocate.expect("the DefaultIngressClass plugin");
    let ingress = |spec: Value, annotations: Value| {
        json!({"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
            "metadata": {"name": "i", "namespace": "default", "annotations": annotations},
            "spec": spec})
    };
    let mut plain = ingress(json!({}), json!({}));
    default_class(&objects, &mut plain).await.unwrap();
    assert_eq!(
        plain["spec"]["ingressClassName"], "new",
        "the newest default"
    );
    let mut named = ingress(json!({"ingressClassName": "mine"}), json!({}));
    default_class(&objects, &mut named).await.unwrap();
    assert_eq!(named["spec"]["ingressClassName"], "mine");
    let mut annotated = ingress(json!({}), json!({"kubernetes.io/ingress.class": "legacy"}));
    default_class(&objects, &mut annotated).await.unwrap();
    assert!(annotated["spec"].get("ingressClassName").is_none());
}
