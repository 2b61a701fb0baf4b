//! Label and field selectors from query parameters, and label selectors from objects
//! (`matchLabels`/`matchExpressions`), matched against a few labels and fields.
#![no_main]

use std::collections::BTreeMap;

use libfuzzer_sys::fuzz_target;
use plinth_core::selector::{FieldSelector, LabelSelector};

fuzz_target!(|data: &[u8]| {
    let labels = BTreeMap::from([
        ("app".to_owned(), "web".to_owned()),
        ("tier".to_owned(), "front".to_owned()),
    ]);
    if let Ok(text) = std::str::from_utf8(data) {
        if let Ok(selector) = LabelSelector::parse(text) {
            let _ = selector.matches(&labels);
        }
        if let Ok(selector) = FieldSelector::parse(text) {
            let _ =
                selector.matches(|field| (field == "metadata.name").then(|| "web-0".to_owned()));
        }
    }
    if let Ok(object) = serde_json::from_slice::<serde_json::Value>(data)
        && let Ok(selector) = LabelSelector::from_object(&object)
    {
        let _ = selector.matches(&labels);
    }
});
