//! Resource quantities (`100m`, `1.5Gi`, `2e3`), as strings and as JSON values.
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::Value;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = plinth_core::quantity::parse(text);
        let value = Value::String(text.to_owned());
        let _ = plinth_core::quantity::millis(&value);
        let _ = plinth_core::quantity::bytes(&value);
    }
});
