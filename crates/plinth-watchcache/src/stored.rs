//! What the cache holds of an object: its JSON, its encodings (JSON and protobuf, made once),\n//! its labels and selectable fields, and its type meta shared across objects.

use std::sync::{Arc, Mutex, PoisonError};

use plinth_core::meta::metadata_mut;
use plinth_store::{EventKind, Revision};
use serde_json::{Value, json};

/// One change, encoded once and shared by every watcher. It keeps the objects as the cache
/// does (bytes and extracted fields), not decoded: a watcher that needs the object itself (a
/// view that differs, a selector on a field not extracted) decodes it.
#[derive(Debug)]
pub struct CacheEvent {
    /// Put or delete.
    pub kind: EventKind,
    /// The storage key.
    pub key: String,
    /// The object after the change (for a delete: before it), resourceVersion set to the
    /// change's revision: its JSON and the labels selectors read.
    pub stored: Stored,
    /// The object before the change, at its own revision.
    pub prev_stored: Option<Stored>,
    /// The change's revision.
    pub revision: Revision,
}

/// An object's labels, extracted once.
pub type Labels = plinth_core::selector::SortedLabels;

/// The `apiVersion` and `kind` an object was stored with, shared by every object of a cache
/// that has the same pair.
#[derive(Debug, PartialEq, Eq)]
pub struct TypeMeta {
    /// `apiVersion`.
    pub api_version: String,
    /// `kind`.
    pub kind: String,
}

/// An object as the cache keeps it: its JSON exactly as a list item or a watch event carries
/// it (compact, resourceVersion in place), encoded once when the change arrives, and what
/// label selectors read, extracted then too. A list concatenates these bytes; a watch event's
/// bytes go to every watcher as they are.
///
/// Its protobuf message (built-in types) is encoded the first time a protobuf client asks for
/// it and kept with it, shared by every copy (a list's, a watch event's): one encoding per
/// object version and format, as kube-apiserver's `cachingObject` keeps them.
#[derive(Clone, Debug)]
pub struct Stored(Arc<StoredObject>);

#[derive(Debug)]
pub(crate) struct StoredObject {
    wire: bytes::Bytes,
    revision: Revision,
    labels: Labels,
    /// The values of the cache's selectable fields (`Cacher::fields`), in its order.
    fields: FieldValues,
    field_names: Arc<[String]>,
    type_meta: Arc<TypeMeta>,
    protobuf: std::sync::OnceLock<Option<bytes::Bytes>>,
}

impl Stored {
    /// The memory this object version holds, as the cache accounts it: its encodings, the
    /// extracted labels and field values, and the allocations around them (estimated from
    /// their sizes, allocator rounding aside).
    pub fn footprint(&self) -> usize {
        const ARC: usize = 2 * std::mem::size_of::<usize>();
        // A label: its key and value as boxed strings in the set's slice.
        const PAIR: usize = 2 * std::mem::size_of::<Box<str>>();
        let object = &self.0;
        let labels: usize = object
            .labels
            .iter()
            .map(|(k, v)| PAIR + k.len() + v.len())
            .sum();
        let fields = object.fields.0.len();
        let protobuf = object
            .protobuf
            .get()
            .and_then(Option::as_ref)
            .map_or(0, bytes::Bytes::len);
        ARC + std::mem::size_of::<StoredObject>() + object.wire.len() + protobuf + labels + fields
    }

    /// The object (resourceVersion set); `None` if the bytes are not an object.
    pub fn decode(&self) -> Option<Value> {
        serde_json::from_slice(&self.0.wire).ok()
    }

    /// The object's JSON, resourceVersion in place.
    pub fn wire(&self) -> &bytes::Bytes {
        &self.0.wire
    }

    /// The object's protobuf message (without the `k8s\0` envelope), encoded on first use;
    /// `None` when its type has no protobuf form.
    pub fn protobuf(&self) -> Option<&bytes::Bytes> {
        self.0
            .protobuf
            .get_or_init(|| {
                let object = self.decode()?;
                plinth_protobuf::encode_message(&object)
                    .ok()
                    .map(|raw| raw.into_boxed_slice().into())
            })
            .as_ref()
    }

    /// The object's labels (empty when it has none).
    pub fn labels(&self) -> &Labels {
        &self.0.labels
    }

    /// The value of selectable field `field` (`metadata.name`, `spec.nodeName`…) as field
    /// selectors compare it, extracted when the change arrived; `None` if this cache does not
    /// extract that field.
    pub fn field(&self, field: &str) -> Option<&str> {
        let at = self.0.field_names.iter().position(|f| f == field)?;
        self.0.fields.get(at, self.0.field_names.len())
    }

    /// The `apiVersion` and `kind` it was stored with.
    pub fn type_meta(&self) -> &TypeMeta {
        &self.0.type_meta
    }

    /// The revision of its last change.
    pub fn revision(&self) -> Revision {
        self.0.revision
    }
}

/// An object's selectable field values in one allocation: each value's end (a little-endian
/// `u32` offset into the text), then the values' text one after another — rather than a boxed
/// string each (a pod has ten).
#[derive(Debug)]
struct FieldValues(Box<[u8]>);

impl FieldValues {
    const END: usize = std::mem::size_of::<u32>();

    fn new(values: &[String]) -> Self {
        let text: usize = values.iter().map(String::len).sum();
        let mut bytes = Vec::with_capacity(values.len() * Self::END + text);
        let mut end = 0usize;
        for value in values {
            end += value.len();
            bytes.extend_from_slice(&u32::try_from(end).unwrap_or(u32::MAX).to_le_bytes());
        }
        for value in values {
            bytes.extend_from_slice(value.as_bytes());
        }
        Self(bytes.into_boxed_slice())
    }

    /// Where value `at`'s text ends (`None` past the last).
    fn end(&self, at: usize) -> Option<usize> {
        let start = at.checked_mul(Self::END)?;
        let raw = self.0.get(start..start.checked_add(Self::END)?)?;
        let raw: [u8; 4] = raw.try_into().ok()?;
        usize::try_from(u32::from_le_bytes(raw)).ok()
    }

    /// Value `at` of the `count` values held.
    fn get(&self, at: usize, count: usize) -> Option<&str> {
        let text = count.checked_mul(Self::END)?;
        let start = match at {
            0 => 0,
            _ => self.end(at - 1)?,
        };
        let end = self.end(at)?;
        let bytes = self
            .0
            .get(text.checked_add(start)?..text.checked_add(end)?)?;
        std::str::from_utf8(bytes).ok()
    }
}

/// The `TypeMeta`s a cache has seen (one, but for a custom resource stored at several
/// versions), so that objects share them.
#[derive(Default)]
pub(crate) struct TypeMetas(Mutex<Vec<Arc<TypeMeta>>>);

impl TypeMetas {
    fn intern(&self, object: &Value) -> Arc<TypeMeta> {
        let text = |field: &str| object.get(field).and_then(Value::as_str).unwrap_or("");
        let mut seen = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(found) = seen
            .iter()
            .find(|t| t.api_version == text("apiVersion") && t.kind == text("kind"))
        {
            return found.clone();
        }
        let meta = Arc::new(TypeMeta {
            api_version: text("apiVersion").to_owned(),
            kind: text("kind").to_owned(),
        });
        seen.push(meta.clone());
        meta
    }
}

/// A field's value as a field selector compares it (kube's field sets: a missing field is
/// the empty string, a non-string is its JSON). `a|b`: the first of the paths with a value
/// (a core Event's `source`: its source's component, else its reporting component).
pub fn selector_value(object: &Value, field: &str) -> String {
    if field.contains('|') {
        return field
            .split('|')
            .map(|path| selector_value(object, path))
            .find(|value| !value.is_empty())
            .unwrap_or_default();
    }
    match plinth_core::meta::at_path(object, field) {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Null) | None => String::new(),
        Some(other) => other.to_string(),
    }
}

/// Decodes stored bytes, sets the resourceVersion, and encodes the result once, extracting
/// its labels and the cache's selectable `fields` (`absent` where the object has none).
pub(crate) fn encode(
    value: &[u8],
    revision: Revision,
    types: &TypeMetas,
    fields: &Arc<[String]>,
    absent: &[String],
) -> Option<Stored> {
    let mut object: Value = serde_json::from_slice(value).ok()?;
    metadata_mut(&mut object)?.insert("resourceVersion".into(), json!(revision.to_string()));
    let labels = plinth_core::meta::labels(&object);
    let values: Vec<String> = fields
        .iter()
        .zip(absent)
        .map(|(f, absent)| {
            let value = selector_value(&object, f);
            if value.is_empty() {
                absent.clone()
            } else {
                value
            }
        })
        .collect();
    let field_values = FieldValues::new(&values);
    let stored = Stored(Arc::new(StoredObject {
        // Exactly its length (a `Vec` grown while encoding holds up to twice that).
        wire: plinth_protobuf::to_json(&object).into_boxed_slice().into(),
        revision,
        labels: Labels::new(labels),
        fields: field_values,
        field_names: fields.clone(),
        type_meta: types.intern(&object),
        protobuf: std::sync::OnceLock::new(),
    }));
    Some(stored)
}

#[cfg(test)]
mod field_tests {
    use super::FieldValues;

    #[test]
    fn field_values_read_back_from_one_allocation() {
        let values: Vec<String> = ["web-1", "", "node-é", "Running"].map(str::to_owned).into();
        let held = FieldValues::new(&values);
        assert_eq!(held.0.len(), 4 * 4 + 5 + 7 + 7);
        for (at, value) in values.iter().enumerate() {
            assert_eq!(held.get(at, values.len()), Some(value.as_str()));
        }
        assert_eq!(held.get(4, values.len()), None);
        let none = FieldValues::new(&[]);
        assert_eq!(none.get(0, 0), None);
    }
}
