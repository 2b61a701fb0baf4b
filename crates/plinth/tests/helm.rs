//! Helm (v4, built from its Go module) against `plinth serve`: a public chart's whole life —
//! podinfo's chart and podinfo itself, both from the Go module proxy — `install --wait` (pods
//! Ready through the image map), `test` (the chart's test pods against the Service's DNS
//! name), `upgrade`, `rollback`, `history`, a server-side `--dry-run`, `uninstall --wait`.
//! Needs `go` (scripts/go-tool builds helm and podinfo once).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::{Backend, Plinth};
use serde_json::Value;

/// `scripts/go-tool ARGS`: a built program's path, or a module's directory.
fn go_tool(args: &[&str]) -> PathBuf {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/go-tool");
    let out = Command::new(script).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "go-tool {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

/// podinfo's module (its chart, its UI files) at the version scripts/go-tool builds.
const PODINFO: &str = "github.com/stefanprodan/podinfo@v1.8.1-0.20250910200901-e86405a8674e";

/// Helm with this server's kubeconfig and directories of the test's own.
struct Helm<'a> {
    binary: PathBuf,
    plinth: &'a Plinth,
}

impl Helm<'_> {
    fn output(&self, args: &[&str]) -> Output {
        let home = self.plinth.dir.path().join("helm");
        Command::new(&self.binary)
            .args(args)
            .env("KUBECONFIG", &self.plinth.kubeconfig)
            .env("HELM_CACHE_HOME", home.join("cache"))
            .env("HELM_CONFIG_HOME", home.join("config"))
            .env("HELM_DATA_HOME", home.join("data"))
            .output()
            .expect("run helm")
    }

    /// Runs helm; its stdout, or a panic with its stderr.
    fn run(&self, args: &[&str]) -> String {
        let out = self.output(args);
        assert!(
            out.status.success(),
            "helm {args:?} failed:\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn json(&self, args: &[&str]) -> Value {
        let mut full = args.to_vec();
        full.extend(["-o", "json"]);
        serde_json::from_str(&self.run(&full)).unwrap()
    }
}

/// The image map for podinfo's chart: podinfo's image as its Dockerfile makes it (the binary
/// and `ui/` in `/home/app`, `podcli` on `PATH` for the probes), and the chart's test images
/// as the machine's tools (curl, jq, grpc_health_probe built from its module).
fn podinfo_images(dir: &Path, module: &Path) -> PathBuf {
    let podinfo = go_tool(&["podinfo"]);
    let podcli = go_tool(&["podcli"]);
    let probe = go_tool(&["grpc_health_probe"]);
    let images = dir.join("images.yaml");
    std::fs::write(
        &images,
        format!(
            r#""ghcr.io/stefanprodan/podinfo:*":
  files:
    /home/app/podinfo: {podinfo}
    /home/app/ui: {ui}
    /usr/local/bin/podcli: {podcli}
  workdir: /home/app
  cmd: [./podinfo]
"curlimages/curl:*": {{entrypoint: [curl]}}
"giantswarm/tiny-tools*": {{cmd: [sh]}}
"stefanprodan/grpc_health_probe:*":
  files: {{/usr/local/bin/grpc_health_probe: {probe}}}
"#,
            podinfo = podinfo.display(),
            ui = module.join("ui").display(),
            podcli = podcli.display(),
            probe = probe.display(),
        ),
    )
    .unwrap();
    images
}

#[test]
fn a_public_charts_whole_life_through_helm() {
    let helm_binary = go_tool(&["helm"]);
    let module = go_tool(&["--module", PODINFO]);
    let chart = module.join("charts/podinfo");
    let work = tempfile::tempdir().unwrap();
    let images = podinfo_images(work.path(), &module);
    let plinth = Plinth::start_with(
        Backend::Embedded,
        &[
            "--node-name",
            "helm-node",
            "--pod-network=namespaces",
            "--images",
            images.to_str().unwrap(),
        ],
    );
    let helm = Helm {
        binary: helm_binary,
        plinth: &plinth,
    };
    let chart = chart.to_str().unwrap();

    // install --wait: the Deployment's pod Ready (its exec probes run podcli against it).
    helm.run(&[
        "install",
        "pi",
        chart,
        "-n",
        "pi",
        "--create-namespace",
        "--wait",
        "--timeout",
        "5m",
    ]);
    let status = helm.json(&["status", "pi", "-n", "pi"]);
    assert_eq!(status["info"]["status"], "deployed", "{status}");
    assert_eq!(status["version"], 1);
    let deployment = plinth.json(&["-n", "pi", "get", "deployment", "pi-podinfo"]);
    assert_eq!(deployment["status"]["readyReplicas"], 1, "{deployment}");

    // The Service's endpoints name the ready pod on the gRPC port before the tests dial it
    // (helm's wait counts a ClusterIP Service ready at once; the chart's gRPC test gives
    // itself one second to connect).
    plinth.eventually("the Service's slice with the ready pod's gRPC port", || {
        let slices = plinth.json(&[
            "-n",
            "pi",
            "get",
            "endpointslices",
            "-l",
            "kubernetes.io/service-name=pi-podinfo",
        ]);
        slices["items"].as_array().is_some_and(|items| {
            items.iter().any(|s| {
                s["ports"].as_array().is_some_and(|ports| {
                    ports
                        .iter()
                        .any(|p| p["name"] == "grpc" && p["port"] == 9999)
                }) && s["endpoints"]
                    .as_array()
                    .is_some_and(|e| e.iter().any(|e| e["conditions"]["ready"] == true))
            })
        })
    });
    // ... and the node agent has programmed the Service's rules for it (as kube-proxy, a
    // moment after the slice): the Service answers on its gRPC port from this machine.
    let cluster_ip = plinth.kubectl(&[
        "-n",
        "pi",
        "get",
        "service",
        "pi-podinfo",
        "-o",
        "jsonpath={.spec.clusterIP}",
    ]);
    let grpc: std::net::SocketAddr = format!("{}:9999", cluster_ip.trim()).parse().unwrap();
    plinth.eventually("the Service answers on its gRPC port", || {
        std::net::TcpStream::connect_timeout(&grpc, std::time::Duration::from_secs(2)).is_ok()
    });
    // test: the chart's test pods (curl, jq, grpc_health_probe) reach podinfo by its
    // Service's DNS name; hook-succeeded deletes them. The gRPC test gives itself one second
    // to resolve the name and connect from its fresh pod, which a machine loaded by the rest
    // of the suite can miss: a suite that fails is run again (before-hook-creation replaces
    // its pod), up to three times, each failure shown.
    let passed = |tested: &str, test: &str| {
        tested.split("TEST SUITE:").skip(1).any(|s| {
            s.contains(test)
                && s.lines()
                    .any(|l| l.starts_with("Phase:") && l.ends_with("Succeeded"))
        })
    };
    let mut outcome = String::new();
    for attempt in 1..=3 {
        let out = helm.output(&["test", "pi", "-n", "pi", "--logs"]);
        outcome = format!(
            "{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        if out.status.success()
            && ["service-test", "jwt-test", "grpc-test"]
                .iter()
                .all(|test| passed(&outcome, test))
        {
            break;
        }
        eprintln!("helm test, attempt {attempt}, failed:\n{outcome}");
        std::thread::sleep(std::time::Duration::from_secs(2));
    }
    for test in ["service-test", "jwt-test", "grpc-test"] {
        assert!(passed(&outcome, test), "{test}:\n{outcome}");
    }
    plinth.eventually("the test pods deleted (hook-succeeded)", || {
        let pods = plinth.kubectl(&["-n", "pi", "get", "pods", "-o", "name"]);
        !pods.contains("-test-")
    });

    // upgrade --wait to two replicas, then rollback to the first revision.
    helm.run(&[
        "upgrade",
        "pi",
        chart,
        "-n",
        "pi",
        "--set",
        "replicaCount=2",
        "--wait",
        "--timeout",
        "5m",
    ]);
    let deployment = plinth.json(&["-n", "pi", "get", "deployment", "pi-podinfo"]);
    assert_eq!(deployment["status"]["readyReplicas"], 2, "{deployment}");
    helm.run(&[
        "rollback",
        "pi",
        "1",
        "-n",
        "pi",
        "--wait",
        "--timeout",
        "5m",
    ]);
    plinth.eventually("the rollback's one replica", || {
        let d = plinth.json(&["-n", "pi", "get", "deployment", "pi-podinfo"]);
        d["spec"]["replicas"] == 1 && d["status"]["replicas"] == 1
    });
    let history = helm.json(&["history", "pi", "-n", "pi"]);
    let statuses: Vec<&str> = history
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["status"].as_str().unwrap())
        .collect();
    assert_eq!(
        statuses,
        ["superseded", "superseded", "deployed"],
        "{history}"
    );
    assert!(
        history[2]["description"]
            .as_str()
            .is_some_and(|d| d.contains("Rollback to 1")),
        "{history}"
    );

    // A server-side dry run renders and validates against the server, and creates nothing.
    let dry = helm.run(&[
        "install",
        "pi2",
        chart,
        "-n",
        "pi",
        "--dry-run=server",
        "--set",
        "replicaCount=3",
    ]);
    assert!(dry.contains("name: pi2-podinfo"), "{dry}");
    let releases = plinth.kubectl(&["-n", "pi", "get", "secrets", "-o", "name"]);
    assert!(!releases.contains("pi2"), "{releases}");
    assert!(
        !plinth
            .kubectl(&["-n", "pi", "get", "deployments", "-o", "name"])
            .contains("pi2")
    );

    // uninstall --wait: the release's objects and its records gone.
    helm.run(&["uninstall", "pi", "-n", "pi", "--wait", "--timeout", "5m"]);
    let left = plinth.kubectl(&[
        "-n",
        "pi",
        "get",
        "deployments,services,secrets",
        "-o",
        "name",
    ]);
    assert!(
        !left.contains("pi-podinfo") && !left.contains("sh.helm.release"),
        "{left}"
    );
    let listed = helm.json(&["list", "-n", "pi"]);
    assert_eq!(listed, serde_json::json!([]));
}

/// The chart of Helm's release machinery (tests/charts/hooks, the project's own).
fn hooks_chart() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/charts/hooks")
        .to_str()
        .unwrap()
        .to_owned()
}

fn job_complete(plinth: &Plinth, namespace: &str, name: &str) -> bool {
    let out = plinth.kubectl_output(&["-n", namespace, "get", "job", name, "-o", "json"]);
    out.status.success()
        && serde_json::from_slice::<Value>(&out.stdout).unwrap()["status"]["conditions"]
            .as_array()
            .is_some_and(|c| {
                c.iter()
                    .any(|c| c["type"] == "Complete" && c["status"] == "True")
            })
}

fn exists(plinth: &Plinth, args: &[&str]) -> bool {
    plinth.kubectl_output(args).status.success()
}

#[test]
fn hooks_crds_lookup_and_refusals_through_helm() {
    let plinth = Plinth::start_with(Backend::Embedded, &["--node-name", "hooks-node"]);
    let helm = Helm {
        binary: go_tool(&["helm"]),
        plinth: &plinth,
    };
    let chart = hooks_chart();
    plinth.kubectl(&["create", "namespace", "h"]);
    plinth.kubectl(&[
        "-n",
        "h",
        "create",
        "configmap",
        "seed",
        "--from-literal=value=from-the-cluster",
    ]);

    // install: the CRD of crds/ first, then the pre-install hook (weight -5) to completion,
    // the release's objects (lookup saw the cluster), the post-install hook.
    helm.run(&["install", "r", &chart, "-n", "h"]);
    let looked_up = plinth.json(&["-n", "h", "get", "configmap", "r-looked-up"]);
    assert_eq!(looked_up["data"]["seed"], "from-the-cluster", "{looked_up}");
    let gadget = plinth.json(&["-n", "h", "get", "gadgets.hooks.example.com", "r-gadget"]);
    assert_eq!(gadget["spec"]["size"], 3);
    assert!(job_complete(&plinth, "h", "r-pre-install"));
    let log = plinth.kubectl(&["-n", "h", "logs", "job/r-pre-install"]);
    assert_eq!(log.trim(), "pre-install ran");
    // hook-succeeded: the post-install Job is deleted once it succeeds.
    assert!(!exists(
        &plinth,
        &["-n", "h", "get", "job", "r-post-install"]
    ));
    let hooks = helm.run(&["get", "hooks", "r", "-n", "h"]);
    for hook in ["r-pre-install", "r-post-install", "r-pre-delete"] {
        assert!(hooks.contains(&format!("name: {hook}")), "{hooks}");
    }

    // upgrade: post-upgrade runs (and goes) again; the revision moves on.
    helm.run(&["upgrade", "r", &chart, "-n", "h"]);
    let looked_up = plinth.json(&["-n", "h", "get", "configmap", "r-looked-up"]);
    assert_eq!(looked_up["data"]["revision"], "2");
    assert!(!exists(
        &plinth,
        &["-n", "h", "get", "job", "r-post-install"]
    ));

    // uninstall: the pre-delete hook runs first (kept: its policy deletes only on failure);
    // the release's objects go; the CRD of crds/ stays, as Helm never deletes those.
    helm.run(&["uninstall", "r", "-n", "h", "--wait"]);
    assert!(job_complete(&plinth, "h", "r-pre-delete"));
    assert!(!exists(
        &plinth,
        &["-n", "h", "get", "configmap", "r-looked-up"]
    ));
    assert!(!exists(
        &plinth,
        &["-n", "h", "get", "gadgets.hooks.example.com", "r-gadget"]
    ));
    assert!(exists(
        &plinth,
        &["get", "crd", "gadgets.hooks.example.com"]
    ));

    // A failing pre-install hook fails the install with the Job's reason.
    let failed = helm.output(&[
        "install",
        "bad",
        &chart,
        "-n",
        "h",
        "--set",
        "failingHook=true",
    ]);
    let stderr = String::from_utf8_lossy(&failed.stderr);
    assert!(!failed.status.success());
    assert!(
        stderr.contains("failed pre-install: resource Job/h/bad-fails not ready. status: Failed"),
        "{stderr}"
    );
    let job = plinth.json(&["-n", "h", "get", "job", "bad-fails"]);
    let failed_condition = job["status"]["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == "Failed").cloned())
        .unwrap_or_default();
    assert_eq!(failed_condition["reason"], "BackoffLimitExceeded", "{job}");
    let status = helm.json(&["status", "bad", "-n", "h"]);
    assert_eq!(status["info"]["status"], "failed", "{status}");

    // A manifest kube refuses: kube's own words through Helm, and nothing of it created.
    let refused = helm.output(&[
        "install",
        "inv",
        &chart,
        "-n",
        "h",
        "--set",
        "invalidService=true",
    ]);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success());
    assert!(
        stderr.contains(
            r#"Service "inv-svc" is invalid: spec.ports[0].port: Invalid value: 70000: must be between 1 and 65535, inclusive"#
        ),
        "{stderr}"
    );
    assert!(!exists(&plinth, &["-n", "h", "get", "service", "inv-svc"]));
}

/// sealed-secrets' chart (from its Go module): its CRD from `crds/`, and a NetworkPolicy whose
/// egress rule `lookup` fills in from the `kubernetes` Endpoints.
#[test]
fn a_public_charts_crds_and_lookup_through_helm() {
    let plinth = Plinth::start(Backend::Embedded);
    let helm = Helm {
        binary: go_tool(&["helm"]),
        plinth: &plinth,
    };
    let module = go_tool(&["--module", "github.com/bitnami-labs/sealed-secrets@v0.40.0"]);
    let chart = module.join("helm/sealed-secrets");
    helm.run(&[
        "install",
        "ss",
        chart.to_str().unwrap(),
        "-n",
        "ss",
        "--create-namespace",
        "--set",
        "networkPolicy.enabled=true,networkPolicy.egress.enabled=true",
    ]);
    let crd = plinth.json(&["get", "crd", "sealedsecrets.bitnami.com"]);
    assert_eq!(crd["spec"]["names"]["kind"], "SealedSecret");
    let endpoints = plinth.json(&["-n", "default", "get", "endpoints", "kubernetes"]);
    let address = endpoints["subsets"][0]["addresses"][0]["ip"]
        .as_str()
        .unwrap();
    let policies = plinth.json(&["-n", "ss", "get", "networkpolicies"]);
    let egress = &policies["items"][0]["spec"]["egress"][0];
    assert_eq!(
        egress["to"][0]["ipBlock"]["cidr"],
        format!("{address}/32"),
        "{policies}"
    );
    helm.run(&["uninstall", "ss", "-n", "ss"]);
    assert!(exists(
        &plinth,
        &["get", "crd", "sealedsecrets.bitnami.com"]
    ));
    assert!(!exists(
        &plinth,
        &["-n", "ss", "get", "networkpolicies", "ss-sealed-secrets"]
    ));
}

/// Thirteen popular charts (tests/charts/popular.json) through `helm template | kubectl apply
/// --server-side`, by the script that writes docs/helm-charts.md: every one accepted.
#[test]
fn popular_charts_templates_are_accepted() {
    let work = tempfile::tempdir().unwrap();
    let report = work.path().join("helm-charts.md");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/helm-charts");
    let out = Command::new(script)
        .arg("--plinth")
        .arg(env!("CARGO_BIN_EXE_plinth"))
        .arg("--out")
        .arg(&report)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let listed: Value = serde_json::from_str(
        &std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/charts/popular.json"),
        )
        .unwrap(),
    )
    .unwrap();
    let charts = listed["charts"].as_array().unwrap().len();
    assert!(charts >= 10);
    let report = std::fs::read_to_string(&report).unwrap();
    assert!(
        report.contains(&format!("**{charts} of {charts} charts accepted.**")),
        "{report}"
    );
}
