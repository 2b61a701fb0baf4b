//! A table of schema cases: each keyword with a valid and an invalid instance and the expected
//! causes (field, reason, message).

use serde_json::{Value, json};

use crate::Schema;

fn schema(spec: Value) -> Schema {
    Schema::compile(&json!({"type": "object", "properties": {"spec": spec}})).unwrap()
}

/// A cause as (field, reason, message).
type Found = Vec<(String, String, String)>;

/// A case: the spec schema, a valid spec, an invalid spec, the causes it gives.
type Case = (Value, Value, Value, Found);

fn causes(s: &Schema, spec: Value) -> Found {
    s.validate(&json!({"spec": spec}))
        .into_iter()
        .map(|c| (c.field, c.reason, c.message))
        .collect()
}

fn one(field: &str, reason: &str, message: &str) -> Found {
    vec![(field.to_owned(), reason.to_owned(), message.to_owned())]
}

#[test]
fn keyword_table() {
    let cases: Vec<Case> = vec![
        (
            json!({"type": "object", "properties": {"replicas": {"type": "integer", "minimum": 0}}}),
            json!({"replicas": 3}),
            json!({"replicas": -1}),
            one(
                "spec.replicas",
                "FieldValueInvalid",
                "Invalid value: -1: spec.replicas in body should be greater than or equal to 0",
            ),
        ),
        (
            json!({"type": "object", "properties": {"replicas": {"type": "integer"}}}),
            json!({"replicas": 3}),
            json!({"replicas": "three"}),
            one(
                "spec.replicas",
                "FieldValueTypeInvalid",
                "Invalid value: \"three\": spec.replicas in body must be of type integer: \"string\"",
            ),
        ),
        (
            json!({"type": "object", "properties": {"n": {"type": "number", "maximum": 10, "exclusiveMaximum": true}}}),
            json!({"n": 9.5}),
            json!({"n": 10}),
            one(
                "spec.n",
                "FieldValueInvalid",
                "Invalid value: 10: spec.n in body should be less than 10",
            ),
        ),
        (
            json!({"type": "object", "properties": {"n": {"type": "integer", "multipleOf": 5}}}),
            json!({"n": 15}),
            json!({"n": 7}),
            one(
                "spec.n",
                "FieldValueInvalid",
                "Invalid value: 7: spec.n in body should be a multiple of 5",
            ),
        ),
        (
            json!({"type": "object", "properties": {"color": {"type": "string", "enum": ["red", "blue"]}}}),
            json!({"color": "red"}),
            json!({"color": "pink"}),
            one(
                "spec.color",
                "FieldValueNotSupported",
                "Unsupported value: \"pink\": supported values: \"red\", \"blue\"",
            ),
        ),
        (
            json!({"type": "object", "properties": {"name": {"type": "string", "pattern": "^[a-z]+$"}}}),
            json!({"name": "abc"}),
            json!({"name": "A1"}),
            one(
                "spec.name",
                "FieldValueInvalid",
                "Invalid value: \"A1\": spec.name in body should match '^[a-z]+$'",
            ),
        ),
        (
            json!({"type": "object", "properties": {"name": {"type": "string", "minLength": 2}}}),
            json!({"name": "ab"}),
            json!({"name": "a"}),
            one(
                "spec.name",
                "FieldValueInvalid",
                "Invalid value: \"a\": spec.name in body should be at least 2 chars long",
            ),
        ),
        (
            json!({"type": "object", "properties": {"name": {"type": "string", "maxLength": 3}}}),
            json!({"name": "abc"}),
            json!({"name": "abcd"}),
            one(
                "spec.name",
                "FieldValueTooLong",
                "Too long: may not be more than 3 bytes",
            ),
        ),
        (
            json!({"type": "object", "properties": {"tags": {"type": "array", "items": {"type": "string"}, "maxItems": 2}}}),
            json!({"tags": ["a", "b"]}),
            json!({"tags": ["a", "b", "c"]}),
            one(
                "spec.tags",
                "FieldValueTooMany",
                "Too many: 3: must have at most 2 items",
            ),
        ),
        (
            json!({"type": "object", "properties": {"tags": {"type": "array", "items": {"type": "string"}, "x-kubernetes-list-type": "set"}}}),
            json!({"tags": ["a", "b"]}),
            json!({"tags": ["a", "a"]}),
            one(
                "spec.tags[1]",
                "FieldValueDuplicate",
                "Duplicate value: \"a\"",
            ),
        ),
        (
            json!({"type": "object", "properties": {"ports": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"],
                   "items": {"type": "object", "properties": {"name": {"type": "string"}, "port": {"type": "integer"}}}}}}),
            json!({"ports": [{"name": "a", "port": 1}, {"name": "b", "port": 1}]}),
            json!({"ports": [{"name": "a", "port": 1}, {"name": "a", "port": 2}]}),
            one(
                "spec.ports[1]",
                "FieldValueDuplicate",
                "Duplicate value: {\"name\":\"a\"}",
            ),
        ),
        (
            json!({"type": "object", "required": ["size"], "properties": {"size": {"type": "integer"}}}),
            json!({"size": 1}),
            json!({}),
            one("spec.size", "FieldValueRequired", "Required value"),
        ),
        (
            json!({"type": "object", "properties": {"port": {"x-kubernetes-int-or-string": true}}}),
            json!({"port": "http"}),
            json!({"port": true}),
            one(
                "spec.port",
                "FieldValueTypeInvalid",
                "Invalid value: true: spec.port in body must be of type integer-or-string: boolean",
            ),
        ),
        (
            json!({"type": "object", "properties": {"at": {"type": "string", "format": "date-time"}}}),
            json!({"at": "2024-01-02T03:04:05Z"}),
            json!({"at": "yesterday"}),
            one(
                "spec.at",
                "FieldValueTypeInvalid",
                "Invalid value: \"yesterday\": spec.at in body must be of type date-time: \"yesterday\"",
            ),
        ),
        (
            json!({"type": "object", "properties": {"ip": {"type": "string", "format": "ipv4"}}}),
            json!({"ip": "10.0.0.1"}),
            json!({"ip": "10.0.0.256"}),
            one(
                "spec.ip",
                "FieldValueTypeInvalid",
                "Invalid value: \"10.0.0.256\": spec.ip in body must be of type ipv4: \"10.0.0.256\"",
            ),
        ),
        (
            json!({"type": "object", "properties": {"labels": {"type": "object", "additionalProperties": {"type": "string"}}}}),
            json!({"labels": {"a": "b"}}),
            json!({"labels": {"a": 1}}),
            one(
                "spec.labels.a",
                "FieldValueTypeInvalid",
                "Invalid value: 1: spec.labels.a in body must be of type string: \"integer\"",
            ),
        ),
        (
            json!({"type": "object", "properties": {"v": {"anyOf": [{"type": "integer"}, {"type": "string"}]}}}),
            json!({"v": 1}),
            json!({"v": true}),
            one(
                "spec.v",
                "FieldValueInvalid",
                "Invalid value: true: spec.v in body must match at least one schema in anyOf",
            ),
        ),
        (
            json!({"type": "object", "properties": {"count": {"type": "integer", "format": "int32"}}}),
            json!({"count": 5}),
            json!({"count": 3_000_000_000_u64}),
            one(
                "spec.count",
                "FieldValueTypeInvalid",
                "Invalid value: 3000000000: spec.count in body must be of type int32: 3000000000",
            ),
        ),
    ];
    for (i, (spec, good, bad, expected)) in cases.into_iter().enumerate() {
        let s = schema(spec);
        let found = causes(&s, good.clone());
        assert!(
            found.is_empty(),
            "case {i}: {good} must be valid: {found:?}"
        );
        assert_eq!(causes(&s, bad.clone()), expected, "case {i}: {bad}");
    }
}

#[test]
fn defaults_are_applied_in_objects_lists_and_maps() {
    let s = Schema::compile(&json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {
        "replicas": {"type": "integer", "default": 1},
        "nested": {"type": "object", "default": {}, "properties": {"mode": {"type": "string", "default": "fast"}}},
        "items": {"type": "array", "items": {"type": "object", "properties": {"weight": {"type": "integer", "default": 10}}}},
        "byName": {"type": "object", "additionalProperties": {"type": "object", "properties": {"on": {"type": "boolean", "default": true}}}},
    }}}}))
    .unwrap();
    let mut object = json!({"spec": {"items": [{}, {"weight": 3}], "byName": {"a": {}}}});
    s.apply_defaults(&mut object);
    assert_eq!(
        object["spec"],
        json!({"replicas": 1, "nested": {"mode": "fast"}, "items": [{"weight": 10}, {"weight": 3}], "byName": {"a": {"on": true}}})
    );
}

#[test]
fn unknown_fields_are_pruned_unless_preserved() {
    let s = Schema::compile(&json!({"type": "object", "properties": {
        "spec": {"type": "object", "properties": {"a": {"type": "string"},
                 "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                 "embedded": {"type": "object", "x-kubernetes-embedded-resource": true, "properties": {"spec": {"type": "object"}}}}},
    }}))
    .unwrap();
    let mut object = json!({"apiVersion": "x/v1", "kind": "X", "metadata": {"name": "n"}, "extra": 1,
        "spec": {"a": "x", "b": 2, "free": {"anything": [1]}, "embedded": {"apiVersion": "v1", "kind": "Pod", "metadata": {}, "junk": 1}}});
    let mut pruned = s.prune(&mut object);
    pruned.sort();
    assert_eq!(pruned, ["extra", "spec.b", "spec.embedded.junk"]);
    assert_eq!(object["spec"]["free"], json!({"anything": [1]}));
    assert_eq!(object["metadata"], json!({"name": "n"}));
    assert_eq!(object["spec"]["embedded"]["kind"], "Pod");
}

#[test]
fn bad_schemas_do_not_compile() {
    assert!(Schema::compile(&json!({"type": "objekt"})).is_err());
    assert!(
        Schema::compile(
            &json!({"type": "object", "properties": {"a": {"type": "string", "pattern": "("}}})
        )
        .is_err()
    );
    assert!(Schema::compile(&json!("nope")).is_err());
}

#[test]
fn every_shared_crd_schema_compiles() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/crds");
    let Ok(entries) = std::fs::read_dir(&dir) else {
        panic!("{} is missing", dir.display())
    };
    let mut compiled = 0;
    for entry in entries
        .filter_map(Result::ok)
        .filter(|e| e.path().extension().is_some_and(|x| x == "yaml"))
    {
        let text = std::fs::read_to_string(entry.path()).unwrap();
        for document in text.split("\n---") {
            let Ok(crd) = serde_norway::from_str::<Value>(document) else {
                continue;
            };
            for version in crd
                .pointer("/spec/versions")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                if let Some(schema) = version.pointer("/schema/openAPIV3Schema") {
                    let structural = crate::structural_errors(schema);
                    assert!(
                        structural.is_empty(),
                        "{}: {structural:?}",
                        entry.path().display()
                    );
                    Schema::compile(schema)
                        .unwrap_or_else(|e| panic!("{}: {e}", entry.path().display()));
                    compiled += 1;
                }
            }
        }
    }
    assert!(compiled >= 11, "compiled {compiled} schemas");
}

/// CEL rules (`x-kubernetes-validations`): messages, reasons, field paths, transition rules,
/// the Kubernetes string/list extensions, compile errors and the cost budget.
#[test]
fn cel_rule_table() {
    let rules = |rules: Value| {
        json!({"type": "object",
               "properties": {"replicas": {"type": "integer"}, "max": {"type": "integer"},
                              "name": {"type": "string", "maxLength": 64},
                              "tags": {"type": "array", "maxItems": 10,
                                       "items": {"type": "string", "maxLength": 32}}},
               "x-kubernetes-validations": rules})
    };
    let cases: Vec<Case> = vec![
        (
            rules(json!([{"rule": "self.replicas <= self.max"}])),
            json!({"replicas": 1, "max": 3}),
            json!({"replicas": 5, "max": 3}),
            one(
                "spec",
                "FieldValueInvalid",
                "Invalid value: \"object\": failed rule: self.replicas <= self.max",
            ),
        ),
        (
            rules(
                json!([{"rule": "self.replicas <= self.max", "message": "replicas must not exceed max"}]),
            ),
            json!({"replicas": 3, "max": 3}),
            json!({"replicas": 4, "max": 3}),
            one(
                "spec",
                "FieldValueInvalid",
                "Invalid value: \"object\": replicas must not exceed max",
            ),
        ),
        (
            rules(json!([{"rule": "self.replicas <= self.max",
                          "messageExpression": "'replicas ' + string(self.replicas) + ' above ' + string(self.max)",
                          "reason": "FieldValueForbidden", "fieldPath": ".replicas"}])),
            json!({"replicas": 3, "max": 3}),
            json!({"replicas": 9, "max": 3}),
            one(
                "spec.replicas",
                "FieldValueForbidden",
                "Forbidden: replicas 9 above 3",
            ),
        ),
        (
            rules(
                json!([{"rule": "self.name.lowerAscii().startsWith('web-') && self.tags.all(t, t.matches('^[a-z]+$'))"}]),
            ),
            json!({"name": "WEB-1", "tags": ["a", "b"]}),
            json!({"name": "WEB-1", "tags": ["a", "B"]}),
            one(
                "spec",
                "FieldValueInvalid",
                "Invalid value: \"object\": failed rule: self.name.lowerAscii().startsWith('web-') && self.tags.all(t, t.matches('^[a-z]+$'))",
            ),
        ),
        (
            rules(
                json!([{"rule": "has(self.name) || self.replicas == 0", "reason": "FieldValueRequired", "message": "name is needed", "fieldPath": ".name"}]),
            ),
            json!({"replicas": 0}),
            json!({"replicas": 2}),
            one(
                "spec.name",
                "FieldValueRequired",
                "Required value: name is needed",
            ),
        ),
        (
            rules(json!([{"rule": "self.tags.size() == 0 || self.tags[0] != ''"}])),
            json!({"tags": ["x"]}),
            json!({"tags": [""]}),
            one(
                "spec",
                "FieldValueInvalid",
                "Invalid value: \"object\": failed rule: self.tags.size() == 0 || self.tags[0] != ''",
            ),
        ),
        (
            rules(json!([{"rule": "self.name.size() > 100"}])),
            json!({}),
            json!({}),
            // A runtime error is reported for every object; the valid instance is the same one.
            Vec::new(),
        ),
    ];
    for (i, (spec_schema, good, bad, expected)) in cases.into_iter().enumerate() {
        let s = schema(spec_schema);
        if expected.is_empty() {
            let found = causes(&s, good);
            assert_eq!(found.len(), 1, "case {i}: {found:?}");
            assert!(
                found[0]
                    .2
                    .contains("no such key: name evaluating rule: self.name.size() > 100"),
                "case {i}: {found:?}"
            );
            continue;
        }
        assert_eq!(causes(&s, good), Vec::new(), "case {i}: the valid instance");
        assert_eq!(causes(&s, bad), expected, "case {i}");
    }
}

#[test]
fn cel_transition_rules_compare_with_the_stored_object() {
    let s = schema(json!({"type": "object",
        "properties": {"mode": {"type": "string", "maxLength": 16,
            "x-kubernetes-validations": [{"rule": "self == oldSelf", "message": "mode is immutable"}]},
            "items": {"type": "array", "maxItems": 8, "x-kubernetes-list-type": "map",
                      "x-kubernetes-list-map-keys": ["name"],
                      "items": {"type": "object", "properties": {
                          "name": {"type": "string", "maxLength": 16},
                          "size": {"type": "integer",
                                   "x-kubernetes-validations": [{"rule": "self >= oldSelf", "message": "may only grow"}]}}}}},
        "x-kubernetes-validations": [{"rule": "!oldSelf.hasValue() || !has(oldSelf.value().mode) || has(self.mode)",
                                      "optionalOldSelf": true, "message": "mode may not be removed"}]}));
    let old = json!({"spec": {"mode": "fast", "items": [{"name": "a", "size": 2}]}});
    // Creates run no transition rule.
    assert!(s.validate(&json!({"spec": {"mode": "slow"}})).is_empty());
    let found = |new: Value| -> Vec<String> {
        s.validate_update(&new, Some(&old))
            .into_iter()
            .map(|c| c.line())
            .collect()
    };
    assert!(found(old.clone()).is_empty());
    assert_eq!(
        found(json!({"spec": {"mode": "slow", "items": [{"name": "a", "size": 2}]}})),
        ["spec.mode: Invalid value: \"string\": mode is immutable"]
    );
    // Items correlate by key: a new item has no old self; a shrunk one fails.
    assert_eq!(
        found(
            json!({"spec": {"mode": "fast", "items": [{"name": "b", "size": 1}, {"name": "a", "size": 1}]}})
        ),
        ["spec.items[1].size: Invalid value: \"integer\": may only grow"]
    );
    assert_eq!(
        found(json!({"spec": {"items": [{"name": "a", "size": 2}]}})),
        ["spec: Invalid value: \"object\": mode may not be removed"]
    );
}

#[test]
fn cel_rules_that_cannot_compile_or_cost_too_much_are_refused() {
    let compile = |spec: Value| {
        Schema::compile(&json!({"type": "object", "properties": {"spec": spec}})).map(drop)
    };
    let error =
        compile(json!({"type": "object", "x-kubernetes-validations": [{"rule": "self.a +"}]}))
            .unwrap_err();
    assert_eq!(
        error.path,
        "openAPIV3Schema.properties[spec].x-kubernetes-validations[0].rule"
    );
    assert!(
        error
            .reason
            .starts_with("compilation failed: ERROR: <input>:1:9: Syntax error"),
        "{}",
        error.reason
    );
    let cause = error.cause("spec.validation");
    assert!(
        cause.message.starts_with(
            "Invalid value: apiextensions.ValidationRule{Rule:\"self.a +\", Message:\"\""
        ),
        "{}",
        cause.message
    );
    let error = compile(
        json!({"type": "object", "x-kubernetes-validations": [{"rule": "true", "reason": "Nope"}]}),
    )
    .unwrap_err();
    assert_eq!(
        error.cause("spec.validation").line(),
        "spec.validation.openAPIV3Schema.properties[spec].x-kubernetes-validations[0].reason: Unsupported value: \"Nope\": supported values: \"FieldValueDuplicate\", \"FieldValueForbidden\", \"FieldValueInvalid\", \"FieldValueRequired\""
    );
    // Type errors, as cel-go's checker finds them.
    let typed = |rule: &str| {
        compile(
            json!({"type": "object", "properties": {"replicas": {"type": "integer"}, "name": {"type": "string"}},
                       "x-kubernetes-validations": [{"rule": rule}]}),
        )
    };
    let error = typed("self.replicas > 'a'").unwrap_err();
    assert_eq!(
        error.reason,
        "compilation failed: ERROR: <input>:1:15: found no matching overload for '_>_' applied to '(int, string)'\n | self.replicas > 'a'\n | ..............^"
    );
    let error = typed("self.replicsa > 1").unwrap_err();
    assert!(
        error
            .reason
            .starts_with("compilation failed: ERROR: <input>:1:5: undefined field 'replicsa'"),
        "{}",
        error.reason
    );
    assert!(
        typed("self.replicas > 1.5 && self.name + 'x' != '' && (self.replicas + 1) % 2 == 0")
            .is_ok()
    );
    let error = compile(
        json!({"type": "object", "x-kubernetes-validations": [{"rule": "size(nope) > 0"}]}),
    )
    .unwrap_err();
    assert!(
        error.reason.contains("undeclared reference to 'nope'"),
        "{}",
        error.reason
    );
    let error = compile(json!({"type": "object", "x-kubernetes-validations": [{"rule": "self.a == 1", "optionalOldSelf": true}]})).unwrap_err();
    assert_eq!(
        error.reason,
        "may not be set if oldSelf is not used in rule"
    );
    // An unbounded list of unbounded strings, each matched against a regex: far too costly.
    let costly = json!({"type": "object", "properties": {"names": {"type": "array", "items": {"type": "string"}}},
                        "x-kubernetes-validations": [{"rule": "self.names.all(n, n.matches('^[a-z]+$'))"}]});
    let error = compile(costly).unwrap_err();
    assert_eq!(
        error.cause("spec.validation").line(),
        "spec.validation.openAPIV3Schema.properties[spec].x-kubernetes-validations[0].rule: Forbidden: estimated rule cost exceeds budget by factor of more than 100x (try simplifying the rule, or adding maxItems, maxProperties, and maxLength where arrays, maps, and strings are declared)"
    );
    // The same rule with declared bounds fits.
    let bounded = json!({"type": "object", "properties": {"names": {"type": "array", "maxItems": 100,
                             "items": {"type": "string", "maxLength": 64}}},
                         "x-kubernetes-validations": [{"rule": "self.names.all(n, n.matches('^[a-z]+$'))"}]});
    assert!(compile(bounded).is_ok());
    // Presence tests, logical operators and constants add nothing (kube sets cel-go's
    // `PresenceTestHasCost(false)`): kyverno's GeneratingPolicy rule on each item of an
    // unbounded list of objects (at most 1,048,576 runs: the request over the smallest item and a comma) costs 6 a run, 6.3M in all,
    // and fits.
    let presence = json!({"type": "object", "properties": {"generate": {"type": "array", "items": {
        "type": "object",
        "properties": {"expression": {"type": "string"}, "template": {"type": "object"}},
        "x-kubernetes-validations": [{"rule": "(has(self.expression) && !has(self.template)) || (!has(self.expression) && has(self.template))"}]}}}});
    assert!(compile(presence).is_ok());
    // Twice the work per item (a second pair of tests) is over the budget, by kube's factor.
    let twice = json!({"type": "object", "properties": {"generate": {"type": "array", "items": {
        "type": "object",
        "properties": {"a": {"type": "string"}, "b": {"type": "string"}, "c": {"type": "string"}, "d": {"type": "string"}},
        "x-kubernetes-validations": [{"rule": "(has(self.a) && !has(self.b)) || (!has(self.a) && has(self.b)) || (has(self.c) && !has(self.d)) || (!has(self.c) && has(self.d))"}]}}}});
    let error = compile(twice).unwrap_err();
    assert!(
        error
            .reason
            .contains("estimated rule cost exceeds budget by factor of 1.258291x"),
        "{}",
        error.reason
    );
}

/// CRD-level rules: a schema must be structural and its extensions consistent; every
/// violation is reported with kube's path and wording.
#[test]
fn structural_rules_report_every_violation() {
    let errors = crate::structural_errors(&json!({
        "type": "object",
        "properties": {
            "metadata": {"type": "object", "properties": {"labels": {"type": "object"}}},
            "spec": {"type": "object",
                     "properties": {
                         "untyped": {"description": "no type"},
                         "list": {"type": "array"},
                         "both": {"type": "object", "properties": {"a": {"type": "string"}},
                                  "additionalProperties": {"type": "string"}},
                         "ports": {"type": "array", "x-kubernetes-list-type": "map",
                                   "x-kubernetes-list-map-keys": ["port", "missing"],
                                   "items": {"type": "object", "properties": {"port": {"type": "integer"}}}},
                         "keyed": {"type": "array", "x-kubernetes-list-map-keys": ["name"],
                                   "items": {"type": "object", "properties": {"name": {"type": "string"}}}},
                         "kept": {"type": "object", "x-kubernetes-preserve-unknown-fields": false},
                         "intOrString": {"x-kubernetes-int-or-string": true, "x-kubernetes-preserve-unknown-fields": true},
                         "typedIntOrString": {"type": "string", "x-kubernetes-int-or-string": true},
                         "embedded": {"type": "string", "x-kubernetes-embedded-resource": true}}}}
    }));
    let lines: Vec<String> = errors
        .iter()
        .map(|e| e.cause("spec.validation").line())
        .collect();
    let expected = [
        "spec.validation.openAPIV3Schema.properties[metadata]: Forbidden: must not specify anything other than name and generateName, but metadata is implicitly specified",
        "spec.validation.openAPIV3Schema.properties[spec].properties[both].additionalProperties: Forbidden: additionalProperties and properties are mutual exclusive",
        "spec.validation.openAPIV3Schema.properties[spec].properties[embedded].properties: Required value: must not be empty if x-kubernetes-embedded-resource is true without x-kubernetes-preserve-unknown-fields",
        "spec.validation.openAPIV3Schema.properties[spec].properties[embedded].type: Invalid value: \"string\": must be object if x-kubernetes-embedded-resource is true",
        "spec.validation.openAPIV3Schema.properties[spec].properties[intOrString].x-kubernetes-preserve-unknown-fields: Invalid value: true: must be false if x-kubernetes-int-or-string is true",
        "spec.validation.openAPIV3Schema.properties[spec].properties[kept].x-kubernetes-preserve-unknown-fields: Invalid value: false: must be true or undefined",
        "spec.validation.openAPIV3Schema.properties[spec].properties[keyed].x-kubernetes-list-type: Required value: must be map if x-kubernetes-list-map-keys is non-empty",
        "spec.validation.openAPIV3Schema.properties[spec].properties[list].items: Required value: must be specified",
        "spec.validation.openAPIV3Schema.properties[spec].properties[ports].x-kubernetes-list-map-keys: Invalid value: []string{\"port\", \"missing\"}: entries must all be names of item properties",
        "spec.validation.openAPIV3Schema.properties[spec].properties[untyped].type: Required value: must not be empty for specified object fields",
    ];
    let mut lines = lines;
    lines.sort();
    assert_eq!(lines, expected);
    assert!(
        crate::structural_errors(&json!({"type": "object", "properties": {
        "metadata": {"type": "object", "properties": {"name": {"type": "string", "maxLength": 20}}},
        "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}))
        .is_empty()
    );
}

/// Kubernetes' CEL libraries as CRDs use them.
#[test]
fn cel_kubernetes_libraries() {
    assert_eq!(crate::cel::extension_failures(), &[] as &[String]);
    let s = schema(json!({"type": "object", "properties": {
        "endpoint": {"type": "string", "maxLength": 256,
                     "x-kubernetes-validations": [
                         {"rule": "isURL(self) && url(self).getScheme() in ['http', 'https']", "message": "must be an http(s) URL"},
                         {"rule": "!isURL(self) || url(self).getHostname() != 'localhost'", "message": "must not be local"}]},
        "memory": {"type": "string", "maxLength": 32,
                   "x-kubernetes-validations": [
                       {"rule": "isQuantity(self) && quantity(self).isLessThan(quantity('4Gi'))", "message": "must be a quantity below 4Gi"}]},
        "image": {"type": "string", "maxLength": 128,
                  "x-kubernetes-validations": [
                      {"rule": "self.find('[0-9]+$') != '' && self.findAll('[a-z]+').size() >= 1", "message": "must end in a version"},
                      {"rule": "self.lowerAscii() == self && self.split(':').size() == 2", "message": "must be name:tag"}]},
        "sizes": {"type": "array", "maxItems": 16, "items": {"type": "integer"},
                  "x-kubernetes-validations": [{"rule": "self.sort() == self && self.distinct().size() == self.size()", "message": "must be sorted and distinct"},
                                               {"rule": "self.isSorted() && self.sum() <= 20 && (self.size() == 0 || self.max() <= 10 && self.min() >= 1) && self.indexOf(99) == -1", "message": "k8s list functions"}]},
        "host": {"type": "string", "maxLength": 63,
                 "x-kubernetes-validations": [{"rule": "!format.dns1123Label().validate(self).hasValue()",
                                               "messageExpression": "format.dns1123Label().validate(self).value().join(', ')"}]}}}));
    let ok = json!({"endpoint": "https://api.example.com:8443/v1", "memory": "512Mi",
                    "image": "redis:7", "sizes": [1, 2, 8], "host": "web-1"});
    assert_eq!(causes(&s, ok), Vec::new());
    let bad = json!({"endpoint": "http://localhost:80/x", "memory": "8Gi",
                     "image": "Redis:latest", "sizes": [4, 2, 2], "host": "Web_1"});
    let messages: Vec<String> = causes(&s, bad)
        .into_iter()
        .map(|(f, _, m)| format!("{f}: {m}"))
        .collect();
    assert_eq!(
        messages,
        [
            "spec.endpoint: Invalid value: \"string\": must not be local",
            "spec.host: Invalid value: \"string\": a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')",
            "spec.image: Invalid value: \"string\": must end in a version",
            "spec.image: Invalid value: \"string\": must be name:tag",
            "spec.memory: Invalid value: \"string\": must be a quantity below 4Gi",
            "spec.sizes: Invalid value: \"array\": must be sorted and distinct",
            "spec.sizes: Invalid value: \"array\": k8s list functions",
        ]
    );
    let not_url = causes(&s, json!({"endpoint": "not a url"}));
    assert_eq!(
        not_url[0].2,
        "Invalid value: \"string\": must be an http(s) URL"
    );
}

/// Embedded resources (`x-kubernetes-embedded-resource`) carry a kind, an apiVersion and valid
/// metadata.
#[test]
fn embedded_resources_are_validated_like_objects() {
    let s = schema(json!({"type": "object", "properties": {"template": {
        "type": "object", "x-kubernetes-embedded-resource": true,
        "x-kubernetes-preserve-unknown-fields": true}}}));
    let ok = json!({"template": {"apiVersion": "v1", "kind": "ConfigMap",
                                 "metadata": {"name": "x", "labels": {"app": "web"}}}});
    assert_eq!(causes(&s, ok), Vec::new());
    let bad = json!({"template": {"kind": "Config_Map",
                                  "metadata": {"name": "a/b", "labels": {"bad key!": "x"}}}});
    let lines: Vec<String> = causes(&s, bad)
        .into_iter()
        .map(|(f, _, m)| format!("{f}: {m}"))
        .collect();
    assert_eq!(lines.len(), 4, "{lines:?}");
    assert!(
        lines.contains(&"spec.template.apiVersion: Required value: must not be empty".to_owned()),
        "{lines:?}"
    );
    assert!(lines.iter().any(|l| l.starts_with("spec.template.kind: Invalid value: \"Config_Map\": may have mixed case, but should otherwise match: a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character")), "{lines:?}");
    assert!(
        lines.contains(
            &"spec.template.metadata.name: Invalid value: \"a/b\": may not contain '/'".to_owned()
        ),
        "{lines:?}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("spec.template.metadata.labels: Invalid value: \"bad key!\"")),
        "{lines:?}"
    );
}

#[test]
fn property_names_are_escaped_for_cel_as_kube_escapes_them() {
    use crate::cel::names::{escape, unescape};
    for (name, escaped) in [
        ("namespace", Some("__namespace__")),
        ("if", Some("__if__")),
        ("foo-bar", Some("foo__dash__bar")),
        ("a.b/c", Some("a__dot__b__slash__c")),
        ("x__y", Some("x__underscores__y")),
        ("_x", Some("_x")),
        ("plain", Some("plain")),
        ("1st", None),
        ("a b", None),
        ("", None),
    ] {
        assert_eq!(escape(name).as_deref(), escaped, "{name}");
        if let Some(escaped) = escaped {
            assert_eq!(unescape(escaped), name);
        }
    }
    let schema = Schema::compile(&json!({"type": "object", "properties": {"spec": {
        "type": "object",
        "properties": {"namespace": {"type": "string"}, "max-size": {"type": "integer"},
                       "labels": {"type": "object", "additionalProperties": {"type": "string"}}},
        "x-kubernetes-validations": [
            {"rule": "!has(self.__namespace__) || self.__namespace__ != 'kube-system'", "message": "not kube-system"},
            {"rule": "!has(self.max__dash__size) || self.max__dash__size <= 10", "message": "at most 10"},
            {"rule": "!has(self.labels) || !('app-name' in self.labels) || self.labels['app-name'] != ''", "message": "map keys are not escaped"}
        ]}}}))
    .unwrap();
    let messages = |spec: Value| -> Vec<String> {
        schema
            .validate(&json!({"spec": spec}))
            .into_iter()
            .map(|c| c.message)
            .collect()
    };
    assert!(
        messages(json!({"namespace": "apps", "max-size": 3, "labels": {"app-name": "x"}}))
            .is_empty()
    );
    assert_eq!(
        messages(json!({"namespace": "kube-system", "max-size": 11, "labels": {"app-name": ""}})),
        [
            "Invalid value: \"object\": not kube-system",
            "Invalid value: \"object\": at most 10",
            "Invalid value: \"object\": map keys are not escaped"
        ]
    );
    // The unescaped name is not a field.
    let refused = Schema::compile(&json!({"type": "object", "properties": {"spec": {
        "type": "object", "properties": {"max-size": {"type": "integer"}},
        "x-kubernetes-validations": [{"rule": "self.maxsize > 0"}]}}}));
    assert!(
        refused
            .unwrap_err()
            .reason
            .contains("undefined field 'maxsize'")
    );
}

#[test]
fn preserving_and_int_or_string_nodes_need_no_type() {
    let schema = json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {
        "anything": {"x-kubernetes-preserve-unknown-fields": true},
        "list": {"type": "array", "items": {"x-kubernetes-preserve-unknown-fields": true}},
        "port": {"x-kubernetes-int-or-string": true},
        "untyped": {"description": "no type, nothing preserved"}}}}});
    let found: Vec<String> = crate::structural_errors(&schema)
        .iter()
        .map(|e| e.cause("spec.validation").line())
        .collect();
    assert_eq!(
        found,
        [
            "spec.validation.openAPIV3Schema.properties[spec].properties[untyped].type: Required value: must not be empty for specified object fields"
        ]
    );
}

#[test]
fn has_tests_are_booleans_not_strings_in_the_cost_estimate() {
    // kube accepts this over a 50-item list; costing `has(x.a)` as an unbounded string did not.
    let schema = json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {
        "items": {"type": "array", "maxItems": 50, "items": {"type": "object", "properties": {
            "a": {"type": "string"}, "b": {"type": "string"}}}}},
        "x-kubernetes-validations": [{"rule": "self.items.all(x, has(x.a) == has(x.b))"},
                                     {"rule": "[has(self.items), true].filter(x, x).size() >= 1"}]}}});
    let compiled = Schema::compile(&schema).unwrap();
    assert!(
        compiled
            .validate(&json!({"spec": {"items": [{"a": "1", "b": "2"}]}}))
            .is_empty()
    );
    assert_eq!(
        compiled.validate(&json!({"spec": {"items": [{"a": "1"}]}}))[0].message,
        "Invalid value: \"object\": failed rule: self.items.all(x, has(x.a) == has(x.b))"
    );
}

#[test]
fn durations_timestamps_ips_and_cidrs_work_and_unknown_functions_are_refused() {
    let rules = |rule: &str| {
        Schema::compile(
            &json!({"type": "object", "properties": {"spec": {"type": "object",
            "properties": {"t": {"type": "string"}, "d": {"type": "string"}, "ip": {"type": "string"}},
            "x-kubernetes-validations": [{"rule": rule}]}}}),
        )
    };
    for (rule, spec, ok) in [
        (
            "duration(self.d) <= duration('1h')",
            json!({"d": "30m"}),
            true,
        ),
        (
            "duration(self.d) <= duration('1h')",
            json!({"d": "2h"}),
            false,
        ),
        (
            "timestamp(self.t) > timestamp('2020-01-01T00:00:00Z')",
            json!({"t": "2024-01-01T00:00:00Z"}),
            true,
        ),
        (
            "timestamp(self.t) > timestamp('2020-01-01T00:00:00Z')",
            json!({"t": "2019-01-01T00:00:00Z"}),
            false,
        ),
        (
            "isIP(self.ip) && ip(self.ip).family() == 4",
            json!({"ip": "10.0.0.1"}),
            true,
        ),
        ("isIP(self.ip)", json!({"ip": "10.0.0.300"}), false),
        (
            "cidr('10.0.0.0/8').containsIP(self.ip)",
            json!({"ip": "10.1.2.3"}),
            true,
        ),
        (
            "cidr('10.0.0.0/8').containsIP(self.ip)",
            json!({"ip": "11.1.2.3"}),
            false,
        ),
        (
            "isCIDR(self.ip) && cidr(self.ip).prefixLength() == 24 && cidr(self.ip).masked() == '192.168.1.0/24'",
            json!({"ip": "192.168.1.7/24"}),
            true,
        ),
        (
            "!ip(self.ip).isLoopback() && ip(self.ip).isGlobalUnicast()",
            json!({"ip": "2001:db8::1"}),
            true,
        ),
        (
            "ip.isCanonical(self.ip)",
            json!({"ip": "2001:db8:0:0:0:0:0:1"}),
            false,
        ),
    ] {
        let schema = rules(rule).unwrap_or_else(|e| panic!("{rule}: {e}"));
        assert_eq!(
            schema.validate(&json!({"spec": spec})).is_empty(),
            ok,
            "{rule} on {spec}"
        );
    }
    let refused = rules("isFancy(self.ip)").unwrap_err();
    assert!(
        refused
            .reason
            .contains("undeclared reference to 'isFancy' (in container '')"),
        "{}",
        refused.reason
    );
}

#[test]
fn an_embedded_objects_metadata_is_kept_as_object_meta() {
    // A schema that declares `metadata: {type: object}` (as generated CRDs do) still keeps the
    // embedded object's name and labels, and drops what ObjectMeta does not have.
    let schema = Schema::compile(&json!({"type": "object", "properties": {"spec": {"type": "object",
        "properties": {"template": {"type": "object", "x-kubernetes-embedded-resource": true,
            "properties": {"apiVersion": {"type": "string"}, "kind": {"type": "string"},
                           "metadata": {"type": "object"},
                           "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}}}}}))
    .unwrap();
    let mut object = json!({"spec": {"template": {"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "web", "labels": {"app": "web"}, "bogus": 1},
        "spec": {"containers": []}}}});
    let pruned = schema.prune(&mut object);
    assert_eq!(pruned, ["spec.template.metadata.bogus"]);
    assert_eq!(
        object["spec"]["template"]["metadata"],
        json!({"name": "web", "labels": {"app": "web"}})
    );
    assert!(schema.validate(&object).is_empty());
    object["spec"]["template"]["metadata"]["name"] = json!("a/b");
    assert!(
        schema.validate(&object)[0]
            .field
            .starts_with("spec.template.metadata.name")
    );
}

/// Strings declared `format: duration`, `date-time`, `date` and `byte` are typed in CEL as kube
/// types them: durations compare as durations (`1m` < `90s` is false as text, true as time),
/// timestamps as instants whatever their offset, with duration and timestamp arithmetic,
/// their accessors, and kube's overload errors when a rule mixes them with strings.
#[test]
fn cel_types_formatted_strings_as_durations_and_timestamps() {
    let typed = |rule: &str| {
        schema(json!({"type": "object",
            "properties": {
                "timeout": {"type": "string", "format": "duration"},
                "interval": {"type": "string", "format": "duration"},
                "start": {"type": "string", "format": "date-time"},
                "end": {"type": "string", "format": "date-time"},
                "day": {"type": "string", "format": "date"},
                "key": {"type": "string", "format": "byte"},
                "plain": {"type": "string"}},
            "x-kubernetes-validations": [{"rule": rule,
                "messageExpression": "'timeout ' + string(self.timeout) + ' against ' + string(self.interval)"}]}))
    };
    let failed = |timeout: &str, interval: &str| {
        one(
            "spec",
            "FieldValueInvalid",
            &format!("Invalid value: \"object\": timeout {timeout} against {interval}"),
        )
    };
    // (rule, valid spec, invalid spec, message of the invalid one)
    let cases: Vec<(&str, Value, Value, Found)> = vec![
        (
            "self.timeout <= self.interval",
            json!({"timeout": "30s", "interval": "1m"}),
            json!({"timeout": "2m", "interval": "90s"}),
            failed("120s", "90s"),
        ),
        (
            "self.timeout < duration('1h') && self.timeout + self.interval > duration('1m')",
            json!({"timeout": "45s", "interval": "1m30s"}),
            json!({"timeout": "2h", "interval": "1s"}),
            failed("7200s", "1s"),
        ),
        (
            "self.start < self.end && self.end - self.start >= self.interval",
            // The same instant written with another offset is still later than the start.
            json!({"timeout": "1s", "interval": "1h", "start": "2026-12-03T10:00:00Z", "end": "2026-12-03T13:00:00+02:00"}),
            json!({"timeout": "1s", "interval": "2h", "start": "2026-12-03T10:00:00Z", "end": "2026-12-03T12:30:00+01:00"}),
            failed("1s", "7200s"),
        ),
        (
            "self.start + self.interval > timestamp('2026-12-03T10:30:00Z') && self.start.getHours() == 10",
            json!({"timeout": "1s", "interval": "45m", "start": "2026-12-03T10:00:00Z"}),
            json!({"timeout": "1s", "interval": "15m", "start": "2026-12-03T10:00:00Z"}),
            failed("1s", "900s"),
        ),
        (
            "self.day < timestamp('2027-01-01T00:00:00Z') && size(self.key) == 3",
            json!({"timeout": "1s", "interval": "1s", "day": "2026-12-31", "key": "YWJj"}),
            json!({"timeout": "1s", "interval": "1s", "day": "2027-01-01", "key": "YWJj"}),
            failed("1s", "1s"),
        ),
    ];
    for (i, (rule, good, bad, expected)) in cases.into_iter().enumerate() {
        let s = typed(rule);
        assert_eq!(causes(&s, good), Vec::new(), "case {i}: the valid instance");
        assert_eq!(causes(&s, bad), expected, "case {i}");
    }
    // Mixed with strings, kube's checker finds no overload.
    let errors = Schema::compile(&json!({"type": "object", "properties": {"spec": {"type": "object",
        "properties": {"timeout": {"type": "string", "format": "duration"}, "plain": {"type": "string"}},
        "x-kubernetes-validations": [{"rule": "self.timeout == self.plain"}]}}}))
    .err()
    .unwrap();
    assert!(
        errors.reason.contains(
            "found no matching overload for '_==_' applied to '(google.protobuf.Duration, string)'"
        ),
        "{errors:?}"
    );
}
