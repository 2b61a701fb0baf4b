//! Who is asking, and whether they may: authentication (a chain — client certificates signed
//! by the cluster CA, the admin token, a static token file; first match wins, else 401) and
//! authorization (RBAC, [`rbac`]), as kube-apiserver's filters do them before a request reaches
//! its handler.
//!
//! Rooms: this file (users, the authenticator chain), `rbac` (the RBAC authorizer, which
//! implements `plinth_registry::authz::Authorizer`), `serviceaccount` (ServiceAccount tokens,
//! the `TokenIssuer`), `bootstrap` (the default roles and bindings every cluster has),
//! `controller` (keeping the authorizer in step with the RBAC objects, ClusterRole
//! aggregation), `pki` (the cluster CA, serving and client certificates, kubeconfigs),
//! `tokens` (the token file), `x509` (client certificates).

#![forbid(unsafe_code)]
#![warn(missing_docs)]
#![cfg_attr(not(test), warn(clippy::unwrap_used))]

pub mod bootstrap;
pub mod controller;
mod error;
pub mod node;
pub mod pki;
pub mod rbac;
pub mod serviceaccount;
mod tokens;
mod x509;

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Arc;

use axum::http::{HeaderMap, header};
use plinth_core::ApiError;
use plinth_registry::authz::ISSUER;
use plinth_registry::resources::Objects;

pub use error::CredentialsError;
pub use plinth_registry::authz::{Attributes, Authorizer, Decision, Rule};
pub use plinth_registry::user::{ANONYMOUS, AUTHENTICATED, MASTERS, UNAUTHENTICATED, User};
pub use tokens::TokenFileError;

/// The user the admin token stands for.
pub const ADMIN: &str = "plinth-admin";

/// The client certificate of a TLS connection (DER), already verified against the cluster
/// CA by the TLS layer; every request on the connection carries it.
#[derive(Clone, Debug)]
pub struct PeerCertificate(pub Arc<Vec<u8>>);

/// The authenticator chain.
#[derive(Debug)]
pub struct Authenticator {
    admin_token: String,
    tokens: HashMap<String, User>,
    anonymous: bool,
    /// ServiceAccount tokens.
    pub service_accounts: Arc<serviceaccount::Tokens>,
}

impl Authenticator {
    /// The chain with the admin token and, if given, kube's static token file
    /// (`token,user,uid,"group1,group2"` per line).
    ///
    /// # Errors
    /// [`TokenFileError`] for a file that cannot be read or has a malformed line.
    pub fn new(
        admin_token: &str,
        token_file: Option<&Path>,
        service_accounts: Arc<serviceaccount::Tokens>,
    ) -> Result<Self, TokenFileError> {
        let tokens = match token_file {
            Some(path) => tokens::read(path)?,
            None => HashMap::new(),
        };
        Ok(Self {
            admin_token: admin_token.to_owned(),
            tokens,
            anonymous: false,
            service_accounts,
        })
    }

    /// With `allow`, a request without credentials is [`User::anonymous`] and RBAC decides
    /// what it may do (kube's `--anonymous-auth`); without, it gets 401. Credentials that
    /// fail still get 401 either way.
    #[must_use]
    pub fn with_anonymous(mut self, allow: bool) -> Self {
        self.anonymous = allow;
        self
    }

    /// Who sent a request with these headers over a connection presenting `peer`: the client
    /// certificate's subject first (CN the user, O the groups), then the bearer token — the
    /// admin's, the token file's, or a ServiceAccount token whose account (and bound object)
    /// `objects` still holds with the uid it was issued for.
    ///
    /// # Errors
    /// 401 `Unauthorized` when no authenticator accepts the request (no credentials, an
    /// unknown, expired or tampered token, a certificate without a common name).
    pub async fn authenticate(
        &self,
        headers: &HeaderMap,
        peer: Option<&PeerCertificate>,
        objects: &dyn Objects,
    ) -> Result<User, ApiError> {
        if let Some(user) = peer.and_then(|cert| x509::user(&cert.0)) {
            return Ok(user);
        }
        let token = match headers.get(header::AUTHORIZATION) {
            Some(credentials) => credentials
                .to_str()
                .ok()
                .and_then(|v| v.strip_prefix("Bearer "))
                .map(str::trim)
                .filter(|t| !t.is_empty())
                .map(str::to_owned)
                .ok_or_else(ApiError::unauthorized)?,
            // A browser's WebSocket cannot send headers: its token rides as a subprotocol.
            None => match websocket_token(headers) {
                Some(token) => token,
                None if self.anonymous && peer.is_none() => return Ok(User::anonymous()),
                None => return Err(ApiError::unauthorized()),
            },
        };
        let token = token.as_str();
        self.token_user(token, objects, &[ISSUER])
            .await
            .map(|(user, _)| user)
            .ok_or_else(ApiError::unauthorized)
    }

    /// Who bearer `token` is, for `audiences`: the admin's or the token file's tokens (good for
    /// any audience, so all of them), or a ServiceAccount token issued for one of them whose
    /// account (and bound object) `objects` still holds with the uid it was issued for.
    async fn token_user(
        &self,
        token: &str,
        objects: &dyn Objects,
        audiences: &[&str],
    ) -> Option<(User, Vec<String>)> {
        let all = || {
            audiences
                .iter()
                .map(|a| (*a).to_owned())
                .collect::<Vec<_>>()
        };
        if constant_time_eq(token.as_bytes(), self.admin_token.as_bytes()) {
            return Some((User::new(ADMIN, &[MASTERS]), all()));
        }
        if let Some((_, user)) = self
            .tokens
            .iter()
            .find(|(known, _)| constant_time_eq(known.as_bytes(), token.as_bytes()))
        {
            return Some((user.clone(), all()));
        }
        let (claims, matched) = self.service_accounts.verify_for(token, audiences)?;
        let exists = |plural: &'static str, name: String, uid: String| {
            let namespace = claims.namespace.clone();
            async move {
                let Some(def) = objects.resource("", "v1", plural) else {
                    return false;
                };
                objects
                    .get(&def, Some(&namespace), &name)
                    .await
                    .is_ok_and(|o| plinth_core::meta::meta_str(&o, "uid") == Some(uid.as_str()))
            }
        };
        if !exists("serviceaccounts", claims.name.clone(), claims.uid.clone()).await {
            return None;
        }
        if let Some((kind, name, uid)) = &claims.bound {
            let plural = match kind.as_str() {
                "Secret" => "secrets",
                "Pod" => "pods",
                _ => return None,
            };
            if !exists(plural, name.clone(), uid.clone()).await {
                return None;
            }
        }
        Some((claims.user(), matched))
    }
}

#[async_trait::async_trait]
impl plinth_registry::resources::TokenReviewer for Authenticator {
    async fn review(
        &self,
        objects: &dyn Objects,
        token: &str,
        audiences: &[String],
    ) -> Result<(User, Vec<String>), String> {
        let wanted: Vec<&str> = if audiences.is_empty() {
            vec![ISSUER]
        } else {
            audiences.iter().map(String::as_str).collect()
        };
        self.token_user(token, objects, &wanted)
            .await
            .ok_or_else(|| {
                // kube's authenticators pass over a token that is not theirs (not a JWT of
                // this issuer) without an error; one of theirs that fails is an error.
                if self.service_accounts.claims_issued_here(token) {
                    "[invalid bearer token, token lookup failed]".to_owned()
                } else {
                    String::new()
                }
            })
    }
}

/// kube's impersonation filter: a request with `Impersonate-User` (and `-Group`, `-Uid`,
/// `-Extra-<key>`) acts as that user if its sender may `impersonate` each of them (users,
/// groups, `uids` and `userextras/<key>` of `authentication.k8s.io`, ServiceAccounts for a
/// `system:serviceaccount:` name). Without the headers, the sender as is.
///
/// # Errors
/// 403 for an impersonation not allowed; 400 for groups or extras without a user.
pub fn impersonate(sender: User, headers: &HeaderMap, rbac: &rbac::Rbac) -> Result<User, ApiError> {
    let values = |name: &str| -> Vec<String> {
        headers
            .get_all(name)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .map(str::to_owned)
            .collect()
    };
    let user = values("impersonate-user").into_iter().next();
    let groups = values("impersonate-group");
    let uid = values("impersonate-uid").into_iter().next();
    let extras: Vec<(String, String)> = headers
        .iter()
        .filter_map(|(name, value)| {
            let key = name.as_str().strip_prefix("impersonate-extra-")?;
            Some((key.to_owned(), value.to_str().ok()?.to_owned()))
        })
        .collect();
    let Some(name) = user else {
        if groups.is_empty() && extras.is_empty() && uid.is_none() {
            return Ok(sender);
        }
        return Err(ApiError::bad_request(
            "requested impersonation of groups, a uid or extras without impersonating a user",
        ));
    };
    let check = |group: &str, resource: &str, namespace: &str, object: &str| {
        let attributes = Attributes::check("impersonate", group, resource, namespace, object);
        match rbac.authorize(&sender, &attributes) {
            Decision::Allow(_) => Ok(()),
            Decision::Deny(reason) => Err(attributes.forbidden(&sender, &reason)),
        }
    };
    match name
        .strip_prefix("system:serviceaccount:")
        .and_then(|rest| rest.split_once(':'))
    {
        Some((namespace, account)) => check("", "serviceaccounts", namespace, account)?,
        None => check("", "users", "", &name)?,
    }
    for group in &groups {
        check("", "groups", "", group)?;
    }
    if let Some(uid) = &uid {
        check("authentication.k8s.io", "uids", "", uid)?;
    }
    let mut extra: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (key, value) in extras {
        check(
            "authentication.k8s.io",
            &format!("userextras/{key}"),
            "",
            &value,
        )?;
        extra.entry(key).or_default().push(value);
    }
    let group_refs: Vec<&str> = groups.iter().map(String::as_str).collect();
    let mut user = User::new(&name, &group_refs);
    if let Some(uid) = uid {
        user.uid = uid;
    }
    user.extra = extra;
    Ok(user)
}

/// The subprotocol prefix that carries a bearer token on a WebSocket request (kube-apiserver's
/// `base64url.bearer.authorization.k8s.io.<token, base64url without padding>`).
pub const WEBSOCKET_TOKEN_PROTOCOL: &str = "base64url.bearer.authorization.k8s.io.";

/// The bearer token a WebSocket request offers as a subprotocol, if any.
fn websocket_token(headers: &HeaderMap) -> Option<String> {
    use base64::Engine as _;
    headers
        .get_all(header::SEC_WEBSOCKET_PROTOCOL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .find_map(|p| p.strip_prefix(WEBSOCKET_TOKEN_PROTOCOL))
        .and_then(|encoded| {
            base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(encoded.trim_end_matches('='))
                .ok()
        })
        .and_then(|bytes| String::from_utf8(bytes).ok())
        .filter(|t| !t.is_empty())
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_websocket_offers_its_token_as_a_subprotocol() {
        let mut headers = HeaderMap::new();
        assert_eq!(websocket_token(&headers), None);
        // "my-token", base64url without padding, beside the channel protocol it wants.
        headers.insert(
            header::SEC_WEBSOCKET_PROTOCOL,
            "v4.channel.k8s.io, base64url.bearer.authorization.k8s.io.bXktdG9rZW4"
                .parse()
                .unwrap(),
        );
        assert_eq!(websocket_token(&headers).as_deref(), Some("my-token"));
        headers.insert(
            header::SEC_WEBSOCKET_PROTOCOL,
            "base64url.bearer.authorization.k8s.io.!!!".parse().unwrap(),
        );
        assert_eq!(websocket_token(&headers), None, "not base64url");
    }
}
