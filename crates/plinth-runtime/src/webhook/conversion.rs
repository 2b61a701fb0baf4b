//! CRD conversion, hub and spoke (controller-runtime's `conversion.Hub`/`Convertible`): each
//! served version converts to and from one hub type, so N versions need N pairs of functions,
//! not N². A [`Converter`] answers kube's `ConversionReview` (`apiextensions.k8s.io/v1`).

use std::collections::HashMap;
use std::sync::Arc;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

type IntoHub<H> = Arc<dyn Fn(Value) -> Result<H, String> + Send + Sync>;
type FromHub<H> = Arc<dyn Fn(&H) -> Result<Value, String> + Send + Sync>;

/// Converts objects between the versions of one kind through the hub type `H`.
///
/// # Example
///
/// ```
/// use plinth_runtime::webhook::Converter;
/// use serde_json::{json, Value};
/// // v1 says `size: 3`; v2, the hub, says `replicas: 3`.
/// #[derive(serde::Serialize, serde::Deserialize)]
/// struct V1 { kind: String, metadata: Value, spec: V1Spec }
/// #[derive(serde::Serialize, serde::Deserialize)]
/// struct V1Spec { size: i64 }
/// #[derive(serde::Serialize, serde::Deserialize, Clone)]
/// struct V2 { kind: String, metadata: Value, spec: V2Spec }
/// #[derive(serde::Serialize, serde::Deserialize, Clone)]
/// struct V2Spec { replicas: i64 }
/// let converter = Converter::<V2>::new()
///     .version("example.com/v2", |v2: V2| v2, |hub: &V2| hub.clone())
///     .version(
///         "example.com/v1",
///         |v1: V1| V2 { kind: v1.kind, metadata: v1.metadata, spec: V2Spec { replicas: v1.spec.size } },
///         |hub: &V2| V1 { kind: hub.kind.clone(), metadata: hub.metadata.clone(),
///                         spec: V1Spec { size: hub.spec.replicas } },
///     );
/// let old = json!({"apiVersion": "example.com/v1", "kind": "Widget",
///                  "metadata": {"name": "w"}, "spec": {"size": 3}});
/// let new = converter.convert(old, "example.com/v2").unwrap();
/// assert_eq!(new["spec"], json!({"replicas": 3}));
/// ```
pub struct Converter<H> {
    versions: HashMap<String, (IntoHub<H>, FromHub<H>)>,
}

impl<H> std::fmt::Debug for Converter<H> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut versions: Vec<&String> = self.versions.keys().collect();
        versions.sort();
        f.debug_struct("Converter")
            .field("versions", &versions)
            .finish()
    }
}

impl<H: 'static> Default for Converter<H> {
    fn default() -> Self {
        Self {
            versions: HashMap::new(),
        }
    }
}

impl<H: Send + Sync + 'static> Converter<H> {
    /// A converter knowing no version yet.
    ///
    /// # Example
    ///
    /// ```
    /// let converter = plinth_runtime::webhook::Converter::<serde_json::Value>::new();
    /// // No version known yet: nothing converts.
    /// let object = serde_json::json!({"apiVersion": "example.com/v1"});
    /// assert!(converter.convert(object, "example.com/v2").is_err());
    /// ```
    pub fn new() -> Self {
        Self::default()
    }

    /// `api_version` (`example.com/v1`) is the type `T`, converted to the hub by `into_hub` and
    /// back by `from_hub` (for the hub's own version, both are the identity).
    ///
    /// # Example
    ///
    /// ```
    /// use plinth_runtime::webhook::Converter;
    /// use serde_json::{json, Value};
    /// // v1 says `size: 3`; v2, the hub, says `replicas: 3`.
    /// #[derive(serde::Serialize, serde::Deserialize)]
    /// struct V1 { kind: String, metadata: Value, spec: V1Spec }
    /// #[derive(serde::Serialize, serde::Deserialize)]
    /// struct V1Spec { size: i64 }
    /// #[derive(serde::Serialize, serde::Deserialize, Clone)]
    /// struct V2 { kind: String, metadata: Value, spec: V2Spec }
    /// #[derive(serde::Serialize, serde::Deserialize, Clone)]
    /// struct V2Spec { replicas: i64 }
    /// let converter = Converter::<V2>::new()
    ///     .version("example.com/v2", |v2: V2| v2, |hub: &V2| hub.clone())
    ///     .version(
    ///         "example.com/v1",
    ///         |v1: V1| V2 { kind: v1.kind, metadata: v1.metadata, spec: V2Spec { replicas: v1.spec.size } },
    ///         |hub: &V2| V1 { kind: hub.kind.clone(), metadata: hub.metadata.clone(),
    ///                         spec: V1Spec { size: hub.spec.replicas } },
    ///     );
    /// let v2 = json!({"apiVersion": "example.com/v2", "kind": "Widget",
    ///                 "metadata": {"name": "w"}, "spec": {"replicas": 5}});
    /// let v1 = converter.convert(v2, "example.com/v1").unwrap();
    /// assert_eq!((v1["apiVersion"].as_str(), &v1["spec"]), (Some("example.com/v1"), &json!({"size": 5})));
    /// ```
    #[must_use]
    pub fn version<T>(
        mut self,
        api_version: &str,
        into_hub: impl Fn(T) -> H + Send + Sync + 'static,
        from_hub: impl Fn(&H) -> T + Send + Sync + 'static,
    ) -> Self
    where
        T: DeserializeOwned + Serialize + 'static,
    {
        let version = api_version.to_owned();
        let into: IntoHub<H> = Arc::new(move |value: Value| {
            serde_json::from_value::<T>(value)
                .map(&into_hub)
                .map_err(|e| format!("decoding {version}: {e}"))
        });
        let target = api_version.to_owned();
        let from: FromHub<H> = Arc::new(move |hub: &H| {
            let mut value = serde_json::to_value(from_hub(hub))
                .map_err(|e| format!("encoding {target}: {e}"))?;
            value["apiVersion"] = json!(target);
            Ok(value)
        });
        self.versions.insert(api_version.to_owned(), (into, from));
        self
    }

    /// `object` in `desired` (an apiVersion).
    ///
    /// # Errors
    /// A version this converter does not know, or an object that does not decode as its type.
    ///
    /// # Example
    ///
    /// ```
    /// use plinth_runtime::webhook::Converter;
    /// use serde_json::{json, Value};
    /// // v1 says `size: 3`; v2, the hub, says `replicas: 3`.
    /// #[derive(serde::Serialize, serde::Deserialize)]
    /// struct V1 { kind: String, metadata: Value, spec: V1Spec }
    /// #[derive(serde::Serialize, serde::Deserialize)]
    /// struct V1Spec { size: i64 }
    /// #[derive(serde::Serialize, serde::Deserialize, Clone)]
    /// struct V2 { kind: String, metadata: Value, spec: V2Spec }
    /// #[derive(serde::Serialize, serde::Deserialize, Clone)]
    /// struct V2Spec { replicas: i64 }
    /// let converter = Converter::<V2>::new()
    ///     .version("example.com/v2", |v2: V2| v2, |hub: &V2| hub.clone())
    ///     .version(
    ///         "example.com/v1",
    ///         |v1: V1| V2 { kind: v1.kind, metadata: v1.metadata, spec: V2Spec { replicas: v1.spec.size } },
    ///         |hub: &V2| V1 { kind: hub.kind.clone(), metadata: hub.metadata.clone(),
    ///                         spec: V1Spec { size: hub.spec.replicas } },
    ///     );
    /// let unknown = json!({"apiVersion": "example.com/v3", "kind": "Widget"});
    /// assert_eq!(
    ///     converter.convert(unknown, "example.com/v1").unwrap_err(),
    ///     "cannot convert from unknown version \"example.com/v3\""
    /// );
    /// ```
    pub fn convert(&self, object: Value, desired: &str) -> Result<Value, String> {
        let from = object
            .get("apiVersion")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        if from == desired {
            return Ok(object);
        }
        let (into_hub, _) = self
            .versions
            .get(&from)
            .ok_or_else(|| format!("cannot convert from unknown version {from:?}"))?;
        let (_, from_hub) = self
            .versions
            .get(desired)
            .ok_or_else(|| format!("cannot convert to unknown version {desired:?}"))?;
        from_hub(&into_hub(object)?)
    }

    /// The answer to a ConversionReview's `request`: every object converted, or a failure
    /// naming the first that could not be.
    ///
    /// # Example
    ///
    /// ```
    /// use plinth_runtime::webhook::Converter;
    /// use serde_json::{json, Value};
    /// // v1 says `size: 3`; v2, the hub, says `replicas: 3`.
    /// #[derive(serde::Serialize, serde::Deserialize)]
    /// struct V1 { kind: String, metadata: Value, spec: V1Spec }
    /// #[derive(serde::Serialize, serde::Deserialize)]
    /// struct V1Spec { size: i64 }
    /// #[derive(serde::Serialize, serde::Deserialize, Clone)]
    /// struct V2 { kind: String, metadata: Value, spec: V2Spec }
    /// #[derive(serde::Serialize, serde::Deserialize, Clone)]
    /// struct V2Spec { replicas: i64 }
    /// let converter = Converter::<V2>::new()
    ///     .version("example.com/v2", |v2: V2| v2, |hub: &V2| hub.clone())
    ///     .version(
    ///         "example.com/v1",
    ///         |v1: V1| V2 { kind: v1.kind, metadata: v1.metadata, spec: V2Spec { replicas: v1.spec.size } },
    ///         |hub: &V2| V1 { kind: hub.kind.clone(), metadata: hub.metadata.clone(),
    ///                         spec: V1Spec { size: hub.spec.replicas } },
    ///     );
    /// let request = json!({
    ///     "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
    ///     "desiredAPIVersion": "example.com/v2",
    ///     "objects": [{"apiVersion": "example.com/v1", "kind": "Widget",
    ///                  "metadata": {"name": "w"}, "spec": {"size": 2}}]
    /// });
    /// let response = converter.review(&request);
    /// assert_eq!(response["uid"], request["uid"]);
    /// assert_eq!(response["result"]["status"], "Success");
    /// assert_eq!(response["convertedObjects"][0]["spec"]["replicas"], 2);
    /// ```
    pub fn review(&self, request: &Value) -> Value {
        let uid = request.get("uid").cloned().unwrap_or(Value::Null);
        let desired = request
            .get("desiredAPIVersion")
            .and_then(Value::as_str)
            .unwrap_or("");
        let objects = request
            .get("objects")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let converted: Result<Vec<Value>, String> = objects
            .into_iter()
            .map(|object| self.convert(object, desired))
            .collect();
        match converted {
            Ok(objects) => json!({"uid": uid, "convertedObjects": objects,
                "result": {"status": "Success", "metadata": {}}}),
            Err(message) => json!({"uid": uid, "convertedObjects": [],
                "result": {"status": "Failure", "message": message, "metadata": {}}}),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Deserialize, serde::Serialize)]
    struct V1 {
        #[serde(rename = "apiVersion")]
        api_version: String,
        kind: String,
        metadata: Value,
        spec: V1Spec,
    }
    #[derive(serde::Deserialize, serde::Serialize)]
    struct V1Spec {
        size: i64,
    }
    #[derive(serde::Deserialize, serde::Serialize, Clone)]
    struct V2 {
        #[serde(rename = "apiVersion")]
        api_version: String,
        kind: String,
        metadata: Value,
        spec: V2Spec,
    }
    #[derive(serde::Deserialize, serde::Serialize, Clone)]
    struct V2Spec {
        size: String,
    }

    fn converter() -> Converter<V2> {
        Converter::new()
            .version("example.com/v2", |v: V2| v, V2::clone)
            .version(
                "example.com/v1",
                |v: V1| V2 {
                    api_version: v.api_version,
                    kind: v.kind,
                    metadata: v.metadata,
                    spec: V2Spec {
                        size: format!("{}Gi", v.spec.size),
                    },
                },
                |h: &V2| V1 {
                    api_version: h.api_version.clone(),
                    kind: h.kind.clone(),
                    metadata: h.metadata.clone(),
                    spec: V1Spec {
                        size: h.spec.size.trim_end_matches("Gi").parse().unwrap_or(0),
                    },
                },
            )
    }

    #[test]
    fn objects_go_through_the_hub_both_ways() {
        let c = converter();
        let v1 = json!({"apiVersion": "example.com/v1", "kind": "W", "metadata": {"name": "a"}, "spec": {"size": 3}});
        let v2 = c.convert(v1.clone(), "example.com/v2").unwrap();
        assert_eq!(v2["apiVersion"], "example.com/v2");
        assert_eq!(v2["spec"]["size"], "3Gi");
        assert_eq!(v2["metadata"]["name"], "a");
        assert_eq!(c.convert(v2, "example.com/v1").unwrap(), v1);
        assert!(c.convert(v1, "example.com/v9").is_err());
    }

    #[test]
    fn reviews_answer_every_object_or_fail() {
        let c = converter();
        let request = json!({"uid": "u", "desiredAPIVersion": "example.com/v2", "objects": [
            {"apiVersion": "example.com/v1", "kind": "W", "metadata": {"name": "a"}, "spec": {"size": 1}},
            {"apiVersion": "example.com/v2", "kind": "W", "metadata": {"name": "b"}, "spec": {"size": "2Gi"}}]});
        let answer = c.review(&request);
        assert_eq!(answer["uid"], "u");
        assert_eq!(answer["result"]["status"], "Success");
        assert_eq!(answer["convertedObjects"][0]["spec"]["size"], "1Gi");
        let bad = json!({"uid": "u", "desiredAPIVersion": "example.com/v2", "objects": [
            {"apiVersion": "example.com/v1", "kind": "W", "metadata": {}, "spec": {"size": "x"}}]});
        let answer = c.review(&bad);
        assert_eq!(answer["result"]["status"], "Failure");
        assert!(
            answer["result"]["message"]
                .as_str()
                .unwrap()
                .contains("decoding example.com/v1")
        );
    }
}
