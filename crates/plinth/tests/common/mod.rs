//! A `plinth serve` process for end-to-end tests, and kubectl against it.

#![allow(dead_code, unreachable_pub, clippy::unwrap_used)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

use plinth_store_etcd::testing::EtcdProcess;

pub mod envtest;
pub mod http;

/// Which storage the server under test uses.
pub enum Backend {
    Embedded,
    Etcd(EtcdProcess),
    /// An etcd that another test server started (its endpoint).
    SharedEtcd(String),
}

/// A running `plinth serve`.
pub struct Plinth {
    child: Option<Child>,
    pub dir: tempfile::TempDir,
    pub kubeconfig: PathBuf,
    backend: Backend,
    listen: String,
    extra_args: Vec<String>,
    /// The address ranges of this server's pods and Services, when it runs a node.
    slot: Option<Slot>,
}

/// The address ranges of one test server's pods and Services ([`plinth_testenv::Slot`]).
pub use plinth_testenv::Slot;

impl Plinth {
    pub fn start(backend: Backend) -> Self {
        Self::start_with(backend, &[])
    }

    /// Starts with extra `plinth serve` arguments.
    pub fn start_with(backend: Backend, extra_args: &[&str]) -> Self {
        Self::start_in(tempfile::tempdir().unwrap(), backend, extra_args)
    }

    /// Starts on data directory `dir` (one a test prepared, say a restored backup).
    pub fn start_in(dir: tempfile::TempDir, backend: Backend, extra_args: &[&str]) -> Self {
        // Port 0: plinth binds a free port itself (no race with other tests) and writes it into
        // the kubeconfig, which every client here reads.
        let mut plinth = Self {
            child: None,
            kubeconfig: dir.path().join("kubeconfig"),
            dir,
            backend,
            listen: "127.0.0.1:0".to_owned(),
            extra_args: extra_args.iter().map(|s| (*s).to_owned()).collect(),
            slot: None,
        };
        if plinth.runs_node() {
            plinth.slot = Some(Slot::take());
        }
        plinth.launch();
        plinth
    }

    /// Starts with an audit log of every request at `Metadata` level; returns the directory
    /// holding the policy and the log (kept as long as it lives) and the log's path.
    pub fn start_audited(backend: Backend) -> (Self, tempfile::TempDir, PathBuf) {
        Self::start_audited_with(backend, tempfile::tempdir().unwrap(), &[])
    }

    /// [`Plinth::start_audited`] with the policy and log in `dir` and more arguments.
    pub fn start_audited_with(
        backend: Backend,
        dir: tempfile::TempDir,
        extra_args: &[&str],
    ) -> (Self, tempfile::TempDir, PathBuf) {
        let policy = dir.path().join("audit-policy.yaml");
        std::fs::write(
            &policy,
            "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: Metadata\n",
        )
        .unwrap();
        let log = dir.path().join("audit.log");
        let mut args = vec![
            "--audit-policy-file",
            policy.to_str().unwrap(),
            "--audit-log-path",
            log.to_str().unwrap(),
        ];
        args.extend_from_slice(extra_args);
        let plinth = Self::start_with(backend, &args);
        (plinth, dir, log)
    }

    pub async fn start_etcd() -> Self {
        let etcd = EtcdProcess::start().await.expect("start etcd");
        Self::start(Backend::Etcd(etcd))
    }

    fn launch(&mut self) {
        let mut command = Command::new(env!("CARGO_BIN_EXE_plinth"));
        command
            .args(["serve", "--data-dir"])
            .arg(self.dir.path())
            .args(["--listen", &self.listen]);
        match &self.backend {
            Backend::Etcd(etcd) => {
                command.args(["--etcd-servers", &etcd.endpoint()]);
            }
            Backend::SharedEtcd(endpoint) => {
                command.args(["--etcd-servers", endpoint]);
            }
            Backend::Embedded => {}
        }
        command.args(&self.extra_args);
        // A node agent only where a test names its node.
        match &self.slot {
            Some(slot) => {
                if self
                    .extra_args
                    .iter()
                    .any(|a| a == "--pod-network=namespaces")
                {
                    command.args(slot.private_args());
                } else {
                    command.args(slot.args());
                }
            }
            None => {
                command.args(["--no-node", "--pod-network=shared"]);
            }
        }
        let mut child = command
            .env("RUST_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn plinth");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(
            Path::new(line.trim()),
            self.kubeconfig,
            "plinth prints its kubeconfig path"
        );
        self.child = Some(child);
    }

    /// The etcd this server started with, when it owns one.
    pub fn etcd_mut(&mut self) -> Option<&mut EtcdProcess> {
        match &mut self.backend {
            Backend::Etcd(etcd) => Some(etcd),
            _ => None,
        }
    }

    /// Whether the server runs a node agent (the test gave `--node-name`).
    pub fn runs_node(&self) -> bool {
        self.extra_args.iter().any(|a| a == "--node-name")
    }

    /// The etcd endpoint this server stores in, if any.
    pub fn etcd_endpoint(&self) -> Option<String> {
        match &self.backend {
            Backend::Etcd(etcd) => Some(etcd.endpoint()),
            Backend::SharedEtcd(endpoint) => Some(endpoint.clone()),
            Backend::Embedded => None,
        }
    }

    /// SIGKILLs the server and starts it again on the same data (and etcd).
    pub fn kill_and_restart(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.kill().unwrap();
            child.wait().unwrap();
        }
        self.launch();
    }

    /// This server's URL (`https://127.0.0.1:PORT`), from its kubeconfig.
    pub fn server_url(&self) -> String {
        let config = std::fs::read_to_string(&self.kubeconfig).unwrap();
        config
            .lines()
            .find_map(|l| l.trim().strip_prefix("server: "))
            .unwrap()
            .to_owned()
    }

    /// SIGKILLs the server, keeping its port for [`Plinth::relaunch`] (clients that know its
    /// address find it there again, as behind a fixed address).
    pub fn kill(&mut self) {
        let url = self.server_url();
        self.listen = url.trim_start_matches("https://").to_owned();
        if let Some(mut child) = self.child.take() {
            child.kill().unwrap();
            child.wait().unwrap();
        }
    }

    /// Stops the server with SIGTERM, keeping its port for [`Plinth::relaunch`].
    pub fn stop(&mut self) {
        let url = self.server_url();
        self.listen = url.trim_start_matches("https://").to_owned();
        let status = self.terminate();
        assert!(status.success(), "plinth stopped with {status}");
    }

    /// The storage the next [`Plinth::relaunch`] starts on.
    pub fn set_backend(&mut self, backend: Backend) {
        self.backend = backend;
    }

    /// Starts the server again after [`Plinth::kill`], on the same data, storage and port.
    pub fn relaunch(&mut self) {
        assert!(self.child.is_none(), "relaunch follows kill");
        self.launch();
    }

    /// The server's process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// A `kube` client for this server, from its kubeconfig.
    pub async fn kube_client(&self) -> kube::Client {
        use kube::config::{KubeConfigOptions, Kubeconfig};
        let kubeconfig = Kubeconfig::read_from(&self.kubeconfig).unwrap();
        let config =
            kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
                .await
                .unwrap();
        kube::Client::try_from(config).unwrap()
    }

    /// SIGKILLs the server and, while it is down, deletes `key` (a storage key such as
    /// `/configmaps/default/x`) straight from its storage; then starts it again.
    pub fn delete_while_down(&mut self, key: &str) {
        self.change_while_down(key, None);
    }

    /// SIGKILLs the server and, while it is down, writes `value` under `key` straight into its
    /// storage (as an older version of Plinth, or another writer, might have); then starts it
    /// again.
    pub fn put_while_down(&mut self, key: &str, value: &serde_json::Value) {
        self.change_while_down(key, Some(value));
    }

    /// SIGKILLs the server, reads `key` straight from its storage (as stored: encrypted, if
    /// it is), and starts it again.
    pub fn read_while_down(&mut self, key: &str) -> Option<bytes::Bytes> {
        if let Some(mut child) = self.child.take() {
            child.kill().unwrap();
            child.wait().unwrap();
        }
        let runtime = tokio::runtime::Runtime::new().unwrap();
        let value = runtime.block_on(async {
            match self.etcd_endpoint() {
                Some(endpoint) => {
                    let store = plinth_store_etcd::EtcdStore::connect(&[endpoint], "/registry/")
                        .await
                        .unwrap();
                    plinth_store::Store::get(&store, key)
                        .await
                        .unwrap()
                        .map(|kv| kv.value)
                }
                None => {
                    let store =
                        plinth_store_embedded::EmbeddedStore::open(self.dir.path().join("store"))
                            .unwrap();
                    let value = plinth_store::Store::get(&store, key)
                        .await
                        .unwrap()
                        .map(|kv| kv.value);
                    store.close().await;
                    value
                }
            }
        });
        drop(runtime);
        self.launch();
        value
    }

    fn change_while_down(&mut self, key: &str, value: Option<&serde_json::Value>) {
        if let Some(mut child) = self.child.take() {
            child.kill().unwrap();
            child.wait().unwrap();
        }
        async fn change(
            store: &dyn plinth_store::Store,
            key: &str,
            value: Option<&serde_json::Value>,
        ) {
            match value {
                Some(v) => {
                    let bytes = bytes::Bytes::from(serde_json::to_vec(v).unwrap());
                    match store.get(key).await.unwrap() {
                        Some(kv) => store.update(key, bytes, kv.mod_revision).await.map(drop),
                        None => store.create(key, bytes).await.map(drop),
                    }
                    .unwrap();
                }
                None => {
                    store.delete(key, None).await.unwrap();
                }
            }
        }
        let runtime = tokio::runtime::Runtime::new().unwrap();
        runtime.block_on(async {
            match self.etcd_endpoint() {
                Some(endpoint) => {
                    let store = plinth_store_etcd::EtcdStore::connect(&[endpoint], "/registry/")
                        .await
                        .unwrap();
                    change(&store, key, value).await;
                }
                None => {
                    let store =
                        plinth_store_embedded::EmbeddedStore::open(self.dir.path().join("store"))
                            .unwrap();
                    change(&store, key, value).await;
                    // Releases the data directory's lock before the server starts again.
                    store.close().await;
                }
            }
        });
        drop(runtime);
        self.launch();
    }

    /// Sends SIGTERM and returns the exit status.
    pub fn terminate(&mut self) -> std::process::ExitStatus {
        let mut child = self.child.take().unwrap();
        sigterm(&child);
        child.wait().unwrap()
    }

    /// kubectl for this server: its kubeconfig, and a discovery cache of its own (the shared
    /// `~/.kube/cache` is keyed by host and port, and ports are reused by later servers).
    pub fn kubectl_command(&self) -> Command {
        let mut command = Command::new("kubectl");
        command
            .env("KUBECONFIG", &self.kubeconfig)
            .env("KUBECACHEDIR", self.dir.path().join("kube-cache"))
            .env_remove("KUBECTL_EXTERNAL_DIFF");
        command
    }

    pub fn kubectl_output(&self, args: &[&str]) -> Output {
        self.kubectl_command()
            .args(args)
            .output()
            .expect("run kubectl")
    }

    /// Runs kubectl and returns stdout; panics with stderr if it fails.
    pub fn kubectl(&self, args: &[&str]) -> String {
        let out = self.kubectl_output(args);
        assert!(
            out.status.success(),
            "kubectl {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// Creates each CRD file with `kubectl create` (as large real-world CRDs are installed:
    /// their schemas overflow client-side apply's last-applied annotation), then waits until
    /// every CRD is Established, within `timeout` (kubectl's `--timeout`, e.g. `60s`).
    pub fn install_crds(&self, files: &[std::path::PathBuf], timeout: &str) {
        for file in files {
            let out = self.kubectl_output(&["create", "-f", file.to_str().unwrap()]);
            assert!(
                out.status.success(),
                "{}: {}",
                file.display(),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let timeout = format!("--timeout={timeout}");
        self.kubectl(&[
            "wait",
            "--for=condition=Established",
            "crd",
            "--all",
            &timeout,
        ]);
    }

    /// Runs kubectl expecting failure; returns stderr.
    pub fn kubectl_fails(&self, args: &[&str]) -> String {
        let out = self.kubectl_output(args);
        assert!(
            !out.status.success(),
            "kubectl {args:?} should fail but printed {}",
            String::from_utf8_lossy(&out.stdout)
        );
        String::from_utf8(out.stderr).unwrap()
    }

    /// Runs kubectl with `input` on stdin.
    pub fn kubectl_stdin(&self, args: &[&str], input: &str) -> Output {
        use std::io::Write;
        let mut child = self
            .kubectl_command()
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.as_bytes())
            .unwrap();
        child.wait_with_output().unwrap()
    }

    /// Runs kubectl with `input` on stdin; panics with stderr if it fails, else returns stdout.
    pub fn kubectl_with(&self, args: &[&str], input: &str) -> String {
        let out = self.kubectl_stdin(args, input);
        assert!(
            out.status.success(),
            "kubectl {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    pub fn json(&self, args: &[&str]) -> serde_json::Value {
        let mut full = args.to_vec();
        full.extend(["-o", "json"]);
        serde_json::from_str(&self.kubectl(&full)).unwrap()
    }

    /// Retries `check` until it holds (a hang guard ends the wait: see
    /// [`plinth_testenv::eventually_blocking`]).
    pub fn eventually(&self, what: &str, check: impl FnMut() -> bool) {
        plinth_testenv::eventually_blocking(what, check);
    }
}

impl Drop for Plinth {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            // A node agent stops its pods' processes when the server stops: SIGTERM first.
            if self.runs_node() && terminated_within(&mut child, 300) {
                return;
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A child process killed (by its PID, through `Child::kill`) when dropped, if still held:
/// what a test starts is stopped even when an assertion fails first.
pub struct Stopped(pub Option<Child>);

impl Drop for Stopped {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The events of an audit log, parsed.
pub fn audit_events(log: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(log)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Generates `embedded::<name>` and `etcd::<name>` tests, each running `<name>(&mut Plinth)` on a
/// fresh server.
#[macro_export]
macro_rules! on_both_backends {
    ($($name:ident;)*) => {
        mod embedded {
            $(
                #[test]
                fn $name() {
                    let mut plinth = $crate::common::Plinth::start($crate::common::Backend::Embedded);
                    super::$name(&mut plinth);
                }
            )*
        }
        mod etcd {
            $(
                #[test]
                fn $name() {
                    let runtime = tokio::runtime::Runtime::new().unwrap();
                    let mut plinth = runtime.block_on($crate::common::Plinth::start_etcd());
                    super::$name(&mut plinth);
                }
            )*
        }
    };
}

/// The holder of the controllers' Lease, as `server` sees it.
pub fn lease_holder(server: &Plinth) -> String {
    let out = server.kubectl_output(&[
        "get",
        "lease",
        "-n",
        "kube-system",
        "kube-controller-manager",
        "-o",
        "jsonpath={.spec.holderIdentity}",
    ]);
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Whether `holder` names `server` (its identity carries its data directory).
pub fn holds(holder: &str, server: &Plinth) -> bool {
    let dir = std::fs::canonicalize(server.dir.path()).unwrap();
    holder.ends_with(&format!("_{}", dir.display()))
}

/// A self-signed certificate made as `openssl req -x509` makes it (`CA:TRUE`), for `san`, in
/// `dir/<name>.crt` and `.key`; its PEM.
pub fn openssl_self_signed(
    dir: &std::path::Path,
    name: &str,
    san: &str,
) -> (String, std::path::PathBuf, std::path::PathBuf) {
    let (cert, key) = (
        dir.join(format!("{name}.crt")),
        dir.join(format!("{name}.key")),
    );
    let made = std::process::Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
        ])
        .args(["-nodes", "-days", "2", "-subj", "/CN=localhost", "-addext"])
        .arg(format!("subjectAltName={san}"))
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .unwrap();
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );
    let text = std::process::Command::new("openssl")
        .args(["x509", "-noout", "-text", "-in"])
        .arg(&cert)
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&text.stdout).contains("CA:TRUE"),
        "openssl made a CA certificate"
    );
    (std::fs::read_to_string(&cert).unwrap(), cert, key)
}

/// `kubectl port-forward TARGET :PORT` while held (stopped by its PID when dropped), and
/// the local port kubectl chose.
pub struct Forwarded {
    /// The local port.
    pub local: String,
    child: Stopped,
    drain: Option<std::thread::JoinHandle<std::io::Result<u64>>>,
}

impl Forwarded {
    /// Starts the forward (`websockets`: `KUBECTL_PORT_FORWARD_WEBSOCKETS`, when given) and
    /// reads where kubectl listens.
    pub fn start(plinth: &Plinth, target: &str, port: u16, websockets: Option<&str>) -> Self {
        let mut command = plinth.kubectl_command();
        command
            .args(["port-forward", target, &format!(":{port}")])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null());
        if let Some(value) = websockets {
            command.env("KUBECTL_PORT_FORWARD_WEBSOCKETS", value);
        }
        let mut child = command.spawn().unwrap();
        let stdout = child.stdout.take().unwrap();
        let child = Stopped(Some(child));
        let mut reader = std::io::BufReader::new(stdout);
        let mut line = String::new();
        std::io::BufRead::read_line(&mut reader, &mut line).unwrap();
        // kubectl goes on writing ("Handling connection…"): its output is read to the end.
        let drain = std::thread::spawn(move || std::io::copy(&mut reader, &mut std::io::sink()));
        let local = line
            .split_whitespace()
            .find_map(|w| w.strip_prefix("127.0.0.1:"))
            .unwrap_or_else(|| panic!("kubectl port-forward says where: {line}"))
            .to_owned();
        Self {
            local,
            child,
            drain: Some(drain),
        }
    }
}

impl Drop for Forwarded {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.0.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        if let Some(drain) = self.drain.take() {
            let _ = drain.join();
        }
    }
}

/// What the machine has of network devices, namespaces and rule tables now.
pub fn machine_network() -> (String, String, String) {
    let run = |program: &str, args: &[&str]| {
        let out = std::process::Command::new(program)
            .args(args)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    (
        run("ip", &["-o", "link", "show"]),
        run("ip", &["netns", "list"]),
        run("nft", &["list", "tables"]),
    )
}

/// The names of a list's items, in its order.
pub fn item_names(list: &serde_json::Value) -> Vec<String> {
    list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|i| i["metadata"]["name"].as_str().unwrap_or("").to_owned())
        .collect()
}

/// The machine's devices, network namespaces and rule tables whose names carry `tag` (a
/// node agent's: see [`bridge_tag`]).
pub fn leftovers(tag: &str) -> Vec<String> {
    let (links, namespaces, tables) = machine_network();
    links
        .lines()
        .chain(namespaces.lines())
        .chain(tables.lines())
        .filter(|l| l.contains(tag))
        .map(str::to_owned)
        .collect()
}

/// The tag in the names of what node `node`'s agent makes on the machine (its bridge, its
/// pods' namespaces and devices, its rule table), read off the node's network condition.
pub fn bridge_tag(plinth: &Plinth, node: &str) -> String {
    let read = || {
        plinth.kubectl(&[
            "get",
            "node",
            node,
            "-o",
            "jsonpath={.status.conditions[?(@.type==\"NetworkUnavailable\")].message}",
        ])
    };
    plinth.eventually("the node's network condition", || read().contains("plbr-"));
    let message = read();
    let bridge = message
        .split_whitespace()
        .find(|w| w.starts_with("plbr-"))
        .unwrap_or_else(|| panic!("no bridge named in {message:?}"));
    bridge.trim_start_matches("plbr-").to_owned()
}

/// Sends SIGTERM to `child` (by its PID).
pub fn sigterm(child: &Child) {
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
}

/// SIGTERM, then up to `tenths` tenths of a second for `child` to end; whether it did.
pub fn terminated_within(child: &mut Child, tenths: u32) -> bool {
    sigterm(child);
    for _ in 0..tenths {
        if child.try_wait().ok().flatten().is_some() {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    false
}
