//! PATCH bodies applied to an object: JSON patch, merge patch and strategic merge patch
//! (ObjectMeta's lists and a pod-like keyed list). The input is `kind byte, target JSON,
//! 0 byte, patch JSON`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use plinth_core::smp::{ListMerge, OBJECT_META};
use serde_json::Value;

const LISTS: [(&str, ListMerge); 4] = [
    OBJECT_META[0],
    OBJECT_META[1],
    ("spec.containers", ListMerge::Keyed("name")),
    ("spec.containers.ports", ListMerge::Keyed("containerPort")),
];

fuzz_target!(|data: &[u8]| {
    let Some((&kind, rest)) = data.split_first() else {
        return;
    };
    let (target, patch) = match rest.iter().position(|b| *b == 0) {
        Some(at) => (&rest[..at], &rest[at + 1..]),
        None => (&b"{}"[..], rest),
    };
    let Ok(mut target) = serde_json::from_slice::<Value>(target) else {
        return;
    };
    let Ok(patch) = serde_json::from_slice::<Value>(patch) else {
        return;
    };
    match kind % 3 {
        0 => {
            if let Ok(ops) = serde_json::from_value::<json_patch::Patch>(patch) {
                let _ = json_patch::patch(&mut target, &ops);
            }
        }
        1 => json_patch::merge(&mut target, &patch),
        _ => {
            let _ = plinth_core::smp::apply(&mut target, &patch, &LISTS);
        }
    }
});
