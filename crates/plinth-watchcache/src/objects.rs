//! A cache's objects by key, with how many sit under each parent key (a namespace's objects),
//! so a page of a list knows how many objects follow it without walking them.

use std::collections::{BTreeMap, HashMap};

use crate::Stored;

/// The objects of one resource by key; reads go to the map, writes through
/// [`Objects::insert`] and [`Objects::remove`], which keep the counts.
#[derive(Default)]
pub(crate) struct Objects {
    map: BTreeMap<String, Stored>,
    /// Objects per parent key (a key up to its last `/`, that included).
    parents: HashMap<String, usize>,
}

/// The key up to its last `/`, that included (a namespaced object's namespace prefix).
fn parent(key: &str) -> &str {
    key.rfind('/').map_or("", |at| &key[..=at])
}

impl Objects {
    /// The objects of `map`, counted.
    pub(crate) fn new(map: BTreeMap<String, Stored>) -> Self {
        let mut parents: HashMap<String, usize> = HashMap::new();
        for key in map.keys() {
            match parents.get_mut(parent(key)) {
                Some(count) => *count += 1,
                None => {
                    parents.insert(parent(key).to_owned(), 1);
                }
            }
        }
        Self { map, parents }
    }

    /// Puts `stored` at `key`.
    pub(crate) fn insert(&mut self, key: String, stored: Stored) {
        let parent_key = parent(&key).to_owned();
        if self.map.insert(key, stored).is_none() {
            *self.parents.entry(parent_key).or_default() += 1;
        }
    }

    /// Removes the object at `key`.
    pub(crate) fn remove(&mut self, key: &str) {
        if self.map.remove(key).is_some()
            && let Some(count) = self.parents.get_mut(parent(key))
        {
            *count -= 1;
            if *count == 0 {
                self.parents.remove(parent(key));
            }
        }
    }

    /// How many objects are under `prefix`, when known without walking them: every object
    /// when `prefix` is the cache's own `root`, one parent's when `prefix` is `root` and one
    /// more segment ending in `/` (a namespace); `None` for any other prefix.
    pub(crate) fn count(&self, prefix: &str, root: &str) -> Option<usize> {
        if prefix == root {
            return Some(self.map.len());
        }
        let segment = prefix.strip_prefix(root)?.strip_suffix('/')?;
        (!segment.is_empty() && !segment.contains('/'))
            .then(|| self.parents.get(prefix).copied().unwrap_or(0))
    }
}

impl std::ops::Deref for Objects {
    type Target = BTreeMap<String, Stored>;

    fn deref(&self) -> &Self::Target {
        &self.map
    }
}
