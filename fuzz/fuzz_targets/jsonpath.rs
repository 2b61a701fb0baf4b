//! JSONPath as CRD printer columns and selectable fields name it, selected from an object.
#![no_main]

use libfuzzer_sys::fuzz_target;
use plinth_core::jsonpath::JsonPath;
use serde_json::json;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(path) = JsonPath::parse(text) {
        let object = json!({"metadata": {"name": "a", "labels": {"x.y/z": "1"}},
            "spec": {"items": [{"n": 1}, {"n": [2, 3]}], "flag": true}});
        let _ = path.select(&object);
        let _ = path.fields();
    }
});
