//! kube's admission configuration file (`--admission-control-config-file`): an
//! `AdmissionConfiguration` whose `plugins` carry each plugin's configuration, inline or in a
//! file of its own. Plinth reads the PodSecurity plugin's (`PodSecurityConfiguration`: the
//! default levels, the exempt users, namespaces and runtime classes).

use std::path::Path;

use serde_json::Value;

pub use plinth_admission::podsecurity::Config as PodSecurity;

/// A configuration file that cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("admission control config {path}: {why}")]
pub struct ConfigError {
    /// The file.
    pub path: String,
    /// What is wrong.
    pub why: String,
}

fn read_document(path: &Path) -> Result<Value, ConfigError> {
    let error = |why: String| ConfigError {
        path: path.display().to_string(),
        why,
    };
    let text = std::fs::read_to_string(path).map_err(|e| error(e.to_string()))?;
    serde_norway::from_str(&text).map_err(|e| error(e.to_string()))
}

/// The PodSecurity configuration of the admission configuration at `path` (kube's defaults
/// when the file does not configure the plugin).
///
/// # Errors
/// A file that cannot be read or parsed, a document of another kind, a configuration kube
/// would refuse.
pub fn pod_security(path: &Path) -> Result<PodSecurity, ConfigError> {
    let error = |why: String| ConfigError {
        path: path.display().to_string(),
        why,
    };
    let document = read_document(path)?;
    if document["kind"] != "AdmissionConfiguration" {
        return Err(error(format!(
            "kind is {}, not AdmissionConfiguration",
            document["kind"]
        )));
    }
    let plugins = document["plugins"].as_array().cloned().unwrap_or_default();
    let Some(plugin) = plugins.iter().find(|p| p["name"] == "PodSecurity") else {
        return Ok(PodSecurity::default());
    };
    let configuration = match (&plugin["configuration"], plugin["path"].as_str()) {
        (Value::Null, Some(file)) => {
            let file = path.parent().unwrap_or(Path::new(".")).join(file);
            read_document(&file)?
        }
        (Value::Null, None) => return Ok(plinth_admission::podsecurity::Config::default()),
        (inline, _) => inline.clone(),
    };
    if configuration["kind"] != "PodSecurityConfiguration" {
        return Err(error(format!(
            "the PodSecurity plugin's configuration is of kind {}, not PodSecurityConfiguration",
            configuration["kind"]
        )));
    }
    PodSecurity::from_value(&configuration).map_err(error)
}
