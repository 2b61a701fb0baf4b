//! What a container is started with: its environment, command, mounts and clients.

use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};

use super::worker::Worker;
use crate::images;
use crate::sandbox;
use crate::volumes;

impl Worker {
    /// The container's environment, in kube's order: `envFrom`, then `env` (each expanded
    /// with what came before).
    pub(super) async fn environment(
        &self,
        container: &Value,
    ) -> Result<Vec<(String, String)>, (String, String)> {
        let pod = self.current();
        let pod_json = self.pod_json(&pod);
        let namespace = pod.metadata.namespace.clone().unwrap_or_default();
        let name = container["name"].as_str().unwrap_or("");
        let mut env: Vec<(String, String)> = vec![
            (
                "PATH".into(),
                "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".into(),
            ),
            ("HOSTNAME".into(), host_name(&pod)),
            ("HOME".into(), "/root".into()),
        ];
        let links = pod
            .spec
            .as_ref()
            .and_then(|s| s.enable_service_links)
            .unwrap_or(true);
        env.extend(self.agent.proxy.environment(&namespace, links));
        let set = |env: &mut Vec<(String, String)>, key: String, value: String| {
            env.retain(|(k, _)| *k != key);
            env.push((key, value));
        };
        let config_error = |m: String| ("CreateContainerConfigError".to_owned(), m);
        for from in container["envFrom"].as_array().into_iter().flatten() {
            let prefix = from["prefix"].as_str().unwrap_or("");
            for (key, secret) in [("configMapRef", false), ("secretRef", true)] {
                let Some(source) = from.get(key).filter(|v| v.is_object()) else {
                    continue;
                };
                let source_name = source["name"].as_str().unwrap_or("");
                match volumes::all_of(&self.agent, &namespace, secret, source_name)
                    .await
                    .map_err(config_error)?
                {
                    Some(values) => {
                        for (k, v) in values {
                            set(&mut env, format!("{prefix}{k}"), v);
                        }
                    }
                    None if source["optional"] == true => {}
                    None => {
                        let what = if secret { "secret" } else { "configmap" };
                        return Err(config_error(format!("{what} \"{source_name}\" not found")));
                    }
                }
            }
        }
        for var in container["env"].as_array().into_iter().flatten() {
            let key = var["name"].as_str().unwrap_or("").to_owned();
            let value = if let Some(value) = var["value"].as_str() {
                let known = env.clone();
                images::expand(value, &|n| {
                    known.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone())
                })
            } else if let Some(from) = var.get("valueFrom").filter(|v| v.is_object()) {
                if let Some(path) = from.pointer("/fieldRef/fieldPath").and_then(Value::as_str) {
                    volumes::field_value(&pod_json, path).unwrap_or_default()
                } else if let Some(reference) =
                    from.get("resourceFieldRef").filter(|v| v.is_object())
                {
                    volumes::resource_value(&pod_json, name, reference).unwrap_or_default()
                } else {
                    let (secret, selector) =
                        match (from.get("secretKeyRef"), from.get("configMapKeyRef")) {
                            (Some(s), _) if s.is_object() => (true, s),
                            (_, Some(c)) if c.is_object() => (false, c),
                            _ => continue,
                        };
                    let source = selector["name"].as_str().unwrap_or("");
                    let wanted = selector["key"].as_str().unwrap_or("");
                    match volumes::key_of(&self.agent, &namespace, secret, source, wanted)
                        .await
                        .map_err(config_error)?
                    {
                        Some(v) => v,
                        None if selector["optional"] == true => continue,
                        None => {
                            let what = if secret { "secret" } else { "configmap" };
                            let exists = volumes::all_of(&self.agent, &namespace, secret, source)
                                .await
                                .ok()
                                .flatten()
                                .is_some();
                            return Err(config_error(if exists {
                                format!(
                                    "couldn't find key {wanted} in {}{} {namespace}/{source}",
                                    what[..1].to_uppercase(),
                                    &what[1..]
                                )
                            } else {
                                format!("{what} \"{source}\" not found")
                            }));
                        }
                    }
                }
            } else {
                String::new()
            };
            set(&mut env, key, value);
        }
        Ok(env)
    }

    pub(super) fn pod_json(&self, pod: &Pod) -> Value {
        let mut value = serde_json::to_value(pod).unwrap_or(Value::Null);
        value["status"]["podIP"] = json!(self.ip);
        value["status"]["hostIP"] = json!("127.0.0.1");
        value
    }

    /// `$(VAR)` expansion in a container with environment `env`: its variables, and the
    /// pod's address as `POD_IP` when it does not define one.
    pub(super) fn lookup<'a>(
        &self,
        env: &'a [(String, String)],
    ) -> impl Fn(&str) -> Option<String> + 'a {
        let ip = self.ip.clone();
        move |name: &str| -> Option<String> {
            env.iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone())
                .or_else(|| (name == "POD_IP").then(|| ip.clone()))
        }
    }

    /// The image map's entry for `image`, as this node's network has it.
    pub(super) fn image(&self, image: &str) -> Option<&images::Entry> {
        let private = self
            .agent
            .network
            .get()
            .is_some_and(|mode| mode.private().is_some());
        self.agent.config.images.lookup_in(image, private)
    }

    /// The clients of a container's image, pointed at the pod.
    pub(super) fn clients(&self, container: &Value, env: &[(String, String)]) -> images::Clients {
        container["image"]
            .as_str()
            .and_then(|image| self.image(image))
            .map(|entry| entry.clients(&self.lookup(env)))
            .unwrap_or_default()
    }

    /// The argument vector and the sandbox mounts of a container, or why it cannot start.
    pub(super) fn command(
        &self,
        container: &Value,
        env: &[(String, String)],
    ) -> Result<Vec<String>, (String, String)> {
        let image = container["image"].as_str().unwrap_or("");
        let Some(entry) = self.image(image) else {
            return Err((
                "ErrImagePull".into(),
                format!(
                    "image {image:?} is not in this node's image map: map it to a local executable (plinth node --images FILE)"
                ),
            ));
        };
        let strings = |key: &str| -> Option<Vec<String>> {
            container.get(key).and_then(Value::as_array).map(|a| {
                a.iter()
                    .filter_map(|v| v.as_str().map(str::to_owned))
                    .collect()
            })
        };
        let command = strings("command");
        let args = strings("args");
        let lookup = self.lookup(env);
        let argv = images::argv(entry, command.as_deref(), args.as_deref(), &lookup);
        if argv.is_empty() {
            return Err(("CreateContainerError".into(), "no command specified".into()));
        }
        Ok(argv)
    }

    /// Why the container's `subPathExpr`s cannot be used once expanded (the kubelet refuses
    /// absolute paths and `..`): kube's `CreateContainerConfigError`.
    pub(super) fn subpath_problem(
        &self,
        container: &Value,
        env: &[(String, String)],
    ) -> Option<String> {
        let lookup = self.lookup(env);
        container["volumeMounts"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|m| m["subPathExpr"].as_str().filter(|s| !s.is_empty()))
            .find_map(|expr| {
                let sub = images::expand(expr, &lookup);
                if sub.starts_with('/') {
                    Some(format!(
                        "error SubPath `{sub}` must not be an absolute path"
                    ))
                } else if sub.split('/').any(|part| part == "..") {
                    Some(format!("error SubPath `{sub}` must not contain '..'"))
                } else {
                    None
                }
            })
    }

    pub(super) fn mounts(
        &self,
        container: &Value,
        env: &[(String, String)],
    ) -> Vec<sandbox::Mount> {
        let lookup = self.lookup(env);
        let volumes = self.volumes.lock().map(|v| v.clone()).unwrap_or_default();
        let pod = self.current();
        let api_backed: Vec<String> = pod
            .spec
            .as_ref()
            .and_then(|s| s.volumes.clone())
            .unwrap_or_default()
            .into_iter()
            .filter(|v| {
                v.config_map.is_some()
                    || v.secret.is_some()
                    || v.downward_api.is_some()
                    || v.projected.is_some()
            })
            .map(|v| v.name)
            .collect();
        container["volumeMounts"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|m| {
                let name = m["name"].as_str()?;
                let mut source = volumes.get(name)?.clone();
                // `subPathExpr`: the container's variables expanded in it.
                let expanded = m["subPathExpr"]
                    .as_str()
                    .filter(|s| !s.is_empty())
                    .map(|e| images::expand(e, &lookup));
                let sub = m["subPath"].as_str().map(str::to_owned).or(expanded);
                if let Some(sub) = sub.as_deref().filter(|s| !s.is_empty()) {
                    source = source.join(sub.trim_start_matches('/'));
                    if !source.exists() {
                        let _ = std::fs::create_dir_all(&source);
                    }
                }
                Some(sandbox::Mount {
                    source,
                    target: m["mountPath"].as_str().unwrap_or("/").to_owned(),
                    read_only: m["readOnly"] == true || api_backed.iter().any(|v| v == name),
                })
            })
            .collect()
    }
}

/// A pod's host name: `spec.hostname` (a StatefulSet's or Indexed Job's pod), else its name.
pub(super) fn host_name(pod: &Pod) -> String {
    let name = pod
        .spec
        .as_ref()
        .and_then(|s| s.hostname.clone())
        .filter(|h| !h.is_empty())
        .or_else(|| pod.metadata.name.clone())
        .unwrap_or_default();
    truncated_host_name(&name)
}

/// A host name of at most 63 characters, as the kubelet cuts a longer pod name (without
/// a `-` or `.` left at its end).
fn truncated_host_name(name: &str) -> String {
    if name.len() <= 63 {
        return name.to_owned();
    }
    let mut cut = 63;
    while !name.is_char_boundary(cut) {
        cut -= 1;
    }
    name[..cut].trim_end_matches(['-', '.']).to_owned()
}

#[cfg(test)]
mod tests {
    use super::truncated_host_name;

    #[test]
    fn long_pod_names_make_host_names_of_63_characters() {
        let name = "termination-message-container2c57c6e4-3387-449f-8633-431862aadc06";
        let host = truncated_host_name(name);
        assert_eq!(host.len(), 63);
        assert!(name.starts_with(&host));
        let dashed = format!("{}-{}", "a".repeat(62), "b".repeat(5));
        assert_eq!(truncated_host_name(&dashed), "a".repeat(62));
        assert_eq!(truncated_host_name("short"), "short");
    }
}
