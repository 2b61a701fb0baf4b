//! History: an object's past versions with their provenance, the objects deleted in the
//! retained window, and the revision current at a past time — read from the store's kept
//! revisions ([`plinth_store::Store::versions`], [`plinth_store::Store::journal`]).

use plinth_core::ApiError;
use plinth_store::{EventKind, Revision, StoreError, Version};
use serde_json::{Value, json};

use crate::Registry;
use crate::codec::{converted_all, decode_view, store_error};
use crate::provenance::Provenance;
use crate::resources::ResourceDef;

/// What a version did to its object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    /// Created it.
    Added,
    /// Changed it.
    Modified,
    /// Deleted it.
    Deleted,
}

impl Change {
    /// As a watch event names it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Added => "ADDED",
            Self::Modified => "MODIFIED",
            Self::Deleted => "DELETED",
        }
    }
}

/// One version of an object.
#[derive(Clone, Debug)]
pub struct ObjectVersion {
    /// The revision the write produced (the object's resourceVersion then).
    pub revision: Revision,
    /// What the write did.
    pub change: Change,
    /// The object after the write; for a deletion, as it was when deleted (`None` if that
    /// version is no longer kept).
    pub object: Option<Value>,
    /// Who wrote, if the store kept it.
    pub provenance: Option<Provenance>,
}

impl ObjectVersion {
    /// As the history API shows it.
    pub fn to_json(&self, with_object: bool) -> Value {
        let mut out = json!({
            "revision": self.revision.to_string(),
            "type": self.change.as_str(),
        });
        if let Some(p) = &self.provenance {
            out["provenance"] = p.to_json();
        }
        if with_object && let Some(object) = &self.object {
            out["object"] = object.clone();
        }
        out
    }
}

/// What a store version did to its object.
fn change_of(version: &Version) -> Change {
    if version.kind == EventKind::Delete {
        Change::Deleted
    } else if version.kv.create_revision == version.kv.mod_revision {
        Change::Added
    } else {
        Change::Modified
    }
}

/// The 410 of a history read that reaches before what is kept, naming the oldest revision
/// kept (as kube's "too old resource version" names what it can serve).
fn too_old(def: &ResourceDef, name: &str, error: StoreError) -> ApiError {
    match error {
        StoreError::Compacted {
            requested,
            compacted: Some(oldest),
        } => ApiError::expired(format!(
            "too old resource version: {requested} ({oldest}): the oldest retained revision is {oldest}"
        )),
        other => store_error(def, name, other),
    }
}

impl Registry {
    /// The versions of one object from revision `from` on (0: all kept), oldest first,
    /// each in `def`'s version — or, without `objects`, only what each write was and who made
    /// it (nothing decoded).
    ///
    /// # Errors
    /// 410 when `from` is older than history keeps.
    pub async fn history(
        &self,
        def: &ResourceDef,
        namespace: Option<&str>,
        name: &str,
        from: Revision,
        objects: bool,
    ) -> Result<Vec<ObjectVersion>, ApiError> {
        let key = def.key(namespace, name);
        let versions = self
            .store
            .versions(&key, from)
            .await
            .map_err(|e| too_old(def, name, e))?;
        if !objects {
            return Ok(versions
                .into_iter()
                .map(|v| ObjectVersion {
                    revision: v.kv.mod_revision,
                    change: change_of(&v),
                    object: None,
                    provenance: v.note.as_deref().and_then(Provenance::from_note),
                })
                .collect());
        }
        self.object_versions(def, versions).await
    }

    /// The objects of `def` (in `namespace`, or all) deleted at or after revision `from`
    /// (0: as far back as kept), oldest deletion first, each as it was when deleted.
    ///
    /// # Errors
    /// 410 when `from` is older than history keeps.
    pub async fn deleted(
        &self,
        def: &ResourceDef,
        namespace: Option<&str>,
        from: Revision,
        limit: usize,
    ) -> Result<Vec<ObjectVersion>, ApiError> {
        let prefix = def.list_prefix(namespace);
        let journal = self
            .store
            .journal(&prefix, from, usize::MAX)
            .await
            .map_err(|e| too_old(def, "", e))?;
        let mut out = Vec::new();
        for deletion in journal.iter().filter(|v| v.kind == EventKind::Delete) {
            if out.len() >= limit {
                break;
            }
            // The deleted object: the version just before the deletion.
            let versions = self
                .store
                .versions(&deletion.kv.key, 0)
                .await
                .map_err(|e| too_old(def, "", e))?;
            let upto: Vec<Version> = versions
                .into_iter()
                .filter(|v| v.kv.mod_revision <= deletion.kv.mod_revision)
                .collect();
            let start = upto.len().saturating_sub(2);
            let mut pair = self.object_versions(def, upto[start..].to_vec()).await?;
            if let Some(last) = pair.pop().filter(|v| v.change == Change::Deleted) {
                out.push(last);
            }
        }
        Ok(out)
    }

    /// Store versions as object versions: decoded, converted to `def`'s version, a deletion
    /// carrying the object it deleted.
    async fn object_versions(
        &self,
        def: &ResourceDef,
        versions: Vec<Version>,
    ) -> Result<Vec<ObjectVersion>, ApiError> {
        let mut out = Vec::with_capacity(versions.len());
        let mut previous: Option<Value> = None;
        for version in versions {
            let provenance = version.note.as_deref().and_then(Provenance::from_note);
            let (change, object) = if version.kind == EventKind::Delete {
                (Change::Deleted, previous.take())
            } else {
                // A version no longer readable (sealed with a key the server no longer has)
                // is shown without its object.
                let object = decode_view(def, &version.kv).ok();
                previous.clone_from(&object);
                (change_of(&version), object)
            };
            out.push(ObjectVersion {
                revision: version.kv.mod_revision,
                change,
                object,
                provenance,
            });
        }
        if def.conversion.is_some() {
            let objects: Vec<Value> = out.iter().filter_map(|v| v.object.clone()).collect();
            let mut converted = converted_all(self, def, objects).await?.into_iter();
            for version in &mut out {
                if version.object.is_some() {
                    version.object = converted.next();
                }
            }
        }
        Ok(out)
    }

    /// The store's revision as of `time_micros` (Unix microseconds): that of the newest write
    /// made at or before it, found by bisection over the writes' provenance times.
    ///
    /// # Errors
    /// 410 if that is before the oldest write kept; 400 if the store keeps no write times.
    pub async fn revision_at(&self, time_micros: i64) -> Result<Revision, ApiError> {
        let internal = |e: StoreError| ApiError::internal(e);
        if !self.store.keeps_notes() {
            return Err(ApiError::bad_request(
                "this server's storage keeps no write times: ask by resourceVersion",
            ));
        }
        let current = self.store.current_revision().await.map_err(internal)?;
        // The time of the first write at or after `revision` that has one, and its revision.
        let write_at = |revision: Revision| async move {
            let writes = self
                .store
                .journal("/", revision, 16)
                .await
                .map_err(internal)?;
            Ok::<_, ApiError>(writes.iter().find_map(|w| {
                let note = Provenance::from_note(w.note.as_deref()?)?;
                Some((w.kv.mod_revision, note.time_micros))
            }))
        };
        let Some((oldest, oldest_time)) = write_at(0).await? else {
            return Ok(current);
        };
        if time_micros < oldest_time {
            return Err(ApiError::expired(format!(
                "{} is before the oldest retained write (revision {oldest}, {}): the oldest retained revision is {oldest}",
                plinth_core::meta::format_micro_time(time_micros),
                plinth_core::meta::format_micro_time(oldest_time),
            )));
        }
        // Invariant: the write at `low` was made at or before the time; none after `high` was.
        let (mut low, mut high) = (oldest, current);
        while low < high {
            let middle = low + (high - low + 1) / 2;
            match write_at(middle).await? {
                Some((revision, time)) if time <= time_micros && revision <= high => {
                    low = revision;
                }
                _ => high = middle - 1,
            }
        }
        Ok(low)
    }
}
