//! The container sandbox: a container's process in its own mount and PID namespaces, seeing
//! the machine's files (bound read-write, as they are), a private `/tmp`, its own `/proc`,
//! and its pod's volumes at their mount paths — so two pods see neither each other's volumes
//! nor each other's processes.
//!
//! It runs as a separate program (`plinth sandbox <spec>`, the agent's own executable) in
//! two stages: the first, in the agent's namespaces, joins the container's cgroup, unshares
//! the mount and PID namespaces and starts the second, which is PID 1 of the new namespace:
//! it builds the container's root, changes into it and runs the container's command, reaping
//! orphans and passing on signals. Each stage exits with the command's exit code (`128 + N`
//! when signal `N` ended it), which is what the agent reports. When the first stage is killed
//! the second gets `SIGKILL` too, and with it everything in the namespace.

use std::ffi::OsString;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};

use nix::mount::{MsFlags, mount};
use nix::sched::{CloneFlags, unshare};
use nix::sys::signal::{Signal, kill};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::Pid;
use serde::{Deserialize, Serialize};

pub use crate::security::Security;

/// What the sandbox runs, handed to it as one JSON argument (all but the environment, which is
/// the sandbox's own: see [`Spec::env`]).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Spec {
    /// The program and its arguments.
    pub argv: Vec<String>,
    /// The whole environment. It travels as the stages' own environment, never in the JSON
    /// argument: arguments are world-readable in `/proc/<pid>/cmdline`, an environment is its
    /// owner's (`/proc/<pid>/environ`, mode 0400) — containers' variables carry Secrets.
    #[serde(skip)]
    pub env: Vec<(String, String)>,
    /// The working directory, inside the container.
    pub cwd: Option<String>,
    /// An empty directory the container's root is built in.
    pub root: PathBuf,
    /// Host directories (or files) and where they appear, read-only or not.
    pub mounts: Vec<Mount>,
    /// The cgroup directories to join before anything starts.
    pub cgroups: Vec<PathBuf>,
    /// Who the command runs as and what it may do (kube's `securityContext`); none: as the
    /// sandbox itself (root with every capability).
    pub security: Option<Security>,
    /// Namespaced kernel parameters set before the command starts (`/proc/sys` names with
    /// dots, as kube writes them).
    pub sysctls: Vec<(String, String)>,
    /// The host name inside (the pod's name); needs a UTS namespace.
    pub hostname: Option<String>,
    /// Host directories the container must not see (the agent's data, other pods'
    /// volumes among it): an empty directory is put over each.
    pub hide: Vec<PathBuf>,
    /// The process whose end ends this stage (its PID and start time): the agent for the
    /// first stage, the first stage for the second.
    #[serde(default)]
    pub parent: Option<Parent>,
    /// The pod's network namespace (its file), joined before anything else; none: the
    /// machine's network.
    #[serde(default)]
    pub netns: Option<PathBuf>,
}

/// A process, told apart from a later one that reuses its PID by its start time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Parent {
    /// Its PID (as the machine's `/proc` numbers it).
    pub pid: u32,
    /// When it started, in clock ticks after boot (`/proc/PID/stat`'s 22nd field).
    pub start: u64,
}

impl Parent {
    /// This process.
    pub fn this() -> Option<Parent> {
        Parent::of(std::process::id())
    }

    /// Process `pid`, if it is alive (not a zombie).
    fn of(pid: u32) -> Option<Parent> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // The command name (in parentheses) may hold spaces; the fields after it do not.
        let (_, rest) = stat.rsplit_once(')')?;
        let fields: Vec<&str> = rest.split_whitespace().collect();
        if matches!(fields.first(), Some(&("Z" | "X" | "x"))) {
            return None;
        }
        // `rest` starts at the 3rd field (the state), so the 22nd is at index 19.
        let start = fields.get(19)?.parse().ok()?;
        Some(Parent { pid, start })
    }

    /// Whether this process is still the one that was recorded.
    fn alive(self) -> bool {
        Parent::of(self.pid) == Some(self)
    }
}

/// Makes this stage end with its parent: the kernel's parent-death signal covers a parent
/// that dies from now on; one that died before this stage got here (it was killed as it
/// started this one) is found gone, and this stage gives up.
fn tie_to(parent: Option<Parent>) -> Result<(), String> {
    nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).map_err(|e| format!("pdeathsig: {e}"))?;
    match parent {
        Some(parent) if !parent.alive() => Err(format!("parent {} is gone", parent.pid)),
        _ => Ok(()),
    }
}

/// A volume mount.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Mount {
    /// On the host.
    pub source: PathBuf,
    /// Inside the container.
    pub target: String,
    /// Mounted read-only.
    pub read_only: bool,
}

/// Where the host's top-level directories stay as they are (system files), apart from those
/// the sandbox makes its own.
const OWN: &[&str] = &["proc", "tmp", "dev", "sys"];

/// Whether the host's `path` is hidden inside a container (under a top-level directory the
/// sandbox makes its own, such as `/tmp`).
pub fn replaced(path: &str) -> bool {
    let top = path.trim_start_matches('/').split('/').next().unwrap_or("");
    path.starts_with('/') && OWN.contains(&top)
}

/// Runs the first stage with `spec` (JSON) and returns the exit code to leave with.
pub fn main(spec: &str, second_stage: bool) -> i32 {
    let spec: Spec = match serde_json::from_str(spec) {
        Ok(spec) => spec,
        Err(e) => {
            eprintln!("sandbox: bad spec: {e}");
            return 126;
        }
    };
    let result = if second_stage {
        second(&spec)
    } else {
        first(&spec)
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("sandbox: {e}");
            126
        }
    }
}

fn exit_code(status: ExitStatus) -> i32 {
    status
        .code()
        .or_else(|| status.signal().map(|s| 128 + s))
        .unwrap_or(1)
}

/// Passes the usual termination signals on to the process whose PID `target` holds (none
/// while it is 0). Started before `unshare`: a process cannot make threads after unsharing
/// its PID namespace.
fn forward_signals() -> Result<std::sync::Arc<std::sync::atomic::AtomicI32>, String> {
    use signal_hook::consts::signal::{SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1, SIGUSR2};
    use std::sync::atomic::{AtomicI32, Ordering};
    let mut signals =
        signal_hook::iterator::Signals::new([SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2])
            .map_err(|e| format!("signals: {e}"))?;
    let target = std::sync::Arc::new(AtomicI32::new(0));
    let to = target.clone();
    std::thread::spawn(move || {
        for signal in signals.forever() {
            let pid = to.load(Ordering::SeqCst);
            if pid > 0
                && let Ok(signal) = Signal::try_from(signal)
            {
                let _ = kill(Pid::from_raw(pid), signal);
            }
        }
    });
    Ok(target)
}

/// Waits for `child` to exit and returns its code; as PID 1 (`reap`), every other child
/// that exits is collected too.
fn wait_for(child: u32, reap: bool) -> Result<i32, String> {
    let target = Pid::from_raw(i32::try_from(child).map_err(|e| e.to_string())?);
    loop {
        let waited = if reap {
            waitpid(None, Some(WaitPidFlag::__WALL))
        } else {
            waitpid(target, None)
        };
        match waited {
            Ok(WaitStatus::Exited(pid, code)) if pid == target => return Ok(code),
            Ok(WaitStatus::Signaled(pid, signal, _)) if pid == target => {
                return Ok(128 + signal as i32);
            }
            Ok(_) => {}
            Err(nix::errno::Errno::EINTR) => {}
            Err(e) => return Err(format!("wait: {e}")),
        }
    }
}

fn supervise(child: u32, reap: bool, target: &std::sync::atomic::AtomicI32) -> Result<i32, String> {
    target.store(
        i32::try_from(child).map_err(|e| e.to_string())?,
        std::sync::atomic::Ordering::SeqCst,
    );
    wait_for(child, reap)
}

fn first(spec: &Spec) -> Result<i32, String> {
    // The container goes with the agent: if it dies, so does this stage, and with it the
    // namespace.
    tie_to(spec.parent)?;
    for cgroup in &spec.cgroups {
        std::fs::write(cgroup.join("cgroup.procs"), std::process::id().to_string())
            .map_err(|e| format!("join cgroup {}: {e}", cgroup.display()))?;
    }
    // The pod's network, shared by its containers as the pause container's is.
    if let Some(netns) = &spec.netns {
        let file = std::fs::File::open(netns)
            .map_err(|e| format!("network namespace {}: {e}", netns.display()))?;
        nix::sched::setns(&file, CloneFlags::CLONE_NEWNET)
            .map_err(|e| format!("join network namespace {}: {e}", netns.display()))?;
    }
    // Without root, the namespaces are made in a user namespace of their own, where the
    // agent's user is root; it must come first, while this is the only thread.
    if !nix::unistd::geteuid().is_root() {
        own_user_namespace()?;
    }
    let forward = forward_signals()?;
    // Its own System V IPC too (kernel.shm* and kernel.msg* parameters are its own).
    let mut flags = CloneFlags::CLONE_NEWNS | CloneFlags::CLONE_NEWPID | CloneFlags::CLONE_NEWIPC;
    if spec.hostname.is_some() {
        flags |= CloneFlags::CLONE_NEWUTS;
    }
    unshare(flags).map_err(|e| format!("unshare: {e}"))?;
    let exe = std::env::current_exe().map_err(|e| format!("own executable: {e}"))?;
    let second = Spec {
        parent: Parent::this(),
        ..spec.clone()
    };
    let encoded = serde_json::to_string(&second).map_err(|e| e.to_string())?;
    // The second stage inherits this one's environment: the container's.
    let child = Command::new(exe)
        .arg("sandbox")
        .arg("--stage2")
        .arg(encoded)
        .spawn()
        .map_err(|e| format!("start the sandbox: {e}"))?;
    supervise(child.id(), false, &forward)
}

/// Moves this process into a new user namespace in which its user and group are root (and
/// nothing else is mapped), as `unshare --map-root-user` does.
fn own_user_namespace() -> Result<(), String> {
    let (uid, gid) = (nix::unistd::geteuid(), nix::unistd::getegid());
    unshare(CloneFlags::CLONE_NEWUSER).map_err(|e| format!("unshare the user namespace: {e}"))?;
    for (file, text) in [
        ("/proc/self/setgroups", "deny".to_owned()),
        ("/proc/self/uid_map", format!("0 {uid} 1")),
        ("/proc/self/gid_map", format!("0 {gid} 1")),
    ] {
        std::fs::write(file, text).map_err(|e| format!("{file}: {e}"))?;
    }
    Ok(())
}

/// Whether the agent makes its sandboxes in user namespaces (it is not root): entering one
/// then takes its user namespace too.
pub fn in_user_namespace() -> bool {
    !nix::unistd::geteuid().is_root()
}

/// The mount flags a bind mount of `path` keeps when remounted: in a user namespace the
/// flags of a mount made outside it are locked, and a remount that drops one is refused.
fn locked_flags(path: &Path) -> MsFlags {
    use nix::sys::statvfs::FsFlags;
    let Ok(stat) = nix::sys::statvfs::statvfs(path) else {
        return MsFlags::empty();
    };
    let flags = stat.flags();
    let mut kept = MsFlags::empty();
    for (from, to) in [
        (FsFlags::ST_NOSUID, MsFlags::MS_NOSUID),
        (FsFlags::ST_NODEV, MsFlags::MS_NODEV),
        (FsFlags::ST_NOEXEC, MsFlags::MS_NOEXEC),
        (FsFlags::ST_NOATIME, MsFlags::MS_NOATIME),
        (FsFlags::ST_NODIRATIME, MsFlags::MS_NODIRATIME),
        (FsFlags::ST_RELATIME, MsFlags::MS_RELATIME),
    ] {
        if flags.contains(from) {
            kept |= to;
        }
    }
    kept
}

fn bind(source: &Path, target: &Path, read_only: bool) -> Result<(), String> {
    mount(
        Some(source),
        target,
        None::<&str>,
        MsFlags::MS_BIND | MsFlags::MS_REC,
        None::<&str>,
    )
    .map_err(|e| format!("bind {} on {}: {e}", source.display(), target.display()))?;
    if read_only {
        seal(target)?;
    }
    Ok(())
}

/// The path `target` (absolute, inside the container) under `root`: symbolic links on the
/// way are followed as the container will see them (`/var/run` → `/run` is `root/run`, not
/// the host's), and nothing climbs out of `root`.
fn inside(root: &Path, target: &str) -> PathBuf {
    let mut path = root.to_path_buf();
    let mut pending: Vec<std::ffi::OsString> = Path::new(target)
        .components()
        .rev()
        .filter_map(|c| match c {
            std::path::Component::Normal(p) => Some(p.to_owned()),
            _ => None,
        })
        .collect();
    let mut links = 0;
    while let Some(part) = pending.pop() {
        let next = path.join(&part);
        match std::fs::read_link(&next) {
            Ok(link) if links < 40 => {
                links += 1;
                if link.is_absolute() {
                    path = root.to_path_buf();
                }
                for c in link.components().rev() {
                    match c {
                        std::path::Component::Normal(p) => pending.push(p.to_owned()),
                        std::path::Component::ParentDir => pending.push("..".into()),
                        _ => {}
                    }
                }
            }
            _ if part == ".." => {
                if path != root {
                    path.pop();
                }
            }
            _ => path = next,
        }
    }
    path
}

fn build_root(spec: &Spec) -> Result<(), String> {
    let root = &spec.root;
    // `readOnlyRootFilesystem`: the image's files (the machine's) and the root itself cannot
    // be written; volumes and the files the agent shows can.
    let read_only = spec.security.as_ref().is_some_and(|s| s.read_only_root);
    mount(
        None::<&str>,
        "/",
        None::<&str>,
        MsFlags::MS_REC | MsFlags::MS_PRIVATE,
        None::<&str>,
    )
    .map_err(|e| format!("make mounts private: {e}"))?;
    std::fs::create_dir_all(root).map_err(|e| format!("root: {e}"))?;
    mount(
        Some("tmpfs"),
        root,
        Some("tmpfs"),
        MsFlags::MS_NOSUID,
        Some("mode=755"),
    )
    .map_err(|e| format!("root tmpfs: {e}"))?;
    let entries = std::fs::read_dir("/").map_err(|e| format!("read /: {e}"))?;
    for entry in entries.flatten() {
        let name: OsString = entry.file_name();
        let Some(text) = name.to_str() else { continue };
        if OWN.contains(&text) {
            continue;
        }
        let host = Path::new("/").join(&name);
        let target = root.join(&name);
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        if kind.is_symlink() {
            if let Ok(link) = std::fs::read_link(&host) {
                let _ = std::os::unix::fs::symlink(link, &target);
            }
        } else if kind.is_dir() {
            std::fs::create_dir_all(&target).map_err(|e| e.to_string())?;
            bind(&host, &target, read_only)?;
        }
    }
    for dir in ["dev", "sys"] {
        let target = root.join(dir);
        std::fs::create_dir_all(&target).map_err(|e| e.to_string())?;
        bind(&Path::new("/").join(dir), &target, false)?;
    }
    let tmp = root.join("tmp");
    std::fs::create_dir_all(&tmp).map_err(|e| e.to_string())?;
    // Read-only mounts are made writable first and sealed once the volumes' mount points
    // are made in them (as runc makes mount points before it remounts the root).
    mount(
        Some("tmpfs"),
        &tmp,
        Some("tmpfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        Some("mode=1777"),
    )
    .map_err(|e| format!("/tmp: {e}"))?;
    let proc = root.join("proc");
    std::fs::create_dir_all(&proc).map_err(|e| e.to_string())?;
    mount(
        Some("proc"),
        &proc,
        Some("proc"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
        None::<&str>,
    )
    .map_err(|e| format!("/proc: {e}"))?;
    for hidden in &spec.hide {
        let target = inside(root, &hidden.to_string_lossy());
        if target.is_dir() {
            mount(
                Some("tmpfs"),
                &target,
                Some("tmpfs"),
                MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
                Some("mode=700"),
            )
            .map_err(|e| format!("hide {}: {e}", hidden.display()))?;
        }
    }
    // Mount points the machine's directories lack are made in a layer of the container's own
    // over the nearest machine directory, never in the machine's (an image's `/home/app`,
    // `/usr/local/bin/tool`).
    let mut layers = Layers::new(root, read_only);
    for m in &spec.mounts {
        let target = inside(root, &m.target);
        if !target.exists() {
            layers.shield(root, &target);
        }
    }
    for m in &spec.mounts {
        let target = inside(root, &m.target);
        if m.source.is_dir() {
            std::fs::create_dir_all(&target)
                .map_err(|e| format!("mount point {}: {e}", m.target))?;
        } else {
            if let Some(parent) = target.parent() {
                std::fs::create_dir_all(parent)
                    .map_err(|e| format!("mount point {}: {e}", m.target))?;
            }
            if !target.exists() {
                std::fs::write(&target, b"")
                    .map_err(|e| format!("mount point {}: {e}", m.target))?;
            }
        }
        bind(&m.source, &target, m.read_only)?;
    }
    if read_only {
        for sealed in layers.covered.iter().chain([&tmp]) {
            seal(sealed)?;
        }
        mount(
            None::<&str>,
            root,
            None::<&str>,
            MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY | MsFlags::MS_NOSUID,
            None::<&str>,
        )
        .map_err(|e| format!("make the root read-only: {e}"))?;
    }
    Ok(())
}

/// Makes the mount at `target` read-only (the mounts below it keep their own flags).
fn seal(target: &Path) -> Result<(), String> {
    mount(
        None::<&str>,
        target,
        None::<&str>,
        MsFlags::MS_BIND | MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY | locked_flags(target),
        None::<&str>,
    )
    .map_err(|e| format!("make {} read-only: {e}", target.display()))
}

/// Whether something is mounted below machine directory `dir`.
fn has_mounts_below(dir: &Path) -> bool {
    let Ok(text) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return false;
    };
    let prefix = format!("{}/", dir.display());
    text.lines()
        .filter_map(|line| line.split(' ').nth(4))
        .any(|point| point.starts_with(&prefix))
}

/// A tmpfs of the container's own at `at` holding machine directory `machine`'s entries,
/// each bound in: where no overlay can be put over a machine directory (in a user namespace,
/// one with a mount below it, as `/run` with `/run/netns`), new mount points are made in it
/// instead of the machine's. The entries are read-only when the root is.
fn mirror(at: &Path, machine: &Path, read_only: bool) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(machine)
        .map(|m| m.permissions().mode() & 0o7777)
        .unwrap_or(0o755);
    let entries: Vec<_> = std::fs::read_dir(machine)
        .map_err(|e| format!("read {}: {e}", machine.display()))?
        .flatten()
        .collect();
    mount(
        Some("tmpfs"),
        at,
        Some("tmpfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        Some(format!("mode={mode:o}").as_str()),
    )
    .map_err(|e| format!("tmpfs on {}: {e}", at.display()))?;
    for entry in entries {
        let (host, target) = (entry.path(), at.join(entry.file_name()));
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        if kind.is_symlink() {
            if let Ok(link) = std::fs::read_link(&host) {
                let _ = std::os::unix::fs::symlink(link, &target);
            }
            continue;
        }
        let made = if kind.is_dir() {
            std::fs::create_dir(&target)
        } else {
            std::fs::write(&target, b"")
        };
        if made.is_ok() {
            let _ = bind(&host, &target, read_only);
        }
    }
    Ok(())
}

/// Writable layers of a container's own over machine directories inside its root (overlay
/// mounts: the machine's directory below, the container's changes above, in a tmpfs).
struct Layers {
    /// Where the layers' upper and work directories live (a tmpfs beside the root).
    base: PathBuf,
    made: usize,
    ready: bool,
    /// Whether the root is read-only: the entries of mirrors are, and the directories
    /// covered are sealed once their mount points are made.
    read_only: bool,
    /// The directories a layer or mirror was mounted on.
    covered: Vec<PathBuf>,
}

impl Layers {
    fn new(root: &Path, read_only: bool) -> Self {
        let mut base = root.as_os_str().to_owned();
        base.push(".layers");
        Self {
            base: PathBuf::from(base),
            made: 0,
            ready: false,
            read_only,
            covered: Vec::new(),
        }
    }

    /// Puts a layer over the nearest existing ancestor of `target` when that ancestor is a
    /// machine directory (the same directory as at its path outside). Best effort: where no
    /// overlay can be mounted, the mount point is made as before.
    fn shield(&mut self, root: &Path, target: &Path) {
        use std::os::unix::fs::MetadataExt;
        let Some(ancestor) = target.ancestors().skip(1).find(|a| a.exists()) else {
            return;
        };
        let Ok(relative) = ancestor.strip_prefix(root) else {
            return;
        };
        if relative.as_os_str().is_empty() {
            return;
        }
        let machine = Path::new("/").join(relative);
        let same = match (std::fs::metadata(ancestor), std::fs::metadata(&machine)) {
            (Ok(a), Ok(m)) => a.dev() == m.dev() && a.ino() == m.ino(),
            _ => false,
        };
        if !same {
            return;
        }
        // An overlay would hide the mounts below the directory (`/dev/pts` under `/dev`).
        if has_mounts_below(&machine) {
            if mirror(ancestor, &machine, self.read_only).is_ok() {
                self.covered.push(ancestor.to_path_buf());
            }
            return;
        }
        if !self.prepare() {
            return;
        }
        let layer = self.base.join(self.made.to_string());
        self.made += 1;
        let (upper, work) = (layer.join("upper"), layer.join("work"));
        if std::fs::create_dir_all(&upper).is_err() || std::fs::create_dir_all(&work).is_err() {
            return;
        }
        let options = format!(
            "lowerdir={},upperdir={},workdir={}",
            ancestor.display(),
            upper.display(),
            work.display()
        );
        let overlaid = mount(
            Some("overlay"),
            ancestor,
            Some("overlay"),
            MsFlags::MS_NOSUID,
            Some(options.as_str()),
        );
        let covered = overlaid.is_ok() || mirror(ancestor, &machine, self.read_only).is_ok();
        if covered {
            self.covered.push(ancestor.to_path_buf());
        }
    }

    /// The tmpfs the layers live in, mounted the first time.
    fn prepare(&mut self) -> bool {
        if !self.ready {
            self.ready = std::fs::create_dir_all(&self.base).is_ok()
                && mount(
                    Some("tmpfs"),
                    &self.base,
                    Some("tmpfs"),
                    MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
                    Some("mode=700"),
                )
                .is_ok();
        }
        self.ready
    }
}

fn second(spec: &Spec) -> Result<i32, String> {
    // The namespace ends with the first stage: if it is killed, so is this one. (The
    // machine's `/proc` is still mounted here, so the first stage can be looked up; inside
    // the new PID namespace `getppid()` says 0 whatever became of it.)
    tie_to(spec.parent)?;
    if let Some(name) = &spec.hostname {
        nix::unistd::sethostname(name).map_err(|e| format!("hostname: {e}"))?;
    }
    let forward = forward_signals()?;
    build_root(spec)?;
    nix::unistd::chroot(&spec.root).map_err(|e| format!("chroot: {e}"))?;
    std::env::set_current_dir("/").map_err(|e| format!("chdir /: {e}"))?;
    for (name, value) in &spec.sysctls {
        let path = crate::security::sysctl_path(name);
        std::fs::write(&path, value).map_err(|e| format!("sysctl {name}={value}: {e}"))?;
    }
    let argv = match &spec.security {
        Some(security) => security.wrap(&spec.argv),
        None => spec.argv.clone(),
    };
    let Some((program, args)) = argv.split_first() else {
        return Err("no command".into());
    };
    let mut command = Command::new(program);
    // This stage's environment is the container's (see `Spec::env`).
    command.args(args).env_clear().envs(std::env::vars_os());
    if let Some(cwd) = &spec.cwd {
        let _ = std::fs::create_dir_all(cwd);
        command.current_dir(cwd);
    }
    let child = match command.spawn() {
        Ok(child) => child,
        Err(e) => {
            eprintln!("exec {program}: {e}");
            return Ok(if e.kind() == std::io::ErrorKind::NotFound {
                127
            } else {
                126
            });
        }
    };
    let code = supervise(child.id(), true, &forward)?;
    // Whatever is left in the namespace goes with its init.
    let _ = kill(Pid::from_raw(-1), Signal::SIGKILL);
    Ok(code)
}

/// Whether this machine lets the agent make namespaces (as root, or in a user namespace of
/// its own where unprivileged user namespaces are allowed): checked once by running `true`
/// in a sandbox.
pub fn available(exe: &Path) -> bool {
    let spec = Spec {
        argv: vec!["/bin/true".into()],
        env: Vec::new(),
        root: std::env::temp_dir().join(format!("plinth-sandbox-probe-{}", std::process::id())),
        ..Spec::default()
    };
    let Ok(encoded) = serde_json::to_string(&spec) else {
        return false;
    };
    let ok = Command::new(exe)
        .arg("sandbox")
        .arg(encoded)
        .env_clear()
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    let _ = std::fs::remove_dir(&spec.root);
    ok
}

/// Exit code of a finished process as the sandbox reports it.
pub fn code_of(status: ExitStatus) -> i32 {
    exit_code(status)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_the_sandbox_makes_its_own_are_known() {
        assert!(replaced("/tmp/target/debug/redis-operator"));
        assert!(replaced("/proc/self/exe"));
        assert!(!replaced("/usr/bin/redis-server"));
        assert!(!replaced("/tmpfoo/x"));
        assert!(!replaced("tmp/x"), "only absolute paths");
    }
}
