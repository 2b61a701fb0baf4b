//! Request bodies as the API server decodes them: JSON (with the strict duplicate-field
//! check) and YAML (with the duplicate-key scan); the first byte picks which.
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::Value;

fuzz_target!(|data: &[u8]| {
    let Some((&which, body)) = data.split_first() else {
        return;
    };
    if which % 2 == 0 {
        let _ = plinth_core::duplicates::duplicate_fields(body);
        let _ = serde_json::from_slice::<Value>(body);
    } else {
        if let Ok(text) = std::str::from_utf8(body) {
            let _ = plinth_core::duplicates::yaml_duplicate_keys(text);
        }
        let _ = serde_norway::from_slice::<Value>(body);
    }
});
