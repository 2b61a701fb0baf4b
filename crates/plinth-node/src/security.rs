//! A container's `securityContext` as the runtime applies it: its user and groups, the
//! capabilities it keeps, `no_new_privs`, a read-only root, and the pod's sysctls.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The capabilities a container that is not privileged keeps unless its `securityContext`
/// adds or drops some: the container runtimes' default set (containerd's and CRI-O's).
pub const DEFAULT_CAPABILITIES: &[&str] = &[
    "chown",
    "dac_override",
    "fsetid",
    "fowner",
    "mknod",
    "net_raw",
    "setgid",
    "setuid",
    "setfcap",
    "setpcap",
    "net_bind_service",
    "sys_chroot",
    "kill",
    "audit_write",
];

/// Every capability name Linux knows (as `setpriv` spells them).
const ALL_CAPABILITIES: &[&str] = &[
    "chown",
    "dac_override",
    "dac_read_search",
    "fowner",
    "fsetid",
    "kill",
    "setgid",
    "setuid",
    "setpcap",
    "linux_immutable",
    "net_bind_service",
    "net_broadcast",
    "net_admin",
    "net_raw",
    "ipc_lock",
    "ipc_owner",
    "sys_module",
    "sys_rawio",
    "sys_chroot",
    "sys_ptrace",
    "sys_pacct",
    "sys_admin",
    "sys_boot",
    "sys_nice",
    "sys_resource",
    "sys_time",
    "sys_tty_config",
    "mknod",
    "lease",
    "audit_write",
    "audit_control",
    "setfcap",
    "mac_override",
    "mac_admin",
    "syslog",
    "wake_alarm",
    "block_suspend",
    "audit_read",
    "perfmon",
    "bpf",
    "checkpoint_restore",
];

/// Where `setpriv` (util-linux) is: the container's command is started through it.
const SETPRIV: &str = "/usr/bin/setpriv";

/// Who a container's process runs as and what it may do.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Security {
    /// The user (`runAsUser`); none: the runtime's own.
    pub uid: Option<u32>,
    /// The primary group (`runAsGroup`, else the user's in `/etc/passwd`, else 0).
    pub gid: Option<u32>,
    /// Supplementary groups (`fsGroup` and `supplementalGroups`).
    pub groups: Vec<u32>,
    /// The capabilities kept (lower case, without `cap_`); none: every one (privileged).
    pub capabilities: Option<Vec<String>>,
    /// `allowPrivilegeEscalation: false`: set-user-ID programs and file capabilities grant
    /// nothing.
    pub no_new_privs: bool,
    /// `readOnlyRootFilesystem`.
    pub read_only_root: bool,
}

impl Security {
    /// The container's security as its pod spec and container (JSON) say.
    pub fn of(pod_spec: &Value, container: &Value) -> Self {
        let pod = &pod_spec["securityContext"];
        let own = &container["securityContext"];
        let pick = |key: &str| {
            own[key]
                .as_i64()
                .or_else(|| pod[key].as_i64())
                .and_then(|v| u32::try_from(v).ok())
        };
        let uid = pick("runAsUser");
        let gid = pick("runAsGroup").or_else(|| uid.map(|u| primary_group(u).unwrap_or(0)));
        let mut groups: Vec<u32> = pod["fsGroup"]
            .as_i64()
            .into_iter()
            .chain(
                pod["supplementalGroups"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_i64),
            )
            .filter_map(|g| u32::try_from(g).ok())
            .collect();
        groups.sort_unstable();
        groups.dedup();
        let capabilities = if own["privileged"] == true {
            None
        } else {
            Some(capabilities(&own["capabilities"]))
        };
        Self {
            uid,
            gid,
            groups,
            capabilities,
            no_new_privs: own["allowPrivilegeEscalation"] == false,
            read_only_root: own["readOnlyRootFilesystem"] == true,
        }
    }

    /// What of this a runtime without root can apply: capabilities and `no_new_privs`, not
    /// users or groups (a user namespace maps only the agent's own).
    pub fn without_identity(&self) -> Self {
        Self {
            uid: None,
            gid: None,
            groups: Vec::new(),
            ..self.clone()
        }
    }

    /// `argv` started through `setpriv` so that it runs as this says.
    pub fn wrap(&self, argv: &[String]) -> Vec<String> {
        let mut out = vec![SETPRIV.to_owned()];
        if let Some(gid) = self.gid {
            out.push(format!("--regid={gid}"));
        }
        if let Some(uid) = self.uid {
            out.push(format!("--reuid={uid}"));
        }
        if self.groups.is_empty() {
            if self.uid.is_some() || self.gid.is_some() {
                out.push("--clear-groups".to_owned());
            }
        } else {
            let list: Vec<String> = self.groups.iter().map(u32::to_string).collect();
            out.push(format!("--groups={}", list.join(",")));
        }
        if let Some(kept) = &self.capabilities {
            let mut set = String::from("-all");
            for cap in kept {
                set.push_str(",+");
                set.push_str(cap);
            }
            out.push(format!("--bounding-set={set}"));
            out.push("--inh-caps=-all".to_owned());
        }
        if self.no_new_privs {
            out.push("--no-new-privs".to_owned());
        }
        out.push("--".to_owned());
        out.extend(argv.iter().cloned());
        out
    }
}

/// The default set with the container's `capabilities.add` and `.drop` applied (`ALL` in
/// either means every one; names with or without `CAP_`, any case; unknown names are
/// ignored).
fn capabilities(spec: &Value) -> Vec<String> {
    let names = |key: &str| -> Vec<String> {
        spec[key]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .map(|n| {
                let lower = n.to_ascii_lowercase();
                lower.strip_prefix("cap_").unwrap_or(&lower).to_owned()
            })
            .collect()
    };
    let (add, drop) = (names("add"), names("drop"));
    let mut kept: Vec<String> = if add.iter().any(|n| n == "all") {
        ALL_CAPABILITIES.iter().map(|c| (*c).to_owned()).collect()
    } else {
        DEFAULT_CAPABILITIES
            .iter()
            .map(|c| (*c).to_owned())
            .chain(
                add.into_iter()
                    .filter(|n| ALL_CAPABILITIES.contains(&n.as_str())),
            )
            .collect()
    };
    if drop.iter().any(|n| n == "all") {
        kept.clear();
    }
    kept.retain(|c| !drop.contains(c));
    kept.sort();
    kept.dedup();
    kept
}

/// The primary group of user `uid` in the machine's `/etc/passwd` (the container sees the
/// machine's files).
fn primary_group(uid: u32) -> Option<u32> {
    let text = std::fs::read_to_string("/etc/passwd").ok()?;
    text.lines().find_map(|line| {
        let fields: Vec<&str> = line.split(':').collect();
        (fields.len() > 3 && fields[2].parse() == Ok(uid))
            .then(|| fields[3].parse().ok())
            .flatten()
    })
}

/// The `/proc/sys` file of a sysctl name: dots separate its parts, unless the name uses
/// slashes (then dots are part of a name, as in `net/ipv4/conf/eth0.100/forwarding`).
pub fn sysctl_path(name: &str) -> String {
    if name.contains('/') {
        format!("/proc/sys/{}", name.trim_start_matches('/'))
    } else {
        format!("/proc/sys/{}", name.replace('.', "/"))
    }
}

/// The sysctls kube calls safe: namespaced, allowed on every node without
/// `--allowed-unsafe-sysctls`.
pub const SAFE_SYSCTLS: &[&str] = &[
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
    "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
    "net.ipv4.tcp_rmem",
    "net.ipv4.tcp_wmem",
];

/// The pod's sysctls (name, value), or the first one this node does not allow (kubelet's
/// `SysctlForbidden`).
///
/// # Errors
/// The name of a sysctl that is not safe.
pub fn sysctls(pod_spec: &Value) -> Result<Vec<(String, String)>, String> {
    let mut out = Vec::new();
    for item in pod_spec
        .pointer("/securityContext/sysctls")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let name = item["name"].as_str().unwrap_or("");
        let value = item["value"].as_str().unwrap_or("");
        let dotted = name.replace('/', ".");
        if !SAFE_SYSCTLS.contains(&dotted.as_str()) {
            return Err(name.to_owned());
        }
        out.push((name.to_owned(), value.to_owned()));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_container_overrides_the_pod_and_capabilities_start_from_the_default_set() {
        let pod = json!({"securityContext": {"runAsUser": 1000, "runAsGroup": 3000, "fsGroup": 2000, "supplementalGroups": [5, 2000]}});
        let container = json!({"securityContext": {"runAsUser": 1001, "allowPrivilegeEscalation": false,
            "capabilities": {"add": ["NET_ADMIN", "CAP_SYS_TIME", "NOT_A_CAP"], "drop": ["KILL"]}}});
        let s = Security::of(&pod, &container);
        assert_eq!((s.uid, s.gid), (Some(1001), Some(3000)));
        assert_eq!(s.groups, [5, 2000]);
        assert!(s.no_new_privs && !s.read_only_root);
        let caps = s.capabilities.clone().unwrap_or_default();
        assert!(caps.contains(&"net_admin".to_owned()) && caps.contains(&"sys_time".to_owned()));
        assert!(!caps.contains(&"kill".to_owned()) && !caps.iter().any(|c| c == "not_a_cap"));
        let argv = s.wrap(&["sh".to_owned(), "-c".to_owned(), "id".to_owned()]);
        assert_eq!(
            argv[..4],
            [
                "/usr/bin/setpriv",
                "--regid=3000",
                "--reuid=1001",
                "--groups=5,2000"
            ]
        );
        assert!(argv.contains(&"--no-new-privs".to_owned()));
        assert_eq!(argv[argv.len() - 4..], ["--", "sh", "-c", "id"]);
    }

    #[test]
    fn privileged_keeps_everything_and_drop_all_keeps_nothing() {
        let privileged = Security::of(
            &json!({}),
            &json!({"securityContext": {"privileged": true}}),
        );
        assert_eq!(privileged.capabilities, None);
        assert!(
            !privileged
                .wrap(&[])
                .iter()
                .any(|a| a.starts_with("--bounding-set"))
        );
        let none = Security::of(
            &json!({}),
            &json!({"securityContext": {"capabilities": {"drop": ["ALL"]}}}),
        );
        assert_eq!(none.capabilities, Some(Vec::new()));
        assert!(none.wrap(&[]).contains(&"--bounding-set=-all".to_owned()));
        let plain = Security::of(&json!({}), &json!({}));
        assert_eq!((plain.uid, plain.gid), (None, None));
        assert_eq!(
            plain.capabilities.map(|c| c.len()),
            Some(DEFAULT_CAPABILITIES.len())
        );
    }

    #[test]
    fn sysctls_are_safe_ones_with_either_separator() {
        let spec = json!({"securityContext": {"sysctls": [
            {"name": "kernel.shm_rmid_forced", "value": "1"},
            {"name": "net/ipv4/ip_local_port_range", "value": "1024 65535"}]}});
        let got = sysctls(&spec).unwrap_or_default();
        assert_eq!(got.len(), 2);
        assert_eq!(sysctl_path(&got[0].0), "/proc/sys/kernel/shm_rmid_forced");
        assert_eq!(
            sysctl_path(&got[1].0),
            "/proc/sys/net/ipv4/ip_local_port_range"
        );
        let unsafe_one =
            json!({"securityContext": {"sysctls": [{"name": "kernel.msgmax", "value": "1"}]}});
        assert_eq!(sysctls(&unsafe_one), Err("kernel.msgmax".to_owned()));
    }
}
