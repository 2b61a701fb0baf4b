//! One request on a resource: the verb, the typed options from [`Query`], the decoded body —
//! handed to the registry — and the answer in the negotiated format.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::Response;
use bytes::Bytes;
use futures::StreamExt;
use plinth_core::{ApiError, StatusReason};
use serde_json::{Value, json};

use super::AppState;
use super::body::{decode_body, decode_patch};
use super::negotiate::{Format, partial, respond, respond_bytes, with_body};
use super::query::Query;
use plinth_registry::resources::ResourceDef;
use plinth_registry::table::{self, IncludeObject};
use plinth_registry::{Listed, Part, Registry, ScaleWrite, WriteOptions, default_watch_timeout};

/// The field manager of a write that names none: its User-Agent up to the first `/`, as
/// kube-apiserver records it.
pub(super) fn default_manager(user_agent: &str) -> String {
    user_agent
        .split('/')
        .next()
        .unwrap_or("")
        .chars()
        .take(128)
        .collect()
}

/// One request on a resource.
pub(super) struct Call<'a> {
    pub(super) state: &'a AppState,
    pub(super) def: Arc<ResourceDef>,
    pub(super) namespace: Option<String>,
    pub(super) name: Option<String>,
    pub(super) subresource: Option<String>,
    /// The path after a `proxy` subresource.
    pub(super) tail: Option<String>,
    pub(super) format: Format,
    pub(super) query: &'a Query,
    pub(super) headers: &'a HeaderMap,
    /// Who asks.
    pub(super) user: &'a plinth_auth::User,
    /// The connection's upgrade, if it asks for one.
    pub(super) upgrade: &'a std::sync::Mutex<Option<hyper::upgrade::OnUpgrade>>,
}

impl Call<'_> {
    /// kube's proxy answer to a GET or HEAD of the proxy's root without its slash
    /// (`…/pods/web/proxy?x=1`): 301 to the same path with it (`…/proxy/?x=1`), so that the
    /// page's relative links resolve under the proxy.
    fn proxy_root_redirect(&self, method: &Method) -> Option<Response> {
        let plain = self
            .upgrade
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .is_none();
        if self.subresource.as_deref() != Some("proxy")
            || self.tail.is_some()
            || !matches!(*method, Method::GET | Method::HEAD)
            || !plain
        {
            return None;
        }
        let gv = &self.def.group_version;
        let mut location = if gv.group.is_empty() {
            format!("/api/{}", gv.version)
        } else {
            format!("/apis/{}/{}", gv.group, gv.version)
        };
        if let Some(namespace) = &self.namespace {
            location.push_str(&format!("/namespaces/{namespace}"));
        }
        location.push_str(&format!(
            "/{}/{}/proxy/",
            self.def.plural,
            self.name.as_deref().unwrap_or("")
        ));
        let pairs = self.query.pairs();
        if !pairs.is_empty() {
            let mut query = form_urlencoded::Serializer::new(String::new());
            for (k, v) in &pairs {
                query.append_pair(k, v);
            }
            location.push('?');
            location.push_str(&query.finish());
        }
        let mut response = Response::new(Body::empty());
        *response.status_mut() = StatusCode::MOVED_PERMANENTLY;
        let location = HeaderValue::from_str(&location).ok()?;
        response.headers_mut().insert(header::LOCATION, location);
        Some(response)
    }

    /// The request's write options; the field manager defaults to the client's User-Agent up
    /// to its first `/`, as kube-apiserver does.
    fn write_options(&self) -> Result<WriteOptions, ApiError> {
        let mut options = self.query.write_options()?;
        options.requester = Some(plinth_registry::Requester {
            user: self.user.clone(),
            authorizer: self.state.rbac.clone(),
        });
        let agent = self
            .headers
            .get(header::USER_AGENT)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        options.default_manager = default_manager(agent);
        Ok(options)
    }

    /// The write options of a create or update whose body is `body`: with the fields a JSON
    /// body gives twice, which its parse into an object hides.
    fn body_write_options(&self, body: &[u8]) -> Result<WriteOptions, ApiError> {
        let mut options = self.write_options()?;
        let json = matches!(
            super::body::content_type(self.headers).as_str(),
            "" | "application/json"
        );
        if json && options.field_validation != plinth_registry::FieldValidation::Ignore {
            options.duplicates = plinth_core::duplicates::duplicate_fields(body);
        }
        Ok(options)
    }

    fn registry(&self) -> &Registry {
        &self.state.registry
    }

    /// The admission this request's writes pass (the server's chain).
    fn admit(&self) -> &dyn plinth_registry::admit::Admit {
        &*self.state.admission
    }

    /// The registry with this request's admission, as a type's hooks read and write through it.
    fn objects(&self) -> plinth_registry::Admitted<'_> {
        self.state.registry.admitted(self.admit())
    }

    /// The namespace of the request: required for namespaced objects, none for cluster-scoped.
    fn namespace(&self) -> Result<Option<&str>, ApiError> {
        match (&self.namespace, self.def.namespaced) {
            (Some(_), false) => Err(ApiError::new(
                StatusReason::NotFound,
                "the server could not find the requested resource",
            )),
            (ns, _) => Ok(ns.as_deref()),
        }
    }

    /// JSON or YAML as asked, for answers that are not the resource (Status, Scale).
    fn plain_format(&self) -> Format {
        if self.format == Format::Yaml {
            Format::Yaml
        } else {
            Format::Json
        }
    }

    /// `value` in protobuf, `encoded` by the caller; JSON (which protobuf clients take too)
    /// if it has a field the protobuf message lacks.
    fn protobuf_or_json(
        &self,
        code: StatusCode,
        value: &Value,
        encoded: Result<Vec<u8>, plinth_protobuf::Unmapped>,
        warnings: &[String],
    ) -> Response {
        match encoded {
            Ok(bytes) => with_body(code, plinth_protobuf::MEDIA_TYPE, bytes, warnings),
            Err(unmapped) => {
                tracing::warn!(field = %unmapped.0, kind = %self.def.kind, "no protobuf field for it: answered in JSON");
                respond(code, value, Format::Json, warnings)
            }
        }
    }

    fn object_response(&self, code: StatusCode, object: &Value, warnings: &[String]) -> Response {
        match self.format {
            Format::Protobuf { .. } => self.protobuf_or_json(
                code,
                object,
                plinth_protobuf::encode_object(object),
                warnings,
            ),
            Format::Metadata => respond(code, &partial(object), Format::Json, warnings),
            Format::MetadataProtobuf => {
                let partial = partial(object);
                self.protobuf_or_json(
                    code,
                    &partial,
                    plinth_protobuf::encode_object(&partial),
                    warnings,
                )
            }
            Format::Table => respond(
                code,
                &table::of_object(
                    &self.def,
                    object,
                    IncludeObject::parse(self.query.get("includeObject")),
                    true,
                ),
                Format::Json,
                warnings,
            ),
            format => respond(code, object, format, warnings),
        }
    }

    /// Serves the request.
    pub(super) async fn run(self, method: &Method, body: Bytes) -> Result<Response, ApiError> {
        if self.def.answer.is_some()
            && matches!(
                self.format,
                Format::Table | Format::Metadata | Format::MetadataProtobuf
            )
        {
            // kube's review resources have no table convertor and no object metadata to give.
            let what = if self.format == Format::Table {
                "being converted to a Table"
            } else {
                "metadata"
            };
            return Err(ApiError::new(
                plinth_core::StatusReason::NotAcceptable,
                format!(
                    "the resource {}/{}, Resource={} does not support {what}",
                    self.def.group_version.group, self.def.group_version.version, self.def.plural
                ),
            ));
        }
        if let Some(answer) = self.def.answer {
            return self.answer(answer, method, &body).await;
        }
        if let Some((_, answer)) = self
            .def
            .answered_subresources
            .iter()
            .find(|(sub, _)| Some(*sub) == self.subresource.as_deref())
        {
            return self.answer_subresource(*answer, method, &body).await;
        }
        if let Some(computed) = self.def.computed {
            if *method != Method::GET || self.subresource.is_some() || self.query.flag("watch") {
                return Err(ApiError::method_not_allowed());
            }
            let labels = match self.query.get("labelSelector") {
                Some(text) => plinth_core::selector::LabelSelector::parse(text).map_err(|e| {
                    ApiError::bad_request(format!("unable to parse requirement: {e}"))
                })?,
                None => plinth_core::selector::LabelSelector::default(),
            };
            let objects = self.objects();
            let reading = plinth_registry::resources::Reading {
                objects: &objects,
                nodes: &*self.state.nodes,
                namespace: self.namespace.as_deref(),
                name: self.name.as_deref(),
                labels,
            };
            let answer = computed(reading).await?;
            // Tables as for stored resources (`kubectl get componentstatuses`); other formats
            // as JSON, YAML, or protobuf where the kind has one.
            return Ok(match self.format {
                Format::Table if self.name.is_some() => {
                    self.object_response(StatusCode::OK, &answer, &[])
                }
                Format::Table => list_response(
                    &self.def,
                    Format::Table,
                    IncludeObject::parse(self.query.get("includeObject")),
                    Listed::Value(answer),
                ),
                _ => respond(StatusCode::OK, &answer, self.plain_format(), &[]),
            });
        }
        if let Some((_, connect)) = self
            .def
            .connect_subresources
            .iter()
            .find(|(sub, _)| Some(*sub) == self.subresource.as_deref())
        {
            let name = self
                .name
                .as_deref()
                .ok_or_else(ApiError::method_not_allowed)?;
            // A proxy's name may carry a scheme and a port: `[scheme:]name[:port]`.
            let (scheme, name, port) = match self.subresource.as_deref() {
                Some("proxy") => match name.split(':').collect::<Vec<_>>().as_slice() {
                    [name, port] => ("", *name, *port),
                    [scheme, name, port] => (*scheme, *name, *port),
                    _ => ("", name, ""),
                },
                _ => ("", name, ""),
            };
            let object = self
                .registry()
                .get(&self.def, self.namespace()?, name)
                .await?;
            self.admit_connect(name).await?;
            if let Some(redirect) = self.proxy_root_redirect(method) {
                return Ok(redirect);
            }
            let objects = self.objects();
            let request = plinth_registry::resources::ConnectRequest {
                object,
                method: method.clone(),
                query: self.query.pairs(),
                headers: self.headers.clone(),
                upgrade: self
                    .upgrade
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .take(),
                objects: &objects,
                nodes: &*self.state.nodes,
                tail: self.tail.clone().unwrap_or_default(),
                port: port.to_owned(),
                scheme: scheme.to_owned(),
                body,
            };
            return connect(request).await;
        }
        let part = match self.subresource.as_deref() {
            None => Part::Main,
            Some("status") if self.def.status_subresource => Part::Status,
            Some(sub)
                if let Some((name, pointer)) = self
                    .def
                    .field_subresources
                    .iter()
                    .find(|(name, _)| *name == sub) =>
            {
                let verb = match *method {
                    Method::GET => "get",
                    Method::PUT => "update",
                    Method::PATCH => "patch",
                    _ => "",
                };
                let allowed = self
                    .def
                    .discovered_subresources
                    .iter()
                    .any(|d| d.name == *name && d.verbs.contains(&verb));
                if !allowed {
                    return Err(ApiError::method_not_allowed());
                }
                Part::Field { name, pointer }
            }
            Some("scale") if self.def.scale.is_some() => return self.scale(method, body).await,
            Some(_) => {
                return Err(ApiError::new(
                    StatusReason::NotFound,
                    "the server could not find the requested resource",
                ));
            }
        };
        let namespace = self.namespace()?.map(str::to_owned);
        let ns = namespace.as_deref();
        let registry = self.registry();
        match (method.clone(), self.name.clone()) {
            (Method::GET, Some(name)) => {
                if let Some(rv) = self
                    .query
                    .get("resourceVersion")
                    .filter(|rv| !rv.is_empty())
                {
                    plinth_registry::parse_rv(rv)?;
                }
                let object = registry.get(&self.def, ns, &name).await?;
                Ok(self.object_response(StatusCode::OK, &object, &[]))
            }
            (Method::GET, None) if self.query.flag("watch") => self.watch(namespace).await,
            (Method::GET, None) => {
                let options = self.query.list_options()?;
                let list = registry.list_encoded(&self.def, ns, &options).await?;
                if matches!(self.format, Format::Protobuf { .. }) {
                    return self.protobuf_list(list).await;
                }
                // Writing a list (a Table's rows, above all) is CPU work: off the async workers.
                let (def, format) = (self.def.clone(), self.format);
                let include = IncludeObject::parse(self.query.get("includeObject"));
                tokio::task::spawn_blocking(move || list_response(&def, format, include, list))
                    .await
                    .map_err(|e| ApiError::internal(format!("list: {e}")))
            }
            (Method::POST, None) => {
                let options = self.body_write_options(&body)?;
                let object = decode_body(self.headers, &body)?;
                let written = registry
                    .create(
                        self.admit(),
                        &self.def,
                        ns.or(Some("default")).filter(|_| self.def.namespaced),
                        object,
                        &options,
                    )
                    .await?;
                Ok(self.object_response(StatusCode::CREATED, &written.object, &written.warnings))
            }
            (Method::PUT, Some(name)) => {
                let options = self.body_write_options(&body)?;
                let object = decode_body(self.headers, &body)?;
                let written = registry
                    .update(self.admit(), &self.def, ns, &name, object, part, &options)
                    .await?;
                Ok(self.written_response(&written))
            }
            (Method::PATCH, Some(name)) => {
                let options = self.write_options()?;
                let patch = decode_patch(self.headers, &body)?;
                if matches!(patch, plinth_registry::Patch::Apply(_))
                    && options.field_validation == plinth_registry::FieldValidation::Strict
                {
                    strict_yaml(&body)?;
                }
                let written = registry
                    .patch(self.admit(), &self.def, ns, &name, patch, part, &options)
                    .await?;
                Ok(self.written_response(&written))
            }
            (Method::DELETE, Some(name)) => {
                let options = self.delete_options(&body)?;
                let deleted = registry
                    .delete(self.admit(), &self.def, ns, &name, &options)
                    .await?;
                if deleted.gone && !self.def.delete_returns_object {
                    let uid = plinth_core::meta::meta_str(&deleted.object, "uid").unwrap_or("");
                    let mut details = json!({"name": name, "kind": self.def.plural, "uid": uid});
                    if !self.def.group_version.group.is_empty() {
                        details["group"] = json!(self.def.group_version.group);
                    }
                    let status = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details});
                    return Ok(respond(StatusCode::OK, &status, self.plain_format(), &[]));
                }
                Ok(self.object_response(StatusCode::OK, &deleted.object, &[]))
            }
            (Method::DELETE, None) => {
                let options = self.delete_options(&body)?;
                let list_options = self.query.list_options()?;
                let list = registry.list(&self.def, ns, &list_options).await?;
                for item in list["items"].as_array().cloned().unwrap_or_default() {
                    let item_ns = plinth_core::meta::namespace(&item).map(str::to_owned);
                    let item_name = plinth_core::meta::name(&item).unwrap_or("").to_owned();
                    match registry
                        .delete(
                            self.admit(),
                            &self.def,
                            item_ns.as_deref(),
                            &item_name,
                            &options,
                        )
                        .await
                    {
                        Ok(_) => {}
                        Err(e) if e.reason == StatusReason::NotFound => {}
                        Err(e) => return Err(e),
                    }
                }
                let status = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"});
                Ok(respond(StatusCode::OK, &status, Format::Json, &[]))
            }
            _ => Err(ApiError::method_not_allowed()),
        }
    }

    /// 201 for a write that created, 200 otherwise.
    fn written_response(&self, written: &plinth_registry::Written) -> Response {
        let code = if written.created {
            StatusCode::CREATED
        } else {
            StatusCode::OK
        };
        self.object_response(code, &written.object, &written.warnings)
    }

    /// A list in protobuf, encoded on the blocking pool (a first encoding of many objects is
    /// CPU work); JSON if an item has no protobuf form.
    async fn protobuf_list(&self, list: Listed) -> Result<Response, ApiError> {
        if let Listed::Encoded(encoded) = &list
            && encoded.all_cached()
        {
            // Streamed, as JSON lists are: the envelope and metadata at once, the items'
            // cached messages in pieces as the connection takes them. (Items encoded for this
            // list are encoded on the blocking pool below.)
            if let Ok(chunks) = encoded.protobuf_chunks(LIST_CHUNK) {
                let stream = futures::stream::iter(chunks.map(Ok::<_, std::convert::Infallible>));
                return Ok(with_body(
                    StatusCode::OK,
                    plinth_protobuf::MEDIA_TYPE,
                    axum::body::Body::from_stream(stream),
                    &[],
                ));
            }
        }
        let (list, encoded) = tokio::task::spawn_blocking(move || {
            let encoded = match &list {
                Listed::Encoded(encoded) => encoded.to_protobuf(),
                Listed::Value(value) => plinth_protobuf::encode_list(value),
            };
            (list, encoded)
        })
        .await
        .map_err(|e| ApiError::internal(format!("list: {e}")))?;
        Ok(match encoded {
            Ok(bytes) => with_body(StatusCode::OK, plinth_protobuf::MEDIA_TYPE, bytes, &[]),
            Err(unmapped) => {
                tracing::warn!(field = %unmapped.0, kind = %self.def.kind, "no protobuf field for it: answered in JSON");
                match list {
                    Listed::Encoded(e) => {
                        respond_bytes(StatusCode::OK, e.to_json(), "application/json")
                    }
                    Listed::Value(v) => respond(StatusCode::OK, &v, Format::Json, &[]),
                }
            }
        })
    }

    /// A question resource: a create is answered (201, the object with its status) and not
    /// stored; nothing else is served.
    async fn answer(
        &self,
        answer: plinth_registry::resources::Answer,
        method: &Method,
        body: &Bytes,
    ) -> Result<Response, ApiError> {
        if method != Method::POST || self.name.is_some() || self.subresource.is_some() {
            return Err(ApiError::method_not_allowed());
        }
        let mut object = decode_body(self.headers, body)?;
        let findings = self.def.strategy.decode(&self.def, &mut object);
        if let Some(error) = findings.type_error {
            return Err(ApiError::bad_request(format!("{}: {error}", self.def.kind)));
        }
        if !object.is_object() {
            return Err(ApiError::bad_request(
                "the object provided is not a JSON object",
            ));
        }
        // Absent type fields default from the URL, as the decoder defaults them.
        let expected = self.def.group_version.api_version();
        for (field, wanted) in [("apiVersion", expected.as_str()), ("kind", &self.def.kind)] {
            match object.get(field).and_then(Value::as_str) {
                None | Some("") => object[field] = json!(wanted),
                Some(given) if given == wanted => {}
                Some(given) => {
                    return Err(ApiError::bad_request(format!(
                        "the {field} in the data ({given}) does not match the expected {field} ({wanted})"
                    )));
                }
            }
        }
        if !object.get("metadata").is_some_and(Value::is_object) {
            object["metadata"] = json!({});
        }
        let objects = self.objects();
        let asker = self.asker(&objects);
        let answered = answer(&asker, object).await?;
        Ok(self.object_response(StatusCode::CREATED, &answered, &[]))
    }

    /// Admission of a connection (kube's CONNECT): the validating webhooks and policies see
    /// its options (`PodAttachOptions`, `PodExecOptions`, …) as the object.
    async fn admit_connect(&self, name: &str) -> Result<(), ApiError> {
        let subresource = self.subresource.as_deref().unwrap_or("");
        let kind = match (self.def.kind.as_str(), subresource) {
            ("Pod", "attach") => "PodAttachOptions",
            ("Pod", "exec") => "PodExecOptions",
            ("Pod", "portforward") => "PodPortForwardOptions",
            ("Pod", "proxy") => "PodProxyOptions",
            ("Service", "proxy") => "ServiceProxyOptions",
            ("Node", "proxy") => "NodeProxyOptions",
            _ => return Ok(()),
        };
        let mut options = json!({"kind": kind, "apiVersion": "v1"});
        for (key, value) in self.query.pairs() {
            match key.as_str() {
                "stdin" | "stdout" | "stderr" | "tty" => {
                    options[key.as_str()] = json!(matches!(value.as_str(), "true" | "1"));
                }
                "container" => options["container"] = json!(value),
                "command" => {
                    if !options["command"].is_array() {
                        options["command"] = json!([]);
                    }
                    if let Some(list) = options["command"].as_array_mut() {
                        list.push(json!(value));
                    }
                }
                "ports" => {
                    if !options["ports"].is_array() {
                        options["ports"] = json!([]);
                    }
                    if let (Some(list), Ok(port)) =
                        (options["ports"].as_array_mut(), value.parse::<i64>())
                    {
                        list.push(json!(port));
                    }
                }
                _ => {}
            }
        }
        if let Some(tail) = self.tail.as_deref().filter(|t| !t.is_empty()) {
            options["path"] = json!(tail);
        }
        let request = plinth_registry::admit::Request {
            operation: plinth_registry::admit::Operation::Connect,
            def: &self.def,
            subresource,
            namespace: self.namespace.as_deref(),
            name,
            namespace_object: None,
            user: self.user,
            dry_run: false,
            options: Value::Null,
        };
        let objects = self.objects();
        self.admit()
            .validate(&objects, &request, Some(&options), None)
            .await
            .map(drop)
    }

    fn asker<'a>(
        &'a self,
        objects: &'a plinth_registry::Admitted<'a>,
    ) -> plinth_registry::resources::Asker<'a> {
        plinth_registry::resources::Asker {
            user: self.user,
            authorizer: &*self.state.rbac,
            namespace: self.namespace.as_deref(),
            objects,
            tokens: &*self.state.authenticator.service_accounts,
            reviewer: &self.state.authenticator,
        }
    }

    /// A subresource answered from its parent (`serviceaccounts/<name>/token`): POST only.
    async fn answer_subresource(
        &self,
        answer: plinth_registry::resources::SubAnswer,
        method: &Method,
        body: &Bytes,
    ) -> Result<Response, ApiError> {
        let Some(name) = self.name.as_deref().filter(|_| method == Method::POST) else {
            return Err(ApiError::method_not_allowed());
        };
        let request = decode_body(self.headers, body)?;
        if !request.is_object() {
            return Err(ApiError::bad_request(
                "the object provided is not a JSON object",
            ));
        }
        let parent = self
            .registry()
            .get(&self.def, self.namespace()?, name)
            .await?;
        let objects = self.objects();
        let asker = self.asker(&objects);
        let answered = answer(&asker, parent, request).await?;
        Ok(self.object_response(StatusCode::CREATED, &answered, &[]))
    }

    /// `/scale`: GET, PUT and PATCH of the autoscaling/v1 Scale.
    async fn scale(&self, method: &Method, body: Bytes) -> Result<Response, ApiError> {
        let name = self.name.clone().ok_or_else(ApiError::method_not_allowed)?;
        let ns = self.namespace()?;
        let registry = self.registry();
        let change = match *method {
            Method::GET => {
                let scale = registry.get_scale(&self.def, ns, &name).await?;
                return Ok(respond(StatusCode::OK, &scale, self.plain_format(), &[]));
            }
            Method::PUT => ScaleWrite::Replace(decode_body(self.headers, &body)?),
            Method::PATCH => ScaleWrite::Patch(decode_patch(self.headers, &body)?),
            _ => return Err(ApiError::method_not_allowed()),
        };
        let options = self.write_options()?;
        let scale = registry
            .write_scale(self.admit(), &self.def, ns, &name, change, &options)
            .await?;
        Ok(respond(StatusCode::OK, &scale, self.plain_format(), &[]))
    }

    /// The delete options from the query and the `DeleteOptions` body, if any.
    fn delete_options(&self, body: &Bytes) -> Result<plinth_registry::DeleteOptions, ApiError> {
        let parsed = if body.iter().all(u8::is_ascii_whitespace) {
            None
        } else {
            Some(decode_body(self.headers, body)?)
        };
        let mut options = self.query.delete_options(parsed.as_ref())?;
        options.user = Some(self.user.clone());
        Ok(options)
    }

    /// A watch in protobuf frames (`metav1.WatchEvent`, length-prefixed). An event whose
    /// object has no protobuf form ends the stream with a log line: the client re-watches.
    fn protobuf_watch(
        &self,
        events: futures::stream::BoxStream<'static, plinth_registry::WatchEvent>,
        stop: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> Response {
        let kind = self.def.kind.clone();
        let body = events
            .take_until(Box::pin(stop))
            .map(move |event| {
                event
                    .to_protobuf_frame()
                    .map(Bytes::from)
                    .map_err(|unmapped| {
                        tracing::warn!(field = %unmapped.0, %kind, "no protobuf field for it: watch ended");
                        std::io::Error::other("no protobuf form")
                    })
            })
            .take_while(|frame| futures::future::ready(frame.is_ok()));
        let mut response = Response::new(Body::from_stream(body));
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static(plinth_protobuf::WATCH_MEDIA_TYPE),
        );
        response.headers_mut().insert(
            header::CACHE_CONTROL,
            HeaderValue::from_static("no-cache, private"),
        );
        response
    }

    async fn watch(&self, namespace: Option<String>) -> Result<Response, ApiError> {
        let options = self.query.watch_options()?;
        let timeout = options.timeout.unwrap_or_else(default_watch_timeout);
        let events = self
            .registry()
            .watch(self.def.clone(), namespace, options)
            .await?;
        let mut shutdown = self.state.shutdown.clone();
        let stop = async move {
            tokio::select! {
                () = tokio::time::sleep(timeout) => {}
                _ = shutdown.wait_for(|stopping| *stopping) => {}
            }
        };
        if matches!(self.format, Format::Protobuf { .. }) {
            return Ok(self.protobuf_watch(events, stop));
        }
        if self.format == Format::MetadataProtobuf {
            let partials = events.map(|event| match event.kind {
                "ERROR" => event,
                kind => plinth_registry::WatchEvent::new(kind, partial(&event.object())),
            });
            return Ok(self.protobuf_watch(partials.boxed(), stop));
        }
        let (def, table, metadata_only) = (
            self.def.clone(),
            self.format == Format::Table,
            self.format == Format::Metadata,
        );
        let include = IncludeObject::parse(self.query.get("includeObject"));
        let mut first = true;
        let body = events.take_until(Box::pin(stop)).map(move |event| {
            let object = if table && matches!(event.kind, "ADDED" | "MODIFIED" | "DELETED") {
                let headers = std::mem::replace(&mut first, false);
                table::of_object(&def, &event.object(), include, headers)
            } else if metadata_only && event.kind != "ERROR" {
                partial(&event.object())
            } else {
                // Plain JSON: the cache's bytes when it encoded the object.
                return Ok::<_, std::convert::Infallible>(event.to_json_line());
            };
            Ok(plinth_registry::WatchEvent::new(event.kind, object).to_json_line())
        });
        let mut response = Response::new(Body::from_stream(body));
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        response.headers_mut().insert(
            header::CACHE_CONTROL,
            HeaderValue::from_static("no-cache, private"),
        );
        Ok(response)
    }
}

/// The size of the pieces a streamed list is written in.
const LIST_CHUNK: usize = 64 * 1024;

/// A list in the negotiated format (protobuf is [`Call::protobuf_list`]); JSON from the
/// watch cache is its items' cached bytes concatenated.
fn list_response(
    def: &ResourceDef,
    format: Format,
    include: IncludeObject,
    list: Listed,
) -> Response {
    let list = match list {
        Listed::Encoded(encoded) if format == Format::Json => {
            // Streamed: the envelope leaves at once, the items in pieces as the connection
            // takes them (one piece in memory beside the cached items).
            let chunks = std::sync::Arc::new(encoded).json_chunks(LIST_CHUNK);
            let stream = futures::stream::iter(chunks.map(Ok::<_, std::convert::Infallible>));
            return with_body(
                StatusCode::OK,
                "application/json",
                axum::body::Body::from_stream(stream),
                &[],
            );
        }
        Listed::Encoded(encoded) if format == Format::Table => {
            // Streamed likewise: each piece's rows made from its items as it is written.
            let chunks = table::list_chunks(
                def.clone(),
                std::sync::Arc::new(encoded),
                include,
                LIST_CHUNK,
            );
            let stream = futures::stream::iter(chunks.map(Ok::<_, std::convert::Infallible>));
            return with_body(
                StatusCode::OK,
                "application/json",
                axum::body::Body::from_stream(stream),
                &[],
            );
        }
        other => other.into_value(),
    };
    let list = &list;
    match format {
        Format::Table => respond(
            StatusCode::OK,
            &table::of_list(def, list, include),
            Format::Json,
            &[],
        ),
        Format::MetadataProtobuf => {
            let items: Result<Vec<_>, _> = list["items"]
                .as_array()
                .map(Vec::as_slice)
                .unwrap_or_default()
                .iter()
                .map(|item| plinth_protobuf::encode_message(&partial(item)))
                .collect();
            let empty = json!({});
            let encoded = items.and_then(|items| {
                plinth_protobuf::encode_list_of(
                    "meta.k8s.io/v1",
                    "PartialObjectMetadataList",
                    list.get("metadata").unwrap_or(&empty),
                    &items,
                )
            });
            match encoded {
                Ok(bytes) => with_body(StatusCode::OK, plinth_protobuf::MEDIA_TYPE, bytes, &[]),
                Err(unmapped) => {
                    tracing::warn!(field = %unmapped.0, kind = %def.kind, "no protobuf field for it: answered in JSON");
                    list_response(def, Format::Metadata, include, Listed::Value(list.clone()))
                }
            }
        }
        Format::Metadata => {
            let items: Vec<Value> = list["items"]
                .as_array()
                .map(|i| i.iter().map(partial).collect())
                .unwrap_or_default();
            let metadata_list = json!({
                "kind": "PartialObjectMetadataList",
                "apiVersion": "meta.k8s.io/v1",
                "metadata": list["metadata"],
                "items": items,
            });
            respond(StatusCode::OK, &metadata_list, Format::Json, &[])
        }
        format => respond(StatusCode::OK, list, format, &[]),
    }
}

/// kube's strict YAML check of an apply patch: keys given twice in one mapping are refused
/// as go-yaml words them.
fn strict_yaml(body: &[u8]) -> Result<(), ApiError> {
    let text = String::from_utf8_lossy(body);
    let twice = plinth_core::duplicates::yaml_duplicate_keys(&text);
    if twice.is_empty() {
        return Ok(());
    }
    let lines: Vec<String> = twice
        .iter()
        .map(|(line, key)| format!("  line {line}: key {key:?} already set in map"))
        .collect();
    Err(ApiError::bad_request(format!(
        "error strict decoding YAML: error converting YAML to JSON: yaml: unmarshal errors:\n{}",
        lines.join("\n")
    )))
}
