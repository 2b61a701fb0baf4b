//! API groups, versions, kinds and resources.

use std::fmt;

/// An API group and version: `v1` (the core group) or `coordination.k8s.io/v1`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GroupVersion {
    /// The group; empty for the core group.
    pub group: String,
    /// The version.
    pub version: String,
}

impl GroupVersion {
    /// A group and version.
    pub fn new(group: impl Into<String>, version: impl Into<String>) -> Self {
        Self {
            group: group.into(),
            version: version.into(),
        }
    }

    /// Parses an `apiVersion` string: `v1` or `group/version`.
    pub fn parse(api_version: &str) -> Option<Self> {
        match api_version.split_once('/') {
            None if !api_version.is_empty() => Some(Self::new("", api_version)),
            Some((group, version))
                if !group.is_empty() && !version.is_empty() && !version.contains('/') =>
            {
                Some(Self::new(group, version))
            }
            _ => None,
        }
    }

    /// The `apiVersion` string.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }
}

impl fmt::Display for GroupVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.api_version())
    }
}

/// A kind in a group and version.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct GroupVersionKind {
    /// The group and version.
    pub group_version: GroupVersion,
    /// The kind, e.g. `ConfigMap`.
    pub kind: String,
}

/// A resource in a group, as named in errors: `configmaps`, `leases.coordination.k8s.io`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct GroupResource {
    /// The group; empty for the core group.
    pub group: String,
    /// The resource (plural), e.g. `configmaps`.
    pub resource: String,
}

impl GroupResource {
    /// A resource in a group.
    pub fn new(group: impl Into<String>, resource: impl Into<String>) -> Self {
        Self {
            group: group.into(),
            resource: resource.into(),
        }
    }
}

impl fmt::Display for GroupResource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.group.is_empty() {
            f.write_str(&self.resource)
        } else {
            write!(f, "{}.{}", self.resource, self.group)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_versions_parse_and_print() {
        assert_eq!(GroupVersion::parse("v1"), Some(GroupVersion::new("", "v1")));
        let lease = GroupVersion::parse("coordination.k8s.io/v1").unwrap();
        assert_eq!(
            (lease.group.as_str(), lease.api_version()),
            ("coordination.k8s.io", "coordination.k8s.io/v1".into())
        );
        for bad in ["", "/v1", "g/", "a/b/c"] {
            assert_eq!(GroupVersion::parse(bad), None, "{bad:?}");
        }
        assert_eq!(
            GroupResource::new("coordination.k8s.io", "leases").to_string(),
            "leases.coordination.k8s.io"
        );
        assert_eq!(
            GroupResource::new("", "configmaps").to_string(),
            "configmaps"
        );
    }
}
