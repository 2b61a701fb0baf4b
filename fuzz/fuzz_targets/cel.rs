//! CEL: an expression compiled as a CRD rule or a policy's (`self`, `oldSelf`, `object`) and
//! evaluated on a given object.
#![no_main]

use libfuzzer_sys::fuzz_target;
use plinth_schema::Expression;
use serde_json::json;

fuzz_target!(|data: &[u8]| {
    let Ok(source) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(expression) = Expression::compile(source, &["self", "oldSelf", "object"]) else {
        return;
    };
    let object = json!({
        "metadata": {"name": "web", "labels": {"app": "web"}},
        "spec": {"replicas": 3, "image": "nginx:1.27", "ports": [80, 443],
                 "limits": {"cpu": "500m", "memory": "1Gi"}},
    });
    let _ = expression.evaluate(&[("self", &object), ("oldSelf", &object), ("object", &object)]);
});
