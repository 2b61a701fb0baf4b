//! The devices and namespaces of one agent's pods: a bridge the agent owns with the node's
//! gateway address (made with iproute2, `ip`), and per pod a network namespace with its own
//! `lo` and a veth pair whose outer end is on the bridge (made over netlink).
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
use crate::netlink;

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
    // One name per call: two checks of one process may run at once.
    static CALLS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let probe = format!("plinth-probe-{}-{call}", std::process::id());
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

/// Whether the agent that claimed `tag` still runs.
fn owner_alive(tag: &str) -> bool {
    std::fs::read_to_string(PathBuf::from(OWNERS_DIR).join(tag))
        .ok()
        .and_then(|pid| pid.trim().parse::<u32>().ok())
        .is_some_and(|pid| std::path::Path::new(&format!("/proc/{pid}")).exists())
}

/// The machine's lock over sweeping and claiming (an exclusive lock on
/// `/run/plinth/net/.lock`, held while the file is open): an agent that found another's
/// owner dead sweeps only while no agent of that tag is setting up again — else it could
/// remove the new agent's bridge and its pods' devices as they are made.
async fn machine_lock() -> Option<std::fs::File> {
    tokio::task::spawn_blocking(|| {
        std::fs::create_dir_all(OWNERS_DIR).ok()?;
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(PathBuf::from(OWNERS_DIR).join(".lock"))
            .ok()?;
        file.lock().ok()?;
        Some(file)
    })
    .await
    .ok()
    .flatten()
}

/// Removes what an earlier agent of `names` left and [`claim`]s them for this process, under
/// the machine's lock (see [`sweep_orphans`]).
pub async fn take_over(names: &Names) {
    let _lock = machine_lock().await;
    sweep(names).await;
    claim(names);
}

/// Removes the devices, namespaces and rules of every agent whose process is gone (it was
/// killed before it could clean up, and has not started again). Each owner is looked at
/// again under the machine's lock, so that one starting again meanwhile ([`take_over`]) is
/// left alone.
pub async fn sweep_orphans() {
    let Ok(entries) = std::fs::read_dir(OWNERS_DIR) else {
        return;
    };
    let dead: Vec<String> = entries
        .flatten()
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .filter(|tag| tag.len() == 6 && tag.bytes().all(|b| b.is_ascii_hexdigit()))
        .filter(|tag| !owner_alive(tag))
        .collect();
    sweep_dead(dead).await;
}

/// Sweeps the tags in `dead` whose owner is still gone once the machine's lock is held.
async fn sweep_dead(dead: Vec<String>) {
    if dead.is_empty() {
        return;
    }
    let _lock = machine_lock().await;
    for tag in dead {
        if owner_alive(&tag) || !PathBuf::from(OWNERS_DIR).join(&tag).exists() {
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
///
/// Made as `ip netns add` makes one (a thread of its own leaves the agent's namespace for a
/// new one, bound to a file under `/run/netns`), then configured over netlink from inside
/// it: no process per step.
pub async fn pod_up(
    names: &Names,
    uid: &str,
    address: Ipv4Addr,
    gateway: Ipv4Addr,
) -> Result<PathBuf, String> {
    let path = names.namespace_path(uid);
    // A namespace of the same name left by an earlier start of this pod goes first.
    if path.exists() {
        pod_down(names, uid).await;
    }
    let sandbox = Sandbox {
        path: path.clone(),
        veth: names.veth(uid),
        bridge: names.bridge(),
        address,
        gateway,
    };
    let (done, made) = tokio::sync::oneshot::channel();
    // The thread ends in the pod's namespace: never one of a pool.
    std::thread::Builder::new()
        .name("pod-netns".into())
        .spawn(move || {
            let _ = done.send(sandbox.make());
        })
        .map_err(|e| format!("pod namespace thread: {e}"))?;
    let made = made
        .await
        .unwrap_or_else(|_| Err("pod namespace thread ended".into()));
    if let Err(e) = made {
        pod_down(names, uid).await;
        return Err(e);
    }
    Ok(path)
}

/// What one pod's namespace is made of.
struct Sandbox {
    path: PathBuf,
    veth: String,
    bridge: String,
    address: Ipv4Addr,
    gateway: Ipv4Addr,
}

impl Sandbox {
    /// Makes the namespace: to be called on a thread of its own, which it leaves inside it.
    fn make(&self) -> Result<(), String> {
        use nix::mount::MsFlags;
        let host = std::fs::File::open("/proc/thread-self/ns/net")
            .map_err(|e| format!("the agent's namespace: {e}"))?;
        let mut outside = netlink::Socket::open()?;
        let bridge = netlink::index(&self.bridge)?;
        // The pair of an earlier start of this pod whose namespace is still being taken down.
        if netlink::index(&self.veth).is_ok() {
            let _ = outside.delete_link(&self.veth);
        }
        netns_dir()?;
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&self.path)
            .map_err(|e| format!("{}: {e}", self.path.display()))?;
        nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET)
            .map_err(|e| format!("new network namespace: {e}"))?;
        nix::mount::mount(
            Some("/proc/thread-self/ns/net"),
            &self.path,
            None::<&str>,
            MsFlags::MS_BIND,
            None::<&str>,
        )
        .map_err(|e| format!("bind {}: {e}", self.path.display()))?;
        let mut inside = netlink::Socket::open()?;
        inside.add_veth("eth0", &self.veth, std::os::fd::AsRawFd::as_raw_fd(&host))?;
        outside.link_up_on(&self.veth, bridge)?;
        inside.link_up(LOOPBACK)?;
        let eth0 = netlink::index("eth0")?;
        inside.add_address(eth0, self.address)?;
        inside.link_up(eth0)?;
        inside.add_default_route(eth0, self.gateway)
    }
}

/// `lo`'s index in every namespace.
const LOOPBACK: u32 = 1;

/// Makes `/run/netns` a shared mount point (once), as `ip netns add` does, so that a pod's
/// namespace file unmounted here is unmounted in every mount namespace that copied it.
fn netns_dir() -> Result<(), String> {
    static READY: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();
    READY
        .get_or_init(|| {
            use nix::mount::MsFlags;
            std::fs::create_dir_all(NETNS_DIR).map_err(|e| format!("{NETNS_DIR}: {e}"))?;
            let share = || {
                nix::mount::mount(
                    Some(""),
                    NETNS_DIR,
                    Some("none"),
                    MsFlags::MS_SHARED | MsFlags::MS_REC,
                    None::<&str>,
                )
            };
            if share().is_ok() {
                return Ok(());
            }
            nix::mount::mount(
                Some(NETNS_DIR),
                NETNS_DIR,
                Some("none"),
                MsFlags::MS_BIND | MsFlags::MS_REC,
                None::<&str>,
            )
            .map_err(|e| format!("{NETNS_DIR}: {e}"))?;
            share().map_err(|e| format!("{NETNS_DIR}: {e}"))
        })
        .clone()
}

/// Removes pod `uid`'s namespace (as `ip netns del` does). Its veth pair goes with it: the
/// kernel removes the devices of a namespace nothing holds any more, many at once — deleting
/// each here would cost a wait for the kernel's grace period per pod.
pub async fn pod_down(names: &Names, uid: &str) {
    let path = names.namespace_path(uid);
    let _ = tokio::task::spawn_blocking(move || {
        let _ = nix::mount::umount2(&path, nix::mount::MntFlags::MNT_DETACH);
        let _ = std::fs::remove_file(&path);
    })
    .await;
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

    /// Two pods' sandboxes on a bridge: each with its address, `lo` and default route, each
    /// reaching the other through the gateway; removed, nothing of them is left.
    #[tokio::test]
    async fn sandboxes_are_made_over_netlink_and_removed() {
        if let Err(e) = available().await {
            panic!("this test needs network namespaces (root, ip, nft): {e}");
        }
        let names = Names::of(&format!("sandbox-test-{}", std::process::id()));
        let subnet = Cidr::parse("10.251.7.0/24").expect("range");
        sweep(&names).await;
        let gateway = bridge_up(&names, subnet).await.expect("bridge");
        let a = subnet.nth(2).expect("address");
        let b = subnet.nth(3).expect("address");
        let made_a = pod_up(&names, "pod-a", a, gateway).await;
        let made_b = pod_up(&names, "pod-b", b, gateway).await;
        let inside = |uid: &str, args: &[&str]| {
            let mut all = vec!["-n".to_owned(), names.namespace(uid)];
            all.extend(args.iter().map(|a| (*a).to_owned()));
            std::process::Command::new("ip")
                .args(&all)
                .output()
                .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
                .unwrap_or_default()
        };
        let addresses = inside("pod-a", &["-4", "-o", "addr", "show"]);
        let routes = inside("pod-a", &["route", "show"]);
        // pod-b listens; pod-a connects (both from threads that entered their namespaces).
        let enter = |uid: &str| {
            let file = std::fs::File::open(names.namespace_path(uid));
            move || -> std::io::Result<()> {
                nix::sched::setns(file?, nix::sched::CloneFlags::CLONE_NEWNET)
                    .map_err(std::io::Error::from)
            }
        };
        let (enter_a, enter_b) = (enter("pod-a"), enter("pod-b"));
        let reached = std::thread::spawn(move || -> std::io::Result<String> {
            enter_b()?;
            let listener = std::net::TcpListener::bind((b, 7777))?;
            let dialer = std::thread::spawn(move || -> std::io::Result<()> {
                enter_a()?;
                let mut stream = std::net::TcpStream::connect_timeout(
                    &(b, 7777).into(),
                    std::time::Duration::from_secs(10),
                )?;
                std::io::Write::write_all(&mut stream, b"hello")
            });
            let (mut stream, from) = listener.accept()?;
            let mut text = String::new();
            std::io::Read::read_to_string(&mut stream, &mut text)?;
            dialer
                .join()
                .map_err(|_| std::io::Error::other("dialer"))??;
            Ok(format!("{text} from {}", from.ip()))
        })
        .join()
        .map_err(|_| "the namespaces' threads panicked".to_owned());
        let master = std::fs::read_link(format!("/sys/class/net/{}/master", names.veth("pod-b")));
        pod_down(&names, "pod-a").await;
        pod_down(&names, "pod-b").await;
        let left_a = names.namespace_path("pod-a").exists();
        // The kernel takes the pair down with the namespace, soon after.
        let veth = format!("/sys/class/net/{}", names.veth("pod-a"));
        let mut veth_left = true;
        for _ in 0..300 {
            veth_left = std::path::Path::new(&veth).exists();
            if !veth_left {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        sweep(&names).await;
        assert_eq!(made_a.ok(), Some(names.namespace_path("pod-a")));
        assert!(made_b.is_ok(), "{made_b:?}");
        assert!(
            addresses.contains(&format!("eth0    inet {a}/32")),
            "{addresses}"
        );
        assert!(addresses.contains("lo    inet 127.0.0.1/8"), "{addresses}");
        assert!(
            routes.contains(&format!("default via {gateway} dev eth0 onlink")),
            "{routes}"
        );
        assert!(
            master.is_ok_and(|m| m.ends_with(names.bridge())),
            "pod-b's outer end is on the bridge"
        );
        assert_eq!(
            reached.map(|r| r.map_err(|e| e.to_string())),
            Ok(Ok(format!("hello from {a}")))
        );
        assert!(!left_a && !veth_left, "pod-a's namespace and veth are gone");
    }

    /// A sweep that found an agent's owner dead, but got the machine's lock only after that
    /// agent started again and took its names over, leaves the new agent's devices alone —
    /// and sweeps them when the owner is still gone.
    #[tokio::test]
    async fn a_sweep_decided_on_a_dead_owner_spares_its_successor() {
        if let Err(e) = available().await {
            panic!("this test needs network namespaces (root, ip, nft): {e}");
        }
        let names = Names::of(&format!("sweep-race-{}", std::process::id()));
        let subnet = Cidr::parse("10.251.9.0/24").expect("range");
        let bridge = format!("/sys/class/net/{}", names.bridge());
        // A dead owner: a process that has ended.
        let mut ended = std::process::Command::new("true").spawn().expect("true");
        let dead_pid = ended.id();
        ended.wait().expect("wait");
        let claim_dead = || {
            std::fs::create_dir_all(OWNERS_DIR).expect("owners");
            std::fs::write(
                PathBuf::from(OWNERS_DIR).join(names.tag()),
                dead_pid.to_string(),
            )
            .expect("owner file");
        };

        sweep(&names).await;
        claim_dead();
        bridge_up(&names, subnet).await.expect("bridge");
        // The sweeper decided on the dead owner, then waits for the lock the successor holds.
        let lock = machine_lock().await.expect("lock");
        let sweeper = tokio::spawn(sweep_dead(vec![names.tag().to_owned()]));
        claim(&names);
        drop(lock);
        sweeper.await.expect("sweeper");
        let spared = std::path::Path::new(&bridge).exists();

        // Still dead when the lock comes: swept, owner file and all.
        claim_dead();
        sweep_dead(vec![names.tag().to_owned()]).await;
        let swept = !std::path::Path::new(&bridge).exists()
            && !PathBuf::from(OWNERS_DIR).join(names.tag()).exists();

        sweep(&names).await;
        release(&names);
        assert!(spared, "the successor's bridge was left alone");
        assert!(swept, "a dead owner's bridge and claim are removed");
    }
}
