//! Identities and RBAC end to end: users from a token file and from client certificates
//! (`plinth kubeconfig`), spec/status separation on a custom resource, `kubectl auth can-i`
//! agreeing with what requests are allowed, escalation prevention, `kubectl auth whoami`,
//! 401s, and the Python client as a certificate user.

#![allow(clippy::unwrap_used)]

mod common;

use std::process::Command;

use common::http::Http;
use common::{Backend, Plinth};
use serde_json::{Value, json};

/// The users of the token file: name → token.
const USERS: [(&str, &str); 5] = [
    ("alice", "alice-token"),
    ("bob", "bob-token"),
    ("carol", "carol-token"),
    ("dave", "dave-token"),
    ("eve", "eve-token"),
];

fn token(user: &str) -> &'static str {
    USERS.iter().find(|(u, _)| *u == user).unwrap().1
}

const WIDGETS: &str = r"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.example.com}
spec:
  group: example.com
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget}
  versions:
  - name: v1
    served: true
    storage: true
    subresources: {status: {}}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec: {type: object, properties: {size: {type: integer}}}
          status: {type: object, properties: {ready: {type: boolean}}}
";

const BINDINGS: &str = r#"apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: spec-writer, namespace: team}
rules:
- apiGroups: [example.com]
  resources: [widgets]
  verbs: [get, list, watch, update, patch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: status-writer, namespace: team}
rules:
- apiGroups: [example.com]
  resources: [widgets/status]
  verbs: [get, update, patch]
- apiGroups: [example.com]
  resources: [widgets]
  verbs: [get]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: alice-spec, namespace: team}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: spec-writer}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: alice}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: bob-status, namespace: team}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: status-writer}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: bob}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: carol-admin, namespace: team}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: admin}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: Group, name: team-admins}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: dave-views}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: view}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: dave}]
"#;

fn start() -> Plinth {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("tokens.csv");
    let mut lines = String::from("# token,user,uid,groups\n");
    for (i, (user, token)) in USERS.iter().enumerate() {
        let groups = if *user == "carol" { ",team-admins" } else { "" };
        lines.push_str(&format!("{token},{user},uid-{i}{groups}\n"));
    }
    std::fs::write(&file, lines).unwrap();
    let plinth = Plinth::start_with(
        Backend::Embedded,
        &["--token-auth-file", file.to_str().unwrap()],
    );
    // The server read the file at start.
    drop(dir);
    let crd = plinth.dir.path().join("widgets.yaml");
    std::fs::write(&crd, WIDGETS).unwrap();
    plinth.install_crds(&[crd], "120s");
    plinth.kubectl(&["create", "namespace", "team"]);
    plinth.kubectl(&["create", "namespace", "other"]);
    plinth.kubectl_with(&["apply", "-f", "-"], BINDINGS);
    for ns in ["team", "other"] {
        plinth.kubectl_with(
            &["-n", ns, "apply", "-f", "-"],
            "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w1}\nspec: {size: 1}\n",
        );
    }
    // The authorizer follows the RBAC objects' watch: wait until it has the last binding.
    plinth.eventually("the bindings are in force", || {
        can_i(&plinth, "dave", &["list", "configmaps", "-n", "other"])
    });
    plinth
}

/// `kubectl auth can-i` as `user`.
fn can_i(plinth: &Plinth, user: &str, args: &[&str]) -> bool {
    let mut full = vec!["--token", token(user), "auth", "can-i"];
    full.extend(args);
    let out = plinth.kubectl_output(&full);
    let answer = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    assert!(
        answer == "yes" || answer == "no",
        "kubectl {full:?}: {answer} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    answer == "yes"
}

#[test]
fn spec_and_status_are_separate_permissions() {
    let plinth = start();
    let as_user = |user: &str, args: &[&str]| {
        let mut full = vec!["--token", token(user), "-n", "team"];
        full.extend(args);
        plinth.kubectl_output(&full)
    };
    let spec = [
        "patch",
        "widget",
        "w1",
        "--type=merge",
        "-p",
        r#"{"spec":{"size":2}}"#,
    ];
    let status = [
        "patch",
        "widget",
        "w1",
        "--subresource=status",
        "--type=merge",
        "-p",
        r#"{"status":{"ready":true}}"#,
    ];
    // Alice may change the spec, not the status (kubectl reads the status first).
    let out = as_user("alice", &spec);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = as_user("alice", &status);
    assert!(!out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).trim(),
        "Error from server (Forbidden): widgets.example.com \"w1\" is forbidden: User \"alice\" cannot get resource \"widgets/status\" in API group \"example.com\" in the namespace \"team\""
    );
    // Nor through the main resource: the status subresource owns it.
    let sneaky = [
        "patch",
        "widget",
        "w1",
        "--type=merge",
        "-p",
        r#"{"spec":{"size":3},"status":{"ready":true}}"#,
    ];
    assert!(as_user("alice", &sneaky).status.success());
    let widget = plinth.json(&["-n", "team", "get", "widget", "w1"]);
    assert_eq!(widget["spec"]["size"], 3);
    assert_eq!(widget["status"], Value::Null, "{widget}");
    // Bob may report status, not change the spec.
    let out = as_user("bob", &status);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = as_user("bob", &spec);
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(
            "User \"bob\" cannot patch resource \"widgets\" in API group \"example.com\" in the namespace \"team\""
        ),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let widget = plinth.json(&["-n", "team", "get", "widget", "w1"]);
    assert_eq!(
        (
            widget["spec"]["size"].as_i64(),
            widget["status"]["ready"].as_bool()
        ),
        (Some(3), Some(true))
    );
    // And neither outside the namespace their roles are bound in.
    let out = plinth.kubectl_output(&[
        "--token",
        token("alice"),
        "-n",
        "other",
        "get",
        "widget",
        "w1",
    ]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("in the namespace \"other\""));
}

/// One case of the matrix: a verb on a resource (group/resource[/subresource]) in a
/// namespace, asked with `kubectl auth can-i` and tried with a request (writes dry-run).
struct Case {
    verb: &'static str,
    group: &'static str,
    resource: &'static str,
    subresource: &'static str,
    namespace: &'static str,
    name: &'static str,
}

const fn case(
    verb: &'static str,
    group: &'static str,
    resource: &'static str,
    subresource: &'static str,
    namespace: &'static str,
    name: &'static str,
) -> Case {
    Case {
        verb,
        group,
        resource,
        subresource,
        namespace,
        name,
    }
}

impl Case {
    fn can_i_args(&self) -> Vec<String> {
        let mut resource = if self.group.is_empty() {
            self.resource.to_owned()
        } else {
            format!("{}.{}", self.resource, self.group)
        };
        if !self.name.is_empty() {
            resource = format!("{resource}/{}", self.name);
        }
        let mut args = vec![self.verb.to_owned(), resource];
        if !self.subresource.is_empty() {
            args.push(format!("--subresource={}", self.subresource));
        }
        if self.namespace.is_empty() {
            args.push("--all-namespaces".to_owned());
        } else {
            args.extend(["-n".to_owned(), self.namespace.to_owned()]);
        }
        args
    }

    /// The request's method, path and body (a dry run for writes).
    fn request(&self) -> (&'static str, String, Option<Value>) {
        let prefix = if self.group.is_empty() {
            "/api/v1".to_owned()
        } else {
            format!("/apis/{}/v1", self.group)
        };
        let scope = if self.namespace.is_empty() {
            prefix
        } else {
            format!("{prefix}/namespaces/{}", self.namespace)
        };
        let collection = format!("{scope}/{}", self.resource);
        let object = format!("{collection}/{}", self.name);
        let sub = if self.subresource.is_empty() {
            object.clone()
        } else {
            format!("{object}/{}", self.subresource)
        };
        let body = |kind: &str, api: &str, name: &str| json!({"apiVersion": api, "kind": kind, "metadata": {"name": name}});
        let (kind, api) = match self.resource {
            "widgets" => ("Widget", "example.com/v1"),
            "configmaps" => ("ConfigMap", "v1"),
            "secrets" => ("Secret", "v1"),
            "rolebindings" => ("RoleBinding", "rbac.authorization.k8s.io/v1"),
            other => panic!("no body for {other}"),
        };
        match self.verb {
            "get" => ("GET", sub, None),
            "list" => ("GET", collection, None),
            "watch" => (
                "GET",
                format!("{collection}?watch=1&timeoutSeconds=1"),
                None,
            ),
            "create" => (
                "POST",
                format!("{collection}?dryRun=All"),
                Some(body(kind, api, "dry")),
            ),
            "patch" => ("PATCH", format!("{sub}?dryRun=All"), Some(json!({}))),
            "delete" => ("DELETE", format!("{object}?dryRun=All"), None),
            other => panic!("no request for {other}"),
        }
    }
}

#[test]
fn kubectl_auth_can_i_agrees_with_what_requests_may_do() {
    let plinth = start();
    plinth.kubectl(&["-n", "team", "create", "configmap", "c1"]);
    plinth.kubectl(&["-n", "other", "create", "configmap", "c1"]);
    plinth.kubectl(&["-n", "team", "create", "secret", "generic", "s1"]);
    let http = Http::new(&plinth);
    let cases = [
        case("get", "example.com", "widgets", "", "team", "w1"),
        case("patch", "example.com", "widgets", "", "team", "w1"),
        case("patch", "example.com", "widgets", "status", "team", "w1"),
        case("get", "example.com", "widgets", "", "other", "w1"),
        case("list", "example.com", "widgets", "", "team", ""),
        case("delete", "example.com", "widgets", "", "team", "w1"),
        case("list", "", "configmaps", "", "team", ""),
        case("watch", "", "configmaps", "", "other", ""),
        case("create", "", "configmaps", "", "team", ""),
        case("get", "", "secrets", "", "team", "s1"),
        case("list", "", "configmaps", "", "", ""),
        case(
            "create",
            "rbac.authorization.k8s.io",
            "rolebindings",
            "",
            "team",
            "",
        ),
    ];
    let mut checked = 0;
    let mut allowed = 0;
    for (user, token) in USERS {
        let as_user = http.with_token(token);
        for case in &cases {
            let args = case.can_i_args();
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let says = can_i(&plinth, user, &args);
            let (method, path, body) = case.request();
            let body = body.map(|b| b.to_string());
            let content_type = if method == "PATCH" {
                "application/merge-patch+json"
            } else {
                "application/json"
            };
            let reply = as_user.request(
                method,
                &path,
                content_type,
                body.as_deref().map(str::as_bytes),
                true,
            );
            let did = reply.code != 403;
            assert!(
                reply.code < 500 && reply.code != 401,
                "{user} {method} {path}: {} {}",
                reply.code,
                reply.body
            );
            assert_eq!(
                says, did,
                "{user}: can-i {args:?} says {says}, {method} {path} answered {} {}",
                reply.code, reply.body
            );
            checked += 1;
            allowed += usize::from(did);
        }
    }
    assert!(checked >= 50, "{checked} cases");
    // Both answers occur, often.
    assert!(
        allowed >= 10 && checked - allowed >= 10,
        "{allowed} of {checked} allowed"
    );
}

#[test]
fn escalation_identities_and_refusals() {
    let plinth = start();
    let carol = |args: &[&str]| {
        let mut full = vec!["--token", token("carol"), "-n", "team"];
        full.extend(args);
        plinth.kubectl_output(&full)
    };
    // A namespace admin may grant what they hold...
    let out = carol(&[
        "create",
        "rolebinding",
        "eve-edit",
        "--clusterrole=edit",
        "--user=eve",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // ...but not cluster-admin, nor write a role with more than they have.
    let out = carol(&[
        "create",
        "rolebinding",
        "eve-root",
        "--clusterrole=cluster-admin",
        "--user=eve",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("rolebindings.rbac.authorization.k8s.io \"eve-root\" is forbidden: user \"carol\" (groups=[\"team-admins\" \"system:authenticated\"]) is attempting to grant RBAC permissions not currently held"),
        "{stderr}"
    );
    let out = carol(&["create", "role", "everything", "--verb=*", "--resource=*.*"]);
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("is attempting to grant RBAC permissions not currently held")
    );
    assert!(
        plinth
            .kubectl_output(&["-n", "team", "get", "rolebinding", "eve-root"])
            .status
            .code()
            != Some(0)
    );
    // Nor elsewhere.
    let out = plinth.kubectl_output(&[
        "--token",
        token("carol"),
        "-n",
        "other",
        "create",
        "rolebinding",
        "x",
        "--clusterrole=view",
        "--user=eve",
    ]);
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("cannot create resource \"rolebindings\"")
    );

    // Impersonation needs the impersonate verb: the admin may, carol may not.
    let as_eve = plinth.kubectl(&[
        "--as",
        "eve",
        "--as-group",
        "auditors",
        "auth",
        "whoami",
        "-o",
        "json",
    ]);
    let review: Value = serde_json::from_str(&as_eve).unwrap();
    assert_eq!(review["status"]["userInfo"]["username"], "eve");
    assert_eq!(
        review["status"]["userInfo"]["groups"],
        json!(["auditors", "system:authenticated"])
    );
    let out = plinth.kubectl_output(&[
        "--token",
        token("carol"),
        "--as",
        "dave",
        "get",
        "configmaps",
        "-n",
        "team",
    ]);
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("users \"dave\" is forbidden: User \"carol\" cannot impersonate resource \"users\" in API group \"\" at the cluster scope"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Impersonating eve leaves what eve may do: edit in team (carol's binding), not elsewhere.
    plinth.eventually("eve's binding is in force", || {
        plinth
            .kubectl_output(&["--as", "eve", "-n", "team", "get", "configmaps"])
            .status
            .success()
    });
    let out = plinth.kubectl_output(&["--as", "eve", "-n", "other", "get", "configmaps"]);
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("User \"eve\" cannot list resource \"configmaps\"")
    );

    // Who am I.
    let whoami = plinth.kubectl(&["--token", token("carol"), "auth", "whoami", "-o", "json"]);
    let review: Value = serde_json::from_str(&whoami).unwrap();
    assert_eq!(review["status"]["userInfo"]["username"], "carol");
    assert_eq!(review["status"]["userInfo"]["uid"], "uid-2");
    assert_eq!(
        review["status"]["userInfo"]["groups"],
        json!(["team-admins", "system:authenticated"])
    );
    let admin: Value =
        serde_json::from_str(&plinth.kubectl(&["auth", "whoami", "-o", "json"])).unwrap();
    assert!(
        admin["status"]["userInfo"]["groups"]
            .as_array()
            .unwrap()
            .contains(&json!("system:masters"))
    );

    // Unknown tokens and no credentials: 401; health and version stay open.
    let http = Http::new(&plinth);
    let stranger = http.with_token("not-a-token");
    let reply = stranger.get("/api/v1/namespaces");
    assert_eq!(reply.code, 401, "{}", reply.body);
    assert_eq!(reply.json()["reason"], "Unauthorized");
    assert_eq!(
        http.request("GET", "/api", "application/json", None, false)
            .code,
        401
    );
    assert_eq!(
        http.request("GET", "/readyz", "application/json", None, false)
            .code,
        200
    );
    assert_eq!(
        http.request("GET", "/version", "application/json", None, false)
            .code,
        200
    );
    // A user without rules may still discover the API and ask what they may do.
    let eve = http.with_token(token("eve"));
    assert_eq!(eve.get("/apis").code, 200);
    let reply = eve.get("/metrics");
    assert_eq!(reply.code, 403);
    assert_eq!(
        reply.json()["message"],
        "forbidden: User \"eve\" cannot get path \"/metrics\""
    );
    let rules = plinth.kubectl(&[
        "--token",
        token("eve"),
        "auth",
        "can-i",
        "--list",
        "-n",
        "team",
    ]);
    assert!(
        rules.contains("selfsubjectaccessreviews.authorization.k8s.io"),
        "{rules}"
    );
    // A question resource answers creates only, and bad questions get 4xx answers.
    let reviews = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews";
    assert_eq!(http.get(reviews).code, 405);
    for (body, code) in [
        (&b"[1]"[..], 400),
        (b"{not json", 400),
        (br#"{"apiVersion":"v1","kind":"ConfigMap"}"#, 400),
        (br#"{"spec":{"resourceAttributes":"nope"}}"#, 400),
        (br#"{"spec":{}}"#, 422),
    ] {
        let reply = http.post(reviews, body);
        assert_eq!(
            reply.code,
            code,
            "{}: {}",
            String::from_utf8_lossy(body),
            reply.body
        );
    }
    let asked = http.post(
        reviews,
        br#"{"spec":{"nonResourceAttributes":{"path":"/metrics","verb":"get"}}}"#,
    );
    assert_eq!(asked.code, 201, "{}", asked.body);
    assert_eq!(asked.json()["status"]["allowed"], true);
    // A question has no table form: 406, as kube's resources without a table convertor.
    let table = http.request_with(
        "POST",
        reviews,
        "application/json",
        Some(br#"{"spec":{"nonResourceAttributes":{"path":"/","verb":"get"}}}"#),
        true,
        &["Accept: application/json;as=Table;v=v1;g=meta.k8s.io"],
    );
    assert_eq!(table.code, 406, "{}", table.body);
    assert_eq!(table.json()["reason"], "NotAcceptable");
    // rbac/v1's defaults: a binding's roleRef and its User/Group subjects name the group
    // when the request leaves it out (client-go programs often do); a ServiceAccount's not.
    let created = http.post(
        "/apis/rbac.authorization.k8s.io/v1/namespaces/team/rolebindings",
        br#"{"metadata":{"name":"defaulted"},"roleRef":{"kind":"Role","name":"spec-writer"},
            "subjects":[{"kind":"User","name":"zed"},{"kind":"ServiceAccount","name":"default","namespace":"team"}]}"#,
    );
    assert_eq!(created.code, 201, "{}", created.body);
    let created = created.json();
    assert_eq!(created["roleRef"]["apiGroup"], "rbac.authorization.k8s.io");
    assert_eq!(
        created["subjects"][0]["apiGroup"],
        "rbac.authorization.k8s.io"
    );
    assert!(
        created["subjects"][1].get("apiGroup").is_none(),
        "{created}"
    );
    // Bad RBAC objects are refused with kube's field errors.
    let out = plinth.kubectl_stdin(
        &["-n", "team", "create", "-f", "-"],
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata: {name: bad}\nrules: [{apiGroups: [''], resources: [configmaps]}, {verbs: [get], nonResourceURLs: [/x]}]\n",
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("rules[0].verbs: Required value: verbs must contain at least one value"),
        "{stderr}"
    );
    assert!(stderr.contains("rules[1].nonResourceURLs: Invalid value: [\"/x\"]: namespaced rules cannot apply to non-resource URLs"), "{stderr}");
    let out = plinth.kubectl_output(&[
        "-n",
        "team",
        "patch",
        "rolebinding",
        "alice-spec",
        "--type=merge",
        "-p",
        r#"{"roleRef":{"name":"status-writer"}}"#,
    ]);
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("roleRef: Invalid value"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A kubeconfig for `user` in `group`, with a client certificate from `plinth kubeconfig`;
/// its path.
fn kubeconfig_for(plinth: &Plinth, user: &str, group: &str) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_plinth"))
        .args(["kubeconfig", "--data-dir"])
        .arg(plinth.dir.path())
        .args(["--user", user, "--group", group])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

#[test]
fn certificate_users_with_kubectl_and_the_python_client() {
    let plinth = start();
    let kubeconfig = kubeconfig_for(&plinth, "alice", "widget-fans");
    let whoami = plinth.kubectl(&["--kubeconfig", &kubeconfig, "auth", "whoami", "-o", "json"]);
    let review: Value = serde_json::from_str(&whoami).unwrap();
    assert_eq!(review["status"]["userInfo"]["username"], "alice");
    assert_eq!(
        review["status"]["userInfo"]["groups"],
        json!(["widget-fans", "system:authenticated"])
    );
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tests/python/rbac_checks.py"
    );
    let out = Command::new("python3")
        .arg(script)
        .arg(&kubeconfig)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "python checks failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("python rbac: all checks passed"),
        "{stdout}"
    );
}

#[test]
fn service_account_tokens_are_issued_checked_and_revoked() {
    let plinth = start();
    plinth.kubectl(&["-n", "team", "create", "serviceaccount", "robot"]);
    plinth.kubectl(&[
        "-n",
        "team",
        "create",
        "rolebinding",
        "robot-views",
        "--clusterrole=view",
        "--serviceaccount=team:robot",
    ]);
    let token = plinth
        .kubectl(&["-n", "team", "create", "token", "robot"])
        .trim()
        .to_owned();
    let http = Http::new(&plinth);
    let robot = http.with_token(&token);
    let whoami = plinth.kubectl(&["--token", &token, "auth", "whoami", "-o", "json"]);
    let review: Value = serde_json::from_str(&whoami).unwrap();
    let info = &review["status"]["userInfo"];
    assert_eq!(info["username"], "system:serviceaccount:team:robot");
    assert_eq!(
        info["groups"],
        json!([
            "system:serviceaccounts",
            "system:serviceaccounts:team",
            "system:authenticated"
        ])
    );
    let account = plinth.json(&["-n", "team", "get", "serviceaccount", "robot"]);
    assert_eq!(info["uid"], account["metadata"]["uid"]);
    // Its role applies: it may read ConfigMaps in team (view), not write them.
    plinth.eventually("the robot's binding is in force", || {
        robot.get("/api/v1/namespaces/team/configmaps").code == 200
    });
    let write = robot.post(
        "/api/v1/namespaces/team/configmaps",
        br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x"}}"#,
    );
    assert_eq!(write.code, 403, "{}", write.body);

    // A tampered token, one for another audience, and a too-short one.
    let mut parts: Vec<String> = token.split('.').map(str::to_owned).collect();
    let mut signature = parts[2].clone().into_bytes();
    signature[5] = if signature[5] == b'A' { b'B' } else { b'A' };
    parts[2] = String::from_utf8(signature).unwrap();
    assert_eq!(
        http.with_token(&parts.join("."))
            .get("/api/v1/namespaces/team/configmaps")
            .code,
        401
    );
    let vault = plinth.kubectl(&["-n", "team", "create", "token", "robot", "--audience=vault"]);
    assert_eq!(http.with_token(vault.trim()).get("/apis").code, 401);
    let short = plinth.kubectl_fails(&["-n", "team", "create", "token", "robot", "--duration=1m"]);
    assert!(short.contains("spec.expirationSeconds: Invalid value: 60: may not specify a duration less than 10 minutes"), "{short}");
    let missing = plinth.kubectl_fails(&["-n", "team", "create", "token", "nobody"]);
    assert!(
        missing.contains("serviceaccounts \"nobody\" not found"),
        "{missing}"
    );

    // Bound to a Secret: valid while the Secret lives.
    plinth.kubectl(&["-n", "team", "create", "secret", "generic", "binding"]);
    let bound = plinth.kubectl(&[
        "-n",
        "team",
        "create",
        "token",
        "robot",
        "--bound-object-kind=Secret",
        "--bound-object-name=binding",
    ]);
    let bound = http.with_token(bound.trim());
    assert_eq!(bound.get("/apis").code, 200);
    plinth.kubectl(&["-n", "team", "delete", "secret", "binding"]);
    assert_eq!(bound.get("/apis").code, 401);

    // The issuer's documents are public, and its key is the one tokens are signed with.
    let config = http.request(
        "GET",
        "/.well-known/openid-configuration",
        "application/json",
        None,
        false,
    );
    assert_eq!(config.code, 200, "{}", config.body);
    assert_eq!(
        config.json()["issuer"],
        "https://kubernetes.default.svc.cluster.local"
    );
    let keys = http
        .request("GET", "/openid/v1/jwks", "application/json", None, false)
        .json();
    let header: Value = serde_json::from_slice(
        &base64::Engine::decode(
            &base64::engine::general_purpose::URL_SAFE_NO_PAD,
            token.split('.').next().unwrap(),
        )
        .unwrap(),
    )
    .unwrap();
    assert_eq!(keys["keys"][0]["kid"], header["kid"]);

    // Bad token requests get 4xx answers and issue nothing.
    let token_path = "/api/v1/namespaces/team/serviceaccounts/robot/token";
    plinth.kubectl(&["-n", "team", "create", "secret", "generic", "other"]);
    for (body, code, says) in [
        (
            r#"{"spec":{"boundObjectRef":{"kind":"Node","apiVersion":"v1","name":"n1"}}}"#,
            400,
            "cannot bind token for object of kind \"Node\"",
        ),
        (
            r#"{"spec":{"boundObjectRef":{"kind":"Secret","apiVersion":"v1","name":"other","uid":"not-its-uid"}}}"#,
            409,
            "the UID in the bound object reference (not-its-uid) does not match the UID in record",
        ),
        (
            r#"{"spec":{"boundObjectRef":{"kind":"Secret","apiVersion":"v1","name":"missing"}}}"#,
            404,
            "secrets \"missing\" not found",
        ),
        (r#"{"spec":{"expirationSeconds":"soon"}}"#, 400, ""),
        (r#"[1]"#, 400, "not a JSON object"),
    ] {
        let reply = http.post(token_path, body.as_bytes());
        assert_eq!(reply.code, code, "{body}: {}", reply.body);
        let status = reply.json();
        assert_eq!(status["kind"], "Status", "{body}: {}", reply.body);
        assert!(
            status["message"].as_str().unwrap().contains(says),
            "{body}: {}",
            reply.body
        );
    }
    // Impersonating groups without a user is a bad request.
    let reply = http.request_with(
        "GET",
        "/api/v1/namespaces",
        "application/json",
        None,
        true,
        &["Impersonate-Group: devs"],
    );
    assert_eq!(reply.code, 400, "{}", reply.body);
    assert!(
        reply.body.contains("without impersonating a user"),
        "{}",
        reply.body
    );

    // Deleting the account revokes its tokens, even one recreated under the same name.
    plinth.kubectl(&["-n", "team", "delete", "serviceaccount", "robot"]);
    plinth.kubectl(&["-n", "team", "create", "serviceaccount", "robot"]);
    let reply = robot.get("/apis");
    assert_eq!(reply.code, 401, "{}", reply.body);
}

#[test]
fn every_namespace_publishes_the_cluster_ca() {
    let plinth = start();
    let ca = std::fs::read_to_string(plinth.dir.path().join("ca.crt")).unwrap();
    let published = |ns: &str| {
        let out = plinth.kubectl_output(&[
            "-n",
            ns,
            "get",
            "configmap",
            "kube-root-ca.crt",
            "-o",
            "jsonpath={.data.ca\\.crt}",
        ]);
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    for ns in ["default", "kube-system", "team", "other"] {
        plinth.eventually(&format!("kube-root-ca.crt in {ns}"), || published(ns) == ca);
    }
    // Deleted, it comes back; changed, it is put back.
    plinth.kubectl(&["-n", "team", "delete", "configmap", "kube-root-ca.crt"]);
    plinth.eventually("recreated", || published("team") == ca);
    plinth.kubectl(&[
        "-n",
        "team",
        "patch",
        "configmap",
        "kube-root-ca.crt",
        "--type=merge",
        "-p",
        r#"{"data":{"ca.crt":"forged"}}"#,
    ]);
    plinth.eventually("repaired", || published("team") == ca);
    // A ServiceAccount token and this CA are all a pod needs to reach the server.
    plinth.kubectl(&["create", "namespace", "fresh"]);
    plinth.eventually("published in a new namespace", || published("fresh") == ca);
}

/// A key and a PEM certificate request for `user` in `groups`.
fn certificate_request(user: &str, groups: &[&str]) -> (rcgen::KeyPair, String) {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(Vec::new()).unwrap();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, user);
    for group in groups {
        params
            .distinguished_name
            .push(rcgen::DnType::OrganizationName, *group);
    }
    let request = params.serialize_request(&key).unwrap().pem().unwrap();
    (key, request)
}

fn csr_yaml(name: &str, request: &str, usages: &str) -> String {
    let encoded = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, request);
    format!(
        "apiVersion: certificates.k8s.io/v1\nkind: CertificateSigningRequest\nmetadata: {{name: {name}}}\nspec:\n  request: {encoded}\n  signerName: kubernetes.io/kube-apiserver-client\n  expirationSeconds: 86400\n  usages: [{usages}]\n"
    )
}

#[test]
fn certificate_signing_requests_issue_client_certificates() {
    let plinth = start();
    let (key, request) = certificate_request("frank", &["auditors"]);
    // Anyone may ask (here carol, a namespace admin); the request records who asked.
    plinth.kubectl(&[
        "create",
        "clusterrole",
        "csr-creator",
        "--verb=create,get,list,watch",
        "--resource=certificatesigningrequests.certificates.k8s.io",
    ]);
    plinth.kubectl(&[
        "create",
        "clusterrolebinding",
        "carol-asks",
        "--clusterrole=csr-creator",
        "--user=carol",
    ]);
    plinth.eventually("carol may ask", || {
        can_i(
            &plinth,
            "carol",
            &["create", "certificatesigningrequests.certificates.k8s.io"],
        )
    });
    plinth.kubectl_with(
        &["--token", token("carol"), "create", "-f", "-"],
        &csr_yaml("frank", &request, "client auth"),
    );
    let csr = plinth.json(&["get", "csr", "frank"]);
    assert_eq!(csr["spec"]["username"], "carol");
    assert_eq!(
        csr["spec"]["groups"],
        json!(["team-admins", "system:authenticated"])
    );
    let listed = plinth.kubectl(&["get", "csr"]);
    assert!(listed.contains("Pending"), "{listed}");
    // She may not approve her own request: approving needs `approve` on the signer.
    plinth.kubectl(&[
        "create",
        "clusterrole",
        "csr-approver-ish",
        "--verb=update",
        "--resource=certificatesigningrequests.certificates.k8s.io/approval",
    ]);
    plinth.kubectl(&[
        "create",
        "clusterrolebinding",
        "carol-approves",
        "--clusterrole=csr-approver-ish",
        "--user=carol",
    ]);
    plinth.eventually("carol may update approvals", || {
        can_i(
            &plinth,
            "carol",
            &[
                "update",
                "certificatesigningrequests.certificates.k8s.io",
                "--subresource=approval",
            ],
        )
    });
    let refused =
        plinth.kubectl_fails(&["--token", token("carol"), "certificate", "approve", "frank"]);
    assert!(refused.contains("user not permitted to approve requests with signerName \"kubernetes.io/kube-apiserver-client\""), "{refused}");
    // An approval write keeps the request's metadata (kube's approval strategy).
    let noted = plinth.kubectl(&[
        "patch",
        "csr",
        "frank",
        "--subresource=approval",
        "--type=merge",
        "-p",
        r#"{"metadata":{"annotations":{"patchedapproval":"true"}}}"#,
        "-o",
        "jsonpath={.metadata.annotations.patchedapproval}",
    ]);
    assert_eq!(noted, "true");
    // The administrator approves; the signer issues a certificate for the requested subject.
    plinth.kubectl(&["certificate", "approve", "frank"]);
    let mut certificate = String::new();
    plinth.eventually("the certificate is issued", || {
        certificate = plinth.kubectl(&[
            "get",
            "csr",
            "frank",
            "-o",
            "jsonpath={.status.certificate}",
        ]);
        !certificate.is_empty()
    });
    assert!(
        plinth
            .kubectl(&["get", "csr", "frank"])
            .contains("Approved,Issued")
    );
    // A `/status` write keeps the decision where the request places it (kube's
    // preserveConditionInstances): a condition appended after it stays last.
    let mut stored = plinth.json(&["get", "csr", "frank"]);
    stored["status"]["conditions"]
        .as_array_mut()
        .unwrap()
        .push(json!({"type": "StatusUpdate", "status": "True", "reason": "E2E"}));
    let updated: Value = serde_json::from_str(&plinth.kubectl_with(
        &["replace", "--subresource=status", "-o", "json", "-f", "-"],
        &stored.to_string(),
    ))
    .unwrap();
    let kinds: Vec<&str> = updated["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c["type"].as_str())
        .collect();
    assert_eq!(kinds, ["Approved", "StatusUpdate"], "{updated}");
    let b64 = |s: &str| base64::Engine::encode(&base64::engine::general_purpose::STANDARD, s);
    let admin = std::fs::read_to_string(&plinth.kubeconfig).unwrap();
    let server = admin
        .lines()
        .find_map(|l| l.trim().strip_prefix("server: "))
        .unwrap();
    let ca = std::fs::read_to_string(plinth.dir.path().join("ca.crt")).unwrap();
    let config = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {server}\n    certificate-authority-data: {}\nusers:\n- name: frank\n  user:\n    client-certificate-data: {certificate}\n    client-key-data: {}\ncontexts:\n- name: f\n  context: {{cluster: c, user: frank}}\ncurrent-context: f\n",
        b64(&ca),
        b64(&key.serialize_pem())
    );
    let path = plinth.dir.path().join("frank.kubeconfig");
    std::fs::write(&path, config).unwrap();
    let whoami: Value = serde_json::from_str(&plinth.kubectl(&[
        "--kubeconfig",
        path.to_str().unwrap(),
        "auth",
        "whoami",
        "-o",
        "json",
    ]))
    .unwrap();
    assert_eq!(whoami["status"]["userInfo"]["username"], "frank");
    assert_eq!(
        whoami["status"]["userInfo"]["groups"],
        json!(["auditors", "system:authenticated"])
    );

    // A denied request is never signed; one without "client auth" fails with a reason.
    let (_, other) = certificate_request("gina", &[]);
    plinth.kubectl_with(
        &["create", "-f", "-"],
        &csr_yaml("gina", &other, "client auth"),
    );
    plinth.kubectl(&["certificate", "deny", "gina"]);
    let (_, server_auth) = certificate_request("hal", &[]);
    plinth.kubectl_with(
        &["create", "-f", "-"],
        &csr_yaml("hal", &server_auth, "server auth"),
    );
    plinth.kubectl(&["certificate", "approve", "hal"]);
    plinth.eventually("hal's request fails", || {
        plinth.kubectl(&["get", "csr", "hal"]).contains("Failed")
    });
    let hal = plinth.json(&["get", "csr", "hal"]);
    let failed = hal["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Failed")
        .unwrap()
        .clone();
    assert_eq!(failed["reason"], "SignerValidationFailure");
    let gina = plinth.json(&["get", "csr", "gina"]);
    assert!(gina["status"].get("certificate").is_none(), "{gina}");
    // Requests that are not requests are refused.
    let bad = plinth.kubectl_stdin(
        &["create", "-f", "-"],
        &csr_yaml("bad", "not a request", "client auth"),
    );
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("spec.request: Invalid value"),
        "{}",
        String::from_utf8_lossy(&bad.stderr)
    );
}

#[test]
fn anonymous_requests_only_where_allowed() {
    // Off (the default): no credentials, 401 — but for the health, version and OIDC documents.
    let plinth = Plinth::start(Backend::Embedded);
    let http = Http::new(&plinth);
    let anonymous = |path: &str| http.request("GET", path, "application/json", None, false);
    for path in [
        "/healthz",
        "/livez",
        "/readyz",
        "/version",
        "/openid/v1/jwks",
    ] {
        assert_eq!(anonymous(path).code, 200, "{path}");
    }
    // Its keys are where pods reach the server: the `kubernetes` Service.
    let discovery = anonymous("/.well-known/openid-configuration").json();
    let service = plinth.kubectl(&[
        "get",
        "svc",
        "kubernetes",
        "-o",
        "jsonpath={.spec.clusterIP}",
    ]);
    assert_eq!(
        discovery["jwks_uri"],
        format!("https://{service}:443/openid/v1/jwks")
    );
    for path in ["/api", "/api/v1/namespaces/default/configmaps", "/metrics"] {
        let reply = anonymous(path);
        assert_eq!(reply.code, 401, "{path}: {}", reply.body);
        assert_eq!(reply.json()["reason"], "Unauthorized");
    }
    drop(plinth);

    // On: system:anonymous in system:unauthenticated, and RBAC decides.
    let plinth = Plinth::start_with(Backend::Embedded, &["--anonymous-auth"]);
    let http = Http::new(&plinth);
    let anonymous = |path: &str| http.request("GET", path, "application/json", None, false);
    assert_eq!(anonymous("/version").code, 200);
    let reply = anonymous("/api");
    assert_eq!(reply.code, 403, "{}", reply.body);
    assert_eq!(
        reply.json()["message"],
        "forbidden: User \"system:anonymous\" cannot get path \"/api\""
    );
    let configmaps = "/api/v1/namespaces/default/configmaps";
    let reply = anonymous(configmaps);
    assert_eq!(reply.code, 403);
    assert_eq!(
        reply.json()["message"],
        "configmaps is forbidden: User \"system:anonymous\" cannot list resource \"configmaps\" in API group \"\" in the namespace \"default\""
    );
    // A bad token is still refused, not taken for anonymous.
    let reply =
        http.with_token("not-a-token")
            .request("GET", "/version", "application/json", None, true);
    assert_eq!(reply.code, 401);
    plinth.kubectl(&[
        "create",
        "rolebinding",
        "anonymous-view",
        "--clusterrole=view",
        "--group=system:unauthenticated",
    ]);
    plinth.eventually("the binding is in force", || {
        anonymous(configmaps).code == 200
    });
    let listed = anonymous(configmaps).json();
    assert!(
        listed["items"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["metadata"]["name"] == "kube-root-ca.crt"),
        "{listed}"
    );
    // Reading is all the binding gives.
    let reply = http.request(
        "POST",
        configmaps,
        "application/json",
        Some(br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x"}}"#),
        false,
    );
    assert_eq!(reply.code, 403, "{}", reply.body);
    assert_eq!(
        plinth
            .kubectl_output(&["get", "configmap", "x"])
            .status
            .code(),
        Some(1),
        "nothing created"
    );
    // system:basic-user is bound to system:authenticated only, as in kube: no reviews.
    let review = http.request(
        "POST",
        "/apis/authentication.k8s.io/v1/selfsubjectreviews",
        "application/json",
        Some(br#"{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}"#),
        false,
    );
    assert_eq!(review.code, 403, "{}", review.body);
}

/// kube's Node authorizer and NodeRestriction for an agent's identity (`system:node:<name>`):
/// it reads only the Secrets and ConfigMaps its own pods use, its own Node, and the pods
/// bound to it (by field selector); it changes neither another node nor its own taints,
/// creates only mirror pods, and deletes or updates the status only of pods bound to it —
/// each refusal in kube's words.
#[test]
fn node_identities_reach_only_their_own_pods_objects() {
    let plinth = start();
    plinth.kubectl_with(
        &["apply", "-f", "-"],
        r#"
apiVersion: v1
kind: Node
metadata: {name: edge-1}
---
apiVersion: v1
kind: Node
metadata: {name: edge-2}
---
apiVersion: v1
kind: Secret
metadata: {name: mine}
stringData: {k: v}
---
apiVersion: v1
kind: Secret
metadata: {name: theirs}
stringData: {k: v}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: settings}
data: {k: v}
---
apiVersion: v1
kind: Pod
metadata: {name: p1}
spec:
  nodeName: edge-1
  volumes: [{name: s, secret: {secretName: mine}}]
  containers:
  - name: c
    image: busybox
    env: [{name: K, valueFrom: {configMapKeyRef: {name: settings, key: k}}}]
---
apiVersion: v1
kind: Pod
metadata: {name: p2}
spec:
  nodeName: edge-2
  volumes: [{name: s, secret: {secretName: theirs}}]
  containers: [{name: c, image: busybox}]
"#,
    );
    let kubeconfig = kubeconfig_for(&plinth, "system:node:edge-1", "system:nodes");
    let as_node = |args: &[&str]| {
        let mut all = vec!["--kubeconfig", kubeconfig.as_str()];
        all.extend_from_slice(args);
        plinth.kubectl_output(&all)
    };
    let allowed = |args: &[&str]| {
        let out = as_node(args);
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let refused = |args: &[&str], expected: &str| {
        let out = as_node(args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && stderr.contains(expected),
            "{args:?}: {stderr}"
        );
    };
    // The Node authorizer: its pods' objects, its own Node, its pods by field selector.
    plinth.eventually("the graph to hold the pods", || {
        as_node(&["get", "secret", "mine"]).status.success()
    });
    allowed(&["get", "configmap", "settings"]);
    refused(
        &["get", "secret", "theirs"],
        r#"secrets "theirs" is forbidden: User "system:node:edge-1" cannot get resource "secrets" in API group "" in the namespace "default": no relationship found between node 'edge-1' and this object"#,
    );
    refused(&["get", "secrets"], "No Object name found");
    allowed(&["get", "node", "edge-1"]);
    refused(
        &["get", "node", "edge-2"],
        "node 'edge-1' cannot read 'edge-2', only its own Node object",
    );
    refused(
        &["get", "pods", "-A"],
        "can only list/watch pods with spec.nodeName field selector",
    );
    let mine = allowed(&[
        "get",
        "pods",
        "-A",
        "--field-selector",
        "spec.nodeName=edge-1",
        "-o",
        "name",
    ]);
    assert_eq!(mine.trim(), "pod/p1");
    refused(
        &["get", "pod", "p2"],
        "no relationship found between node 'edge-1' and this object",
    );
    refused(
        &["delete", "configmap", "settings"],
        "can only read resources of this type",
    );

    // NodeRestriction.
    // Updates without a read first (a node may not read another node, nor pods/status): a
    // PUT of the object as the admin reads it, changed.
    let put = |path: &str, object: &Value| {
        let out = plinth.kubectl_stdin(
            &[
                "--kubeconfig",
                &kubeconfig,
                "replace",
                "--raw",
                path,
                "-f",
                "-",
            ],
            &object.to_string(),
        );
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let mut other = plinth.json(&["get", "node", "edge-2", "-o", "json"]);
    other["metadata"]["labels"] = json!({"a": "b"});
    let (done, stderr) = put("/api/v1/nodes/edge-2", &other);
    assert!(
        !done && stderr.contains(r#"nodes "edge-2" is forbidden: node "edge-1" is not allowed to modify node "edge-2""#),
        "{stderr}"
    );
    refused(
        &["taint", "node", "edge-1", "a=b:NoSchedule"],
        r#"node "edge-1" is not allowed to modify taints"#,
    );
    refused(
        &[
            "label",
            "node",
            "edge-1",
            "node-restriction.kubernetes.io/pool=x",
        ],
        "is not allowed to modify labels: node-restriction.kubernetes.io/pool",
    );
    allowed(&["label", "node", "edge-1", "topology.kubernetes.io/zone=z1"]);
    refused(
        &["delete", "pod", "p2", "--wait=false"],
        r#"pods "p2" is forbidden: node "edge-1" can only delete pods with spec.nodeName set to itself"#,
    );
    let mut theirs = plinth.json(&["get", "pod", "p2", "-o", "json"]);
    theirs["status"]["message"] = json!("x");
    let (done, stderr) = put("/api/v1/namespaces/default/pods/p2/status", &theirs);
    assert!(
        !done && stderr.contains(r#"node "edge-1" can only update pod status for pods with spec.nodeName set to itself"#),
        "{stderr}"
    );
    let mut own = plinth.json(&["get", "pod", "p1", "-o", "json"]);
    own["status"]["message"] = json!("seen");
    let (done, stderr) = put("/api/v1/namespaces/default/pods/p1/status", &own);
    assert!(done, "{stderr}");
    refused(
        &[
            "run",
            "extra",
            "--image=busybox",
            "--overrides",
            r#"{"spec":{"nodeName":"edge-1"}}"#,
        ],
        r#"pod does not have "kubernetes.io/config.mirror" annotation, node "edge-1" can only create mirror pods"#,
    );
    // Nothing refused was changed.
    assert!(
        plinth
            .kubectl_output(&["get", "pod", "p2"])
            .status
            .success()
    );
    let edge_2 = plinth.json(&["get", "node", "edge-2", "-o", "json"]);
    assert!(edge_2["metadata"]["labels"].get("a").is_none(), "{edge_2}");
    allowed(&["delete", "pod", "p1", "--wait=false"]);
    plinth.kubectl(&["delete", "pod", "p2", "--wait=false"]);
}

/// kube's ServiceAccount admission: an account with `automountServiceAccountToken: false` gets
/// no token mounted into its pods, unless a pod asks for one itself.
#[test]
fn an_account_that_opts_out_of_automount_gets_no_token_volume() {
    let plinth = Plinth::start(Backend::Embedded);
    plinth.kubectl_with(
        &["apply", "-f", "-"],
        r"apiVersion: v1
kind: ServiceAccount
metadata: {name: quiet}
automountServiceAccountToken: false
---
apiVersion: v1
kind: Pod
metadata: {name: quiet}
spec:
  serviceAccountName: quiet
  containers: [{name: c, image: busybox}]
---
apiVersion: v1
kind: Pod
metadata: {name: asks}
spec:
  serviceAccountName: quiet
  automountServiceAccountToken: true
  containers: [{name: c, image: busybox}]
---
apiVersion: v1
kind: Pod
metadata: {name: default-account}
spec:
  containers: [{name: c, image: busybox}]
",
    );
    let volumes = |pod: &str| -> Vec<String> {
        plinth.json(&["get", "pod", pod])["spec"]["volumes"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|v| v["name"].as_str().map(str::to_owned))
            .collect()
    };
    assert!(volumes("quiet").is_empty(), "{:?}", volumes("quiet"));
    let quiet = plinth.json(&["get", "pod", "quiet"]);
    assert!(
        quiet["spec"]["containers"][0]["volumeMounts"].is_null(),
        "{quiet}"
    );
    for pod in ["asks", "default-account"] {
        assert!(
            volumes(pod)
                .iter()
                .any(|v| v.starts_with("kube-api-access-")),
            "{pod}: {:?}",
            volumes(pod)
        );
    }
}
