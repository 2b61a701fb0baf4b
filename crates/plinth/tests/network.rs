//! Pods like real pods (through kubectl, real processes, real network namespaces): a
//! namespace each, `localhost` their own, Services reached by cluster DNS names and
//! ClusterIPs from pods and from the machine, headless StatefulSet names, and nothing the
//! agent made left behind — after a clean stop, and after SIGKILL once the server is back.

mod common;

use common::{Backend, Plinth, bridge_tag, leftovers, machine_network};

const WEB: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
      - name: web
        image: busybox
        command: [sh, -c, "mkdir -p /tmp/w && hostname > /tmp/w/index.html && exec httpd -f -p 0.0.0.0:8080 -h /tmp/w"]
        readinessProbe: {httpGet: {path: /, port: 8080}, periodSeconds: 1}
---
apiVersion: v1
kind: Service
metadata: {name: web}
spec:
  selector: {app: web}
  ports: [{name: http, port: 8080}]
---
apiVersion: v1
kind: Pod
metadata: {name: client}
spec:
  volumes: [{name: hosts, hostPath: {path: /etc/hosts, type: File}}]
  containers:
  - {name: c, image: busybox, command: [sleep, "3600"]}
  # A container that mounts its own /etc/hosts keeps it (the kubelet leaves it alone).
  - {name: own-hosts, image: busybox, command: [sleep, "3600"], volumeMounts: [{name: hosts, mountPath: /etc/hosts}]}
"#;

const HEADLESS: &str = r#"
apiVersion: v1
kind: Service
metadata: {name: db}
spec:
  clusterIP: None
  selector: {app: db}
  ports: [{name: http, port: 8080}]
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: db}
spec:
  serviceName: db
  replicas: 1
  selector: {matchLabels: {app: db}}
  template:
    metadata: {labels: {app: db}}
    spec:
      containers:
      - name: db
        image: busybox
        command: [sh, -c, "mkdir -p /tmp/w && hostname > /tmp/w/index.html && exec httpd -f -p 8080 -h /tmp/w"]
        readinessProbe: {httpGet: {path: /, port: 8080}, periodSeconds: 1}
"#;

fn exec(plinth: &Plinth, pod: &str, command: &[&str]) -> String {
    let mut args = vec!["exec", pod, "--"];
    args.extend_from_slice(command);
    plinth.kubectl(&args)
}

fn ready(plinth: &Plinth, what: &str) {
    plinth.kubectl(&["wait", "--for=condition=Ready", what, "--timeout=120s"]);
}

#[test]
fn pods_have_their_own_network_dns_and_services_and_leave_nothing_behind() {
    if let Err(e) = tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(plinth_net::host::available())
    {
        panic!("this test needs network namespaces (root, ip, nft): {e}");
    }
    let before = machine_network();
    let mut plinth = Plinth::start_with(
        Backend::Embedded,
        &["--node-name", "netns-a", "--pod-network=namespaces"],
    );
    plinth.kubectl_with(&["apply", "-f", "-"], WEB);
    plinth.kubectl(&["rollout", "status", "deployment/web", "--timeout=120s"]);
    ready(&plinth, "pod/client");
    let tag = bridge_tag(&plinth, "netns-a");
    assert!(
        leftovers(&tag)
            .iter()
            .filter(|l| l.contains("plinth-"))
            .count()
            >= 3
    );

    // Both replicas bound 0.0.0.0:8080 and each reaches itself on localhost.
    let pods = plinth.json(&["get", "pods", "-l", "app=web"]);
    let items = pods["items"].as_array().unwrap();
    assert_eq!(items.len(), 2);
    let mut names = Vec::new();
    for pod in items {
        let name = pod["metadata"]["name"].as_str().unwrap().to_owned();
        let ip = pod["status"]["podIP"].as_str().unwrap().to_owned();
        assert!(!ip.starts_with("127."), "{ip}");
        assert_eq!(
            exec(&plinth, &name, &["wget", "-qO-", "http://127.0.0.1:8080/"]).trim(),
            name
        );
        // By pod IP, from the other pod.
        assert_eq!(
            exec(
                &plinth,
                "client",
                &["wget", "-qO-", &format!("http://{ip}:8080/")]
            )
            .trim(),
            name
        );
        // The pod's own address is on its eth0, and /etc/hosts names it.
        let hosts = exec(&plinth, &name, &["cat", "/etc/hosts"]);
        assert!(
            hosts.starts_with("# Kubernetes-managed hosts file.\n"),
            "{hosts}"
        );
        assert!(hosts.contains(&format!("{ip}\t{name}")), "{hosts}");
        names.push(name);
    }
    let own = plinth.kubectl(&[
        "exec",
        "client",
        "-c",
        "own-hosts",
        "--",
        "cat",
        "/etc/hosts",
    ]);
    assert_eq!(own, std::fs::read_to_string("/etc/hosts").unwrap());
    // Through the Service, by its DNS names (the search path) and ClusterIP.
    let resolv = exec(&plinth, "client", &["cat", "/etc/resolv.conf"]);
    assert!(
        resolv.contains("search default.svc.cluster.local svc.cluster.local cluster.local"),
        "{resolv}"
    );
    assert!(resolv.contains("options ndots:5"), "{resolv}");
    for url in [
        "http://web.default.svc.cluster.local:8080/",
        "http://web:8080/",
    ] {
        let answer = exec(&plinth, "client", &["wget", "-qO-", url]);
        assert!(names.iter().any(|n| n == answer.trim()), "{url}: {answer}");
    }
    let cluster_ip = plinth.kubectl(&["get", "svc", "web", "-o", "jsonpath={.spec.clusterIP}"]);
    let from_machine = std::process::Command::new("curl")
        .args([
            "-s",
            "--max-time",
            "10",
            &format!("http://{cluster_ip}:8080/"),
        ])
        .output()
        .unwrap();
    let from_machine = String::from_utf8_lossy(&from_machine.stdout);
    assert!(
        names.iter().any(|n| n == from_machine.trim()),
        "{from_machine}"
    );
    // The API server from a pod, through the kubernetes Service.
    let version = exec(
        &plinth,
        "client",
        &[
            "wget",
            "-qO-",
            "--no-check-certificate",
            "https://kubernetes.default.svc/version",
        ],
    );
    assert!(version.contains("gitVersion"), "{version}");
    // Names outside the cluster's zone that do not exist: NXDOMAIN from the cluster DNS.
    // (Asked again while the answer is something else — a query lost on a loaded machine
    // times out instead; a wrong answer never turns into NXDOMAIN.)
    plinth.eventually("NXDOMAIN for a name the zone does not hold", || {
        let missing = plinth.kubectl_output(&[
            "exec",
            "client",
            "--",
            "nslookup",
            "nope.default.svc.cluster.local",
        ]);
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&missing.stdout),
            String::from_utf8_lossy(&missing.stderr)
        );
        if !said.contains("NXDOMAIN") {
            eprintln!("nslookup nope.default.svc.cluster.local: {said}");
        }
        said.contains("NXDOMAIN")
    });

    // A headless StatefulSet's pod by its stable name, across a restart of the pod.
    plinth.kubectl_with(&["apply", "-f", "-"], HEADLESS);
    plinth.kubectl(&["rollout", "status", "statefulset/db", "--timeout=120s"]);
    let lookup = || {
        exec(
            &plinth,
            "client",
            &[
                "wget",
                "-qO-",
                "http://db-0.db.default.svc.cluster.local:8080/",
            ],
        )
    };
    // The name follows the pod's endpoint, which follows its readiness (as CoreDNS lags
    // the rollout in kube).
    let fetch = || {
        plinth.kubectl_output(&[
            "exec",
            "client",
            "--",
            "wget",
            "-qO-",
            "http://db-0.db.default.svc.cluster.local:8080/",
        ])
    };
    plinth.eventually("db-0's name answers", || fetch().status.success());
    assert_eq!(lookup().trim(), "db-0");
    let first_ip = plinth.kubectl(&["get", "pod", "db-0", "-o", "jsonpath={.status.podIP}"]);
    let answer = exec(
        &plinth,
        "client",
        &["nslookup", "db-0.db.default.svc.cluster.local"],
    );
    assert!(answer.contains(&first_ip), "{answer}");
    plinth.kubectl(&["delete", "pod", "db-0", "--wait=true"]);
    plinth.eventually("db-0 back and ready", || {
        plinth
            .kubectl_output(&["wait", "--for=condition=Ready", "pod/db-0", "--timeout=5s"])
            .status
            .success()
    });
    plinth.eventually("db-0's name answers again", || {
        fetch().stdout.starts_with(b"db-0")
    });

    // Bad input: a ClusterIP outside the range is refused and nothing is stored.
    let refused = plinth.kubectl_stdin(
        &["apply", "-f", "-"],
        "apiVersion: v1\nkind: Service\nmetadata: {name: outside}\nspec: {clusterIP: 10.1.2.3, ports: [{port: 80}]}\n",
    );
    let text = String::from_utf8_lossy(&refused.stderr);
    assert!(text.contains("is not in the valid range"), "{text}");
    assert!(
        !plinth
            .kubectl_output(&["get", "svc", "outside"])
            .status
            .success()
    );

    // SIGKILL: the dead agent's devices stay until the server is back, which removes them.
    plinth.kill_and_restart();
    plinth.eventually("the node's pods running again", || {
        plinth
            .kubectl_output(&[
                "wait",
                "--for=condition=Ready",
                "pod/client",
                "--timeout=5s",
            ])
            .status
            .success()
    });
    assert_eq!(
        bridge_tag(&plinth, "netns-a"),
        tag,
        "the same names after a restart"
    );
    let uids: Vec<String> = plinth.json(&["get", "pods"])["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["metadata"]["uid"].as_str().unwrap().to_owned())
        .collect();
    let namespaces: Vec<String> = leftovers(&tag)
        .into_iter()
        .filter(|l| l.starts_with(&format!("plinth-{tag}-")))
        .collect();
    assert!(
        namespaces
            .iter()
            .all(|n| uids.iter().any(|u| n.contains(u.as_str()))),
        "only live pods' namespaces: {namespaces:?} vs {uids:?}"
    );
    // db-0 runs again too (its name answers once its readiness probe passes).
    plinth.eventually("db-0's name answers after the restart", || {
        plinth
            .kubectl_output(&[
                "exec",
                "client",
                "--",
                "wget",
                "-qO-",
                "http://db-0.db:8080/",
            ])
            .stdout
            .starts_with(b"db-0")
    });

    // A clean stop removes every device, namespace and rule the agent made.
    drop(plinth);
    assert!(
        leftovers(&tag).is_empty(),
        "left behind: {:?}",
        leftovers(&tag)
    );
    let after = machine_network();
    assert_eq!(before.2.lines().filter(|l| l.contains(&tag)).count(), 0);
    assert_eq!(after.2.lines().filter(|l| l.contains(&tag)).count(), 0);
}

const POLICED: &str = r#"
apiVersion: v1
kind: Namespace
metadata: {name: shop}
---
apiVersion: v1
kind: Namespace
metadata: {name: visitors}
---
apiVersion: v1
kind: Pod
metadata: {name: web, namespace: shop, labels: {app: web}}
spec:
  containers:
  - name: web
    image: busybox
    command: [sh, -c, "mkdir -p /tmp/w && echo shop > /tmp/w/index.html && exec httpd -f -p 8080 -h /tmp/w"]
    ports: [{name: http, containerPort: 8080}]
    readinessProbe: {httpGet: {path: /, port: http}, periodSeconds: 1}
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: shop}
spec:
  selector: {app: web}
  ports: [{name: http, port: 80, targetPort: http}]
---
apiVersion: v1
kind: Pod
metadata: {name: client, namespace: visitors, labels: {role: client}}
spec:
  containers:
  - {name: c, image: busybox, command: [sleep, "3600"]}
---
apiVersion: v1
kind: Pod
metadata: {name: stranger, namespace: visitors}
spec:
  containers:
  - {name: c, image: busybox, command: [sleep, "3600"]}
"#;

const DENY_INGRESS: &str = r#"
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: deny, namespace: shop}
spec:
  podSelector: {}
  policyTypes: [Ingress]
"#;

const ALLOW_CLIENTS: &str = r#"
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: clients, namespace: shop}
spec:
  podSelector: {matchLabels: {app: web}}
  ingress:
  - from:
    - namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: visitors}}
      podSelector: {matchLabels: {role: client}}
    ports: [{port: http}]
"#;

const DENY_EGRESS: &str = r#"
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: quiet, namespace: visitors}
spec:
  podSelector: {matchLabels: {role: client}}
  policyTypes: [Egress]
"#;

const ALLOW_DNS: &str = r#"
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: dns, namespace: visitors}
spec:
  podSelector: {matchLabels: {role: client}}
  policyTypes: [Egress]
  egress:
  - to:
    - namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: kube-system}}
      podSelector: {matchLabels: {k8s-app: kube-dns}}
    ports: [{port: 53, protocol: UDP}, {port: 53, protocol: TCP}]
"#;

const ALLOW_SHOP: &str = r#"
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: shop, namespace: visitors}
spec:
  podSelector: {matchLabels: {role: client}}
  policyTypes: [Egress]
  egress:
  - to: [{namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: shop}}}]
    ports: [{port: 8000, endPort: 8100}]
"#;

/// Whether `command` run in pod `pod` of `visitors` succeeds within a few seconds (a dropped
/// packet is never answered: `timeout` ends the wait).
fn succeeds(plinth: &Plinth, pod: &str, command: &[&str]) -> bool {
    let mut args = vec!["exec", "-n", "visitors", pod, "--", "timeout", "4"];
    args.extend_from_slice(command);
    plinth.kubectl_output(&args).status.success()
}

fn fetches(plinth: &Plinth, pod: &str, url: &str) -> bool {
    succeeds(plinth, pod, &["wget", "-qO-", url])
}

#[test]
fn network_policies_hold_pods_to_what_they_allow() {
    let plinth = Plinth::start_with(
        Backend::Embedded,
        &["--node-name", "netns-p", "--pod-network=namespaces"],
    );
    plinth.kubectl_with(&["apply", "-f", "-"], POLICED);
    plinth.kubectl(&[
        "wait",
        "--for=condition=Ready",
        "-n",
        "shop",
        "pod/web",
        "--timeout=120s",
    ]);
    for pod in ["client", "stranger"] {
        plinth.kubectl(&[
            "wait",
            "--for=condition=Ready",
            "-n",
            "visitors",
            &format!("pod/{pod}"),
            "--timeout=120s",
        ]);
    }
    let labels = plinth.kubectl(&["get", "ns", "visitors", "-o", "jsonpath={.metadata.labels}"]);
    assert!(
        labels.contains(r#""kubernetes.io/metadata.name":"visitors""#),
        "{labels}"
    );
    let web_ip = plinth.kubectl(&[
        "get",
        "pod",
        "-n",
        "shop",
        "web",
        "-o",
        "jsonpath={.status.podIP}",
    ]);
    let by_name = "http://web.shop.svc.cluster.local/";
    let by_ip = format!("http://{web_ip}:8080/");
    assert!(fetches(&plinth, "client", by_name));
    assert!(fetches(&plinth, "stranger", &by_ip));

    // Default deny: nobody reaches the shop, by name or by address; the probes of the node
    // still do (the pod stays Ready).
    plinth.kubectl_with(&["apply", "-f", "-"], DENY_INGRESS);
    plinth.eventually("the shop closed to the client", || {
        !fetches(&plinth, "client", by_name)
    });
    assert!(!fetches(&plinth, "stranger", &by_ip));
    assert!(!fetches(&plinth, "client", &by_ip));
    let ready = plinth.kubectl(&[
        "get",
        "pod",
        "-n",
        "shop",
        "web",
        "-o",
        "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}",
    ]);
    assert_eq!(ready, "True");

    // An allowing policy: the labelled client from the visitors' namespace, on the named
    // port only; the stranger stays out.
    plinth.kubectl_with(&["apply", "-f", "-"], ALLOW_CLIENTS);
    plinth.eventually("the client let in", || fetches(&plinth, "client", by_name));
    assert!(fetches(&plinth, "client", &by_ip));
    assert!(!fetches(&plinth, "stranger", &by_ip));

    // Egress deny: the client can no longer even resolve names, until DNS is allowed (the
    // node's DNS answers as the kube-dns pods); the shop stays out of reach until a port
    // range that holds its port is allowed.
    let resolves = |pod: &str| succeeds(&plinth, pod, &["nslookup", "web.shop.svc.cluster.local"]);
    assert!(resolves("client"));
    plinth.kubectl_with(&["apply", "-f", "-"], DENY_EGRESS);
    plinth.eventually("the client's DNS blocked", || !resolves("client"));
    // Only the selected pod is isolated: the stranger still resolves (asked again should a
    // query time out on a loaded machine; an isolated pod never gets an answer).
    plinth.eventually("the stranger still resolving", || resolves("stranger"));
    plinth.kubectl_with(&["apply", "-f", "-"], ALLOW_DNS);
    plinth.eventually("the client's DNS allowed", || resolves("client"));
    assert!(!fetches(&plinth, "client", by_name));
    plinth.kubectl_with(&["apply", "-f", "-"], ALLOW_SHOP);
    plinth.eventually("the client reaches the shop again", || {
        fetches(&plinth, "client", by_name)
    });

    // Policies gone, everything flows again.
    plinth.kubectl(&["delete", "networkpolicy", "-n", "shop", "--all"]);
    plinth.kubectl(&["delete", "networkpolicy", "-n", "visitors", "--all"]);
    plinth.eventually("the stranger let in", || {
        fetches(&plinth, "stranger", &by_ip)
    });

    // Bad input: an invalid CIDR is kube's 422, and nothing is stored.
    let refused = plinth.kubectl_stdin(
        &["apply", "-f", "-"],
        "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: bad, namespace: shop}\nspec:\n  podSelector: {}\n  ingress: [{from: [{ipBlock: {cidr: 10.0.0.0/33}}]}]\n",
    );
    let text = String::from_utf8_lossy(&refused.stderr);
    assert!(
        text.contains("spec.ingress[0].from[0].ipBlock.cidr: Invalid value"),
        "{text}"
    );
    assert!(
        !plinth
            .kubectl_output(&["get", "networkpolicy", "-n", "shop", "bad"])
            .status
            .success()
    );
}

const WARDLE_SERVER: &str = r#"
import http.server, json, ssl

class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        base = "/apis/wardle.example.com/v1alpha1"
        path = self.path.split("?")[0]
        if path.startswith(base + "/") and path.endswith("/flunders"):
            body = {"kind": "FlunderList", "apiVersion": "wardle.example.com/v1alpha1",
                    "metadata": {}, "items": [{"metadata": {"name": "from-the-pod"}}]}
        elif path == base:
            body = {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "wardle.example.com/v1alpha1",
                    "resources": [{"name": "flunders", "singularName": "flunder", "namespaced": True,
                                   "kind": "Flunder", "verbs": ["get", "list"]}]}
        else:
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
context.load_cert_chain("/certs/tls.crt", "/certs/tls.key")
server = http.server.ThreadingHTTPServer(("0.0.0.0", 8443), Handler)
server.socket = context.wrap_socket(server.socket, server_side=True)
server.serve_forever()
"#;

/// The Available condition of the wardle APIService: status, reason, message.
fn wardle_available(plinth: &Plinth) -> (String, String, String) {
    let service = plinth.json(&["get", "apiservice", "v1alpha1.wardle.example.com"]);
    let condition = service["status"]["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == "Available").cloned())
        .unwrap_or_default();
    let text = |key: &str| condition[key].as_str().unwrap_or("").to_owned();
    (text("status"), text("reason"), text("message"))
}

#[test]
fn an_extension_server_in_a_pod_behind_its_service() {
    let plinth = Plinth::start_with(
        Backend::Embedded,
        &["--node-name", "netns-w", "--pod-network=namespaces"],
    );
    let issued = plinth_runtime::webhook::issue(&["api.wardle.svc"]).unwrap();
    let encode =
        |text: &str| base64::Engine::encode(&base64::engine::general_purpose::STANDARD, text);
    let secret = serde_json::json!({
        "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
        "metadata": {"name": "api-cert", "namespace": "wardle"},
        "data": {"tls.crt": encode(&issued.cert), "tls.key": encode(&issued.key)}
    });
    let script = serde_json::json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "server", "namespace": "wardle"},
        "data": {"server.py": WARDLE_SERVER}
    });
    plinth.kubectl(&["create", "namespace", "wardle"]);
    plinth.kubectl_with(&["apply", "-f", "-"], &secret.to_string());
    plinth.kubectl_with(&["apply", "-f", "-"], &script.to_string());
    plinth.kubectl_with(
        &["apply", "-f", "-"],
        &format!(
            r#"
apiVersion: apps/v1
kind: Deployment
metadata: {{name: api, namespace: wardle}}
spec:
  replicas: 1
  selector: {{matchLabels: {{app: wardle}}}}
  template:
    metadata: {{labels: {{app: wardle}}}}
    spec:
      containers:
      - name: api
        image: python:3.12
        command: [python3, /app/server.py]
        ports: [{{name: https, containerPort: 8443}}]
        readinessProbe: {{tcpSocket: {{port: https}}, periodSeconds: 1}}
        volumeMounts:
        - {{name: certs, mountPath: /certs}}
        - {{name: app, mountPath: /app}}
      volumes:
      - {{name: certs, secret: {{secretName: api-cert}}}}
      - {{name: app, configMap: {{name: server}}}}
---
apiVersion: v1
kind: Service
metadata: {{name: api, namespace: wardle}}
spec:
  selector: {{app: wardle}}
  ports: [{{name: https, port: 443, targetPort: https}}]
---
apiVersion: apiregistration.k8s.io/v1
kind: APIService
metadata: {{name: v1alpha1.wardle.example.com}}
spec:
  group: wardle.example.com
  version: v1alpha1
  service: {{namespace: wardle, name: api}}
  caBundle: {}
  groupPriorityMinimum: 1000
  versionPriority: 15
"#,
            encode(&issued.ca)
        ),
    );
    plinth.kubectl(&[
        "-n",
        "wardle",
        "rollout",
        "status",
        "deployment/api",
        "--timeout=120s",
    ]);
    plinth.eventually("the APIService available", || {
        wardle_available(&plinth).0 == "True"
    });
    let listed = plinth.kubectl(&[
        "get",
        "--raw",
        "/apis/wardle.example.com/v1alpha1/namespaces/wardle/flunders",
    ]);
    assert!(listed.contains("from-the-pod"), "{listed}");
    let names = plinth.kubectl(&["get", "flunders", "-A", "-o", "name"]);
    assert!(names.contains("from-the-pod"), "{names}");

    // The pod gone: the Service has no endpoints, the APIService says so in kube's words and
    // requests for its group are refused (503).
    plinth.kubectl(&["-n", "wardle", "scale", "deployment/api", "--replicas=0"]);
    plinth.eventually("the APIService unavailable", || {
        let (status, reason, _) = wardle_available(&plinth);
        status == "False" && reason == "MissingEndpoints"
    });
    let (_, _, message) = wardle_available(&plinth);
    assert_eq!(
        message,
        r#"endpoints for service/api in "wardle" have no addresses with port name "https""#
    );
    let refused = plinth.kubectl_output(&[
        "get",
        "--raw",
        "/apis/wardle.example.com/v1alpha1/namespaces/wardle/flunders",
    ]);
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("service unavailable"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
}

/// What `curl` gets from `url` on the machine (empty when refused or silent).
fn curl(url: &str) -> String {
    let out = std::process::Command::new("curl")
        .args(["-s", "--max-time", "5", url])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

#[test]
fn host_ports_and_traffic_policies() {
    let plinth = Plinth::start_with(
        Backend::Embedded,
        &["--node-name", "netns-h", "--pod-network=namespaces"],
    );
    let host_port = plinth_testenv::free_port();
    let pod = |name: &str, ports: &str| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}}}\nspec:\n  containers:\n  - name: web\n    image: busybox\n    command: [sh, -c, \"mkdir -p /tmp/w && hostname > /tmp/w/index.html && exec httpd -f -p 8080 -h /tmp/w\"]\n    ports: {ports}\n"
        )
    };
    plinth.kubectl_with(
        &["apply", "-f", "-"],
        &pod(
            "hp",
            &format!("[{{containerPort: 8080, hostPort: {host_port}}}]"),
        ),
    );
    ready(&plinth, "pod/hp");
    plinth.eventually("the host port answers", || {
        curl(&format!("http://127.0.0.1:{host_port}/")) == "hp"
    });

    // A UDP host port: each datagram passed to the pod, its answer back to the sender.
    let udp_port = plinth_testenv::free_port();
    plinth.kubectl_with(
        &["apply", "-f", "-"],
        &format!(
            r#"apiVersion: v1
kind: Pod
metadata: {{name: udp}}
spec:
  containers:
  - name: echo
    image: python:3.12
    command:
    - python3
    - -c
    - |
      import socket
      s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
      s.bind(("0.0.0.0", 5353))
      while True:
          data, sender = s.recvfrom(512)
          s.sendto(b"echo " + data, sender)
    ports: [{{containerPort: 5353, hostPort: {udp_port}, protocol: UDP}}]
"#
        ),
    );
    ready(&plinth, "pod/udp");
    let client = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    client
        .set_read_timeout(Some(std::time::Duration::from_secs(1)))
        .unwrap();
    plinth.eventually("the UDP host port answers", || {
        let mut answer = [0u8; 64];
        client.send_to(b"hi", ("127.0.0.1", udp_port)).is_ok()
            && client
                .recv_from(&mut answer)
                .is_ok_and(|(n, _)| &answer[..n] == b"echo hi")
    });

    // One host port twice in a pod: kube's 422, nothing stored.
    let twice = format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: twice}}\nspec:\n  containers:\n  - {{name: a, image: busybox, ports: [{{containerPort: 1, hostPort: {host_port}}}]}}\n  - {{name: b, image: busybox, ports: [{{containerPort: 2, hostPort: {host_port}}}]}}\n"
    );
    let refused = plinth.kubectl_stdin(&["create", "-f", "-"], &twice);
    let text = String::from_utf8_lossy(&refused.stderr);
    assert!(
        text.contains(&format!(
            "spec.containers[1].ports[0].hostPort: Duplicate value: \"TCP//{host_port}\""
        )),
        "{text}"
    );
    assert!(
        !plinth
            .kubectl_output(&["get", "pod", "twice"])
            .status
            .success()
    );
    // Taken on the only node: the second pod waits, as kube-scheduler's NodePorts says.
    plinth.kubectl_with(
        &["apply", "-f", "-"],
        &pod(
            "hp2",
            &format!("[{{containerPort: 8080, hostPort: {host_port}}}]"),
        ),
    );
    plinth.eventually("hp2 unschedulable", || {
        plinth
            .kubectl(&[
                "get",
                "pod",
                "hp2",
                "-o",
                "jsonpath={.status.conditions[?(@.type==\"PodScheduled\")].message}",
            ])
            .contains("node(s) didn't have free ports for the requested pod ports")
    });
    // Bound past the scheduler: the node's admission rejects it (the kubelet's NodePorts).
    let bound = pod(
        "hp3",
        &format!("[{{containerPort: 8080, hostPort: {host_port}}}]"),
    )
    .replace("spec:\n", "spec:\n  nodeName: netns-h\n");
    plinth.kubectl_with(&["apply", "-f", "-"], &bound);
    plinth.eventually("hp3 rejected by the node", || {
        plinth.kubectl(&["get", "pod", "hp3", "-o", "jsonpath={.status.phase}"]) == "Failed"
    });
    let rejected = plinth.json(&["get", "pod", "hp3"])["status"].clone();
    assert_eq!(rejected["reason"], "NodePorts", "{rejected}");
    assert_eq!(
        rejected["message"],
        "Pod was rejected: Predicate NodePorts failed: node(s) didn't have free ports for the requested pod ports"
    );
    assert_eq!(curl(&format!("http://127.0.0.1:{host_port}/")), "hp");

    // Traffic policies: a Service whose only endpoint (hp's address) is said to be on another
    // node answers through its ClusterIP and node port until the policy is Local.
    let ip = plinth.kubectl(&["get", "pod", "hp", "-o", "jsonpath={.status.podIP}"]);
    plinth.kubectl_with(
        &["apply", "-f", "-"],
        "apiVersion: v1\nkind: Service\nmetadata: {name: manual}\nspec: {type: NodePort, ports: [{port: 80, targetPort: 8080}]}\n",
    );
    let slice = |node: &str| {
        format!(
            "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {{name: manual-1, labels: {{kubernetes.io/service-name: manual}}}}\naddressType: IPv4\nports: [{{name: \"\", port: 8080, protocol: TCP}}]\nendpoints: [{{addresses: [\"{ip}\"], nodeName: {node}, conditions: {{ready: true}}}}]\n"
        )
    };
    plinth.kubectl_with(&["apply", "-f", "-"], &slice("elsewhere"));
    let cluster_ip = plinth.kubectl(&["get", "svc", "manual", "-o", "jsonpath={.spec.clusterIP}"]);
    let node_port = plinth.kubectl(&[
        "get",
        "svc",
        "manual",
        "-o",
        "jsonpath={.spec.ports[0].nodePort}",
    ]);
    let (by_cluster_ip, by_node_port) = (
        format!("http://{cluster_ip}/"),
        format!("http://127.0.0.1:{node_port}/"),
    );
    plinth.eventually("the Service answers", || {
        curl(&by_cluster_ip) == "hp" && curl(&by_node_port) == "hp"
    });
    // The node's first address is its own on the pods' network (the agent serves on the
    // loopback one): node ports answer there, from the machine and from pods.
    let addresses = plinth.kubectl(&[
        "get",
        "node",
        "netns-h",
        "-o",
        "jsonpath={.status.addresses[*].address}",
    ]);
    let node_ip = addresses.split(' ').next().unwrap_or("").to_owned();
    assert!(
        node_ip
            .parse::<std::net::Ipv4Addr>()
            .is_ok_and(|ip| !ip.is_loopback())
            && addresses.contains("127.0.0.1"),
        "{addresses}"
    );
    let at_node_ip = format!("http://{node_ip}:{node_port}/");
    plinth.eventually("the node port answers at the node's address", || {
        curl(&at_node_ip) == "hp"
    });
    let from_pod = plinth.kubectl(&[
        "exec",
        "udp",
        "--",
        "python3",
        "-c",
        &format!("import urllib.request; print(urllib.request.urlopen('{at_node_ip}', timeout=10).read().decode())"),
    ]);
    assert_eq!(from_pod.trim(), "hp");
    // A host port may name that address.
    let node_host_port = plinth_testenv::free_port();
    plinth.kubectl_with(
        &["apply", "-f", "-"],
        &pod(
            "hpn",
            &format!("[{{containerPort: 8080, hostPort: {node_host_port}, hostIP: {node_ip}}}]"),
        ),
    );
    ready(&plinth, "pod/hpn");
    plinth.eventually("the host port answers at the node's address", || {
        curl(&format!("http://{node_ip}:{node_host_port}/")) == "hpn"
    });
    plinth.kubectl(&["delete", "pod", "hpn", "--wait=false"]);
    plinth.kubectl(&[
        "patch",
        "svc",
        "manual",
        "-p",
        r#"{"spec":{"internalTrafficPolicy":"Local","externalTrafficPolicy":"Local"}}"#,
    ]);
    plinth.eventually("no local endpoint, no answer", || {
        curl(&by_cluster_ip).is_empty() && curl(&by_node_port).is_empty()
    });
    plinth.kubectl_with(&["apply", "-f", "-"], &slice("netns-h"));
    plinth.eventually("the local endpoint answers", || {
        curl(&by_cluster_ip) == "hp" && curl(&by_node_port) == "hp"
    });
    // kubectl port-forward reaches a server bound to the pod's own localhost (inside its
    // network namespace, as the kubelet forwards).
    plinth.kubectl_with(
        &["apply", "-f", "-"],
        "apiVersion: v1\nkind: Pod\nmetadata: {name: inner}\nspec:\n  containers:\n  - {name: web, image: busybox, command: [sh, -c, \"mkdir -p /tmp/w && echo inner > /tmp/w/index.html && exec httpd -f -p 127.0.0.1:9090 -h /tmp/w\"]}\n",
    );
    ready(&plinth, "pod/inner");
    let forward = common::Forwarded::start(&plinth, "pod/inner", 9090, None);
    plinth.eventually("the pod's localhost server forwarded", || {
        curl(&format!("http://127.0.0.1:{}/", forward.local)) == "inner"
    });
    drop(forward);

    // The pod gone, its host port is closed.
    plinth.kubectl(&["delete", "pod", "hp", "--wait=true"]);
    plinth.eventually("the host port closed (hp2 may take it)", || {
        curl(&format!("http://127.0.0.1:{host_port}/")) != "hp"
    });
}

/// The `postgres` image as it is (the node's built-in entry for Debian's server): two
/// servers on one node, each on port 5432 of its own network with data and socket
/// directories of its own, initialised from `POSTGRES_*`, one reached through its Service's
/// name with the password, the other over its socket by `kubectl exec`.
#[test]
fn the_postgres_image_runs_as_it_is() {
    let plinth = Plinth::start_with(
        Backend::Embedded,
        &["--node-name", "netns-pg", "--pod-network=namespaces"],
    );
    let server = |name: &str| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, labels: {{app: {name}}}}}\nspec:\n  containers:\n  - name: postgres\n    image: postgres:16\n    env:\n    - {{name: POSTGRES_PASSWORD, value: secret-{name}}}\n    - {{name: POSTGRES_DB, value: app}}\n    ports: [{{containerPort: 5432}}]\n    readinessProbe: {{tcpSocket: {{port: 5432}}, periodSeconds: 1}}\n---\napiVersion: v1\nkind: Service\nmetadata: {{name: {name}}}\nspec: {{selector: {{app: {name}}}, ports: [{{port: 5432}}]}}\n"
        )
    };
    plinth.kubectl_with(&["apply", "-f", "-"], &server("pg-a"));
    plinth.kubectl_with(&["apply", "-f", "-"], &server("pg-b"));
    ready(&plinth, "pod/pg-a");
    ready(&plinth, "pod/pg-b");
    // From pg-b, pg-a by its Service's name, with pg-a's password, into the database made.
    let query = "select current_database() || ' ' || host(inet_server_addr())";
    let pg_a_ip = plinth.kubectl(&["get", "pod", "pg-a", "-o", "jsonpath={.status.podIP}"]);
    // psql in pg-b against pg-a through its Service, with `password`.
    let psql = |password: &str, sql: &str| {
        plinth.kubectl_output(&[
            "exec",
            "pg-b",
            "--",
            "env",
            &format!("PGPASSWORD={password}"),
            "psql",
            "-h",
            "pg-a.default.svc.cluster.local",
            "-U",
            "postgres",
            "-d",
            "app",
            "-tAc",
            sql,
        ])
    };
    let mut answer = String::new();
    plinth.eventually("pg-a answers pg-b through its Service", || {
        let out = psql("secret-pg-a", query);
        answer = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        out.status.success()
    });
    assert_eq!(answer, format!("app {pg_a_ip}"));
    // The wrong password is refused: the server asks for one over the network.
    let refused = psql("secret-pg-b", "select 1");
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("password authentication failed"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
    // pg-b over its own socket (`/var/run/postgresql`, the container's), no password.
    let local = exec(
        &plinth,
        "pg-b",
        &[
            "psql",
            "-U",
            "postgres",
            "-d",
            "app",
            "-tAc",
            "show data_directory",
        ],
    );
    assert_eq!(local.trim(), "/var/lib/postgresql/data");
}

/// The `nginx` image as it is (the node's built-in entry for Debian's nginx): four servers on
/// one node, each on port 80 (or the port its configuration names) of its own network — the
/// image's welcome page, a server a ConfigMap describes in `/etc/nginx/conf.d`, a whole
/// `nginx.conf` of the pod's own (`subPath`), and a template filled from the environment —
/// every request in the container's log.
#[test]
fn the_nginx_image_runs_as_it_is() {
    let plinth = Plinth::start_with(
        Backend::Embedded,
        &["--node-name", "netns-nginx", "--pod-network=namespaces"],
    );
    let manifest = r#"
apiVersion: v1
kind: ConfigMap
metadata: {name: nginx}
data:
  site.conf: |
    server { listen 80; location / { return 200 "site of $hostname\n"; } }
  nginx.conf: |
    events {}
    pid /tmp/own.pid;
    http { server { listen 8080; location / { return 200 "own nginx.conf\n"; } } }
  hello.conf.template: |
    server { listen ${PORT}; location / { return 200 "template on ${PORT}\n"; } }
---
apiVersion: v1
kind: Pod
metadata: {name: web-default}
spec:
  containers:
  - {name: nginx, image: "nginx:1.27", readinessProbe: {httpGet: {path: /, port: 80}, periodSeconds: 1}}
---
apiVersion: v1
kind: Pod
metadata: {name: web-site}
spec:
  containers:
  - name: nginx
    image: nginx
    readinessProbe: {httpGet: {path: /, port: 80}, periodSeconds: 1}
    volumeMounts: [{name: conf, mountPath: /etc/nginx/conf.d}]
  volumes: [{name: conf, configMap: {name: nginx, items: [{key: site.conf, path: site.conf}]}}]
---
apiVersion: v1
kind: Pod
metadata: {name: web-own}
spec:
  containers:
  - name: nginx
    image: nginx:stable
    readinessProbe: {tcpSocket: {port: 8080}, periodSeconds: 1}
    volumeMounts: [{name: conf, mountPath: /etc/nginx/nginx.conf, subPath: nginx.conf}]
  volumes: [{name: conf, configMap: {name: nginx}}]
---
apiVersion: v1
kind: Pod
metadata: {name: web-template}
spec:
  containers:
  - name: nginx
    image: nginx:alpine
    env: [{name: PORT, value: "8081"}]
    readinessProbe: {tcpSocket: {port: 8081}, periodSeconds: 1}
    volumeMounts: [{name: conf, mountPath: /etc/nginx/templates}]
  volumes: [{name: conf, configMap: {name: nginx, items: [{key: hello.conf.template, path: hello.conf.template}]}}]
"#;
    plinth.kubectl_with(&["apply", "-f", "-"], manifest);
    for pod in ["web-default", "web-site", "web-own", "web-template"] {
        ready(&plinth, &format!("pod/{pod}"));
    }
    let ip = |pod: &str| plinth.kubectl(&["get", "pod", pod, "-o", "jsonpath={.status.podIP}"]);
    let page = curl(&format!("http://{}/", ip("web-default")));
    assert!(page.contains("<title>Welcome to nginx!</title>"), "{page}");
    assert_eq!(
        curl(&format!("http://{}/", ip("web-site"))),
        "site of web-site"
    );
    assert_eq!(
        curl(&format!("http://{}:8080/", ip("web-own"))),
        "own nginx.conf"
    );
    assert_eq!(
        curl(&format!("http://{}:8081/", ip("web-template"))),
        "template on 8081"
    );
    // Each reaches itself on `localhost`, and the access log is the container's output.
    assert_eq!(
        exec(&plinth, "web-site", &["curl", "-s", "http://localhost/"]).trim(),
        "site of web-site"
    );
    plinth.eventually("the welcome page's request in web-default's log", || {
        plinth
            .kubectl(&["logs", "web-default"])
            .contains("\"GET / HTTP/1.1\" 200")
    });
}

/// `pods/https:<name>:<port>/proxy/<path>`: the API server reaches a pod's TLS server over
/// TLS, the pod's certificate unverified (as kube's proxy); a scheme other than `http` or
/// `https` is refused.
#[test]
fn the_api_servers_proxy_reaches_a_pods_tls_server_over_https() {
    let plinth = Plinth::start_with(
        Backend::Embedded,
        &["--node-name", "netns-h", "--pod-network=namespaces"],
    );
    let issued = plinth_runtime::webhook::issue(&["tls"]).unwrap();
    let encode =
        |text: &str| base64::Engine::encode(&base64::engine::general_purpose::STANDARD, text);
    let objects = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
         "metadata": {"name": "tls"},
         "data": {"tls.crt": encode(&issued.cert), "tls.key": encode(&issued.key)}},
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "tls"},
         "data": {"server.py": TLS_SERVER}},
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "tls-1"},
         "spec": {"containers": [{"name": "web", "image": "python:3.12",
            "command": ["python3", "/app/server.py"],
            "env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
            "ports": [{"name": "https", "containerPort": 8443}],
            // A port by name and a quantity as a number: kubectl's client-side validation
            // of a List's items reads the published schema (int-or-string, quantity).
            "readinessProbe": {"tcpSocket": {"port": "https"}, "periodSeconds": 1},
            "resources": {"requests": {"cpu": 0.1}},
            "volumeMounts": [{"name": "certs", "mountPath": "/certs"},
                             {"name": "app", "mountPath": "/app"}]}],
          "volumes": [{"name": "certs", "secret": {"secretName": "tls"}},
                      {"name": "app", "configMap": {"name": "tls"}}]}}]});
    plinth.kubectl_with(&["apply", "-f", "-"], &objects.to_string());
    plinth.kubectl(&[
        "wait",
        "--for=condition=Ready",
        "pod/tls-1",
        "--timeout=120s",
    ]);
    assert_eq!(
        plinth.kubectl(&[
            "get",
            "--raw",
            "/api/v1/namespaces/default/pods/https:tls-1:8443/proxy/hello"
        ]),
        "tls-1 /hello"
    );
    let unknown = plinth.kubectl_fails(&[
        "get",
        "--raw",
        "/api/v1/namespaces/default/pods/ftp:tls-1:8443/proxy/",
    ]);
    assert!(unknown.contains("unsupported scheme"), "{unknown}");
    plinth.kubectl(&["delete", "pod", "tls-1", "--wait=false"]);
}

/// A TLS server answering `<pod> <path>`, on the pod's address, port 8443.
const TLS_SERVER: &str = r#"import http.server, os, ssl
class Answer(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = ("tls-1 " + self.path).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
server = http.server.HTTPServer((os.environ["POD_IP"], 8443), Answer)
context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
context.load_cert_chain("/certs/tls.crt", "/certs/tls.key")
server.socket = context.wrap_socket(server.socket, server_side=True)
server.serve_forever()
"#;
