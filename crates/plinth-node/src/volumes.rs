//! A pod's volumes as directories under its own directory: `emptyDir`, `configMap`,
//! `secret`, `downwardAPI`, `projected` (with the ServiceAccount token), `hostPath` and
//! `persistentVolumeClaim` (its bound volume's `hostPath` or `local` directory). The API-backed
//! ones are written again on every sync, so that a changed ConfigMap shows in its files.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use kube::api::Api;
use serde_json::{Value, json};

use crate::agent::Agent;

/// Why a volume cannot be set up (the pod waits, as the kubelet's `FailedMount`).
pub(crate) type MountError = String;

/// Files of a volume: relative path → contents and mode.
type Files = BTreeMap<String, (Vec<u8>, u32)>;

fn pod_value(pod: &Pod) -> Value {
    serde_json::to_value(pod).unwrap_or(Value::Null)
}

/// The directory a volume of the pod at `pod_dir` lives in.
pub(crate) fn volume_dir(pod_dir: &Path, name: &str) -> PathBuf {
    pod_dir.join("volumes").join(name)
}

/// Sets up (or refreshes) every volume of `pod`; returns volume name → host path.
pub(crate) async fn sync(
    agent: &Agent,
    pod: &Pod,
    pod_dir: &Path,
) -> Result<BTreeMap<String, PathBuf>, MountError> {
    let value = pod_value(pod);
    let namespace = pod.metadata.namespace.clone().unwrap_or_default();
    let mut paths = BTreeMap::new();
    let fs_group = value
        .pointer("/spec/securityContext/fsGroup")
        .and_then(Value::as_i64)
        .and_then(|g| u32::try_from(g).ok());
    for volume in value
        .pointer("/spec/volumes")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let name = volume["name"].as_str().unwrap_or("").to_owned();
        let dir = volume_dir(pod_dir, &name);
        let path = if let Some(host) = volume.get("hostPath").filter(|v| v.is_object()) {
            let path = PathBuf::from(host["path"].as_str().unwrap_or("/"));
            let kind = host["type"].as_str().unwrap_or("");
            if kind == "DirectoryOrCreate" {
                std::fs::create_dir_all(&path)
                    .map_err(|e| format!("hostPath {}: {e}", path.display()))?;
            } else if kind == "Directory" && !path.is_dir() {
                return Err(format!(
                    "hostPath type check failed: {} is not a directory",
                    path.display()
                ));
            }
            path
        } else if let Some(claim) = volume
            .get("persistentVolumeClaim")
            .filter(|v| v.is_object())
        {
            claim_path(agent, &namespace, claim["claimName"].as_str().unwrap_or("")).await?
        } else if volume.get("emptyDir").is_some_and(Value::is_object) {
            // Anyone may write it (kube's 0777); with an fsGroup, it is that group's.
            std::fs::create_dir_all(&dir).map_err(|e| format!("emptyDir {name}: {e}"))?;
            if volume.pointer("/emptyDir/medium") == Some(&json!("Memory")) {
                memory(&dir, volume.pointer("/emptyDir/sizeLimit"))
                    .map_err(|e| format!("emptyDir {name}: {e}"))?;
            }
            let mode = if fs_group.is_some() { 0o2777 } else { 0o777 };
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(mode))
                .and_then(|()| own_group(&dir, fs_group))
                .map_err(|e| format!("emptyDir {name}: {e}"))?;
            dir
        } else {
            let files = files_of(agent, pod, &value, volume, &namespace).await?;
            write_files(&dir, &files, fs_group).map_err(|e| format!("volume {name}: {e}"))?;
            dir
        };
        paths.insert(name, path);
    }
    Ok(paths)
}

/// The directory of the volume bound to claim `name`: its PersistentVolume's `hostPath` or
/// `local` path (made if missing).
async fn claim_path(agent: &Agent, namespace: &str, name: &str) -> Result<PathBuf, MountError> {
    use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(agent.client.clone(), namespace);
    let claim = claims
        .get_opt(name)
        .await
        .map_err(|e| e.to_string())?
        .ok_or_else(|| format!("persistentvolumeclaim \"{name}\" not found"))?;
    let volume = claim
        .spec
        .and_then(|s| s.volume_name)
        .filter(|v| !v.is_empty())
        .ok_or_else(|| format!("persistentvolumeclaim \"{name}\" is not bound"))?;
    let volumes: Api<PersistentVolume> = Api::all(agent.client.clone());
    let spec = volumes
        .get(&volume)
        .await
        .map_err(|e| format!("persistentvolume \"{volume}\": {e}"))?
        .spec
        .unwrap_or_default();
    let path = spec
        .host_path
        .map(|h| h.path)
        .or_else(|| spec.local.map(|l| l.path))
        .ok_or_else(|| {
            format!("persistentvolume \"{volume}\" has no local path this node can mount")
        })?;
    let path = PathBuf::from(path);
    std::fs::create_dir_all(&path).map_err(|e| format!("volume {volume}: {e}"))?;
    Ok(path)
}

fn mode(item: &Value, default: u32) -> u32 {
    item.get("mode")
        .and_then(Value::as_u64)
        .and_then(|m| u32::try_from(m).ok())
        .unwrap_or(default)
}

/// The files of the data of a ConfigMap or Secret (`items` picks and renames keys).
fn keyed(
    data: BTreeMap<String, Vec<u8>>,
    source: &Value,
    default: u32,
    files: &mut Files,
    what: &str,
) -> Result<(), MountError> {
    match source.get("items").and_then(Value::as_array) {
        Some(items) if !items.is_empty() => {
            for item in items {
                let key = item["key"].as_str().unwrap_or("");
                let Some(bytes) = data.get(key) else {
                    if source["optional"] == true {
                        continue;
                    }
                    return Err(format!(
                        "configmap references non-existent config key: {key} ({what})"
                    ));
                };
                let path = item["path"].as_str().unwrap_or(key);
                files.insert(path.to_owned(), (bytes.clone(), mode(item, default)));
            }
        }
        _ => {
            for (key, bytes) in data {
                files.insert(key, (bytes, default));
            }
        }
    }
    Ok(())
}

async fn config_map_data(
    agent: &Agent,
    namespace: &str,
    name: &str,
) -> Result<Option<BTreeMap<String, Vec<u8>>>, MountError> {
    let api: Api<ConfigMap> = Api::namespaced(agent.client.clone(), namespace);
    let found = api.get_opt(name).await.map_err(|e| e.to_string())?;
    Ok(found.map(|cm| {
        let mut data: BTreeMap<String, Vec<u8>> = cm
            .data
            .unwrap_or_default()
            .into_iter()
            .map(|(k, v)| (k, v.into_bytes()))
            .collect();
        for (k, v) in cm.binary_data.unwrap_or_default() {
            data.insert(k, v.0);
        }
        data
    }))
}

async fn secret_data(
    agent: &Agent,
    namespace: &str,
    name: &str,
) -> Result<Option<BTreeMap<String, Vec<u8>>>, MountError> {
    let api: Api<Secret> = Api::namespaced(agent.client.clone(), namespace);
    let found = api.get_opt(name).await.map_err(|e| e.to_string())?;
    Ok(found.map(|s| {
        let mut data: BTreeMap<String, Vec<u8>> = s
            .data
            .unwrap_or_default()
            .into_iter()
            .map(|(k, v)| (k, v.0))
            .collect();
        for (k, v) in s.string_data.unwrap_or_default() {
            data.insert(k, v.into_bytes());
        }
        data
    }))
}

/// The value of a `fieldRef` (`metadata.name`, `metadata.labels['x']`, `status.podIP`, …).
pub(crate) fn field_value(pod: &Value, path: &str) -> Option<String> {
    let text = |p: &str| pod.pointer(p).and_then(Value::as_str).map(str::to_owned);
    let pairs = |p: &str| {
        let mut lines: Vec<String> = pod
            .pointer(p)
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
            .map(|(k, v)| format!("{k}={:?}", v.as_str().unwrap_or("")))
            .collect();
        lines.sort();
        lines.join("\n")
    };
    if let Some(key) = path
        .strip_prefix("metadata.labels['")
        .and_then(|k| k.strip_suffix("']"))
    {
        return pod
            .pointer("/metadata/labels")
            .and_then(|l| l.get(key))
            .and_then(Value::as_str)
            .map(str::to_owned);
    }
    if let Some(key) = path
        .strip_prefix("metadata.annotations['")
        .and_then(|k| k.strip_suffix("']"))
    {
        return pod
            .pointer("/metadata/annotations")
            .and_then(|l| l.get(key))
            .and_then(Value::as_str)
            .map(str::to_owned);
    }
    match path {
        "metadata.name" => text("/metadata/name"),
        "metadata.namespace" => text("/metadata/namespace"),
        "metadata.uid" => text("/metadata/uid"),
        "metadata.labels" => Some(pairs("/metadata/labels")),
        "metadata.annotations" => Some(pairs("/metadata/annotations")),
        "spec.nodeName" => text("/spec/nodeName"),
        "spec.serviceAccountName" => text("/spec/serviceAccountName"),
        "status.hostIP" => text("/status/hostIP"),
        "status.podIP" => text("/status/podIP"),
        "status.hostIPs" => text("/status/hostIP"),
        "status.podIPs" => text("/status/podIP"),
        _ => None,
    }
}

/// The value of a `resourceFieldRef` (`limits.cpu`, `requests.memory`, …) of `container`,
/// in units of its `divisor`; a missing limit is the node's capacity, as kube gives it.
pub(crate) fn resource_value(pod: &Value, container: &str, reference: &Value) -> Option<String> {
    let resource = reference["resource"].as_str()?;
    let (kind, name) = resource.split_once('.')?;
    let spec = pod
        .pointer("/spec/containers")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find(|c| c["name"] == reference["containerName"].as_str().unwrap_or(container))?;
    // An unset limit is the node's allocatable amount (the kubelet's rule); an unset
    // request is nothing.
    let value = spec
        .pointer(&format!("/resources/{kind}/{name}"))
        .and_then(plinth_core::quantity::of)
        .unwrap_or_else(|| match (kind, name) {
            ("limits", "cpu") => {
                std::thread::available_parallelism().map_or(1.0, |n| n.get() as f64)
            }
            #[allow(clippy::cast_precision_loss)]
            ("limits", "memory") => crate::node::memory_kib() as f64 * 1024.0,
            ("limits", "ephemeral-storage") => {
                plinth_core::quantity::of(&json!(crate::node::EPHEMERAL_STORAGE)).unwrap_or(0.0)
            }
            _ => 0.0,
        });
    let divisor = reference
        .get("divisor")
        .and_then(plinth_core::quantity::of)
        .filter(|d| *d > 0.0)
        .unwrap_or(1.0);
    Some(format!("{}", (value / divisor).ceil()))
}

fn downward(pod: &Value, items: &[Value], default: u32, files: &mut Files) {
    for item in items {
        let path = item["path"].as_str().unwrap_or("").to_owned();
        let value = if let Some(field) = item.pointer("/fieldRef/fieldPath").and_then(Value::as_str)
        {
            field_value(pod, field).unwrap_or_default()
        } else if let Some(reference) = item.get("resourceFieldRef") {
            resource_value(pod, "", reference).unwrap_or_default()
        } else {
            continue;
        };
        files.insert(path, (value.into_bytes(), mode(item, default)));
    }
}

async fn token(agent: &Agent, pod: &Pod, source: &Value) -> Result<Vec<u8>, MountError> {
    let key = (
        pod.metadata.uid.clone().unwrap_or_default(),
        source["path"].as_str().unwrap_or("token").to_owned(),
    );
    if let Ok(tokens) = agent.tokens.lock()
        && let Some((token, renew_at)) = tokens.get(&key)
        && std::time::Instant::now() < *renew_at
    {
        return Ok(token.clone());
    }
    let seconds = source["expirationSeconds"].as_u64().unwrap_or(3607);
    let token = request_token(agent, pod, source).await?;
    if let Ok(mut tokens) = agent.tokens.lock() {
        let renew_at = std::time::Instant::now() + std::time::Duration::from_secs(seconds * 4 / 5);
        tokens.insert(key, (token.clone(), renew_at));
    }
    Ok(token)
}

/// Forgets a pod's tokens.
pub(crate) fn forget_tokens(agent: &Agent, uid: &str) {
    if let Ok(mut tokens) = agent.tokens.lock() {
        tokens.retain(|(u, _), _| u != uid);
    }
}

async fn request_token(agent: &Agent, pod: &Pod, source: &Value) -> Result<Vec<u8>, MountError> {
    let namespace = pod.metadata.namespace.clone().unwrap_or_default();
    let account = pod
        .spec
        .as_ref()
        .and_then(|s| s.service_account_name.clone())
        .unwrap_or_else(|| "default".into());
    let mut spec = json!({
        "expirationSeconds": source["expirationSeconds"].as_i64().unwrap_or(3607),
        "boundObjectRef": {"apiVersion": "v1", "kind": "Pod",
            "name": pod.metadata.name.clone().unwrap_or_default(),
            "uid": pod.metadata.uid.clone().unwrap_or_default()},
    });
    if let Some(audience) = source["audience"].as_str().filter(|a| !a.is_empty()) {
        spec["audiences"] = json!([audience]);
    }
    let body =
        json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec});
    let request = http::Request::post(format!(
        "/api/v1/namespaces/{namespace}/serviceaccounts/{account}/token"
    ))
    .header("content-type", "application/json")
    .body(serde_json::to_vec(&body).unwrap_or_default())
    .map_err(|e| e.to_string())?;
    let answer: Value = agent
        .client
        .request(request)
        .await
        .map_err(|e| format!("token for service account {account}: {e}"))?;
    Ok(answer
        .pointer("/status/token")
        .and_then(Value::as_str)
        .unwrap_or("")
        .as_bytes()
        .to_vec())
}

async fn files_of(
    agent: &Agent,
    pod: &Pod,
    value: &Value,
    volume: &Value,
    namespace: &str,
) -> Result<Files, MountError> {
    let mut files = Files::new();
    let default_of = |v: &Value| mode(&json!({"mode": v.get("defaultMode")}), 0o644);
    if let Some(source) = volume.get("configMap").filter(|v| v.is_object()) {
        let name = source["name"].as_str().unwrap_or("");
        match config_map_data(agent, namespace, name).await? {
            Some(data) => keyed(data, source, default_of(source), &mut files, name)?,
            None if source["optional"] == true => {}
            None => return Err(format!("configmap \"{name}\" not found")),
        }
    } else if let Some(source) = volume.get("secret").filter(|v| v.is_object()) {
        let name = source["secretName"].as_str().unwrap_or("");
        match secret_data(agent, namespace, name).await? {
            Some(data) => keyed(data, source, default_of(source), &mut files, name)?,
            None if source["optional"] == true => {}
            None => return Err(format!("secret \"{name}\" not found")),
        }
    } else if let Some(source) = volume.get("downwardAPI").filter(|v| v.is_object()) {
        let items = source["items"].as_array().cloned().unwrap_or_default();
        downward(value, &items, default_of(source), &mut files);
    } else if let Some(source) = volume.get("projected").filter(|v| v.is_object()) {
        let default = default_of(source);
        for part in source["sources"].as_array().into_iter().flatten() {
            if let Some(s) = part.get("configMap").filter(|v| v.is_object()) {
                let name = s["name"].as_str().unwrap_or("");
                match config_map_data(agent, namespace, name).await? {
                    Some(data) => keyed(data, s, default, &mut files, name)?,
                    None if s["optional"] == true => {}
                    None => return Err(format!("configmap \"{name}\" not found")),
                }
            } else if let Some(s) = part.get("secret").filter(|v| v.is_object()) {
                let name = s["name"].as_str().unwrap_or("");
                match secret_data(agent, namespace, name).await? {
                    Some(data) => keyed(data, s, default, &mut files, name)?,
                    None if s["optional"] == true => {}
                    None => return Err(format!("secret \"{name}\" not found")),
                }
            } else if let Some(s) = part.get("downwardAPI").filter(|v| v.is_object()) {
                let items = s["items"].as_array().cloned().unwrap_or_default();
                downward(value, &items, default, &mut files);
            } else if let Some(s) = part.get("serviceAccountToken").filter(|v| v.is_object()) {
                let path = s["path"].as_str().unwrap_or("token").to_owned();
                files.insert(path, (token(agent, pod, s).await?, 0o600));
            }
        }
    }
    Ok(files)
}

/// Writes `files` under `dir`, replacing what changed and removing what is gone (each file
/// replaced whole: readers never see half a file).
fn write_files(dir: &Path, files: &Files, fs_group: Option<u32>) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    own_group(dir, fs_group)?;
    for (path, (bytes, mode)) in files {
        let safe: PathBuf = Path::new(path)
            .components()
            .filter_map(|c| match c {
                std::path::Component::Normal(p) => Some(p),
                _ => None,
            })
            .collect();
        let target = dir.join(&safe);
        if std::fs::read(&target).is_ok_and(|old| &old == bytes) {
            continue;
        }
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent)?;
        }
        let temp = target.with_extension("plinth-new");
        std::fs::write(&temp, bytes)?;
        own_group(&temp, fs_group)?;
        std::fs::set_permissions(&temp, std::fs::Permissions::from_mode(*mode))?;
        std::fs::rename(&temp, &target)?;
    }
    for entry in std::fs::read_dir(dir)?.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if entry.path().is_file() && !files.contains_key(&name) {
            let _ = std::fs::remove_file(entry.path());
        }
    }
    Ok(())
}

/// A tmpfs at `dir` (an `emptyDir` of medium `Memory`), sized by its `sizeLimit`, once;
/// where the agent may not mount (it is not root), the directory stays as it is.
fn memory(dir: &Path, limit: Option<&Value>) -> std::io::Result<()> {
    use std::os::unix::fs::MetadataExt;
    let mounted = match (std::fs::metadata(dir), dir.parent().map(std::fs::metadata)) {
        (Ok(own), Some(Ok(parent))) => own.dev() != parent.dev(),
        _ => false,
    };
    if mounted || !nix::unistd::geteuid().is_root() {
        return Ok(());
    }
    let size = limit
        .and_then(plinth_core::quantity::bytes)
        .filter(|b| *b > 0)
        .map(|bytes| format!(",size={bytes}"))
        .unwrap_or_default();
    nix::mount::mount(
        Some("tmpfs"),
        dir,
        Some("tmpfs"),
        nix::mount::MsFlags::MS_NOSUID | nix::mount::MsFlags::MS_NODEV,
        Some(format!("mode=0777{size}").as_str()),
    )
    .map_err(std::io::Error::from)
}

/// Unmounts the memory-backed volumes under a pod's directory (before it is removed).
pub(crate) fn unmount_all(pod_dir: &Path) {
    let volumes = pod_dir.join("volumes");
    for entry in std::fs::read_dir(&volumes).into_iter().flatten().flatten() {
        let _ = nix::mount::umount2(&entry.path(), nix::mount::MntFlags::MNT_DETACH);
    }
}

/// Gives `path` to group `group` (the pod's `fsGroup`), as the kubelet's volume ownership
/// does; nothing without one.
fn own_group(path: &Path, group: Option<u32>) -> std::io::Result<()> {
    match group {
        Some(gid) => std::os::unix::fs::chown(path, None, Some(gid)),
        None => Ok(()),
    }
}

/// A key of a Secret or ConfigMap for an environment variable.
pub(crate) async fn key_of(
    agent: &Agent,
    namespace: &str,
    secret: bool,
    name: &str,
    key: &str,
) -> Result<Option<String>, MountError> {
    let data = if secret {
        secret_data(agent, namespace, name).await?
    } else {
        config_map_data(agent, namespace, name).await?
    };
    Ok(data.and_then(|d| d.get(key).map(|b| String::from_utf8_lossy(b).into_owned())))
}

/// All keys of a Secret or ConfigMap (`envFrom`).
pub(crate) async fn all_of(
    agent: &Agent,
    namespace: &str,
    secret: bool,
    name: &str,
) -> Result<Option<BTreeMap<String, String>>, MountError> {
    let data = if secret {
        secret_data(agent, namespace, name).await?
    } else {
        config_map_data(agent, namespace, name).await?
    };
    Ok(data.map(|d| {
        d.into_iter()
            .map(|(k, v)| (k, String::from_utf8_lossy(&v).into_owned()))
            .collect()
    }))
}
