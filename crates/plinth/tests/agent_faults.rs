//! A node agent SIGKILLed again and again while its pods start, run and terminate (issue #31).
//!
//! The agent runs in a `pids` cgroup the test makes (no one else uses that hierarchy here), so
//! every process it starts — containers' sandboxes, their commands, probes, hooks — is found
//! by membership, never by name. After each SIGKILL the cgroup must empty (a container never
//! outlives its agent); after each restart every pod must be taken up again or, when it was
//! deleted meanwhile, cleaned up; at the end the agent's children are exactly the running
//! containers the API reports, and once the pods are gone, only the agent is left, with none
//! of their files, namespaces or devices.

#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::Duration;

use common::{Backend, Plinth, bridge_tag, leftovers};
use serde_json::Value;

/// The node the agent under test registers.
const NODE: &str = "agent-faults";

/// Where the `pids` controller's hierarchy is mounted (cgroup v1, as on these machines).
const PIDS: &str = "/sys/fs/cgroup/pids";

/// The PIDs (thread-group IDs) in cgroup `dir`.
fn members(dir: &Path) -> BTreeSet<u32> {
    std::fs::read_to_string(dir.join("cgroup.procs"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

/// The parent of process `pid`, if it still runs.
fn parent_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command (in parentheses) may hold spaces; the fields after it do not.
    let rest = &stat[stat.rfind(')')? + 2..];
    rest.split(' ').nth(1)?.parse().ok()
}

/// A `plinth node` process in a cgroup of its own.
struct Agent {
    child: Option<Child>,
    cgroup: PathBuf,
    dir: PathBuf,
}

impl Agent {
    /// Makes the cgroup; the agent starts with [`Agent::launch`].
    fn new(dir: &Path) -> Self {
        let cgroup = Path::new(PIDS).join(format!("plinth-agent-faults-{}", std::process::id()));
        std::fs::create_dir_all(&cgroup).unwrap();
        Self {
            child: None,
            cgroup,
            dir: dir.to_owned(),
        }
    }

    /// Starts the agent: a shell joins the cgroup and becomes the agent, so that the agent
    /// and all it starts are members from the first instruction.
    fn launch(&mut self, plinth: &Plinth) {
        assert!(self.child.is_none());
        let child = Command::new("sh")
            .arg("-c")
            .arg(r#"echo $$ > "$0" && exec "$@""#)
            .arg(self.cgroup.join("cgroup.procs"))
            .arg(env!("CARGO_BIN_EXE_plinth"))
            .args(["node", "--kubeconfig"])
            .arg(&plinth.kubeconfig)
            .args(["--node-name", NODE, "--node-status-update-frequency", "1s"])
            .arg("--data-dir")
            .arg(&self.dir)
            // The server's network.json: the cluster's pod and Service ranges.
            .env("PLINTH_DATA_DIR", plinth.dir.path())
            .env("RUST_LOG", "warn")
            .spawn()
            .unwrap();
        self.child = Some(child);
    }

    fn pid(&self) -> u32 {
        self.child.as_ref().unwrap().id()
    }

    /// SIGKILL, as a crash would end it.
    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.kill().unwrap();
            child.wait().unwrap();
        }
    }

    /// SIGTERM: it stops its pods and removes what it made.
    fn stop(&mut self) -> std::process::ExitStatus {
        let mut child = self.child.take().unwrap();
        common::sigterm(&child);
        child.wait().unwrap()
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        // A failed test's agent: SIGTERM first, so that it removes its network; SIGKILL
        // if it does not end (the next agent on the machine sweeps what a dead one left).
        if let Some(child) = &mut self.child {
            common::terminated_within(child, 300);
        }
        self.kill();
        // Whatever a failed test left in the cgroup, by PID, then the cgroup itself.
        for _ in 0..50 {
            let left = members(&self.cgroup);
            if left.is_empty() {
                break;
            }
            for pid in left {
                let _ = Command::new("kill")
                    .args(["-KILL", &pid.to_string()])
                    .status();
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        // A killed process leaves the cgroup a moment after it dies: the removal is retried.
        for _ in 0..50 {
            if std::fs::remove_dir(&self.cgroup).is_ok() || !self.cgroup.exists() {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// Every pod of the agent's node.
fn pods(plinth: &Plinth) -> Vec<Value> {
    plinth.json(&[
        "get",
        "pods",
        "--field-selector",
        &format!("spec.nodeName={NODE}"),
    ])["items"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// How many containers the API reports running on the node (init containers among them).
fn running_containers(pods: &[Value]) -> usize {
    pods.iter()
        .flat_map(|pod| {
            ["initContainerStatuses", "containerStatuses"]
                .into_iter()
                .flat_map(move |field| pod["status"][field].as_array().cloned().unwrap_or_default())
        })
        .filter(|status| status["state"]["running"].is_object())
        .count()
}

/// Whether the pod is where it should settle: running and ready, or done.
fn settled(pod: &Value) -> bool {
    let phase = pod["status"]["phase"].as_str().unwrap_or("");
    let ready = pod["status"]["conditions"].as_array().is_some_and(|c| {
        c.iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True")
    });
    pod["metadata"]["deletionTimestamp"].is_null() && (phase == "Succeeded" || ready)
}

/// The agent's child processes (each container's sandbox, and anything else it started).
fn children(agent: &Agent) -> Vec<u32> {
    let pid = agent.pid();
    members(&agent.cgroup)
        .into_iter()
        .filter(|p| parent_of(*p) == Some(pid))
        .collect()
}

/// A pod whose init container runs a moment and whose main container takes three seconds to
/// stop (a shell trapping SIGTERM): killing the agent finds pods starting and terminating.
fn pod(name: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: Pod
metadata: {{name: {name}, labels: {{app: churn}}}}
spec:
  nodeName: {NODE}
  terminationGracePeriodSeconds: 30
  initContainers: [{{name: init, image: busybox, command: [sleep, "1"]}}]
  containers:
  - name: main
    image: busybox
    command: [sh, -c, 'trap "sleep 3; exit 0" TERM; while true; do sleep 1; done']
"#
    )
}

const STEADY: &str = r#"apiVersion: apps/v1
kind: Deployment
metadata: {name: steady}
spec:
  replicas: 3
  selector: {matchLabels: {app: steady}}
  template:
    metadata: {labels: {app: steady}}
    spec:
      nodeSelector: {kubernetes.io/hostname: agent-faults}
      terminationGracePeriodSeconds: 5
      containers:
      - name: main
        image: busybox
        command: [sh, -c, "mkdir -p /tmp/w && echo ok > /tmp/w/index.html && exec httpd -f -p 8080 -h /tmp/w"]
        readinessProbe: {httpGet: {path: /, port: 8080}, periodSeconds: 1}
"#;

fn job(name: &str) -> String {
    format!(
        r#"apiVersion: batch/v1
kind: Job
metadata: {{name: {name}}}
spec:
  backoffLimit: 6
  template:
    spec:
      nodeSelector: {{kubernetes.io/hostname: {NODE}}}
      restartPolicy: Never
      containers: [{{name: main, image: busybox, command: [sleep, "2"]}}]
"#
    )
}

#[test]
fn a_node_agent_killed_as_pods_start_run_and_stop_leaves_no_process_and_takes_its_pods_up_again() {
    let begun = std::time::Instant::now();
    // Where the test is, on stderr: a run that hangs shows its last step.
    let step = |what: &str| eprintln!("[{:7.1}s] {what}", begun.elapsed().as_secs_f64());
    assert!(
        Path::new(PIDS).join("cgroup.procs").exists(),
        "this machine has the cgroup v1 pids hierarchy (these machines do)"
    );
    if let Err(e) = tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(plinth_net::host::available())
    {
        panic!("this test needs network namespaces (root, ip, nft): {e}");
    }
    let plinth = Plinth::start_with(
        Backend::Embedded,
        &[
            "--node-name",
            "agent-faults-main",
            "--pod-network=namespaces",
        ],
    );
    // Only the agent under test takes new pods.
    plinth.eventually("the server's own node registered", || {
        plinth
            .kubectl_output(&["get", "node", "agent-faults-main"])
            .status
            .success()
    });
    plinth.kubectl(&["cordon", "agent-faults-main"]);
    step("server up, its node cordoned");
    let dir = tempfile::tempdir().unwrap();
    let mut agent = Agent::new(dir.path());
    agent.launch(&plinth);
    plinth.eventually("the agent's node is Ready", || {
        let out = plinth.kubectl_output(&["get", "node", NODE, "--no-headers"]);
        String::from_utf8_lossy(&out.stdout).contains(" Ready ")
    });
    let tag = bridge_tag(&plinth, NODE);
    assert!(
        !leftovers(&tag).is_empty(),
        "the agent's bridge is found by {tag}"
    );
    plinth.kubectl_with(&["apply", "-f", "-"], STEADY);
    plinth.kubectl(&["rollout", "status", "deployment/steady", "--timeout=120s"]);
    step("agent Ready, Deployment rolled out");

    // Each round starts pods, stops some, scales, runs a Job — then the agent is killed a
    // little later each time (from at once to after most of it settled).
    let pauses = [0, 700, 1500, 2500, 4000];
    for (round, pause) in pauses.iter().enumerate() {
        for i in 0..3 {
            plinth.kubectl_with(&["apply", "-f", "-"], &pod(&format!("churn-{round}-{i}")));
        }
        if round > 0 {
            plinth.kubectl(&[
                "delete",
                "pod",
                &format!("churn-{}-0", round - 1),
                "--wait=false",
            ]);
        }
        let replicas = if round % 2 == 0 { "5" } else { "2" };
        plinth.kubectl(&[
            "scale",
            "deployment/steady",
            &format!("--replicas={replicas}"),
        ]);
        plinth.kubectl_with(&["apply", "-f", "-"], &job(&format!("once-{round}")));
        std::thread::sleep(Duration::from_millis(*pause));
        step(&format!(
            "round {round}: pods, scale and Job applied; killing the agent"
        ));

        let before = members(&agent.cgroup).len();
        agent.kill();
        plinth.eventually("no process outlives the killed agent", || {
            members(&agent.cgroup).is_empty()
        });
        assert!(before > 1, "the agent had started processes ({before})");

        // While it is dead: one pod deleted for good, one gracefully (it waits for the agent).
        plinth.kubectl(&[
            "delete",
            "pod",
            &format!("churn-{round}-1"),
            "--grace-period=0",
            "--force",
        ]);
        plinth.kubectl(&["delete", "pod", &format!("churn-{round}-2"), "--wait=false"]);
        agent.launch(&plinth);
        step(&format!("round {round}: agent started again"));
    }

    // Everything settles: what runs, runs again; what was deleted is gone; Jobs completed.
    // Generous: under a full suite's load a pod restarted five times takes its back-off; on
    // failure the pods that did not settle are named, with their state (before nextest's
    // five minutes end the test unheard).
    let started = std::time::Instant::now();
    loop {
        let unsettled: Vec<String> = pods(&plinth)
            .iter()
            .filter(|p| !settled(p))
            .map(|p| {
                format!(
                    "{} phase={} deleting={} containers={}",
                    p["metadata"]["name"],
                    p["status"]["phase"],
                    !p["metadata"]["deletionTimestamp"].is_null(),
                    p["status"]["containerStatuses"]
                )
            })
            .collect();
        if unsettled.is_empty() {
            break;
        }
        if started.elapsed() >= Duration::from_secs(150) {
            // What the agent said of them (probe failures name their cause).
            let said: Vec<String> = pods(&plinth)
                .iter()
                .filter(|p| !settled(p))
                .map(|p| {
                    let name = p["metadata"]["name"].as_str().unwrap_or("");
                    let events = plinth.kubectl_output(&[
                        "get",
                        "events",
                        "--field-selector",
                        &format!("involvedObject.name={name}"),
                        "-o",
                        "jsonpath={range .items[*]}{.reason}: {.message} (x{.count}){\"\\n\"}{end}",
                    ]);
                    format!("{name}:\n{}", String::from_utf8_lossy(&events.stdout))
                })
                .collect();
            panic!(
                "pods never settled (every pod runs and is ready, or is done, or is gone):\n{}\n\nevents:\n{}",
                unsettled.join("\n"),
                said.join("\n")
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    step("every pod settled");
    plinth.kubectl(&["rollout", "status", "deployment/steady", "--timeout=120s"]);
    for round in 0..pauses.len() {
        plinth.eventually("the Job completed", || {
            plinth.json(&["get", "job", &format!("once-{round}")])["status"]["succeeded"] == 1
        });
    }
    let names: BTreeSet<String> = pods(&plinth)
        .iter()
        .filter_map(|p| p["metadata"]["name"].as_str().map(str::to_owned))
        .collect();
    for round in 0..pauses.len() {
        assert!(!names.contains(&format!("churn-{round}-1")), "{names:?}");
        assert!(!names.contains(&format!("churn-{round}-2")), "{names:?}");
    }
    assert!(names.contains(&format!("churn-{}-0", pauses.len() - 1)));

    step("Jobs completed, deleted pods gone");
    // The agent's children are its running containers, one sandbox each — none without a pod.
    plinth.eventually("one child of the agent per running container", || {
        let pods = pods(&plinth);
        let running = running_containers(&pods);
        let children = children(&agent);
        running > 0 && children.len() == running
    });
    // Each pod's files belong to a pod that exists.
    let pods_dir = dir.path().join("pods");
    let strays = || {
        let uids: BTreeSet<String> = pods(&plinth)
            .iter()
            .filter_map(|p| p["metadata"]["uid"].as_str().map(str::to_owned))
            .collect();
        std::fs::read_dir(&pods_dir)
            .map(|entries| {
                entries
                    .flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .filter(|uid| !uids.contains(uid))
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default()
    };
    plinth.eventually("no files of pods that are gone", || strays().is_empty());

    step("one process per container, no stray files");
    // All gone: only the agent is left, and no file of a pod.
    plinth.kubectl(&["delete", "deployment", "steady", "--wait=false"]);
    plinth.kubectl(&["delete", "jobs", "--all", "--wait=false"]);
    plinth.kubectl(&["delete", "pods", "--all", "--wait=false"]);
    plinth.eventually("no pod left on the node", || pods(&plinth).is_empty());
    plinth.eventually("only the agent is left in its cgroup", || {
        members(&agent.cgroup) == BTreeSet::from([agent.pid()])
    });
    plinth.eventually("no pod's files left", || {
        std::fs::read_dir(&pods_dir).map_or(true, |mut e| e.next().is_none())
    });
    step("everything deleted; stopping the agent");
    let status = agent.stop();
    assert!(status.success(), "the agent stopped cleanly: {status}");
    assert!(members(&agent.cgroup).is_empty());
    let left = leftovers(&tag);
    assert!(left.is_empty(), "left behind: {left:?}");
}
