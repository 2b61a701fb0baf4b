//! A compact, immutable JSON tree for objects held for a long time (the controllers' caches).
//!
//! A `serde_json::Value` object is a B-tree whose every node has room for eleven entries (about
//! 630 bytes for a map of one field), so a 2.6 KiB pod decodes into some 16 KiB. A [`Frozen`]
//! tree keeps each object as one boxed slice of its entries, sorted by key (looked up by binary
//! search and iterated in that order, as serde_json's sorted map is), each array as one boxed
//! slice, and the field names and small values the API uses everywhere (`metadata`, `name`,
//! `True`, `Running`) as static strings rather than allocations. An object whose keys are all
//! such words (most of an API object's) keeps each key as a two-byte index (32 bytes an entry
//! instead of 48), and a string of up to 22 bytes (names, timestamps, addresses) is kept inside
//! its node rather than in an allocation of its own. It reads like a `Value` (`tree["spec"]["nodeName"]
//! .as_str()`, [`Frozen::get`], [`Frozen::at`]); [`Frozen::to_value`] gives a `Value` back for
//! what changes an object. [`Tree`] lets a function read either.

use std::fmt;
use std::sync::Arc;

use serde::ser::{Serialize, SerializeMap, SerializeSeq, Serializer};
use serde_json::{Map, Number, Value};

/// A JSON value that does not change (see the module's text).
#[derive(Clone, Default)]
pub enum Frozen {
    /// `null`.
    #[default]
    Null,
    /// `true` or `false`.
    Bool(bool),
    /// A number, as `serde_json` holds it.
    Number(Number),
    /// A string of the shared vocabulary (no allocation).
    Word(&'static str),
    /// A string of up to [`Short::CAPACITY`] bytes, kept inside the node.
    Short(Short),
    /// Any other string.
    String(Box<str>),
    /// An array.
    Array(Box<[Frozen]>),
    /// An object whose keys are all words of the vocabulary (each kept as its index).
    Record(Record),
    /// Any other object.
    Object(Fields),
}

/// A string short enough to be kept inside its [`Frozen`] node (no allocation of its own).
#[derive(Clone, Copy)]
pub struct Short {
    len: u8,
    bytes: [u8; Short::CAPACITY],
}

impl Short {
    /// The most bytes a short string holds (a node is 24 bytes: its tag, this and the length).
    pub const CAPACITY: usize = 22;

    fn new(text: &str) -> Option<Self> {
        let len = u8::try_from(text.len())
            .ok()
            .filter(|n| usize::from(*n) <= Self::CAPACITY)?;
        let mut bytes = [0; Self::CAPACITY];
        bytes
            .get_mut(..text.len())?
            .copy_from_slice(text.as_bytes());
        Some(Self { len, bytes })
    }

    /// The text.
    pub fn as_str(&self) -> &str {
        // Always valid UTF-8 (copied from a `str`); checked rather than assumed.
        self.bytes
            .get(..usize::from(self.len))
            .and_then(|b| std::str::from_utf8(b).ok())
            .unwrap_or_default()
    }
}

/// A key of a [`FrozenMap`]: a word of the vocabulary (its index) or an owned string.
#[derive(Clone)]
pub(crate) enum Key {
    Word(u16),
    Owned(Box<str>),
}

impl Key {
    fn as_str(&self) -> &str {
        match self {
            Self::Word(w) => word_at(*w),
            Self::Owned(s) => s,
        }
    }
}

/// The entries of an object whose keys are all words, sorted by key.
#[derive(Clone)]
pub struct Record(Box<[(u16, Frozen)]>);

/// The entries of any other object, sorted by key.
#[derive(Clone)]
pub struct Fields(Box<[(Key, Frozen)]>);

/// An object's entries in key order, whichever way they are kept (what
/// [`Frozen::as_object`] gives).
#[derive(Clone, Copy)]
pub struct FrozenMap<'a>(Slots<'a>);

#[derive(Clone, Copy)]
enum Slots<'a> {
    Words(&'a [(u16, Frozen)]),
    Keys(&'a [(Key, Frozen)]),
}

impl Default for FrozenMap<'_> {
    fn default() -> Self {
        Self(Slots::Words(&[]))
    }
}

/// The object of `entries`, sorted by key whatever order a map iterated them in (serde_json's
/// map is sorted by default, in insertion order with its `preserve_order` feature): lookups
/// search the keys in their byte order. With every key a word, each is kept as its index.
fn object_of(mut entries: Vec<(Key, Frozen)>) -> Frozen {
    if !entries.is_sorted_by(|a, b| a.0.as_str() <= b.0.as_str()) {
        entries.sort_by(|a, b| a.0.as_str().cmp(b.0.as_str()));
    }
    if entries.iter().all(|(k, _)| matches!(k, Key::Word(_))) {
        let mut words = Vec::with_capacity(entries.len());
        words.extend(entries.into_iter().filter_map(|(k, v)| match k {
            Key::Word(w) => Some((w, v)),
            Key::Owned(_) => None,
        }));
        Frozen::Record(Record(words.into_boxed_slice()))
    } else {
        Frozen::Object(Fields(entries.into_boxed_slice()))
    }
}

/// Field names and values common in API objects, held once (sorted: looked up by binary search).
const VOCABULARY: &[&str] = &[
    "Always",
    "BestEffort",
    "Burstable",
    "ClusterFirst",
    "ContainersReady",
    "Deployment",
    "Equal",
    "Exists",
    "Failed",
    "False",
    "File",
    "Guaranteed",
    "IfNotPresent",
    "Initialized",
    "Never",
    "NoExecute",
    "NoSchedule",
    "OnFailure",
    "Pending",
    "Pod",
    "PodReadyToStartContainers",
    "PodScheduled",
    "PreemptLowerPriority",
    "Ready",
    "ReplicaSet",
    "Running",
    "SCTP",
    "StatefulSet",
    "Succeeded",
    "TCP",
    "True",
    "UDP",
    "Unknown",
    "apiVersion",
    "app",
    "apps/v1",
    "blockOwnerDeletion",
    "conditions",
    "configMap",
    "containerID",
    "containerPort",
    "containerStatuses",
    "containers",
    "controller",
    "controller-revision-hash",
    "cpu",
    "creationTimestamp",
    "default",
    "default-scheduler",
    "defaultMode",
    "deletionGracePeriodSeconds",
    "deletionTimestamp",
    "dnsPolicy",
    "downwardAPI",
    "effect",
    "enableServiceLinks",
    "exitCode",
    "expirationSeconds",
    "fieldPath",
    "fieldRef",
    "finalizers",
    "finishedAt",
    "generateName",
    "generation",
    "hostIP",
    "hostIPs",
    "hostname",
    "image",
    "imageID",
    "imagePullPolicy",
    "initContainerStatuses",
    "initContainers",
    "ip",
    "items",
    "key",
    "kind",
    "labels",
    "lastProbeTime",
    "lastState",
    "lastTransitionTime",
    "limits",
    "memory",
    "message",
    "metadata",
    "mountPath",
    "name",
    "namespace",
    "nodeName",
    "nodeSelector",
    "observedGeneration",
    "operator",
    "ownerReferences",
    "path",
    "phase",
    "pod-template-hash",
    "podIP",
    "podIPs",
    "ports",
    "preemptionPolicy",
    "priority",
    "projected",
    "protocol",
    "qosClass",
    "readOnly",
    "ready",
    "reason",
    "replicas",
    "requests",
    "resourceVersion",
    "resources",
    "restartCount",
    "restartPolicy",
    "running",
    "schedulerName",
    "securityContext",
    "selector",
    "serviceAccountName",
    "serviceAccountToken",
    "sources",
    "spec",
    "startTime",
    "started",
    "startedAt",
    "state",
    "status",
    "subdomain",
    "template",
    "terminated",
    "terminationGracePeriodSeconds",
    "terminationMessagePath",
    "terminationMessagePolicy",
    "tolerationSeconds",
    "tolerations",
    "type",
    "uid",
    "v1",
    "value",
    "volumeMounts",
    "volumes",
    "waiting",
];

/// The index of `text` in the vocabulary.
fn word_index(text: &str) -> Option<u16> {
    VOCABULARY
        .binary_search(&text)
        .ok()
        .and_then(|i| u16::try_from(i).ok())
}

/// The word at `index` of the vocabulary.
fn word_at(index: u16) -> &'static str {
    VOCABULARY
        .get(usize::from(index))
        .copied()
        .unwrap_or_default()
}

fn key_of<S: AsRef<str> + Into<Box<str>>>(text: S) -> Key {
    match word_index(text.as_ref()) {
        Some(w) => Key::Word(w),
        None => Key::Owned(text.into()),
    }
}

fn string_of<S: AsRef<str> + Into<Box<str>>>(text: S) -> Frozen {
    let text_ref = text.as_ref();
    if let Some(w) = word_index(text_ref) {
        return Frozen::Word(word_at(w));
    }
    match Short::new(text_ref) {
        Some(short) => Frozen::Short(short),
        None => Frozen::String(text.into()),
    }
}

static NULL: Frozen = Frozen::Null;

impl From<Value> for Frozen {
    fn from(value: Value) -> Self {
        match value {
            Value::Null => Self::Null,
            Value::Bool(b) => Self::Bool(b),
            Value::Number(n) => Self::Number(n),
            Value::String(s) => string_of(s),
            Value::Array(items) => Self::Array(items.into_iter().map(Self::from).collect()),
            Value::Object(map) => object_of(
                map.into_iter()
                    .map(|(k, v)| (key_of(k), Self::from(v)))
                    .collect(),
            ),
        }
    }
}

impl From<&Value> for Frozen {
    fn from(value: &Value) -> Self {
        match value {
            Value::Null => Self::Null,
            Value::Bool(b) => Self::Bool(*b),
            Value::Number(n) => Self::Number(n.clone()),
            Value::String(s) => string_of(s.as_str()),
            Value::Array(items) => Self::Array(items.iter().map(Self::from).collect()),
            Value::Object(map) => object_of(
                map.iter()
                    .map(|(k, v)| (key_of(k.as_str()), Self::from(v)))
                    .collect(),
            ),
        }
    }
}

impl Frozen {
    /// The same tree as a `Value` (a copy: for what changes an object or needs a `Value`).
    pub fn to_value(&self) -> Value {
        match self {
            Self::Null => Value::Null,
            Self::Bool(b) => Value::Bool(*b),
            Self::Number(n) => Value::Number(n.clone()),
            Self::Word(w) => Value::String((*w).to_owned()),
            Self::Short(s) => Value::String(s.as_str().to_owned()),
            Self::String(s) => Value::String(s.to_string()),
            Self::Array(items) => Value::Array(items.iter().map(Self::to_value).collect()),
            Self::Record(_) | Self::Object(_) => Value::Object(
                self.as_object()
                    .unwrap_or_default()
                    .iter()
                    .map(|(k, v)| (k.to_owned(), v.to_value()))
                    .collect::<Map<String, Value>>(),
            ),
        }
    }

    /// The field or element `index` names (a `&str` of an object, a `usize` of an array).
    pub fn get<I: FrozenIndex>(&self, index: I) -> Option<&Frozen> {
        index.find(self)
    }

    /// The string, if this is one.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Self::Word(w) => Some(w),
            Self::Short(s) => Some(s.as_str()),
            Self::String(s) => Some(s),
            _ => None,
        }
    }

    /// The number as an `i64`, if it is an integer that fits.
    pub fn as_i64(&self) -> Option<i64> {
        match self {
            Self::Number(n) => n.as_i64(),
            _ => None,
        }
    }

    /// The number as a `u64`, if it is a non-negative integer.
    pub fn as_u64(&self) -> Option<u64> {
        match self {
            Self::Number(n) => n.as_u64(),
            _ => None,
        }
    }

    /// The number as an `f64`.
    pub fn as_f64(&self) -> Option<f64> {
        match self {
            Self::Number(n) => n.as_f64(),
            _ => None,
        }
    }

    /// The boolean, if this is one.
    pub fn as_bool(&self) -> Option<bool> {
        match self {
            Self::Bool(b) => Some(*b),
            _ => None,
        }
    }

    /// The elements, if this is an array.
    pub fn as_array(&self) -> Option<&[Frozen]> {
        match self {
            Self::Array(items) => Some(items),
            _ => None,
        }
    }

    /// The entries, if this is an object.
    pub fn as_object(&self) -> Option<FrozenMap<'_>> {
        match self {
            Self::Record(Record(entries)) => Some(FrozenMap(Slots::Words(entries))),
            Self::Object(Fields(entries)) => Some(FrozenMap(Slots::Keys(entries))),
            _ => None,
        }
    }

    /// Whether this is `null`.
    pub fn is_null(&self) -> bool {
        matches!(self, Self::Null)
    }

    /// Whether this is an object.
    pub fn is_object(&self) -> bool {
        matches!(self, Self::Record(_) | Self::Object(_))
    }

    /// Whether this is an array.
    pub fn is_array(&self) -> bool {
        matches!(self, Self::Array(_))
    }

    /// Whether this is a string.
    pub fn is_string(&self) -> bool {
        matches!(self, Self::Word(_) | Self::Short(_) | Self::String(_))
    }

    /// Whether this is a number.
    pub fn is_number(&self) -> bool {
        matches!(self, Self::Number(_))
    }

    /// Whether this is a boolean.
    pub fn is_boolean(&self) -> bool {
        matches!(self, Self::Bool(_))
    }

    /// The value a JSON Pointer names, as [`crate::At::at`] finds it in a `Value`.
    pub fn at(&self, pointer: &str) -> Option<&Frozen> {
        crate::at::walk(self, pointer, |target, token| match target {
            Self::Array(items) => items.get(crate::at::array_index(token)?),
            _ => target.as_object()?.get(token),
        })
    }

    /// As [`Frozen::at`] (`Value::pointer`'s name).
    pub fn pointer(&self, pointer: &str) -> Option<&Frozen> {
        self.at(pointer)
    }
}

impl<'a> FrozenMap<'a> {
    /// The value of `key`.
    pub fn get(&self, key: &str) -> Option<&'a Frozen> {
        match self.0 {
            Slots::Words(entries) => entries
                .binary_search_by(|(k, _)| word_at(*k).cmp(key))
                .ok()
                .and_then(|i| entries.get(i))
                .map(|(_, v)| v),
            Slots::Keys(entries) => entries
                .binary_search_by(|(k, _)| k.as_str().cmp(key))
                .ok()
                .and_then(|i| entries.get(i))
                .map(|(_, v)| v),
        }
    }

    /// Whether `key` is present.
    pub fn contains_key(&self, key: &str) -> bool {
        self.get(key).is_some()
    }

    /// How many entries.
    pub fn len(&self) -> usize {
        match self.0 {
            Slots::Words(entries) => entries.len(),
            Slots::Keys(entries) => entries.len(),
        }
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The entries in key order.
    pub fn iter(&self) -> Entries<'a> {
        match self.0 {
            Slots::Words(entries) => Entries(Walk::Words(entries.iter())),
            Slots::Keys(entries) => Entries(Walk::Keys(entries.iter())),
        }
    }

    /// The keys in order.
    pub fn keys(&self) -> impl DoubleEndedIterator<Item = &'a str> + ExactSizeIterator + use<'a> {
        self.iter().map(|(k, _)| k)
    }

    /// The values in key order.
    pub fn values(
        &self,
    ) -> impl DoubleEndedIterator<Item = &'a Frozen> + ExactSizeIterator + use<'a> {
        self.iter().map(|(_, v)| v)
    }
}

impl<'a> IntoIterator for FrozenMap<'a> {
    type Item = (&'a str, &'a Frozen);
    type IntoIter = Entries<'a>;
    fn into_iter(self) -> Entries<'a> {
        self.iter()
    }
}

impl<'a> IntoIterator for &FrozenMap<'a> {
    type Item = (&'a str, &'a Frozen);
    type IntoIter = Entries<'a>;
    fn into_iter(self) -> Entries<'a> {
        self.iter()
    }
}

/// The entries of a [`FrozenMap`] in key order.
pub struct Entries<'a>(Walk<'a>);

enum Walk<'a> {
    Words(std::slice::Iter<'a, (u16, Frozen)>),
    Keys(std::slice::Iter<'a, (Key, Frozen)>),
}

impl<'a> Iterator for Entries<'a> {
    type Item = (&'a str, &'a Frozen);
    fn next(&mut self) -> Option<Self::Item> {
        match &mut self.0 {
            Walk::Words(it) => it.next().map(|(k, v)| (word_at(*k), v)),
            Walk::Keys(it) => it.next().map(|(k, v)| (k.as_str(), v)),
        }
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        match &self.0 {
            Walk::Words(it) => it.size_hint(),
            Walk::Keys(it) => it.size_hint(),
        }
    }
}

impl DoubleEndedIterator for Entries<'_> {
    fn next_back(&mut self) -> Option<Self::Item> {
        match &mut self.0 {
            Walk::Words(it) => it.next_back().map(|(k, v)| (word_at(*k), v)),
            Walk::Keys(it) => it.next_back().map(|(k, v)| (k.as_str(), v)),
        }
    }
}

impl ExactSizeIterator for Entries<'_> {}

/// What indexes a [`Frozen`]: a field name or an array position.
pub trait FrozenIndex {
    /// The value this names in `tree`.
    fn find<'a>(&self, tree: &'a Frozen) -> Option<&'a Frozen>;
}

impl FrozenIndex for str {
    fn find<'a>(&self, tree: &'a Frozen) -> Option<&'a Frozen> {
        tree.as_object()?.get(self)
    }
}

impl FrozenIndex for String {
    fn find<'a>(&self, tree: &'a Frozen) -> Option<&'a Frozen> {
        FrozenIndex::find(self.as_str(), tree)
    }
}

impl FrozenIndex for usize {
    fn find<'a>(&self, tree: &'a Frozen) -> Option<&'a Frozen> {
        tree.as_array()?.get(*self)
    }
}

impl<T: FrozenIndex + ?Sized> FrozenIndex for &T {
    fn find<'a>(&self, tree: &'a Frozen) -> Option<&'a Frozen> {
        (**self).find(tree)
    }
}

impl<I: FrozenIndex> std::ops::Index<I> for Frozen {
    type Output = Frozen;
    /// As `Value`'s: what `index` names, or `null` when there is nothing there.
    fn index(&self, index: I) -> &Frozen {
        index.find(self).unwrap_or(&NULL)
    }
}

impl PartialEq for Frozen {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Self::Null, Self::Null) => true,
            (Self::Bool(a), Self::Bool(b)) => a == b,
            (Self::Number(a), Self::Number(b)) => a == b,
            (Self::Array(a), Self::Array(b)) => a == b,
            (a, b) => match (a.as_str(), b.as_str()) {
                (Some(a), Some(b)) => a == b,
                _ => match (a.as_object(), b.as_object()) {
                    (Some(a), Some(b)) => a == b,
                    _ => false,
                },
            },
        }
    }
}

impl PartialEq for FrozenMap<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().zip(other.iter()).all(|(a, b)| a == b)
    }
}

impl PartialEq<Value> for Frozen {
    fn eq(&self, other: &Value) -> bool {
        match (self, other) {
            (Self::Null, Value::Null) => true,
            (Self::Bool(a), Value::Bool(b)) => a == b,
            (Self::Number(a), Value::Number(b)) => a == b,
            (Self::Array(a), Value::Array(b)) => {
                a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x == y)
            }
            (a, Value::Object(b)) => a.as_object().is_some_and(|a| {
                a.len() == b.len() && a.iter().zip(b).all(|((k, x), (l, y))| k == l && x == y)
            }),
            (a, Value::String(b)) => a.as_str() == Some(b.as_str()),
            _ => false,
        }
    }
}

impl PartialEq<Frozen> for Value {
    fn eq(&self, other: &Frozen) -> bool {
        other == self
    }
}

impl PartialEq<str> for Frozen {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == Some(other)
    }
}

impl PartialEq<&str> for Frozen {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == Some(*other)
    }
}

impl PartialEq<String> for Frozen {
    fn eq(&self, other: &String) -> bool {
        self.as_str() == Some(other.as_str())
    }
}

impl PartialEq<bool> for Frozen {
    fn eq(&self, other: &bool) -> bool {
        self.as_bool() == Some(*other)
    }
}

impl PartialEq<i64> for Frozen {
    fn eq(&self, other: &i64) -> bool {
        self.as_i64() == Some(*other)
    }
}

impl Serialize for Frozen {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Self::Null => serializer.serialize_unit(),
            Self::Bool(b) => serializer.serialize_bool(*b),
            Self::Number(n) => n.serialize(serializer),
            Self::Word(w) => serializer.serialize_str(w),
            Self::Short(s) => serializer.serialize_str(s.as_str()),
            Self::String(s) => serializer.serialize_str(s),
            Self::Array(items) => {
                let mut seq = serializer.serialize_seq(Some(items.len()))?;
                for item in items.iter() {
                    seq.serialize_element(item)?;
                }
                seq.end()
            }
            Self::Record(_) | Self::Object(_) => {
                self.as_object().unwrap_or_default().serialize(serializer)
            }
        }
    }
}

impl Serialize for FrozenMap<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut out = serializer.serialize_map(Some(self.len()))?;
        for (k, v) in self.iter() {
            out.serialize_entry(k, v)?;
        }
        out.end()
    }
}

impl fmt::Display for Frozen {
    /// The JSON text, as `Value`'s `Display` writes it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = serde_json::to_string(self).map_err(|_| fmt::Error)?;
        f.write_str(&text)
    }
}

impl fmt::Debug for Frozen {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Frozen({self})")
    }
}

impl fmt::Debug for FrozenMap<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

/// A JSON tree read the same way whether it is a `Value` or a [`Frozen`] (and through an `Arc`
/// or a reference), for functions that read objects of either kind.
pub trait Tree {
    /// The kind of node below this one.
    type Node: Tree<Node = Self::Node> + ?Sized;
    /// The field `key` of an object.
    fn field(&self, key: &str) -> Option<&Self::Node>;
    /// The string, if this is one.
    fn text(&self) -> Option<&str>;
    /// Each entry of an object, in key order (nothing if this is not an object).
    fn entries(&self) -> Vec<(&str, &Self::Node)>;
    /// Each element of an array (nothing if this is not an array).
    fn elements(&self) -> Vec<&Self::Node>;
    /// The number, if this is one.
    fn number(&self) -> Option<&Number>;
    /// Whether this is `null`.
    fn is_null(&self) -> bool;
    /// The boolean, if this is one.
    fn boolean(&self) -> Option<bool>;
    /// The value at the end of `steps`, each a field of an object.
    fn path(&self, steps: &[&str]) -> Option<&Self::Node> {
        let (first, rest) = steps.split_first()?;
        rest.iter()
            .try_fold(self.field(first)?, |node, step| node.field(step))
    }
}

impl Tree for Value {
    type Node = Value;
    fn field(&self, key: &str) -> Option<&Value> {
        self.as_object()?.get(key)
    }
    fn text(&self) -> Option<&str> {
        self.as_str()
    }
    fn entries(&self) -> Vec<(&str, &Value)> {
        self.as_object()
            .map(|m| m.iter().map(|(k, v)| (k.as_str(), v)).collect())
            .unwrap_or_default()
    }
    fn elements(&self) -> Vec<&Value> {
        self.as_array()
            .map(|a| a.iter().collect())
            .unwrap_or_default()
    }
    fn number(&self) -> Option<&Number> {
        match self {
            Value::Number(n) => Some(n),
            _ => None,
        }
    }
    fn is_null(&self) -> bool {
        Value::is_null(self)
    }
    fn boolean(&self) -> Option<bool> {
        self.as_bool()
    }
}

impl Tree for Frozen {
    type Node = Frozen;
    fn field(&self, key: &str) -> Option<&Frozen> {
        self.as_object()?.get(key)
    }
    fn text(&self) -> Option<&str> {
        self.as_str()
    }
    fn entries(&self) -> Vec<(&str, &Frozen)> {
        self.as_object()
            .map(|m| m.iter().collect())
            .unwrap_or_default()
    }
    fn elements(&self) -> Vec<&Frozen> {
        self.as_array()
            .map(|a| a.iter().collect())
            .unwrap_or_default()
    }
    fn number(&self) -> Option<&Number> {
        match self {
            Self::Number(n) => Some(n),
            _ => None,
        }
    }
    fn is_null(&self) -> bool {
        Frozen::is_null(self)
    }
    fn boolean(&self) -> Option<bool> {
        self.as_bool()
    }
}

macro_rules! tree_through {
    ($($outer:ty),*) => {$(
        impl<T: Tree + ?Sized> Tree for $outer {
            type Node = T::Node;
            fn field(&self, key: &str) -> Option<&Self::Node> {
                (**self).field(key)
            }
            fn text(&self) -> Option<&str> {
                (**self).text()
            }
            fn entries(&self) -> Vec<(&str, &Self::Node)> {
                (**self).entries()
            }
            fn elements(&self) -> Vec<&Self::Node> {
                (**self).elements()
            }
            fn number(&self) -> Option<&Number> {
                (**self).number()
            }
            fn is_null(&self) -> bool {
                (**self).is_null()
            }
            fn boolean(&self) -> Option<bool> {
                (**self).boolean()
            }
        }
    )*};
}

tree_through!(&T, &mut T, Arc<T>, Box<T>);

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod() -> Value {
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "web-1", "namespace": "default", "labels": {"app": "web", "x/y": "z"},
                         "ownerReferences": [{"kind": "ReplicaSet", "name": "web", "controller": true}]},
            "spec": {"nodeName": "n1", "containers": [{"name": "c", "resources": {"requests": {"cpu": "100m"}}}],
                     "priority": 0, "weird~key/": 1.5},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
            "n": null, "neg": -3, "big": 18446744073709551615u64, "empty": {}, "none": []
        })
    }

    #[test]
    fn reads_what_value_reads() {
        let value = pod();
        let frozen = Frozen::from(&value);
        assert_eq!(frozen, value);
        assert_eq!(frozen.to_value(), value);
        assert_eq!(Frozen::from(value.clone()).to_value(), value);
        assert_eq!(
            serde_json::to_string(&frozen).ok(),
            serde_json::to_string(&value).ok()
        );
        assert_eq!(frozen.to_string(), value.to_string());
        for pointer in [
            "",
            "/metadata/name",
            "/metadata/labels/x~1y",
            "/spec/containers/0/resources/requests/cpu",
            "/spec/containers/1",
            "/spec/containers/00",
            "/spec/weird~0key~1",
            "/status/conditions/0/status",
            "/n",
            "/neg",
            "/big",
            "/empty",
            "/none/0",
            "/missing/x",
        ] {
            assert_eq!(
                frozen.at(pointer).map(Frozen::to_value),
                value.pointer(pointer).cloned(),
                "{pointer}"
            );
        }
        assert_eq!(frozen["spec"]["nodeName"], "n1");
        assert_eq!(
            frozen["status"]["conditions"][0]["type"].as_str(),
            Some("Ready")
        );
        assert!(frozen["nothing"]["here"].is_null());
        assert_eq!(frozen["neg"].as_i64(), Some(-3));
        assert_eq!(frozen["big"].as_u64(), Some(u64::MAX));
        assert_eq!(frozen["spec"]["weird~key/"].as_f64(), Some(1.5));
        assert_eq!(
            frozen.get("metadata").and_then(|m| m.get("name")),
            frozen.at("/metadata/name")
        );
        assert_eq!(
            frozen["spec"]["containers"].get(0),
            frozen.at("/spec/containers/0")
        );
        let keys: Vec<&str> = frozen
            .as_object()
            .map(|m| m.keys().collect())
            .unwrap_or_default();
        let value_keys: Vec<&str> = value
            .as_object()
            .map(|m| m.keys().map(String::as_str).collect())
            .unwrap_or_default();
        assert_eq!(keys, value_keys);
    }

    #[test]
    fn entries_are_sorted_whatever_order_they_come_in() {
        let entries = Vec::from([
            (key_of("zeta"), Frozen::Bool(true)),
            (key_of("name"), string_of("n")),
            (key_of("alpha"), Frozen::Null),
        ]);
        let object = object_of(entries);
        assert_eq!(object["zeta"], true);
        assert_eq!(object["name"], "n");
        assert!(object.get("alpha").is_some_and(Frozen::is_null));
        assert_eq!(
            object.to_value().to_string(),
            r#"{"alpha":null,"name":"n","zeta":true}"#
        );
    }

    #[test]
    fn nodes_and_entries_stay_small() {
        assert_eq!(std::mem::size_of::<Frozen>(), 24);
        assert_eq!(std::mem::size_of::<(u16, Frozen)>(), 32);
        let value = pod();
        let frozen = Frozen::from(&value);
        // Keys all words: the compact form; one key that is not: the general one.
        assert!(matches!(frozen["status"], Frozen::Record(_)));
        assert!(matches!(frozen["spec"], Frozen::Object(_)));
        assert!(matches!(Frozen::from(json!({})), Frozen::Record(_)));
        // Up to 22 bytes inside the node, longer in an allocation; both read the same.
        let short = "x".repeat(Short::CAPACITY);
        let long = "y".repeat(Short::CAPACITY + 1);
        assert!(matches!(string_of(short.as_str()), Frozen::Short(_)));
        assert!(matches!(string_of(long.as_str()), Frozen::String(_)));
        assert!(matches!(string_of("Running"), Frozen::Word("Running")));
        assert!(matches!(string_of("é".repeat(11)), Frozen::Short(_)));
        assert!(matches!(string_of(""), Frozen::Short(_)));
        for text in [short, long, "é".repeat(11), String::new()] {
            assert_eq!(string_of(text.as_str()), text);
            assert_eq!(
                string_of(text.as_str()).to_value(),
                Value::String(text.clone())
            );
        }
        assert_eq!(frozen["metadata"]["name"], "web-1");
        let map = frozen["metadata"]
            .as_object()
            .map(|m| m.iter().rev().map(|(k, _)| k).collect::<Vec<_>>());
        assert_eq!(
            map,
            Some(vec!["ownerReferences", "namespace", "name", "labels"])
        );
    }

    #[test]
    fn vocabulary_is_sorted_and_words_equal_strings() {
        assert!(VOCABULARY.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(Frozen::Word("True"), Frozen::String("True".into()));
        assert_ne!(Frozen::Word("True"), Frozen::Bool(true));
    }

    #[test]
    fn tree_reads_both() {
        fn name<T: Tree + ?Sized>(object: &T) -> Option<&str> {
            object.field("metadata")?.field("name")?.text()
        }
        let value = pod();
        let frozen = Arc::new(Frozen::from(&value));
        assert_eq!(name(&value), Some("web-1"));
        assert_eq!(name(&frozen), Some("web-1"));
        assert_eq!(name(&&*frozen), Some("web-1"));
        assert_eq!(frozen["metadata"]["labels"].entries().len(), 2);
        assert_eq!(value["spec"]["containers"].elements().len(), 1);
    }
}
