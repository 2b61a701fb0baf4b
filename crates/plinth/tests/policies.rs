//! ValidatingAdmissionPolicies end to end through kubectl: a table of writes against
//! policies with parameters (by name and by selector, found or not), variables,
//! matchConditions, messageExpression and reasons, the three actions (Deny refuses, Warn
//! warns, Audit lets through), failure policies on expressions that error; bad policies and
//! bindings refused with kube's messages; the policy's status.

#![allow(clippy::unwrap_used)]

mod common;

use common::{Backend, Plinth};

const SETUP: &str = r#"
apiVersion: v1
kind: Namespace
metadata: {name: policed, labels: {policy: "on"}}
---
apiVersion: v1
kind: Namespace
metadata: {name: free}
---
apiVersion: v1
kind: Namespace
metadata: {name: params}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: limits, namespace: params, labels: {kind: limit}}
data: {max: "5"}
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: count-limit}
spec:
  paramKind: {apiVersion: v1, kind: ConfigMap}
  matchConstraints:
    resourceRules:
    - {operations: [CREATE, UPDATE], apiGroups: [""], apiVersions: [v1], resources: [configmaps]}
    namespaceSelector: {matchLabels: {policy: "on"}}
  matchConditions:
  - {name: not-skipped, expression: "!object.metadata.name.startsWith('skip-')"}
  variables:
  - {name: count, expression: "int(object.data.count)"}
  validations:
  - expression: "variables.count <= int(params.data.max)"
    messageExpression: "'count ' + string(variables.count) + ' exceeds ' + params.data.max"
    reason: Forbidden
  - expression: "variables.count >= 0"
    message: "count must not be negative"
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: count-limit-by-name}
spec:
  policyName: count-limit
  validationActions: [Deny]
  paramRef: {name: limits, namespace: params, parameterNotFoundAction: Deny}
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: team-label}
spec:
  matchConstraints:
    resourceRules:
    - {operations: [CREATE], apiGroups: [""], apiVersions: [v1], resources: [configmaps]}
    namespaceSelector: {matchLabels: {policy: "on"}}
  validations:
  - expression: "has(object.metadata.labels) && 'team' in object.metadata.labels"
    message: "a team label is required"
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: team-label-warn}
spec:
  policyName: team-label
  validationActions: [Warn, Audit]
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: strict-secrets}
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
    - {operations: [CREATE], apiGroups: [""], apiVersions: [v1], resources: [secrets]}
    namespaceSelector: {matchLabels: {policy: "on"}}
  validations:
  - expression: "object.data.owner != ''"
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: strict-secrets}
spec:
  policyName: strict-secrets
  validationActions: [Deny]
"#;

/// One write and what should come of it.
struct Case {
    what: &'static str,
    namespace: &'static str,
    name: &'static str,
    kind: &'static str,
    body: &'static str,
    /// `None`: allowed; `Some(text)`: refused, stderr containing `text`.
    refused: Option<&'static str>,
    /// A warning kubectl prints.
    warning: Option<&'static str>,
}

const CASES: &[Case] = &[
    Case {
        what: "under the limit from the params ConfigMap",
        namespace: "policed",
        name: "small",
        kind: "ConfigMap",
        body: "metadata: {labels: {team: a}}\ndata: {count: \"3\"}",
        refused: None,
        warning: None,
    },
    Case {
        what: "over it: messageExpression, reason Forbidden",
        namespace: "policed",
        name: "big",
        kind: "ConfigMap",
        body: "metadata: {labels: {team: a}}\ndata: {count: \"9\"}",
        refused: Some(
            "Error from server (Forbidden): error when creating \"STDIN\": configmaps \"big\" is forbidden: ValidatingAdmissionPolicy 'count-limit' with binding 'count-limit-by-name' denied request: count 9 exceeds 5",
        ),
        warning: None,
    },
    Case {
        what: "the second validation's message, reason Invalid by default",
        namespace: "policed",
        name: "negative",
        kind: "ConfigMap",
        body: "metadata: {labels: {team: a}}\ndata: {count: \"-1\"}",
        refused: Some(
            // kube's shape (Forbidden's message and details, reason Invalid) as kubectl shows it;
            // the kube documentation's example reads the same.
            "The configmaps \"negative\" is invalid: : ValidatingAdmissionPolicy 'count-limit' with binding 'count-limit-by-name' denied request: count must not be negative",
        ),
        warning: None,
    },
    Case {
        what: "matchConditions leave skip- objects out",
        namespace: "policed",
        name: "skip-big",
        kind: "ConfigMap",
        body: "metadata: {labels: {team: a}}\ndata: {count: \"99\"}",
        refused: None,
        warning: None,
    },
    Case {
        what: "namespaceSelector: another namespace is not policed",
        namespace: "free",
        name: "big",
        kind: "ConfigMap",
        body: "data: {count: \"99\"}",
        refused: None,
        warning: None,
    },
    Case {
        what: "Warn (and Audit): allowed with a warning",
        namespace: "policed",
        name: "unlabelled",
        kind: "ConfigMap",
        body: "data: {count: \"1\"}",
        refused: None,
        warning: Some(
            "Warning: Validation failed for ValidatingAdmissionPolicy 'team-label' with binding 'team-label-warn': a team label is required",
        ),
    },
    Case {
        what: "an expression that errors, failurePolicy Fail",
        namespace: "policed",
        name: "no-owner",
        kind: "Secret",
        body: "data: {other: eA==}",
        refused: Some(
            "ValidatingAdmissionPolicy 'strict-secrets' with binding 'strict-secrets' denied request: expression 'object.data.owner != ''' resulted in error: no such key: owner",
        ),
        warning: None,
    },
    Case {
        what: "the same expression passing",
        namespace: "policed",
        name: "owned",
        kind: "Secret",
        body: "data: {owner: eA==}",
        refused: None,
        warning: None,
    },
];

fn manifest(case: &Case) -> String {
    let mut body = case.body.to_owned();
    if body.starts_with("metadata: {") {
        body = body.replacen(
            "metadata: {",
            &format!(
                "metadata: {{name: {}, namespace: {}, ",
                case.name, case.namespace
            ),
            1,
        );
    } else {
        body = format!(
            "metadata: {{name: {}, namespace: {}}}\n{body}",
            case.name, case.namespace
        );
    }
    format!("apiVersion: v1\nkind: {}\n{body}\n", case.kind)
}

#[test]
fn policies_deny_warn_and_audit_with_params() {
    let (plinth, _audit, log) = Plinth::start_audited(Backend::Embedded);
    plinth.kubectl_with(&["apply", "-f", "-"], SETUP);
    // In force once the over-limit probe is refused (a dry run: nothing stored meanwhile).
    plinth.eventually("the policies are in force", || {
        let probe = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: probe, namespace: policed, labels: {team: a}}\ndata: {count: \"9\"}\n";
        let out = plinth.kubectl_stdin(&["create", "--dry-run=server", "-f", "-"], probe);
        let strict = "apiVersion: v1\nkind: Secret\nmetadata: {name: probe, namespace: policed}\n";
        let secret = plinth.kubectl_stdin(&["create", "--dry-run=server", "-f", "-"], strict);
        !out.status.success() && !secret.status.success()
    });
    for case in CASES {
        let out = plinth.kubectl_stdin(&["create", "-f", "-"], &manifest(case));
        let stderr = String::from_utf8_lossy(&out.stderr);
        match case.refused {
            Some(expected) => {
                assert!(!out.status.success(), "{}: allowed", case.what);
                assert!(stderr.contains(expected), "{}: {stderr}", case.what);
                let kind = case.kind.to_ascii_lowercase();
                assert_eq!(
                    plinth
                        .kubectl_output(&["-n", case.namespace, "get", &kind, case.name])
                        .status
                        .code(),
                    Some(1),
                    "{}: nothing stored",
                    case.what
                );
            }
            None => assert!(out.status.success(), "{}: {stderr}", case.what),
        }
        if let Some(warning) = case.warning {
            assert!(stderr.contains(warning), "{}: {stderr}", case.what);
        }
    }
    // Audit: the failure is in the audit event's annotations.
    let event = common::audit_events(&log)
        .into_iter()
        .find(|e| {
            e["stage"] == "ResponseComplete"
                && e["annotations"]
                    .get("validation.policy.admission.k8s.io/validation_failure")
                    .is_some()
        })
        .expect("an audit event with the validation failure");
    let failure = event["annotations"]["validation.policy.admission.k8s.io/validation_failure"]
        .as_str()
        .unwrap_or_else(|| panic!("{event}"));
    let failure: serde_json::Value = serde_json::from_str(failure).unwrap();
    assert_eq!(failure[0]["policy"], "team-label");
    assert_eq!(failure[0]["binding"], "team-label-warn");
    assert_eq!(failure[0]["message"], "a team label is required");
    // Updates too: raising the count past the limit is refused.
    let refused = plinth.kubectl_output(&[
        "-n",
        "policed",
        "patch",
        "configmap",
        "small",
        "-p",
        r#"{"data":{"count":"6"}}"#,
    ]);
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("count 6 exceeds 5"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
    // Parameters change: the limit moves with them.
    plinth.kubectl(&[
        "-n",
        "params",
        "patch",
        "configmap",
        "limits",
        "-p",
        r#"{"data":{"max":"10"}}"#,
    ]);
    plinth.kubectl(&[
        "-n",
        "policed",
        "patch",
        "configmap",
        "small",
        "-p",
        r#"{"data":{"count":"6"}}"#,
    ]);
    // Parameters by selector; none found: Deny refuses, Allow lets through.
    plinth.kubectl_with(
        &["apply", "-f", "-"],
        "apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingAdmissionPolicyBinding\nmetadata: {name: count-limit-by-name}\nspec:\n  policyName: count-limit\n  validationActions: [Deny]\n  paramRef: {selector: {matchLabels: {kind: nothing}}, namespace: params, parameterNotFoundAction: Deny}\n",
    );
    let missing = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: lonely, namespace: policed, labels: {team: a}}\ndata: {count: \"1\"}\n";
    plinth.eventually("the selector binding is in force", || {
        let out = plinth.kubectl_stdin(&["create", "--dry-run=server", "-f", "-"], missing);
        String::from_utf8_lossy(&out.stderr)
            .contains("no params found for policy binding with `Deny` parameterNotFoundAction")
    });
    plinth.kubectl_with(
        &["apply", "-f", "-"],
        "apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingAdmissionPolicyBinding\nmetadata: {name: count-limit-by-name}\nspec:\n  policyName: count-limit\n  validationActions: [Deny]\n  paramRef: {selector: {matchLabels: {kind: nothing}}, namespace: params, parameterNotFoundAction: Allow}\n",
    );
    plinth.eventually("parameterNotFoundAction Allow is in force", || {
        plinth
            .kubectl_stdin(&["create", "--dry-run=server", "-f", "-"], missing)
            .status
            .success()
    });
    // The policy's status: the generation checked, and its expressions type-checked against
    // the types it matches — clean here, a warning for a field ConfigMaps do not have.
    plinth.eventually("the policy's status", || {
        let policy = plinth.json(&["get", "validatingadmissionpolicy", "count-limit"]);
        policy["status"]["observedGeneration"] == policy["metadata"]["generation"]
    });
    let policy = plinth.json(&["get", "validatingadmissionpolicy", "count-limit"]);
    assert_eq!(
        policy["status"]["typeChecking"],
        serde_json::json!({}),
        "{policy}"
    );
    plinth.kubectl_with(
        &["apply", "-f", "-"],
        "apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingAdmissionPolicy\nmetadata: {name: typo}\nspec:\n  matchConstraints:\n    resourceRules:\n    - {operations: [CREATE], apiGroups: [\"\"], apiVersions: [v1], resources: [configmaps]}\n  validations:\n  - {expression: \"object.metadata.name != ''\"}\n  - {expression: \"has(object.dataa) && object.data.size() > 0\"}\n",
    );
    plinth.eventually("the typo's warning", || {
        let policy = plinth.json(&["get", "validatingadmissionpolicy", "typo"]);
        let warnings = &policy["status"]["typeChecking"]["expressionWarnings"];
        warnings[0]["fieldRef"] == "spec.validations[1].expression"
            && warnings[0]["warning"].as_str().is_some_and(|w| {
                w.contains("v1, Kind=ConfigMap: ERROR: <input>:1:1: undefined field 'dataa'")
            })
            && warnings.as_array().is_some_and(|w| w.len() == 1)
    });
    let table = plinth.kubectl(&["get", "validatingadmissionpolicybindings"]);
    assert!(table.starts_with("NAME"), "{table}");
    assert!(table.contains("count-limit-by-name"), "{table}");
    // A policy or binding never judges policies: a policy refusing everything can be deleted.
    plinth.kubectl(&[
        "delete",
        "validatingadmissionpolicybinding",
        "strict-secrets",
    ]);
}

#[test]
fn bad_policies_and_bindings_are_refused_with_kubes_messages() {
    let plinth = Plinth::start(Backend::Embedded);
    let out = plinth.kubectl_stdin(
        &["create", "-f", "-"],
        "apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingAdmissionPolicy\nmetadata: {name: bad}\nspec:\n  failurePolicy: Sometimes\n  matchConstraints: {}\n  validations:\n  - {expression: \"object.spec.replicas <\", reason: Teapot}\n  - {expression: \"authorizer.check()\"}\n  variables:\n  - {name: \"not-an-identifier\", expression: \"1\"}\n",
    );
    assert!(!out.status.success());
    let message = String::from_utf8_lossy(&out.stderr);
    for expected in [
        "spec.failurePolicy: Unsupported value: \"Sometimes\": supported values: \"Fail\", \"Ignore\"",
        "spec.matchConstraints.resourceRules: Required value",
        "spec.validations[0].expression: Invalid value: \"object.spec.replicas <\": compilation failed: ERROR: <input>:1:",
        "spec.validations[0].reason: Unsupported value: \"Teapot\"",
        "spec.validations[1].expression: Invalid value: \"authorizer.check()\": compilation failed: ERROR: <input>:1:1: undeclared reference to 'authorizer'",
        "spec.variables[0].name: Invalid value: \"not-an-identifier\": name is not a valid CEL identifier",
    ] {
        assert!(
            message.contains(expected),
            "missing {expected:?} in {message}"
        );
    }
    let out = plinth.kubectl_stdin(
        &["create", "-f", "-"],
        "apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingAdmissionPolicyBinding\nmetadata: {name: bad}\nspec:\n  validationActions: [Deny, Warn, Shout]\n  paramRef: {name: a, selector: {}}\n",
    );
    assert!(!out.status.success());
    let message = String::from_utf8_lossy(&out.stderr);
    for expected in [
        "spec.policyName: Required value",
        "spec.validationActions[2]: Unsupported value: \"Shout\": supported values: \"Audit\", \"Deny\", \"Warn\"",
        "spec.validationActions: Invalid value: [\"Deny\",\"Warn\",\"Shout\"]: must not contain both Deny and Warn",
        "spec.paramRef.name: Forbidden: name and selector are mutually exclusive",
        "spec.paramRef.parameterNotFoundAction: Required value",
    ] {
        assert!(
            message.contains(expected),
            "missing {expected:?} in {message}"
        );
    }
    for kind in [
        "validatingadmissionpolicy",
        "validatingadmissionpolicybinding",
    ] {
        assert_eq!(
            plinth.kubectl_output(&["get", kind, "bad"]).status.code(),
            Some(1),
            "nothing stored"
        );
    }
}

/// A policy over a custom resource sees its fields as the CRD's schema types them, as kube's
/// does: a `format: duration` string is a duration (`90s` is more than `1m`, though not as
/// text), a `format: date-time` one a timestamp.
#[test]
fn policies_type_custom_resources_by_their_schema() {
    let plinth = Plinth::start(Backend::Embedded);
    plinth.kubectl_with(
        &["apply", "-f", "-"],
        r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: probes.timing.example.com}
spec:
  group: timing.example.com
  scope: Namespaced
  names: {plural: probes, singular: probe, kind: Probe}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              timeout: {type: string, format: duration}
              notAfter: {type: string, format: date-time}
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: short-probes}
spec:
  matchConstraints:
    resourceRules:
    - {operations: [CREATE, UPDATE], apiGroups: [timing.example.com], apiVersions: [v1], resources: [probes]}
  validations:
  - expression: "object.spec.timeout <= duration('1m') && object.spec.notAfter > timestamp('2026-01-01T00:00:00Z')"
    messageExpression: "'timeout ' + string(object.spec.timeout) + ' is too long'"
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: short-probes}
spec: {policyName: short-probes, validationActions: [Deny]}
"#,
    );
    let probe = |name: &str, timeout: &str| {
        format!(
            "apiVersion: timing.example.com/v1\nkind: Probe\nmetadata: {{name: {name}, namespace: default}}\nspec: {{timeout: {timeout}, notAfter: \"2026-12-31T23:00:00+01:00\"}}\n"
        )
    };
    plinth.eventually("the policy to be in force", || {
        !plinth
            .kubectl_stdin(
                &["create", "--dry-run=server", "-f", "-"],
                &probe("probe", "2m"),
            )
            .status
            .success()
    });
    let refused = plinth.kubectl_stdin(&["create", "-f", "-"], &probe("slow", "90s"));
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("ValidatingAdmissionPolicy 'short-probes' with binding 'short-probes' denied request: timeout 90s is too long"),
        "{stderr}"
    );
    // As text "30s" > "1m"; as durations it is shorter, and allowed.
    let allowed = plinth.kubectl_stdin(&["create", "-f", "-"], &probe("quick", "30s"));
    assert!(
        allowed.status.success(),
        "{}",
        String::from_utf8_lossy(&allowed.stderr)
    );
}
