//! Server-side apply: a live object with its `managedFields` (decoded as the server reads
//! them) and an applied configuration, merged with conflicts found or forced. The input is
//! `flags byte, live JSON, 0 byte, config JSON`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use plinth_core::managed::{self, Element, ListType, Manager, MapType, Operation, Shape};
use serde_json::Value;

/// A pod-like shape: `containers` keyed by name, `finalizers` a set, labels granular.
struct PodLike;

impl Shape for PodLike {
    fn list_type(&self, path: &[Element]) -> ListType {
        match managed::field_names(path).last().copied() {
            Some("containers") => ListType::Map(vec!["name".into()]),
            Some("finalizers") => ListType::Set,
            _ => ListType::Atomic,
        }
    }

    fn map_type(&self, path: &[Element]) -> MapType {
        match managed::field_names(path).last().copied() {
            Some("labels" | "annotations" | "data") => MapType::Granular,
            Some("config") => MapType::Atomic,
            _ => MapType::Struct,
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&flags, rest)) = data.split_first() else {
        return;
    };
    let Some(at) = rest.iter().position(|b| *b == 0) else {
        return;
    };
    let (Ok(live), Ok(config)) = (
        serde_json::from_slice::<Value>(&rest[..at]),
        serde_json::from_slice::<Value>(&rest[at + 1..]),
    ) else {
        return;
    };
    let Ok(mut entries) = managed::read_entries(&live) else {
        return;
    };
    for entry in &entries {
        let _ = managed::decode(&managed::encode(&entry.fields));
    }
    let me = Manager {
        name: "fuzz".into(),
        operation: Operation::Apply,
        api_version: "v1".into(),
        subresource: String::new(),
        time: "2026-01-01T00:00:00Z".into(),
    };
    let live = (flags & 1 == 0).then_some(&live);
    if let Ok(mut applied) =
        managed::apply(&mut entries, live, &config, &PodLike, &me, flags & 2 != 0)
    {
        managed::write_entries(&mut applied, entries);
    }
});
