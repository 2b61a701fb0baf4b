//! How the data sits in redb.
//!
//! One table, `data` (bytes → bytes), as etcd's mvcc keeps it in bbolt: the value of every change
//! keyed by its revision. Each commit appends at the end of the tree, so it dirties a few pages
//! however scattered the keys it writes; which revision of a key is visible when is the business
//! of the in-memory [`Index`](crate::index::Index), rebuilt from this table at start. Every extra
//! table would cost each commit its own B-tree root, so the table has two key spaces:
//! - `r ++ revision (u64, big-endian)` → `kind (1 put, 0 delete) ++ create revision (i64) ++
//!   key length (u32) ++ key ++ value`: the change made at that revision. Watches replay these
//!   in order; reads fetch values from them. The last one is the current revision, so commits
//!   write no counter.
//! - `m ++ name` → u64 (big-endian): `format`, `compacted`.
//!
//! Compaction deletes the records of revisions that no read at or after the compaction revision
//! needs (see [`Index::compact`](crate::index::Index::compact)).

use bytes::Bytes;
use plinth_store::{KeyValue, Revision, StoreError, StoreResult};
use redb::{ReadableTable, StorageError, TableDefinition};

use crate::index::Entry;

pub(crate) const DATA: TableDefinition<'static, &[u8], &[u8]> = TableDefinition::new("data");

const SPACE_REVISIONS: u8 = b'r';
const SPACE_META: u8 = b'm';

pub(crate) const META_FORMAT: &str = "format";
pub(crate) const META_COMPACTED: &str = "compacted";
/// The on-disk format this code reads and writes.
pub(crate) const FORMAT_VERSION: u64 = 3;

const KIND_DELETE: u8 = 0;
const KIND_PUT: u8 = 1;

/// The table type the functions here read.
pub(crate) trait Data: ReadableTable<&'static [u8], &'static [u8]> {}
impl<T: ReadableTable<&'static [u8], &'static [u8]>> Data for T {}

pub(crate) fn storage(step: &'static str) -> impl FnOnce(StorageError) -> StoreError {
    move |e| StoreError::backend(step, e)
}

/// The table key of `revision`'s record.
pub(crate) fn revision_key(revision: Revision) -> [u8; 9] {
    let mut out = [SPACE_REVISIONS; 9];
    out[1..].copy_from_slice(&(revision as u64).to_be_bytes());
    out
}

fn revision_of(raw: &[u8]) -> Option<Revision> {
    let rev: [u8; 8] = raw.strip_prefix(&[SPACE_REVISIONS])?.try_into().ok()?;
    Some(u64::from_be_bytes(rev) as Revision)
}

/// The change made at one revision.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Record {
    pub(crate) revision: Revision,
    pub(crate) key: String,
    /// 0 for a delete.
    pub(crate) create_revision: Revision,
    pub(crate) value: Bytes,
}

impl Record {
    pub(crate) fn encode_put(key: &str, create_revision: Revision, value: &[u8]) -> Vec<u8> {
        encode(KIND_PUT, key, create_revision, value)
    }

    pub(crate) fn encode_delete(key: &str) -> Vec<u8> {
        encode(KIND_DELETE, key, 0, &[])
    }

    pub(crate) fn decode(revision: Revision, raw: &[u8]) -> StoreResult<Self> {
        let malformed = || {
            StoreError::backend(
                "decode a record",
                format!("malformed record at revision {revision}"),
            )
        };
        let (&kind, rest) = raw.split_first().ok_or_else(malformed)?;
        let (create, rest) = rest.split_at_checked(8).ok_or_else(malformed)?;
        let (len, rest) = rest.split_at_checked(4).ok_or_else(malformed)?;
        let len = u32::from_be_bytes(len.try_into().map_err(|_| malformed())?) as usize;
        let (key, value) = rest.split_at_checked(len).ok_or_else(malformed)?;
        let key = std::str::from_utf8(key)
            .map_err(|_| malformed())?
            .to_owned();
        let create_revision = match kind {
            KIND_PUT => i64::from_be_bytes(create.try_into().map_err(|_| malformed())?),
            KIND_DELETE => 0,
            _ => return Err(malformed()),
        };
        Ok(Self {
            revision,
            key,
            create_revision,
            value: Bytes::copy_from_slice(value),
        })
    }

    /// Just the value of an encoded record, without decoding the rest.
    pub(crate) fn value_of(revision: Revision, raw: &[u8]) -> StoreResult<Bytes> {
        let malformed = || {
            StoreError::backend(
                "decode a record",
                format!("malformed record at revision {revision}"),
            )
        };
        let len: [u8; 4] = raw
            .get(9..13)
            .ok_or_else(malformed)?
            .try_into()
            .map_err(|_| malformed())?;
        let value = raw
            .get(13 + u32::from_be_bytes(len) as usize..)
            .ok_or_else(malformed)?;
        Ok(Bytes::copy_from_slice(value))
    }

    pub(crate) fn is_delete(&self) -> bool {
        self.create_revision == 0
    }

    pub(crate) fn entry(&self) -> Entry {
        Entry {
            revision: self.revision,
            create_revision: self.create_revision,
        }
    }

    /// The key-value after this change (a delete gives an empty value and create revision 0).
    pub(crate) fn into_kv(self) -> KeyValue {
        KeyValue {
            key: self.key,
            value: self.value,
            create_revision: self.create_revision,
            mod_revision: self.revision,
        }
    }
}

fn encode(kind: u8, key: &str, create_revision: Revision, value: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(13 + key.len() + value.len());
    out.push(kind);
    out.extend_from_slice(&create_revision.to_be_bytes());
    out.extend_from_slice(&(key.len() as u32).to_be_bytes());
    out.extend_from_slice(key.as_bytes());
    out.extend_from_slice(value);
    out
}

/// The value of the version `entry` names, as a key-value for `key`.
pub(crate) fn read_version(
    data: &impl Data,
    key: &str,
    entry: Entry,
) -> StoreResult<Option<KeyValue>> {
    let Some(raw) = data
        .get(revision_key(entry.revision).as_slice())
        .map_err(storage("read a record"))?
    else {
        return Ok(None);
    };
    Ok(Some(KeyValue {
        key: key.to_owned(),
        value: Record::value_of(entry.revision, raw.value())?,
        create_revision: entry.create_revision,
        mod_revision: entry.revision,
    }))
}

/// The records from revision `from` to `to` (inclusive), in order.
pub(crate) fn records(
    data: &impl Data,
    from: Revision,
    to: Revision,
) -> StoreResult<impl Iterator<Item = StoreResult<Record>>> {
    let (lower, upper) = (revision_key(from.max(0)), revision_key(to.max(0)));
    let range = data
        .range(lower.as_slice()..=upper.as_slice())
        .map_err(storage("scan records"))?;
    Ok(range.map(|entry| {
        let (k, v) = entry.map_err(storage("scan records"))?;
        let revision = revision_of(k.value())
            .ok_or_else(|| StoreError::backend("scan records", "malformed record key"))?;
        Record::decode(revision, v.value())
    }))
}

/// The key of meta entry `name`.
pub(crate) fn meta_key(name: &str) -> Vec<u8> {
    let mut out = vec![SPACE_META];
    out.extend_from_slice(name.as_bytes());
    out
}

/// Meta entry `name`, if set.
pub(crate) fn read_meta(data: &impl Data, name: &str) -> StoreResult<Option<u64>> {
    let Some(raw) = data
        .get(meta_key(name).as_slice())
        .map_err(storage("read meta"))?
    else {
        return Ok(None);
    };
    let bytes: [u8; 8] = raw
        .value()
        .try_into()
        .map_err(|_| StoreError::backend("read meta", format!("malformed meta entry {name}")))?;
    Ok(Some(u64::from_be_bytes(bytes)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip() {
        let put = Record::decode(7, &Record::encode_put("/a/b", 3, b"hello")).unwrap();
        assert_eq!(
            put,
            Record {
                revision: 7,
                key: "/a/b".into(),
                create_revision: 3,
                value: Bytes::from_static(b"hello")
            }
        );
        let delete = Record::decode(8, &Record::encode_delete("/a/b")).unwrap();
        assert!(delete.is_delete() && delete.value.is_empty() && delete.key == "/a/b");
        assert_eq!(
            Record::value_of(7, &Record::encode_put("/a/b", 3, b"hello")).unwrap(),
            &b"hello"[..]
        );
        assert!(Record::value_of(7, &[1, 0, 0]).is_err());
        assert!(Record::decode(9, b"").is_err());
        assert!(Record::decode(9, &[1, 2]).is_err());
        let mut truncated = Record::encode_put("/long-key", 1, b"");
        truncated.truncate(15);
        assert!(Record::decode(9, &truncated).is_err());
    }

    #[test]
    fn record_keys_sort_by_revision_and_stay_apart_from_meta() {
        assert!(revision_key(2) < revision_key(10) && revision_key(255) < revision_key(256));
        assert_eq!(revision_of(&revision_key(77)), Some(77));
        assert_eq!(revision_of(&meta_key("format")), None);
        assert!(meta_key("compacted").as_slice() < revision_key(0).as_slice());
    }
}
