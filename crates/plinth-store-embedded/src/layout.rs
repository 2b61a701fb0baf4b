//! How the data sits in redb, and the reads every part shares.
//!
//! Three tables:
//! - `revs`: `key ++ 0x00 ++ revision (u64, big-endian)` → `tag (1 put, 0 tombstone) ++ create
//!   revision (i64, big-endian) ++ value`. Every version of every key, sorted by key, then by
//!   revision: the newest version at or before revision R is the last entry of the key's run that
//!   is `<= R`. Keys never contain NUL, so a key's run never interleaves with another key's.
//! - `log`: revision → key. What changed at each revision; watches replay it in order.
//! - `meta`: `format`, `revision` (the last committed), `compacted` (reads below it fail).
//!
//! Worked example (key `a`): `create a=x` at 2 writes `a\0<2> → put,2,x` and `log 2 → a`;
//! `update a=y` at 3 writes `a\0<3> → put,2,y`; `delete a` at 4 writes the tombstone
//! `a\0<4> → del`. A read at 3 finds `a\0<3>` (y); at 4 it finds the tombstone (absent).
//! `compact(4)` removes `a\0<2>` (superseded before 4) and keeps `a\0<3>` (the version just
//! before 4, so the event at 4 still has its previous value) and `a\0<4>`.

use bytes::Bytes;
use plinth_store::{EventKind, KeyValue, Revision, StoreError, StoreResult, WatchEvent};
use redb::{ReadableTable, StorageError, TableDefinition};

pub(crate) const REVS: TableDefinition<'static, &[u8], &[u8]> = TableDefinition::new("revs");
pub(crate) const LOG: TableDefinition<'static, u64, &[u8]> = TableDefinition::new("log");
pub(crate) const META: TableDefinition<'static, &str, u64> = TableDefinition::new("meta");

pub(crate) const META_FORMAT: &str = "format";
pub(crate) const META_REVISION: &str = "revision";
pub(crate) const META_COMPACTED: &str = "compacted";
/// The on-disk format this code reads and writes.
pub(crate) const FORMAT_VERSION: u64 = 1;

const TAG_TOMBSTONE: u8 = 0;
const TAG_PUT: u8 = 1;

/// The `revs` key of `key` at `revision`.
pub(crate) fn version_key(key: &[u8], revision: Revision) -> Vec<u8> {
    let mut out = Vec::with_capacity(key.len() + 9);
    out.extend_from_slice(key);
    out.push(0);
    out.extend_from_slice(&(revision as u64).to_be_bytes());
    out
}

/// Splits a `revs` key into the user key and the revision.
pub(crate) fn split_version_key(raw: &[u8]) -> Option<(&[u8], Revision)> {
    let (key, rest) = raw.split_at_checked(raw.len().checked_sub(9)?)?;
    let (nul, rev) = rest.split_first()?;
    (*nul == 0).then(|| {
        (
            key,
            u64::from_be_bytes(rev.try_into().unwrap_or_default()) as Revision,
        )
    })
}

pub(crate) fn encode_put(create_revision: Revision, value: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(value.len() + 9);
    out.push(TAG_PUT);
    out.extend_from_slice(&create_revision.to_be_bytes());
    out.extend_from_slice(value);
    out
}

pub(crate) fn encode_tombstone() -> Vec<u8> {
    vec![TAG_TOMBSTONE]
}

/// One version of a key as stored: `None` value for a tombstone.
#[derive(Debug, Clone)]
pub(crate) struct Version {
    pub(crate) revision: Revision,
    pub(crate) create_revision: Revision,
    pub(crate) value: Option<Bytes>,
}

impl Version {
    pub(crate) fn decode(revision: Revision, raw: &[u8]) -> StoreResult<Self> {
        match raw.split_first() {
            Some((&TAG_TOMBSTONE, _)) => Ok(Self {
                revision,
                create_revision: 0,
                value: None,
            }),
            Some((&TAG_PUT, rest)) if rest.len() >= 8 => {
                let (create, value) = rest.split_at(8);
                let create_revision = i64::from_be_bytes(create.try_into().unwrap_or_default());
                Ok(Self {
                    revision,
                    create_revision,
                    value: Some(Bytes::copy_from_slice(value)),
                })
            }
            _ => Err(StoreError::backend(
                "decode a stored version",
                format!("malformed record at revision {revision}"),
            )),
        }
    }

    /// The key-value this version is, if it is not a tombstone.
    pub(crate) fn into_kv(self, key: &str) -> Option<KeyValue> {
        Some(KeyValue {
            key: key.to_owned(),
            value: self.value?,
            create_revision: self.create_revision,
            mod_revision: self.revision,
        })
    }
}

pub(crate) fn storage(step: &'static str) -> impl FnOnce(StorageError) -> StoreError {
    move |e| StoreError::backend(step, e)
}

/// The newest version of `key` at or before `at`.
pub(crate) fn latest(
    revs: &impl ReadableTable<&'static [u8], &'static [u8]>,
    key: &str,
    at: Revision,
) -> StoreResult<Option<Version>> {
    if at < 0 {
        return Ok(None);
    }
    let lower = version_key(key.as_bytes(), 0);
    let upper = version_key(key.as_bytes(), at);
    let mut range = revs
        .range(lower.as_slice()..=upper.as_slice())
        .map_err(storage("read a key"))?;
    match range.next_back() {
        None => Ok(None),
        Some(entry) => {
            let (k, v) = entry.map_err(storage("read a key"))?;
            let (_, revision) = split_version_key(k.value())
                .ok_or_else(|| StoreError::backend("read a key", "malformed version key"))?;
            Version::decode(revision, v.value()).map(Some)
        }
    }
}

/// The watch event for the change of `key` at `revision`.
pub(crate) fn event_at(
    revs: &impl ReadableTable<&'static [u8], &'static [u8]>,
    key: &str,
    revision: Revision,
) -> StoreResult<WatchEvent> {
    let raw = version_key(key.as_bytes(), revision);
    let stored = revs
        .get(raw.as_slice())
        .map_err(storage("read history"))?
        .ok_or_else(|| {
            StoreError::backend(
                "read history",
                format!("log names {key:?} at {revision} but no version is stored"),
            )
        })?;
    let version = Version::decode(revision, stored.value())?;
    let prev = latest(revs, key, revision - 1)?.and_then(|v| v.into_kv(key));
    let (kind, kv) = match version.into_kv(key) {
        Some(kv) => (EventKind::Put, kv),
        None => (
            EventKind::Delete,
            KeyValue {
                key: key.to_owned(),
                value: Bytes::new(),
                create_revision: 0,
                mod_revision: revision,
            },
        ),
    };
    Ok(WatchEvent { kind, kv, prev })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_keys_sort_by_key_then_revision() {
        let mut keys = [
            version_key(b"a/b", 2),
            version_key(b"a", 10),
            version_key(b"a", 9),
            version_key(b"a0", 1),
        ];
        keys.sort();
        let decoded: Vec<_> = keys.iter().map(|k| split_version_key(k).unwrap()).collect();
        assert_eq!(
            decoded,
            [
                (&b"a"[..], 9),
                (&b"a"[..], 10),
                (&b"a/b"[..], 2),
                (&b"a0"[..], 1)
            ]
        );
        assert_eq!(split_version_key(b"short"), None);
    }

    #[test]
    fn records_round_trip() {
        let v = Version::decode(7, &encode_put(3, b"hello")).unwrap();
        assert_eq!(
            (v.revision, v.create_revision, v.value.as_deref()),
            (7, 3, Some(&b"hello"[..]))
        );
        assert!(
            Version::decode(8, &encode_tombstone())
                .unwrap()
                .value
                .is_none()
        );
        assert!(Version::decode(9, b"").is_err());
        assert!(Version::decode(9, &[1, 2]).is_err());
    }
}
