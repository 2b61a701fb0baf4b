//! `plinth serve` as a process of a test (an operator's, deployed the way users deploy it):
//! its data in a directory of its own, images mapped to local executables, kubectl pointed
//! at it, stopped by its PID (SIGTERM first, so that its agent stops its pods and removes its
//! devices, namespaces and rules).

use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};

/// A running `plinth serve`.
///
/// # Example
///
/// ```no_run
/// # let plinth = std::path::PathBuf::from("target/debug/plinth");
/// let served = plinth_testenv::Served::start(plinth, "node-a", &[("redis:*", "/usr/bin/redis-server")], false);
/// // kubectl against it; the pods' images run as the mapped executables.
/// served.ok(&["run", "cache", "--image=redis:7"]);
/// served.ok(&["wait", "--for=condition=Ready", "pod/cache", "--timeout=120s"]);
/// // Dropping it stops the server by its PID (SIGTERM first: its pods stop too).
/// drop(served);
/// ```
pub struct Served {
    child: Child,
    /// Its kubeconfig.
    pub kubeconfig: PathBuf,
    /// The directory of its data and of the test's files.
    pub dir: PathBuf,
    _slot: crate::Slot,
}

impl std::fmt::Debug for Served {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Served")
            .field("kubeconfig", &self.kubeconfig)
            .finish_non_exhaustive()
    }
}

impl Served {
    /// Starts `plinth` (see [`crate::plinth_binary`]) serving node `node`, with `images`
    /// (pattern → executable) and the loopback ranges of a slot of its own (pods sharing the
    /// machine's network), or with `--pod-network=namespaces` and private ranges when
    /// `private`.
    ///
    /// # Panics
    /// When it cannot be started or never prints its kubeconfig.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # let plinth = std::path::PathBuf::from("target/debug/plinth");
    /// let served = plinth_testenv::Served::start(plinth, "node-a", &[("redis:*", "/usr/bin/redis-server")], false);
    /// assert!(served.kubeconfig.exists());
    /// assert!(served.dir.join("images.yaml").exists());
    /// ```
    pub fn start(plinth: PathBuf, node: &str, images: &[(&str, &str)], private: bool) -> Self {
        let dir = std::env::temp_dir().join(format!("{node}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        let map: String = images
            .iter()
            .map(|(pattern, path)| format!("{pattern:?}: {path}\n"))
            .collect();
        let images = dir.join("images.yaml");
        std::fs::write(&images, map).unwrap_or_else(|e| panic!("{}: {e}", images.display()));
        // Every request's metadata in an audit log (who did what, from which client).
        let policy = dir.join("audit-policy.yaml");
        std::fs::write(
            &policy,
            "apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived]\nrules:\n- level: Metadata\n",
        )
        .unwrap_or_else(|e| panic!("{}: {e}", policy.display()));
        let slot = crate::Slot::take();
        let ranges = if private {
            let mut args = slot.private_args();
            args.push("--pod-network=namespaces".into());
            args
        } else {
            slot.args()
        };
        let mut child = Command::new(plinth)
            .args(["serve", "--listen", "127.0.0.1:0", "--node-name", node])
            .arg("--data-dir")
            .arg(dir.join("plinth"))
            .arg("--images")
            .arg(&images)
            .args(ranges)
            .arg("--audit-policy-file")
            .arg(&policy)
            .arg("--audit-log-path")
            .arg(dir.join("audit.log"))
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("plinth serve: {e}"));
        let mut line = String::new();
        if let Some(stdout) = child.stdout.take() {
            let _ = std::io::BufReader::new(stdout).read_line(&mut line);
        }
        Self {
            child,
            kubeconfig: PathBuf::from(line.trim()),
            dir,
            _slot: slot,
        }
    }

    /// kubectl with `args`, `input` on its standard input.
    ///
    /// # Panics
    /// When kubectl cannot be run.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # let plinth = std::path::PathBuf::from("target/debug/plinth");
    /// let served = plinth_testenv::Served::start(plinth, "node-a", &[("redis:*", "/usr/bin/redis-server")], false);
    /// let out = served.kubectl_input(&["apply", "-f", "-"], b"apiVersion: v1\nkind: Namespace\nmetadata: {name: team-a}\n");
    /// assert!(out.status.success());
    /// ```
    pub fn kubectl_input(&self, args: &[&str], input: &[u8]) -> Output {
        let mut child = Command::new("kubectl")
            .args(args)
            .env("KUBECONFIG", &self.kubeconfig)
            .env("KUBECACHEDIR", self.dir.join("kube-cache"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("kubectl: {e}"));
        if let Some(mut stdin) = child.stdin.take() {
            let _ = stdin.write_all(input);
        }
        child
            .wait_with_output()
            .unwrap_or_else(|e| panic!("kubectl: {e}"))
    }

    /// kubectl with `args`.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # let plinth = std::path::PathBuf::from("target/debug/plinth");
    /// let served = plinth_testenv::Served::start(plinth, "node-a", &[("redis:*", "/usr/bin/redis-server")], false);
    /// let out = served.kubectl(&["get", "pod", "missing"]);
    /// assert!(!out.status.success());
    /// ```
    pub fn kubectl(&self, args: &[&str]) -> Output {
        self.kubectl_input(args, b"")
    }

    /// kubectl's output, which must succeed.
    ///
    /// # Panics
    /// When kubectl fails.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # let plinth = std::path::PathBuf::from("target/debug/plinth");
    /// let served = plinth_testenv::Served::start(plinth, "node-a", &[("redis:*", "/usr/bin/redis-server")], false);
    /// let printed = served.ok_input(&["create", "-f", "-"], b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings}\n");
    /// assert_eq!(printed.trim(), "configmap/settings created");
    /// ```
    pub fn ok_input(&self, args: &[&str], input: &[u8]) -> String {
        let out = self.kubectl_input(args, input);
        assert!(
            out.status.success(),
            "kubectl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// As [`Served::ok_input`], without input.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # let plinth = std::path::PathBuf::from("target/debug/plinth");
    /// let served = plinth_testenv::Served::start(plinth, "node-a", &[("redis:*", "/usr/bin/redis-server")], false);
    /// let names = served.ok(&["get", "namespaces", "-o", "name"]);
    /// assert!(names.lines().any(|l| l == "namespace/kube-system"));
    /// ```
    pub fn ok(&self, args: &[&str]) -> String {
        self.ok_input(args, b"")
    }

    /// kubectl's error output, which must fail.
    ///
    /// # Panics
    /// When kubectl succeeds.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # let plinth = std::path::PathBuf::from("target/debug/plinth");
    /// let served = plinth_testenv::Served::start(plinth, "node-a", &[("redis:*", "/usr/bin/redis-server")], false);
    /// let error = served.refused(&["create", "-f", "-"], b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: Not_A_Name}\n");
    /// assert!(error.contains("is invalid"));
    /// ```
    pub fn refused(&self, args: &[&str], input: &[u8]) -> String {
        let out = self.kubectl_input(args, input);
        assert!(!out.status.success(), "kubectl {args:?} succeeded");
        String::from_utf8_lossy(&out.stderr).into_owned()
    }

    /// The object(s) `args` get, as JSON.
    ///
    /// # Panics
    /// When kubectl fails or prints no JSON.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # let plinth = std::path::PathBuf::from("target/debug/plinth");
    /// let served = plinth_testenv::Served::start(plinth, "node-a", &[("redis:*", "/usr/bin/redis-server")], false);
    /// let node = served.json(&["get", "node", "node-a"]);
    /// assert_eq!(node["metadata"]["name"], "node-a");
    /// ```
    pub fn json(&self, args: &[&str]) -> serde_json::Value {
        let mut full = args.to_vec();
        full.extend(["-o", "json"]);
        serde_json::from_str(&self.ok(&full)).unwrap_or_else(|e| panic!("{e}"))
    }

    /// The audit events logged so far (`audit.k8s.io/v1` Events at `Metadata` level: verb,
    /// user, `userAgent`, object reference, `requestReceivedTimestamp`, response code).
    ///
    /// # Example
    ///
    /// ```no_run
    /// # let plinth = std::path::PathBuf::from("target/debug/plinth");
    /// let served = plinth_testenv::Served::start(plinth, "node-a", &[("redis:*", "/usr/bin/redis-server")], false);
    /// served.ok(&["get", "configmaps"]);
    /// assert!(served.audit_events().iter().any(|e| e["verb"] == "list"
    ///     && e["objectRef"]["resource"] == "configmaps"));
    /// ```
    pub fn audit_events(&self) -> Vec<serde_json::Value> {
        std::fs::read_to_string(self.dir.join("audit.log"))
            .unwrap_or_default()
            .lines()
            .filter_map(|line| serde_json::from_str(line).ok())
            .collect()
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        for _ in 0..300 {
            if self.child.try_wait().ok().flatten().is_some() {
                let _ = std::fs::remove_dir_all(&self.dir);
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
