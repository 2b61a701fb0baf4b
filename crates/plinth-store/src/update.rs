//! The guaranteed-update loop: the one place optimistic concurrency is handled.

use bytes::Bytes;

use crate::{KeyValue, Store, StoreError};

/// What the closure given to [`guaranteed_update`] wants done.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Update {
    /// Write this value.
    Write(Bytes),
    /// Leave the key as it is.
    Unchanged,
    /// Delete the key (at the revision read: a concurrent change retries with it).
    Delete,
}

/// Reads `key`, lets `decide` compute its new value from the current one, and writes it with a
/// compare-and-swap on the current mod revision — retrying with the fresh value on a conflict,
/// as kube-apiserver's `GuaranteedUpdate` does. `decide` may run several times; it must be a pure
/// function of its input. It returns a future (admission webhooks are called from it); a
/// decision made at once is `Box::pin(std::future::ready(…))`.
///
/// Returns the key as written (as found, for [`Update::Unchanged`]; as it was before it went,
/// for [`Update::Delete`]).
///
/// # Errors
/// `E::from(StoreError::NotFound)` if the key does not exist; `decide`'s own error, unchanged;
/// any other store error.
pub async fn guaranteed_update<'d, S, F, E>(
    store: &S,
    key: &str,
    mut decide: F,
) -> Result<KeyValue, E>
where
    S: Store + ?Sized,
    F: FnMut(&KeyValue) -> futures::future::BoxFuture<'d, Result<Update, E>>,
    E: From<StoreError>,
{
    let mut current = store.get(key).await?.ok_or_else(|| StoreError::NotFound {
        key: key.to_owned(),
    })?;
    loop {
        let value = match decide(&current).await? {
            Update::Unchanged => return Ok(current),
            Update::Write(value) => value,
            Update::Delete => match store.delete(key, Some(current.mod_revision)).await {
                Ok((_, deleted)) => return Ok(deleted),
                Err(StoreError::Conflict { .. }) => {
                    current = store.get(key).await?.ok_or_else(|| StoreError::NotFound {
                        key: key.to_owned(),
                    })?;
                    continue;
                }
                Err(other) => return Err(other.into()),
            },
        };
        match store.update(key, value.clone(), current.mod_revision).await {
            Ok(revision) => {
                return Ok(KeyValue {
                    key: key.to_owned(),
                    value,
                    create_revision: current.create_revision,
                    mod_revision: revision,
                });
            }
            Err(StoreError::Conflict {
                current: Some(fresh),
                ..
            }) => current = *fresh,
            Err(StoreError::Conflict { current: None, .. }) => {
                return Err(StoreError::NotFound {
                    key: key.to_owned(),
                }
                .into());
            }
            Err(other) => return Err(other.into()),
        }
    }
}
