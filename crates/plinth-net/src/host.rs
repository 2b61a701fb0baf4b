//! The devices and namespaces of one agent's pods, made with iproute2 (`ip`): a bridge the
//! agent owns with the node's gateway address, and per pod a network namespace with its own
//! `lo` and a veth pair whose outer end is on the bridge.
//!
//! Everything is named after the node (a tag of 6 hex digits of its name's hash), so that an
//! agent that died leaves nothing its next start cannot find and remove: namespaces
//! `plinth-TAG-<pod uid>`, the bridge `plbr-TAG`, pods' outer ends `pvTAG<6 hex>`, the rule
//! table `plinth_TAG`. An agent also records its tag and process in `/run/plinth/net/TAG`
//! ([`claim`]): any agent starting later removes what a dead one (whose process is gone) left,
//! even if that one never starts again.
//!
//! A pod's address is a `/32` with its default route through the gateway, so that all its
//! traffic, even to a pod on the same bridge, passes the node's routing and rules (Service
//! translation and NetworkPolicy see both directions of every connection).

use std::net::Ipv4Addr;
use std::path::PathBuf;

use tokio::io::AsyncWriteExt;

use crate::cidr::Cidr;

/// Where `ip netns` keeps the namespaces it names.
const NETNS_DIR: &str = "/run/netns";

/// A short, stable tag of `text` (FNV-1a, 6 hex digits).
pub fn tag(text: &str) -> String {
    let mut hash: u32 = 0x811c_9dc5;
    for byte in text.bytes() {
        hash ^= u32::from(byte);
        hash = hash.wrapping_mul(0x0100_0193);
    }
    format!("{:06x}", hash & 0x00ff_ffff)
}

/// The names of one agent's devices, namespaces and rule table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Names {
    tag: String,
}

impl Names {
    /// The names of node `node`'s.
    pub fn of(node: &str) -> Self {
        Self { tag: tag(node) }
    }

    /// The tag in every name.
    pub fn tag(&self) -> &str {
        &self.tag
    }

    /// The bridge.
    pub fn bridge(&self) -> String {
        format!("plbr-{}", self.tag)
    }

    /// The nftables table (family `inet`).
    pub fn table(&self) -> String {
        format!("plinth_{}", self.tag)
    }

    /// Pod `uid`'s network namespace, as `ip netns` names it.
    pub fn namespace(&self, uid: &str) -> String {
        format!("plinth-{}-{uid}", self.tag)
    }

    /// The file that holds it open.
    pub fn namespace_path(&self, uid: &str) -> PathBuf {
        PathBuf::from(NETNS_DIR).join(self.namespace(uid))
    }

    /// Pod `uid`'s veth end on the bridge.
    pub fn veth(&self, uid: &str) -> String {
        format!("pv{}{}", self.tag, tag(uid))
    }

    fn namespace_prefix(&self) -> String {
        format!("plinth-{}-", self.tag)
    }

    fn veth_prefix(&self) -> String {
        format!("pv{}", self.tag)
    }
}

/// Runs `ip` with `args`, feeding it `batch` (one command a line) when given.
async fn ip(args: &[&str], batch: Option<&str>) -> Result<String, String> {
    run("ip", args, batch).await
}

/// Runs `program` with `args` and `input` on its standard input; its output, or why it
/// failed (its error output).
pub(crate) async fn run(
    program: &str,
    args: &[&str],
    input: Option<&str>,
) -> Result<String, String> {
    let mut command = tokio::process::Command::new(program);
    command
        .args(args)
        .stdin(if input.is_some() {
            std::process::Stdio::piped()
        } else {
            std::process::Stdio::null()
        })
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    let mut child = command.spawn().map_err(|e| format!("{program}: {e}"))?;
    if let (Some(text), Some(mut stdin)) = (input, child.stdin.take()) {
        stdin
            .write_all(text.as_bytes())
            .await
            .map_err(|e| format!("{program}: {e}"))?;
    }
    let output = child
        .wait_with_output()
        .await
        .map_err(|e| format!("{program}: {e}"))?;
    if output.status.success() {
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    } else {
        Err(format!(
            "{program} {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr).trim()
        ))
    }
}

/// Whether this process can make namespaces and devices and write rules: it is root (or has
/// `CAP_NET_ADMIN`) and has `ip` and `nft`. Checked by making a namespace and a table in it.
pub async fn available() -> Result<(), String> {
    let probe = format!("plinth-probe-{}", std::process::id());
    ip(&["netns", "add", &probe], None).await?;
    let nft = run(
        "ip",
        &[
            "netns", "exec", &probe, "nft", "add", "table", "inet", "probe",
        ],
        None,
    )
    .await;
    let _ = ip(&["netns", "del", &probe], None).await;
    nft.map(|_| ())
}

/// Writes `value` to a sysctl file of the network (`net/ipv4/conf/plbr-x/forwarding`).
fn sysctl(path: &str, value: &str) -> Result<(), String> {
    std::fs::write(format!("/proc/sys/{path}"), value).map_err(|e| format!("{path}: {e}"))
}

/// Removes whatever an agent of these names left: pods' namespaces and veths, the bridge and
/// the rule table. Nothing else is touched.
pub async fn sweep(names: &Names) {
    if let Ok(entries) = std::fs::read_dir(NETNS_DIR) {
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with(&names.namespace_prefix()) {
                let _ = ip(&["netns", "del", &name], None).await;
            }
        }
    }
    if let Ok(links) = ip(&["-o", "link", "show"], None).await {
        for line in links.lines() {
            let Some(name) = line.split(": ").nth(1) else {
                continue;
            };
            let name = name.split('@').next().unwrap_or(name);
            if name.starts_with(&names.veth_prefix()) || name == names.bridge() {
                let _ = ip(&["link", "del", name], None).await;
            }
        }
    }
    let _ = run("nft", &["delete", "table", "inet", &names.table()], None).await;
}

/// Where agents record which tag is whose (a file per tag holding the owner's PID).
const OWNERS_DIR: &str = "/run/plinth/net";

/// Records that this process owns `names`' devices (see [`sweep_orphans`]).
pub fn claim(names: &Names) {
    let _ = std::fs::create_dir_all(OWNERS_DIR);
    let _ = std::fs::write(
        PathBuf::from(OWNERS_DIR).join(&names.tag),
        std::process::id().to_string(),
    );
}

/// Gives `names` up (after [`sweep`]ing them).
pub fn release(names: &Names) {
    let _ = std::fs::remove_file(PathBuf::from(OWNERS_DIR).join(&names.tag));
}

/// Removes the devices, namespaces and rules of every agent whose process is gone (it was
/// killed before it could clean up, and has not started again).
pub async fn sweep_orphans() {
    let Ok(entries) = std::fs::read_dir(OWNERS_DIR) else {
        return;
    };
    for entry in entries.flatten() {
        let tag = entry.file_name().to_string_lossy().into_owned();
        let alive = std::fs::read_to_string(entry.path())
            .ok()
            .and_then(|pid| pid.trim().parse::<u32>().ok())
            .is_some_and(|pid| std::path::Path::new(&format!("/proc/{pid}")).exists());
        if alive || tag.len() != 6 || !tag.bytes().all(|b| b.is_ascii_hexdigit()) {
            continue;
        }
        let names = Names { tag };
        sweep(&names).await;
        release(&names);
    }
}

/// The node's bridge, up with the gateway address (`.1` of `subnet`), forwarding what
/// arrives on it (only on it: the machine's own setting is left as it is).
pub async fn bridge_up(names: &Names, subnet: Cidr) -> Result<Ipv4Addr, String> {
    let gateway = subnet
        .nth(1)
        .ok_or_else(|| format!("{subnet} has no gateway address"))?;
    let bridge = names.bridge();
    let batch = format!(
        "link add {bridge} type bridge\naddr add {gateway}/{} dev {bridge}\nlink set {bridge} up\n",
        subnet.bits()
    );
    ip(&["-batch", "-"], Some(&batch)).await?;
    sysctl(&format!("net/ipv4/conf/{bridge}/forwarding"), "1")?;
    // Packets of pods on this bridge to another pod on it go through the node (each pod has
    // a /32): redirects telling them to go direct would bypass the rules.
    sysctl(&format!("net/ipv4/conf/{bridge}/send_redirects"), "0")?;
    Ok(gateway)
}

/// Routes `services` (the Service range) to the bridge, so that the machine's own connections
/// to a Service leave from the gateway's address and never by the default route; the first
/// agent of the machine to ask has it (the route goes with its bridge).
pub async fn route_services(names: &Names, services: Cidr) {
    let _ = ip(
        &[
            "route",
            "add",
            &services.to_string(),
            "dev",
            &names.bridge(),
        ],
        None,
    )
    .await;
}

/// Pod `uid`'s namespace, with `lo` up, `eth0` at `address/32` and its default route through
/// `gateway`; the outer end on the bridge. Returns the namespace's file.
pub async fn pod_up(
    names: &Names,
    uid: &str,
    address: Ipv4Addr,
    gateway: Ipv4Addr,
) -> Result<PathBuf, String> {
    let namespace = names.namespace(uid);
    let veth = names.veth(uid);
    // A namespace of the same name left by an earlier start of this pod goes first.
    if names.namespace_path(uid).exists() {
        pod_down(names, uid).await;
    }
    let host = format!(
        "netns add {namespace}\nlink add {veth} type veth peer name eth0 netns {namespace}\nlink set {veth} master {} up\n",
        names.bridge()
    );
    ip(&["-batch", "-"], Some(&host)).await?;
    let inside = format!(
        "link set lo up\naddr add {address}/32 dev eth0\nlink set eth0 up\nroute add default via {gateway} dev eth0 onlink\n"
    );
    if let Err(e) = ip(&["-n", &namespace, "-batch", "-"], Some(&inside)).await {
        pod_down(names, uid).await;
        return Err(e);
    }
    Ok(names.namespace_path(uid))
}

/// Removes pod `uid`'s namespace and with it its veth pair.
pub async fn pod_down(names: &Names, uid: &str) {
    let _ = ip(&["netns", "del", &names.namespace(uid)], None).await;
    let _ = ip(&["link", "del", &names.veth(uid)], None).await;
}

/// Removes the bridge.
pub async fn bridge_down(names: &Names) {
    let _ = ip(&["link", "del", &names.bridge()], None).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_fit_the_kernels_limits() {
        let names = Names::of("plinth-node-with-a-very-long-name.example.com");
        assert!(names.bridge().len() <= 15);
        assert!(names.veth("0b7a8f0e-2a7b-4c6e-9d51-1c0b0b0b0b0b").len() <= 15);
        assert_ne!(names.veth("a"), names.veth("b"));
        assert_eq!(Names::of("n").table(), Names::of("n").table());
    }
}
