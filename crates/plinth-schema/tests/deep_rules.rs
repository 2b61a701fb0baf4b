//! Rules whose text nests deeply or runs long: the `cel` crate parses, evaluates and drops
//! expressions recursively, so these once overflowed the stack and aborted the process (a
//! property test found sixteen unclosed parentheses). Each is refused with a clear error or
//! compiled and evaluated correctly, here on a thread with a 2 MiB stack like a server's.

#![allow(clippy::unwrap_used)]

use plinth_schema::Schema;
use serde_json::{Value, json};

fn schema(rule: &str) -> Value {
    json!({"type": "object", "properties": {"spec": {
        "type": "object",
        "properties": {"a": {"type": "integer"}},
        "x-kubernetes-validations": [{"rule": rule}]}}})
}

/// Runs `work` on a thread with a 2 MiB stack (a tokio worker's).
fn on_small_stack<T: Send>(work: impl FnOnce() -> T + Send) -> T {
    std::thread::scope(|s| {
        std::thread::Builder::new()
            .stack_size(2 << 20)
            .spawn_scoped(s, work)
            .unwrap()
            .join()
            .unwrap()
    })
}

fn refusal(rule: &str) -> String {
    on_small_stack(|| Schema::compile(&schema(rule)).unwrap_err().reason)
}

#[test]
fn unclosed_and_deep_nesting_is_refused_at_the_parsers_limit() {
    // Sixteen unclosed parentheses are a syntax error (they once overflowed the stack).
    let unclosed = refusal(&"(".repeat(16));
    assert!(
        unclosed.starts_with(
            "compilation failed: ERROR: <input>:1:17: Syntax error: mismatched input '<EOF>'"
        ),
        "{unclosed}"
    );
    for rule in ["(".repeat(10_000), "[".repeat(500), "size(".repeat(200)] {
        let reason = refusal(&rule);
        assert!(
            reason.starts_with("compilation failed: ERROR: <input>:1:")
                && reason.contains(": expression recursion limit exceeded: 96\n | "),
            "{reason}"
        );
    }
    let shallow = format!("{}self.a{} > 0", "(".repeat(90), ")".repeat(90));
    on_small_stack(|| {
        let compiled = Schema::compile(&schema(&shallow)).unwrap();
        assert!(compiled.validate(&json!({"spec": {"a": 1}})).is_empty());
        assert_eq!(compiled.validate(&json!({"spec": {"a": 0}})).len(), 1);
    });
}

#[test]
fn long_operator_chains_compile_and_evaluate_up_to_the_depth_limit() {
    // `self.a + 1 + … + 1 > 996`: a tree 999 deep, evaluated on a stack large enough for it.
    let chain = |terms: usize, bound: usize| format!("self.a{} > {bound}", " + 1".repeat(terms));
    on_small_stack(|| {
        let compiled = Schema::compile(&schema(&chain(996, 996))).unwrap();
        assert!(compiled.validate(&json!({"spec": {"a": 1}})).is_empty());
        let causes = compiled.validate(&json!({"spec": {"a": 0}}));
        assert_eq!(causes.len(), 1, "{causes:?}");
        assert_eq!(causes[0].field, "spec");
        assert!(
            causes[0]
                .message
                .starts_with("Invalid value: \"object\": failed rule: self.a + 1")
        );
        drop(compiled);
    });
    assert_eq!(
        refusal(&chain(1_001, 0)),
        "compilation failed: ERROR: <input>:1:1: expression nesting exceeds the limit: depth 1004, limit 1000"
    );
    let selections = refusal(&format!("self{} == 1", ".a".repeat(5_000)));
    assert!(selections.ends_with("limit 1000"), "{}", &selections[..120]);
    // Logical chains are balanced by the parser: five thousand terms are not deep.
    let conjunction = format!("self.a > 0{}", " && self.a > 0".repeat(5_000));
    on_small_stack(|| {
        let compiled = Schema::compile(&schema(&conjunction)).unwrap();
        assert!(compiled.validate(&json!({"spec": {"a": 1}})).is_empty());
        assert_eq!(compiled.validate(&json!({"spec": {"a": 0}})).len(), 1);
    });
}

#[test]
fn long_rules_are_refused_at_cel_gos_size_limit_and_far_columns_are_reported() {
    assert_eq!(
        refusal(&format!("'{}'", "a".repeat(99_999))),
        "compilation failed: expression code point size exceeds limit: size: 100001, limit 100000"
    );
    // A syntax error past column 65,535 (the `cel` crate's own message formatting panics there).
    let reason = refusal(&format!("'{}' +", "a".repeat(70_000)));
    assert!(
        reason.starts_with("compilation failed: ERROR: <input>:1:7000"),
        "{}",
        &reason[..80]
    );
}
