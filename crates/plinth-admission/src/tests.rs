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
    quota::admit(&objects, &ledger, &create(&def, &first, &user))
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
    let refused = quota::admit(&objects, &ledger, &create(&def, &second, &user))
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
    quota::admit(&objects, &ledger, &create(&def, &other, &user))
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
    let refused = quota::admit(&objects, &ledger, &create(&def, &object, &user))
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
    assert_eq!(
        refused.message,
        "ValidatingAdmissionPolicy 'max-keys' with binding 'max-keys' denied request: at most 1 keys in team"
    );

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
