//! ServiceAccount tokens: JWTs (ES256) signed by a key in the data directory, issued by the
//! TokenRequest subresource (`serviceaccounts/<name>/token`, `kubectl create token`) for
//! audiences, an expiry and optionally an object they are bound to, and validated — signature,
//! issuer, audience, time, and that the ServiceAccount (and the bound object) still exist with
//! the same uid — as kube-apiserver validates bound tokens. The public key is published in the
//! OIDC discovery documents (`/.well-known/openid-configuration`, `/openid/v1/jwks`).

use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use base64::Engine;
use ring::rand::SystemRandom;
use ring::signature::{
    ECDSA_P256_SHA256_FIXED, ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, KeyPair,
};
use serde_json::{Value, json};

use super::User;
use crate::error::CredentialsError;

pub use plinth_registry::authz::{DEFAULT_EXPIRATION, ISSUER, TokenIssuer};
/// The signing key's file in the data directory.
const KEY_FILE: &str = "sa.key";

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// The signer and verifier of ServiceAccount tokens.
pub struct Tokens {
    key: EcdsaKeyPair,
    key_id: String,
    /// The URL pods reach the server at (for the JWKS URL: the `kubernetes` Service's).
    server: String,
}

impl std::fmt::Debug for Tokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokens")
            .field("key_id", &self.key_id)
            .finish_non_exhaustive()
    }
}

/// What a token claims, once its signature, issuer, audience and times are checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claims {
    /// The ServiceAccount's namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// Its uid when the token was issued.
    pub uid: String,
    /// The object the token is bound to: kind, name, uid.
    pub bound: Option<(String, String, String)>,
    /// The node (name, uid) of the pod it is bound to, or the node it is bound to.
    pub node: Option<(String, String)>,
    /// The token's id.
    pub id: String,
}

impl Claims {
    /// The user the token stands for.
    pub fn user(&self) -> User {
        let all = "system:serviceaccounts".to_owned();
        let mut user = User::new(
            &format!("system:serviceaccount:{}:{}", self.namespace, self.name),
            &[&all, &format!("{all}:{}", self.namespace)],
        );
        user.uid.clone_from(&self.uid);
        user.extra.insert(
            "authentication.kubernetes.io/credential-id".into(),
            vec![format!("JTI={}", self.id)],
        );
        if let Some((kind, name, uid)) = &self.bound
            && kind == "Pod"
        {
            user.extra.insert(
                "authentication.kubernetes.io/pod-name".into(),
                vec![name.clone()],
            );
            user.extra.insert(
                "authentication.kubernetes.io/pod-uid".into(),
                vec![uid.clone()],
            );
        }
        if let Some((name, uid)) = &self.node {
            user.extra.insert(
                "authentication.kubernetes.io/node-name".into(),
                vec![name.clone()],
            );
            user.extra.insert(
                "authentication.kubernetes.io/node-uid".into(),
                vec![uid.clone()],
            );
        }
        user
    }
}

fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

impl Tokens {
    /// Loads the signing key from `dir`, creating it on first start.
    ///
    /// # Errors
    /// [`CredentialsError`] if it cannot be read, created or parsed.
    pub fn load_or_create(dir: &Path, server: &str) -> Result<Self, CredentialsError> {
        let fail = |step: &'static str| move |e: String| CredentialsError { step, reason: e };
        let path = dir.join(KEY_FILE);
        let pkcs8 = if path.exists() {
            let pem = std::fs::read_to_string(&path)
                .map_err(|e| fail("read the ServiceAccount key")(e.to_string()))?;
            rcgen::KeyPair::from_pem(&pem)
                .map_err(|e| fail("parse the ServiceAccount key")(e.to_string()))?
                .serialize_der()
        } else {
            let key = rcgen::KeyPair::generate()
                .map_err(|e| fail("generate the ServiceAccount key")(e.to_string()))?;
            crate::pki::write_private(&path, key.serialize_pem().as_bytes())?;
            key.serialize_der()
        };
        let key = EcdsaKeyPair::from_pkcs8(
            &ECDSA_P256_SHA256_FIXED_SIGNING,
            &pkcs8,
            &SystemRandom::new(),
        )
        .map_err(|e| fail("load the ServiceAccount key")(e.to_string()))?;
        let digest = ring::digest::digest(&ring::digest::SHA256, key.public_key().as_ref());
        Ok(Self {
            key_id: b64(&digest.as_ref()[..16]),
            key,
            server: server.to_owned(),
        })
    }

    /// The claims of `token` if this issuer signed it for the API server and it is current;
    /// `None` otherwise (not a JWT, another signer, tampered, expired, another audience).
    pub fn verify(&self, token: &str) -> Option<Claims> {
        self.verify_for(token, &[ISSUER]).map(|(claims, _)| claims)
    }

    /// Whether `token` is a JWT that names this issuer (signed or not, current or not): one
    /// this authenticator answers for.
    pub fn claims_issued_here(&self, token: &str) -> bool {
        let mut parts = token.split('.');
        let (Some(_), Some(payload), Some(_), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return false;
        };
        base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(payload)
            .ok()
            .and_then(|bytes| serde_json::from_slice::<Value>(&bytes).ok())
            .is_some_and(|claims| claims["iss"] == ISSUER)
    }

    /// The claims of `token` if this issuer signed it for one of `wanted` and it is current,
    /// with the audiences of `wanted` it names; `None` otherwise.
    pub fn verify_for(&self, token: &str, wanted: &[&str]) -> Option<(Claims, Vec<String>)> {
        let mut parts = token.split('.');
        let (header, payload, signature) = (parts.next()?, parts.next()?, parts.next()?);
        if parts.next().is_some() {
            return None;
        }
        let decode = |s: &str| {
            base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(s)
                .ok()
        };
        let header: Value = serde_json::from_slice(&decode(header)?).ok()?;
        if header["alg"] != "ES256" {
            return None;
        }
        let public = ring::signature::UnparsedPublicKey::new(
            &ECDSA_P256_SHA256_FIXED,
            self.key.public_key().as_ref(),
        );
        let signed = &token[..token.len() - signature.len() - 1];
        public.verify(signed.as_bytes(), &decode(signature)?).ok()?;
        let claims: Value = serde_json::from_slice(&decode(payload)?).ok()?;
        let now = now();
        let audiences: Vec<&str> = match &claims["aud"] {
            Value::String(one) => vec![one.as_str()],
            Value::Array(many) => many.iter().filter_map(Value::as_str).collect(),
            _ => Vec::new(),
        };
        let current = claims["exp"].as_i64().is_some_and(|exp| now < exp)
            && claims["nbf"].as_i64().is_none_or(|nbf| nbf <= now + 60);
        let matched: Vec<String> = wanted
            .iter()
            .filter(|w| audiences.contains(w))
            .map(|w| (*w).to_owned())
            .collect();
        if claims["iss"] != ISSUER || matched.is_empty() || !current {
            return None;
        }
        let k = &claims["kubernetes.io"];
        let text = |v: &Value| v.as_str().unwrap_or("").to_owned();
        let bound = ["pod", "secret", "node"].iter().find_map(|kind| {
            let object = k.get(*kind)?;
            let kind = match *kind {
                "pod" => "Pod",
                "secret" => "Secret",
                _ => "Node",
            };
            Some((kind.to_owned(), text(&object["name"]), text(&object["uid"])))
        });
        let node = k
            .get("node")
            .map(|node| (text(&node["name"]), text(&node["uid"])));
        let claims = Claims {
            namespace: text(&k["namespace"]),
            name: text(&k["serviceaccount"]["name"]),
            uid: text(&k["serviceaccount"]["uid"]),
            bound,
            node,
            id: text(&claims["jti"]),
        };
        Some((claims, matched))
    }

    /// `/.well-known/openid-configuration`.
    pub fn openid_configuration(&self) -> Value {
        json!({
            "issuer": ISSUER,
            "jwks_uri": format!("{}/openid/v1/jwks", self.server),
            "response_types_supported": ["id_token"],
            "subject_types_supported": ["public"],
            "id_token_signing_alg_values_supported": ["ES256"],
        })
    }

    /// `/openid/v1/jwks`: the public key.
    pub fn jwks(&self) -> Value {
        // An uncompressed P-256 point: 0x04, then x and y.
        let point = self.key.public_key().as_ref();
        let (x, y) = point
            .get(1..)
            .map_or((&[][..], &[][..]), |xy| xy.split_at(xy.len() / 2));
        json!({"keys": [{
            "use": "sig", "kty": "EC", "kid": self.key_id, "crv": "P-256", "alg": "ES256",
            "x": b64(x), "y": b64(y),
        }]})
    }
}

impl TokenIssuer for Tokens {
    /// A token for ServiceAccount `namespace/name` (uid `uid`), for `audiences` (the API server
    /// when empty), valid `expiration` seconds, bound to `bound` (kind, name, uid) if given,
    /// naming `node` (its pod's node) if given. Returns the token and its expiry (Unix seconds).
    fn issue(
        &self,
        (namespace, name, uid): (&str, &str, &str),
        audiences: &[String],
        expiration: i64,
        bound: Option<(&str, &str, &str)>,
        node: Option<(&str, &str)>,
    ) -> Result<(String, i64), plinth_core::ApiError> {
        let issued = now();
        let expires = issued + expiration;
        let audiences = if audiences.is_empty() {
            vec![ISSUER.to_owned()]
        } else {
            audiences.to_vec()
        };
        let mut kubernetes = json!({
            "namespace": namespace,
            "serviceaccount": {"name": name, "uid": uid},
        });
        if let Some((kind, object, object_uid)) = bound {
            kubernetes[kind.to_ascii_lowercase()] = json!({"name": object, "uid": object_uid});
        }
        if let Some((node, node_uid)) = node {
            kubernetes["node"] = json!({"name": node, "uid": node_uid});
        }
        let claims = json!({
            "aud": audiences,
            "exp": expires,
            "iat": issued,
            "iss": ISSUER,
            "jti": uuid::Uuid::new_v4().to_string(),
            "kubernetes.io": kubernetes,
            "nbf": issued,
            "sub": format!("system:serviceaccount:{namespace}:{name}"),
        });
        let header = json!({"alg": "ES256", "kid": self.key_id});
        let signing_input = format!(
            "{}.{}",
            b64(header.to_string().as_bytes()),
            b64(claims.to_string().as_bytes())
        );
        let signature = self
            .key
            .sign(&SystemRandom::new(), signing_input.as_bytes())
            .map_err(|_| plinth_core::ApiError::internal("signing a token failed"))?;
        Ok((
            format!("{signing_input}.{}", b64(signature.as_ref())),
            expires,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn issued_tokens_verify_and_tampered_ones_do_not() {
        let dir = tempfile::tempdir().unwrap();
        let tokens = Tokens::load_or_create(dir.path(), "https://127.0.0.1:6443").unwrap();
        let (token, _) = tokens
            .issue(
                ("team", "robot", "u1"),
                &[],
                600,
                Some(("Secret", "s", "u2")),
                None,
            )
            .unwrap();
        let claims = tokens.verify(&token).unwrap();
        assert_eq!(
            (
                claims.namespace.as_str(),
                claims.name.as_str(),
                claims.uid.as_str()
            ),
            ("team", "robot", "u1")
        );
        assert_eq!(
            claims.bound,
            Some(("Secret".into(), "s".into(), "u2".into()))
        );
        assert_eq!(claims.user().name, "system:serviceaccount:team:robot");
        assert!(claims.user().in_group("system:serviceaccounts:team"));
        // A changed payload breaks the signature.
        let mut parts: Vec<&str> = token.split('.').collect();
        let other = tokens
            .issue(("team", "admin", "u3"), &[], 600, None, None)
            .unwrap()
            .0;
        let other_payload = other.split('.').nth(1).unwrap().to_owned();
        parts[1] = &other_payload;
        assert!(tokens.verify(&parts.join(".")).is_none());
        // Another audience, expired, another key, not a JWT.
        let foreign = tokens
            .issue(("team", "robot", "u1"), &["vault".into()], 600, None, None)
            .unwrap()
            .0;
        assert!(tokens.verify(&foreign).is_none());
        let expired = tokens
            .issue(("team", "robot", "u1"), &[], -10, None, None)
            .unwrap()
            .0;
        assert!(tokens.verify(&expired).is_none());
        let elsewhere = tempfile::tempdir().unwrap();
        let stranger = Tokens::load_or_create(elsewhere.path(), "x").unwrap();
        assert!(stranger.verify(&token).is_none());
        assert!(tokens.verify("not.a.jwt").is_none());
        // A token bound to a pod names the pod's node; its user carries both.
        let (on_node, _) = tokens
            .issue(
                ("team", "robot", "u1"),
                &[],
                600,
                Some(("Pod", "p", "u4")),
                Some(("n1", "u5")),
            )
            .unwrap();
        let user = tokens.verify(&on_node).unwrap().user();
        let extra = |key: &str| user.extra.get(key).cloned().unwrap_or_default();
        assert_eq!(extra("authentication.kubernetes.io/pod-name"), ["p"]);
        assert_eq!(extra("authentication.kubernetes.io/node-name"), ["n1"]);
        assert_eq!(extra("authentication.kubernetes.io/node-uid"), ["u5"]);
        assert!(tokens.verify("plain").is_none());
        // The key survives a restart.
        let again = Tokens::load_or_create(dir.path(), "https://127.0.0.1:6443").unwrap();
        assert!(again.verify(&token).is_some());
        assert_eq!(
            again.jwks()["keys"][0]["kid"],
            tokens.jwks()["keys"][0]["kid"]
        );
    }
}
