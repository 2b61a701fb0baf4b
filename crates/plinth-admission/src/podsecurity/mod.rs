//! kube's PodSecurity admission plugin: a namespace's `pod-security.kubernetes.io/{enforce,
//! audit,warn}[-version]` labels choose a level of the Pod Security Standards (privileged,
//! baseline, restricted) at a version; a pod that breaks the enforced level is refused, one
//! that breaks the audit level is noted in the audit event, one that breaks the warn level
//! gets a warning — as do workloads whose pod templates would. Exempt users, namespaces and
//! runtime classes come from the plugin's configuration (kube's `PodSecurityConfiguration`).

mod checks;

use std::collections::BTreeMap;

use plinth_core::{ApiError, Cause};
use serde_json::Value;

use super::{Operation, Request, annotate};
use plinth_registry::ListOptions;
use plinth_registry::resources::Objects;

pub use checks::{Forbidden, NEWEST};

/// The label (and audit annotation) prefix.
const PREFIX: &str = "pod-security.kubernetes.io/";

/// A level of the Pod Security Standards.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    /// Unrestricted.
    Privileged,
    /// Known privilege escalations prevented.
    Baseline,
    /// Hardened.
    Restricted,
}

impl Level {
    /// Parses a label's level.
    ///
    /// # Errors
    /// kube's message for anything else.
    pub fn parse(text: &str) -> Result<Self, &'static str> {
        match text {
            "privileged" => Ok(Self::Privileged),
            "baseline" => Ok(Self::Baseline),
            "restricted" => Ok(Self::Restricted),
            _ => Err("must be one of privileged, baseline, restricted"),
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            Self::Privileged => "privileged",
            Self::Baseline => "baseline",
            Self::Restricted => "restricted",
        }
    }
}

/// A version of the standards: `v1.N`, or `latest`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    /// The newest.
    Latest,
    /// `v1.N`.
    Minor(u32),
}

impl Version {
    /// Parses a label's version.
    ///
    /// # Errors
    /// kube's message for anything but `latest` and `v1.N`.
    pub fn parse(text: &str) -> Result<Self, &'static str> {
        const WRONG: &str = "must be \"latest\" or \"v1.x\"";
        if text == "latest" {
            return Ok(Self::Latest);
        }
        let minor = text.strip_prefix("v1.").ok_or(WRONG)?;
        let canonical = minor == "0" || (!minor.starts_with('0') && !minor.is_empty());
        if !canonical || !minor.bytes().all(|b| b.is_ascii_digit()) {
            return Err(WRONG);
        }
        minor.parse().map(Self::Minor).map_err(|_| WRONG)
    }

    fn minor(self) -> u32 {
        match self {
            Self::Latest => NEWEST,
            Self::Minor(m) => m,
        }
    }
}

impl std::fmt::Display for Version {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Latest => f.write_str("latest"),
            Self::Minor(m) => write!(f, "v1.{m}"),
        }
    }
}

/// A level at a version (`restricted:latest`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LevelVersion {
    /// The level.
    pub level: Level,
    /// The version.
    pub version: Version,
}

impl std::fmt::Display for LevelVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.level.as_str(), self.version)
    }
}

impl LevelVersion {
    const PRIVILEGED: Self = Self {
        level: Level::Privileged,
        version: Version::Latest,
    };

    /// What the level forbids in a pod's metadata and spec, as kube words it:
    /// `reason (detail), reason (detail)`; `None` when it allows the pod.
    pub fn forbids(&self, metadata: &Value, spec: &Value) -> Option<String> {
        let found = checks::evaluate(self.level, self.version.minor(), metadata, spec);
        (!found.is_empty()).then(|| {
            found
                .iter()
                .map(|f| {
                    if f.detail.is_empty() {
                        f.reason.clone()
                    } else {
                        format!("{} ({})", f.reason, f.detail)
                    }
                })
                .collect::<Vec<_>>()
                .join(", ")
        })
    }

    /// The reasons alone, as the warnings about existing pods give them.
    fn reasons(&self, metadata: &Value, spec: &Value) -> Option<String> {
        let found = checks::evaluate(self.level, self.version.minor(), metadata, spec);
        (!found.is_empty()).then(|| {
            found
                .iter()
                .map(|f| f.reason.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        })
    }

    fn equivalent(&self, other: &Self) -> bool {
        (self.level == Level::Privileged && other.level == Level::Privileged) || self == other
    }
}

/// The three modes' levels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    /// What is refused.
    pub enforce: LevelVersion,
    /// What is noted in the audit event.
    pub audit: LevelVersion,
    /// What is warned of.
    pub warn: LevelVersion,
}

impl Default for Policy {
    fn default() -> Self {
        Self {
            enforce: LevelVersion::PRIVILEGED,
            audit: LevelVersion::PRIVILEGED,
            warn: LevelVersion::PRIVILEGED,
        }
    }
}

impl Policy {
    fn fully_privileged(&self) -> bool {
        [self.enforce, self.audit, self.warn]
            .iter()
            .all(|lv| lv.level == Level::Privileged)
    }

    fn equivalent(&self, other: &Self) -> bool {
        self.enforce.equivalent(&other.enforce)
            && self.audit.equivalent(&other.audit)
            && self.warn.equivalent(&other.warn)
    }

    /// The policy a namespace's labels choose over `defaults`, with the labels' errors (an
    /// unparseable enforce level enforces `restricted`; audit and warn fail open). Without a
    /// warn level of its own, a stricter enforce level is warned of too.
    pub fn from_labels(labels: &BTreeMap<String, String>, defaults: &Self) -> (Self, Vec<Cause>) {
        let mut policy = *defaults;
        let mut errors = Vec::new();
        let mut check = |label: &str, value: &str, result: Result<(), &str>| {
            if let Err(why) = result {
                errors.push(Cause::invalid(
                    format!("metadata.labels[{PREFIX}{label}]"),
                    &Value::String(value.to_owned()),
                    why,
                ));
            }
        };
        let label = |name: &str| labels.get(&format!("{PREFIX}{name}"));
        let mut has_enforce_level = false;
        for (mode, name) in [(0, "enforce"), (1, "audit"), (2, "warn")] {
            let slot = match mode {
                0 => &mut policy.enforce,
                1 => &mut policy.audit,
                _ => &mut policy.warn,
            };
            if let Some(value) = label(name) {
                let parsed = Level::parse(value);
                slot.level = match parsed {
                    Ok(level) => level,
                    Err(_) if mode == 0 => Level::Restricted,
                    Err(_) => Level::Privileged,
                };
                if mode == 0 {
                    has_enforce_level = parsed.is_ok();
                }
                check(name, value, parsed.map(|_| ()));
            }
            let version_label = format!("{name}-version");
            if let Some(value) = label(&version_label) {
                let parsed = Version::parse(value);
                slot.version = parsed.unwrap_or(Version::Latest);
                check(&version_label, value, parsed.map(|_| ()));
            }
        }
        if label("warn").is_none() && has_enforce_level && policy.enforce.level > policy.warn.level
        {
            policy.warn.level = policy.enforce.level;
            if label("warn-version").is_none() {
                policy.warn.version = policy.enforce.version;
            }
        }
        (policy, errors)
    }
}

/// The plugin's configuration (kube's `PodSecurityConfiguration`): the policy of namespaces
/// without labels, and who is never checked.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Config {
    /// The policy of unlabelled namespaces.
    pub defaults: Policy,
    /// Users never checked.
    pub exempt_users: Vec<String>,
    /// Namespaces never checked.
    pub exempt_namespaces: Vec<String>,
    /// Runtime classes never checked.
    pub exempt_runtime_classes: Vec<String>,
}

impl Config {
    /// Reads a `pod-security.admission.config.k8s.io` `PodSecurityConfiguration`.
    ///
    /// # Errors
    /// What is wrong with it, naming the field.
    pub fn from_value(configuration: &Value) -> Result<Self, String> {
        let defaults = &configuration["defaults"];
        let mut labels = BTreeMap::new();
        for field in [
            "enforce",
            "enforce-version",
            "audit",
            "audit-version",
            "warn",
            "warn-version",
        ] {
            match &defaults[field] {
                Value::Null => {}
                Value::String(s) => {
                    labels.insert(format!("{PREFIX}{field}"), s.clone());
                }
                other => return Err(format!("defaults.{field}: not a string: {other}")),
            }
        }
        let (policy, errors) = Policy::from_labels(&labels, &Policy::default());
        if let Some(error) = errors.first() {
            // The labels' causes, named as the configuration's fields.
            let field = error
                .field
                .trim_start_matches(&format!("metadata.labels[{PREFIX}"))
                .trim_end_matches(']');
            return Err(format!("defaults.{field}: {}", error.message));
        }
        let list = |field: &str| -> Result<Vec<String>, String> {
            match &configuration["exemptions"][field] {
                Value::Null => Ok(Vec::new()),
                Value::Array(items) => items
                    .iter()
                    .map(|i| {
                        i.as_str()
                            .map(str::to_owned)
                            .ok_or_else(|| format!("exemptions.{field}: not a string: {i}"))
                    })
                    .collect(),
                other => Err(format!("exemptions.{field}: not a list: {other}")),
            }
        };
        Ok(Self {
            defaults: policy,
            exempt_users: list("usernames")?,
            exempt_namespaces: list("namespaces")?,
            exempt_runtime_classes: list("runtimeClasses")?,
        })
    }
}

/// The resources whose objects carry a pod template that workloads' warnings cover.
const TEMPLATES: [(&str, &str, &str); 8] = [
    ("", "replicationcontrollers", "/spec/template"),
    ("", "podtemplates", "/template"),
    ("apps", "replicasets", "/spec/template"),
    ("apps", "deployments", "/spec/template"),
    ("apps", "statefulsets", "/spec/template"),
    ("apps", "daemonsets", "/spec/template"),
    ("batch", "jobs", "/spec/template"),
    ("batch", "cronjobs", "/spec/jobTemplate/spec/template"),
];

/// Pod subresources the plugin lets through unchecked.
const IGNORED_POD_SUBRESOURCES: [&str; 8] = [
    "exec",
    "attach",
    "binding",
    "eviction",
    "log",
    "portforward",
    "proxy",
    "status",
];

/// Admits a write: a pod (enforce, audit, warn), a workload's pod template (audit, warn), a
/// Namespace (its labels parsed; a stricter enforce level warns of existing pods that break
/// it). Returns the warnings.
///
/// # Errors
/// 403 with kube's "violates PodSecurity" message for a pod the enforced level refuses; 422
/// for a Namespace whose labels do not parse.
pub async fn admit(
    config: &Config,
    objects: &dyn Objects,
    request: &Request<'_>,
    object: Option<&Value>,
    old: Option<&Value>,
) -> Result<Vec<String>, ApiError> {
    if !matches!(request.operation, Operation::Create | Operation::Update) {
        return Ok(Vec::new());
    }
    let Some(object) = object else {
        return Ok(Vec::new());
    };
    let def = request.def;
    let group = def.group_version.group.as_str();
    match (group, def.plural.as_str()) {
        ("", "namespaces") => namespace(config, objects, request, object, old).await,
        ("", "pods") => {
            if IGNORED_POD_SUBRESOURCES.contains(&request.subresource) {
                return Ok(Vec::new());
            }
            if let Some(old) = old
                && !significant_update(object, old)
            {
                return Ok(Vec::new());
            }
            let metadata = &object["metadata"];
            evaluate(config, objects, request, metadata, &object["spec"], true).await
        }
        (group, plural) => {
            let Some((_, _, template)) = TEMPLATES
                .iter()
                .find(|(g, p, _)| *g == group && *p == plural)
            else {
                return Ok(Vec::new());
            };
            if !request.subresource.is_empty() {
                return Ok(Vec::new());
            }
            let Some(template) = object.pointer(template).filter(|t| t.is_object()) else {
                return Ok(Vec::new());
            };
            let metadata = &template["metadata"];
            evaluate(config, objects, request, metadata, &template["spec"], false).await
        }
    }
}

fn exempt(list: &[String], name: &str) -> bool {
    !name.is_empty() && list.iter().any(|n| n == name)
}

fn labels_of(object: &Value) -> BTreeMap<String, String> {
    object["metadata"]["labels"]
        .as_object()
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
        .collect()
}

/// An update that matters to the standards: containers added or removed, or an image
/// changed (kube checks nothing else, as nothing else of a pod's security can change).
fn significant_update(pod: &Value, old: &Value) -> bool {
    let list = |o: &'_ Value, field: &str| -> Vec<Value> {
        o["spec"][field].as_array().cloned().unwrap_or_default()
    };
    for field in ["containers", "initContainers"] {
        let (new, before) = (list(pod, field), list(old, field));
        if new.len() != before.len()
            || new
                .iter()
                .zip(&before)
                .any(|(a, b)| a["image"] != b["image"])
        {
            return true;
        }
    }
    let before = list(old, "ephemeralContainers");
    list(pod, "ephemeralContainers").iter().any(|c| {
        before
            .iter()
            .find(|b| b["name"] == c["name"])
            .is_none_or(|b| b["image"] != c["image"])
    })
}

/// Evaluates a pod (or a pod template: `enforce` false) against its namespace's policy.
async fn evaluate(
    config: &Config,
    objects: &dyn Objects,
    request: &Request<'_>,
    metadata: &Value,
    spec: &Value,
    enforce: bool,
) -> Result<Vec<String>, ApiError> {
    let namespace = request.namespace.unwrap_or_default();
    let reason = |why: &str| annotate(format!("{PREFIX}exempt"), why.to_owned());
    if exempt(&config.exempt_namespaces, namespace) {
        reason("namespace");
        return Ok(Vec::new());
    }
    if exempt(&config.exempt_users, &request.user.name) {
        reason("user");
        return Ok(Vec::new());
    }
    let labels = match request.namespace_object {
        Some(ns) => labels_of(ns),
        None => objects
            .namespace(namespace)
            .await
            .map(|ns| labels_of(&ns))
            .unwrap_or_default(),
    };
    let (policy, errors) = Policy::from_labels(&labels, &config.defaults);
    if errors.is_empty() && policy.fully_privileged() {
        if enforce {
            annotate(
                format!("{PREFIX}enforce-policy"),
                LevelVersion::PRIVILEGED.to_string(),
            );
        }
        return Ok(Vec::new());
    }
    if !enforce
        && errors.is_empty()
        && policy.warn.level == Level::Privileged
        && policy.audit.level == Level::Privileged
    {
        return Ok(Vec::new());
    }
    if exempt(
        &config.exempt_runtime_classes,
        spec["runtimeClassName"].as_str().unwrap_or_default(),
    ) {
        reason("runtimeClass");
        return Ok(Vec::new());
    }
    if !errors.is_empty() {
        let lines: Vec<String> = errors.iter().map(Cause::line).collect();
        let errors = match lines.as_slice() {
            [one] => one.clone(),
            many => format!("[{}]", many.join(", ")),
        };
        annotate(
            format!("{PREFIX}error"),
            format!("Failed to parse policy: {errors}"),
        );
    }
    let mut results: Vec<(LevelVersion, Option<String>)> = Vec::new();
    let mut result = |lv: LevelVersion| -> Option<String> {
        if let Some((_, found)) = results.iter().find(|(seen, _)| *seen == lv) {
            return found.clone();
        }
        let found = lv.forbids(metadata, spec);
        results.push((lv, found.clone()));
        found
    };
    if enforce {
        annotate(
            format!("{PREFIX}enforce-policy"),
            policy.enforce.to_string(),
        );
        if let Some(detail) = result(policy.enforce) {
            let name = metadata["name"]
                .as_str()
                .filter(|n| !n.is_empty())
                .unwrap_or(request.name);
            return Err(ApiError::forbidden(
                Some(&request.def.group_resource()),
                name,
                &format!(
                    "violates PodSecurity {:?}: {detail}",
                    policy.enforce.to_string()
                ),
            ));
        }
    }
    if let Some(detail) = result(policy.audit) {
        annotate(
            format!("{PREFIX}audit-violations"),
            format!(
                "would violate PodSecurity {:?}: {detail}",
                policy.audit.to_string()
            ),
        );
    }
    Ok(result(policy.warn)
        .map(|detail| {
            format!(
                "would violate PodSecurity {:?}: {detail}",
                policy.warn.to_string()
            )
        })
        .into_iter()
        .collect())
}

/// A Namespace's labels: refused when they do not parse (unless an update keeps the same
/// errors); a stricter enforce level warns of the existing pods that break it.
async fn namespace(
    config: &Config,
    objects: &dyn Objects,
    request: &Request<'_>,
    object: &Value,
    old: Option<&Value>,
) -> Result<Vec<String>, ApiError> {
    if !request.subresource.is_empty() {
        return Ok(Vec::new());
    }
    let name = object["metadata"]["name"].as_str().unwrap_or(request.name);
    let labels = labels_of(object);
    let (policy, errors) = Policy::from_labels(&labels, &config.defaults);
    let old_policy = old.map(|o| Policy::from_labels(&labels_of(o), &config.defaults));
    let invalid = || Err(ApiError::invalid("", "Namespace", name, errors.clone()));
    let exempt_warning = || -> Vec<String> {
        exempt_namespace_warning(name, &policy, &labels, &config.defaults)
            .into_iter()
            .collect()
    };
    let Some((old_policy, old_errors)) = old_policy else {
        if !errors.is_empty() {
            return invalid();
        }
        if exempt(&config.exempt_namespaces, name) {
            return Ok(exempt_warning());
        }
        return Ok(Vec::new());
    };
    if !errors.is_empty() && (old_errors.is_empty() || old_errors != errors) {
        return invalid();
    }
    let (new, before) = (policy.enforce, old_policy.enforce);
    if new == before
        || new.level == Level::Privileged
        || (new.version == before.version && new.level <= before.level)
    {
        return Ok(Vec::new());
    }
    if exempt(&config.exempt_namespaces, name) {
        return Ok(exempt_warning());
    }
    existing_pods(config, objects, name, new).await
}

/// kube's warning when an exempt namespace is given a policy.
fn exempt_namespace_warning(
    name: &str,
    policy: &Policy,
    labels: &BTreeMap<String, String>,
    defaults: &Policy,
) -> Option<String> {
    if policy.fully_privileged() || policy.equivalent(defaults) {
        return None;
    }
    let has = |mode: &str| {
        labels.contains_key(&format!("{PREFIX}{mode}"))
            || labels.contains_key(&format!("{PREFIX}{mode}-version"))
    };
    let parts: Vec<String> = [
        ("enforce", policy.enforce),
        ("audit", policy.audit),
        ("warn", policy.warn),
    ]
    .into_iter()
    .filter(|(mode, lv)| lv.level != Level::Privileged && has(mode))
    .map(|(mode, lv)| format!("{mode}={lv}"))
    .collect();
    Some(format!(
        "namespace {name:?} is exempt from Pod Security, and the policy ({}) will be ignored",
        parts.join(", ")
    ))
}

/// The most pods a namespace's new enforce level is checked against.
const MAX_PODS_CHECKED: usize = 3000;

/// Warnings for the existing pods of `namespace` that break `enforce`: one per distinct set
/// of reasons, naming the first pod (by name) and how many others; the first pod of each
/// controller is checked before the rest of its replicas.
async fn existing_pods(
    config: &Config,
    objects: &dyn Objects,
    namespace: &str,
    enforce: LevelVersion,
) -> Result<Vec<String>, ApiError> {
    let Some(pods) = objects.resource("", "v1", "pods") else {
        return Ok(Vec::new());
    };
    let Ok(list) = objects
        .list(&pods, Some(namespace), &ListOptions::any_state())
        .await
    else {
        return Ok(vec![
            "failed to list pods while checking new PodSecurity enforce level".to_owned(),
        ]);
    };
    let items = list["items"].as_array().cloned().unwrap_or_default();
    let mut first = Vec::new();
    let mut replicas = Vec::new();
    let mut controllers = std::collections::BTreeSet::new();
    for pod in &items {
        let class = pod["spec"]["runtimeClassName"].as_str().unwrap_or_default();
        if exempt(&config.exempt_runtime_classes, class) {
            continue;
        }
        let controller = pod["metadata"]["ownerReferences"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|r| r["controller"] == true)
            .and_then(|r| r["uid"].as_str());
        match controller {
            Some(uid) if !controllers.insert(uid.to_owned()) => replicas.push(pod),
            _ => first.push(pod),
        }
    }
    first.extend(replicas);
    let total = first.len();
    first.truncate(MAX_PODS_CHECKED);
    // For each distinct set of reasons: the first pod by name, and how many pods.
    let mut seen: Vec<(String, String, usize)> = Vec::new();
    for pod in &first {
        let Some(reasons) = enforce.reasons(&pod["metadata"], &pod["spec"]) else {
            continue;
        };
        let name = pod["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        match seen.iter_mut().find(|(r, _, _)| *r == reasons) {
            Some((_, first_name, count)) => {
                *count += 1;
                if name < *first_name {
                    *first_name = name;
                }
            }
            None => seen.push((reasons, name, 1)),
        }
    }
    let mut warnings = Vec::new();
    if first.len() < total {
        warnings.push(format!(
            "new PodSecurity enforce level only checked against the first {} of {total} existing pods",
            first.len()
        ));
    }
    if !seen.is_empty() {
        warnings.push(format!(
            "existing pods in namespace {namespace:?} violate the new PodSecurity enforce level {:?}",
            enforce.to_string()
        ));
    }
    let mut pods: Vec<String> = seen
        .into_iter()
        .map(|(reasons, name, count)| match count {
            1 => format!("{name}: {reasons}"),
            2 => format!("{name} (and 1 other pod): {reasons}"),
            n => format!("{name} (and {} other pods): {reasons}", n - 1),
        })
        .collect();
    pods.sort();
    warnings.extend(pods);
    Ok(warnings)
}

#[cfg(test)]
mod tests;
