//! Encryption at rest (kube's `EncryptionConfiguration`, `--encryption-provider-config`): the
//! values of the listed resources are encrypted before they reach the store and decrypted on
//! the way back, by a [`Store`] that wraps the real one — the registry, the watch cache and
//! every backend stay unaware of it.
//!
//! Providers as kube writes them: `aesgcm` (AES-GCM, a random 12-byte nonce before the
//! ciphertext), `aescbc` (AES-CBC with PKCS#7 padding, a random 16-byte IV before it),
//! `secretbox` (XSalsa20-Poly1305, a random 24-byte nonce before it) and `identity` (plain). The first provider of a resource writes; every listed
//! one reads, told apart by kube's prefix `k8s:enc:<provider>:v1:<key name>:` (identity has
//! none). Rotation: put the new key first, keep the old one listed, rewrite every object
//! (`kubectl get secrets -A -o json | kubectl replace -f -` — a value read with a key that is
//! no longer the writing one counts as changed, so the replace rewrites it), then drop the
//! old key.

use std::path::Path;
use std::sync::Arc;

use async_trait::async_trait;
use base64::Engine;
use bytes::Bytes;
use futures::StreamExt;
use plinth_store::{
    KeyValue, RangeRequest, RangeResponse, Revision, Store, StoreError, StoreResult, Version,
    WatchStream,
};
use ring::aead::{AES_128_GCM, AES_256_GCM, Aad, LessSafeKey, Nonce, UnboundKey};
use ring::rand::{SecureRandom, SystemRandom};
use serde_json::Value;

/// A configuration that cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("encryption provider config {path}: {why}")]
pub struct ConfigError {
    /// The file.
    pub path: String,
    /// What is wrong.
    pub why: String,
}

enum Provider {
    Identity,
    AesGcm {
        /// `k8s:enc:aesgcm:v1:<name>:`.
        prefix: Vec<u8>,
        key: Box<LessSafeKey>,
    },
    AesCbc {
        /// `k8s:enc:aescbc:v1:<name>:`.
        prefix: Vec<u8>,
        key: Vec<u8>,
    },
    Secretbox {
        /// `k8s:enc:secretbox:v1:<name>:`.
        prefix: Vec<u8>,
        key: Box<crypto_secretbox::XSalsa20Poly1305>,
    },
}

impl std::fmt::Debug for Provider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Identity => f.write_str("identity"),
            Self::AesGcm { prefix, .. }
            | Self::AesCbc { prefix, .. }
            | Self::Secretbox { prefix, .. } => write!(f, "{}", String::from_utf8_lossy(prefix)),
        }
    }
}

/// Which keys a rule covers: a resource's key prefix, or every key.
#[derive(Debug)]
enum Scope {
    Prefix(String),
    All,
}

#[derive(Debug)]
struct Rule {
    scopes: Vec<Scope>,
    providers: Vec<Provider>,
}

/// The parsed configuration: for each key, the providers of the first rule that covers it.
#[derive(Debug)]
pub struct Encryption {
    rules: Vec<Rule>,
    /// Keys read (at these revisions) with a provider that no longer writes.
    stale: std::sync::Mutex<std::collections::HashMap<String, Revision>>,
}

const NAMING: &str =
    "resources are named `secrets`, `widgets.example.com`, `*.example.com` or `*.*`";

fn key_prefix(resource: &str) -> Result<Scope, String> {
    match resource.split_once('.') {
        None => Ok(Scope::Prefix(format!("/{resource}/"))),
        Some(("*", "*")) => Ok(Scope::All),
        Some(("*", "")) => Err(format!("{resource:?} is not supported here: {NAMING}")),
        Some(("*", group)) => Ok(Scope::Prefix(format!("/{group}/"))),
        Some((plural, group)) if !plural.is_empty() && !group.is_empty() => {
            Ok(Scope::Prefix(format!("/{group}/{plural}/")))
        }
        _ => Err(format!("{resource:?}: {NAMING}")),
    }
}

const KINDS: [&str; 3] = ["aesgcm", "aescbc", "secretbox"];

fn provider(spec: &Value) -> Result<Provider, String> {
    if spec.get("identity").is_some() {
        return Ok(Provider::Identity);
    }
    let Some((kind, config)) = KINDS
        .iter()
        .find_map(|kind| Some((*kind, spec.get(*kind)?)))
    else {
        let name = spec
            .as_object()
            .and_then(|m| m.keys().next().cloned())
            .unwrap_or_default();
        return Err(format!(
            "provider {name:?} is not supported (aesgcm, aescbc, secretbox and identity are)"
        ));
    };
    let keys = config
        .get("keys")
        .and_then(Value::as_array)
        .filter(|k| !k.is_empty())
        .ok_or(format!("{kind} needs keys"))?;
    // One provider per key, in order: the first writes.
    let key = &keys[0];
    let name = key.get("name").and_then(Value::as_str).unwrap_or("");
    if name.is_empty() {
        return Err(format!("a {kind} key needs a name"));
    }
    let secret = key
        .get("secret")
        .and_then(Value::as_str)
        .and_then(|s| base64::engine::general_purpose::STANDARD.decode(s).ok())
        .ok_or(format!("key {name:?}: the secret must be base64"))?;
    let prefix = format!("k8s:enc:{kind}:v1:{name}:").into_bytes();
    let length = |allowed: &[usize], what: &str| {
        if allowed.contains(&secret.len()) {
            Ok(())
        } else {
            Err(format!(
                "key {name:?} is {} bytes: {kind} keys are {what} bytes",
                secret.len()
            ))
        }
    };
    match kind {
        "aesgcm" => {
            length(&[16, 32], "16 or 32")?;
            let algorithm = if secret.len() == 16 {
                &AES_128_GCM
            } else {
                &AES_256_GCM
            };
            let key = UnboundKey::new(algorithm, &secret)
                .map_err(|_| format!("key {name:?} is unusable"))?;
            Ok(Provider::AesGcm {
                prefix,
                key: Box::new(LessSafeKey::new(key)),
            })
        }
        "aescbc" => {
            length(&[16, 24, 32], "16, 24 or 32")?;
            Ok(Provider::AesCbc {
                prefix,
                key: secret,
            })
        }
        _ => {
            length(&[32], "32")?;
            use crypto_secretbox::KeyInit;
            let key = crypto_secretbox::XSalsa20Poly1305::new_from_slice(&secret)
                .map_err(|_| format!("key {name:?} is unusable"))?;
            Ok(Provider::Secretbox {
                prefix,
                key: Box::new(key),
            })
        }
    }
}

/// AES-CBC with PKCS#7 padding under a 16-, 24- or 32-byte key.
fn cbc_encrypt(key: &[u8], iv: &[u8; 16], plain: &[u8]) -> Option<Vec<u8>> {
    use cbc::cipher::{BlockEncryptMut, KeyIvInit, block_padding::Pkcs7};
    Some(match key.len() {
        16 => cbc::Encryptor::<aes::Aes128>::new_from_slices(key, iv)
            .ok()?
            .encrypt_padded_vec_mut::<Pkcs7>(plain),
        24 => cbc::Encryptor::<aes::Aes192>::new_from_slices(key, iv)
            .ok()?
            .encrypt_padded_vec_mut::<Pkcs7>(plain),
        _ => cbc::Encryptor::<aes::Aes256>::new_from_slices(key, iv)
            .ok()?
            .encrypt_padded_vec_mut::<Pkcs7>(plain),
    })
}

fn cbc_decrypt(key: &[u8], iv: &[u8], sealed: &[u8]) -> Option<Vec<u8>> {
    use cbc::cipher::{BlockDecryptMut, KeyIvInit, block_padding::Pkcs7};
    match key.len() {
        16 => cbc::Decryptor::<aes::Aes128>::new_from_slices(key, iv)
            .ok()?
            .decrypt_padded_vec_mut::<Pkcs7>(sealed)
            .ok(),
        24 => cbc::Decryptor::<aes::Aes192>::new_from_slices(key, iv)
            .ok()?
            .decrypt_padded_vec_mut::<Pkcs7>(sealed)
            .ok(),
        _ => cbc::Decryptor::<aes::Aes256>::new_from_slices(key, iv)
            .ok()?
            .decrypt_padded_vec_mut::<Pkcs7>(sealed)
            .ok(),
    }
}

impl Encryption {
    /// Reads an `EncryptionConfiguration` (`apiserver.config.k8s.io/v1`) file.
    ///
    /// # Errors
    /// [`ConfigError`] naming what cannot be used.
    pub fn from_file(path: &Path) -> Result<Self, ConfigError> {
        let fail = |why: String| ConfigError {
            path: path.display().to_string(),
            why,
        };
        let text = std::fs::read_to_string(path).map_err(|e| fail(e.to_string()))?;
        let config: Value = serde_norway::from_str(&text).map_err(|e| fail(e.to_string()))?;
        Self::from_value(&config).map_err(fail)
    }

    fn from_value(config: &Value) -> Result<Self, String> {
        if config["kind"] != "EncryptionConfiguration" {
            return Err("kind must be EncryptionConfiguration".into());
        }
        let mut rules = Vec::new();
        for (i, rule) in config["resources"]
            .as_array()
            .ok_or("resources must be a list")?
            .iter()
            .enumerate()
        {
            let scopes = rule["resources"]
                .as_array()
                .filter(|r| !r.is_empty())
                .ok_or(format!("resources[{i}].resources must name resources"))?
                .iter()
                .map(|r| key_prefix(r.as_str().unwrap_or("")))
                .collect::<Result<Vec<_>, _>>()?;
            let mut providers = Vec::new();
            for spec in rule["providers"]
                .as_array()
                .filter(|p| !p.is_empty())
                .ok_or(format!("resources[{i}].providers must not be empty"))?
            {
                // aesgcm with several keys stands for one provider per key.
                match spec.pointer("/aesgcm/keys").and_then(Value::as_array) {
                    Some(keys) if keys.len() > 1 => {
                        for key in keys {
                            providers
                                .push(provider(&serde_json::json!({"aesgcm": {"keys": [key]}}))?);
                        }
                    }
                    _ => providers.push(provider(spec)?),
                }
            }
            rules.push(Rule { scopes, providers });
        }
        Ok(Self {
            rules,
            stale: std::sync::Mutex::default(),
        })
    }

    fn providers(&self, key: &str) -> Option<&[Provider]> {
        self.rules
            .iter()
            .find(|rule| {
                rule.scopes.iter().any(|scope| match scope {
                    Scope::All => true,
                    Scope::Prefix(prefix) => key.starts_with(prefix.as_str()),
                })
            })
            .map(|rule| rule.providers.as_slice())
    }

    fn encrypt(&self, key: &str, value: Bytes) -> StoreResult<Bytes> {
        match self.providers(key).and_then(<[Provider]>::first) {
            None | Some(Provider::Identity) => Ok(value),
            Some(Provider::AesGcm { prefix, key: aead }) => {
                let mut nonce = [0u8; 12];
                SystemRandom::new()
                    .fill(&mut nonce)
                    .map_err(|_| StoreError::backend("encrypt", "no randomness"))?;
                let mut sealed = value.to_vec();
                aead.seal_in_place_append_tag(
                    Nonce::assume_unique_for_key(nonce),
                    Aad::from(key.as_bytes()),
                    &mut sealed,
                )
                .map_err(|_| StoreError::backend("encrypt", "sealing failed"))?;
                let mut out = Vec::with_capacity(prefix.len() + 12 + sealed.len());
                out.extend_from_slice(prefix);
                out.extend_from_slice(&nonce);
                out.extend_from_slice(&sealed);
                Ok(out.into())
            }
            Some(Provider::AesCbc {
                prefix,
                key: secret,
            }) => {
                let mut iv = [0u8; 16];
                SystemRandom::new()
                    .fill(&mut iv)
                    .map_err(|_| StoreError::backend("encrypt", "no randomness"))?;
                let sealed = cbc_encrypt(secret, &iv, &value)
                    .ok_or_else(|| StoreError::backend("encrypt", "aescbc failed"))?;
                Ok([prefix.as_slice(), &iv, &sealed].concat().into())
            }
            Some(Provider::Secretbox {
                prefix,
                key: secret,
            }) => {
                use crypto_secretbox::aead::Aead;
                let mut nonce = [0u8; 24];
                SystemRandom::new()
                    .fill(&mut nonce)
                    .map_err(|_| StoreError::backend("encrypt", "no randomness"))?;
                let sealed = secret
                    .encrypt(&nonce.into(), value.as_ref())
                    .map_err(|_| StoreError::backend("encrypt", "secretbox failed"))?;
                Ok([prefix.as_slice(), &nonce, &sealed].concat().into())
            }
        }
    }

    /// The plain value and whether it was written by a provider other than the writing one
    /// (stale: a rewrite would change it).
    fn decrypt(&self, key: &str, value: &Bytes) -> StoreResult<(Bytes, bool)> {
        let Some(providers) = self.providers(key) else {
            return Ok((value.clone(), false));
        };
        for (i, provider) in providers.iter().enumerate() {
            match provider {
                Provider::AesGcm { prefix, key: aead } => {
                    let Some(rest) = value.strip_prefix(prefix.as_slice()) else {
                        continue;
                    };
                    let (nonce, sealed) = rest.split_at_checked(12).ok_or_else(|| {
                        StoreError::backend("decrypt", format!("{key}: truncated"))
                    })?;
                    let nonce = Nonce::try_assume_unique_for_key(nonce)
                        .map_err(|_| StoreError::backend("decrypt", format!("{key}: bad nonce")))?;
                    let mut buffer = sealed.to_vec();
                    let plain = aead
                        .open_in_place(nonce, Aad::from(key.as_bytes()), &mut buffer)
                        .map_err(|_| {
                            StoreError::backend("decrypt", format!("{key}: authentication failed"))
                        })?;
                    return Ok((Bytes::copy_from_slice(plain), i > 0));
                }
                Provider::AesCbc {
                    prefix,
                    key: secret,
                } => {
                    let Some(rest) = value.strip_prefix(prefix.as_slice()) else {
                        continue;
                    };
                    let (iv, sealed) = rest.split_at_checked(16).ok_or_else(|| {
                        StoreError::backend("decrypt", format!("{key}: truncated"))
                    })?;
                    let plain = cbc_decrypt(secret, iv, sealed).ok_or_else(|| {
                        StoreError::backend("decrypt", format!("{key}: bad padding"))
                    })?;
                    return Ok((plain.into(), i > 0));
                }
                Provider::Secretbox {
                    prefix,
                    key: secret,
                } => {
                    use crypto_secretbox::aead::Aead;
                    let Some(rest) = value.strip_prefix(prefix.as_slice()) else {
                        continue;
                    };
                    let (nonce, sealed) = rest.split_at_checked(24).ok_or_else(|| {
                        StoreError::backend("decrypt", format!("{key}: truncated"))
                    })?;
                    let nonce = crypto_secretbox::Nonce::from_slice(nonce);
                    let plain = secret.decrypt(nonce, sealed).map_err(|_| {
                        StoreError::backend("decrypt", format!("{key}: authentication failed"))
                    })?;
                    return Ok((plain.into(), i > 0));
                }
                Provider::Identity => {
                    if value.starts_with(b"k8s:enc:") {
                        continue;
                    }
                    return Ok((value.clone(), i > 0));
                }
            }
        }
        Err(StoreError::backend(
            "decrypt",
            format!("{key}: no listed provider can read it"),
        ))
    }

    /// `kv` decrypted; a value not written by the writing provider is remembered as stale
    /// (at its revision) until it is rewritten.
    fn open(&self, mut kv: KeyValue) -> StoreResult<KeyValue> {
        if !kv.value.is_empty() {
            let (plain, stale) = self.decrypt(&kv.key, &kv.value)?;
            kv.value = plain;
            let mut stale_keys = self
                .stale
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if stale {
                stale_keys.insert(kv.key.clone(), kv.mod_revision);
            } else if stale_keys
                .get(&kv.key)
                .is_some_and(|r| *r <= kv.mod_revision)
            {
                stale_keys.remove(&kv.key);
            }
        }
        Ok(kv)
    }
}

/// A store whose values are encrypted as an [`Encryption`] says.
pub struct EncryptedStore {
    inner: Arc<dyn Store>,
    encryption: Arc<Encryption>,
}

impl EncryptedStore {
    /// `inner`, encrypting as `encryption` says.
    pub fn new(inner: Arc<dyn Store>, encryption: Encryption) -> Self {
        Self {
            inner,
            encryption: Arc::new(encryption),
        }
    }

    /// Past versions as they were written: decrypted like the live value. A version whose
    /// key the configuration no longer has stays unreadable: its value comes back empty.
    fn open_all(&self, versions: Vec<Version>) -> StoreResult<Vec<Version>> {
        Ok(versions
            .into_iter()
            .map(|mut version| {
                let sealed = version.kv.clone();
                version.kv = self.encryption.open(sealed).unwrap_or_else(|_| KeyValue {
                    value: Bytes::new(),
                    ..version.kv
                });
                version
            })
            .collect())
    }

    fn error(&self, error: StoreError) -> StoreError {
        match error {
            StoreError::Conflict {
                key,
                expected,
                current,
            } => {
                let current = current
                    .and_then(|kv| self.encryption.open(*kv).ok())
                    .map(Box::new);
                StoreError::Conflict {
                    key,
                    expected,
                    current,
                }
            }
            other => other,
        }
    }
}

#[async_trait]
impl Store for EncryptedStore {
    async fn get(&self, key: &str) -> StoreResult<Option<KeyValue>> {
        self.inner
            .get(key)
            .await?
            .map(|kv| self.encryption.open(kv))
            .transpose()
    }

    async fn range(&self, request: RangeRequest) -> StoreResult<RangeResponse> {
        let mut response = self.inner.range(request).await?;
        response.kvs = response
            .kvs
            .into_iter()
            .map(|kv| self.encryption.open(kv))
            .collect::<StoreResult<_>>()?;
        Ok(response)
    }

    async fn create(&self, key: &str, value: Bytes) -> StoreResult<Revision> {
        let value = self.encryption.encrypt(key, value)?;
        self.inner
            .create(key, value)
            .await
            .map_err(|e| self.error(e))
    }

    async fn update(&self, key: &str, value: Bytes, expected: Revision) -> StoreResult<Revision> {
        let value = self.encryption.encrypt(key, value)?;
        self.inner
            .update(key, value, expected)
            .await
            .map_err(|e| self.error(e))
    }

    async fn delete(
        &self,
        key: &str,
        expected: Option<Revision>,
    ) -> StoreResult<(Revision, KeyValue)> {
        let (revision, kv) = self
            .inner
            .delete(key, expected)
            .await
            .map_err(|e| self.error(e))?;
        Ok((revision, self.encryption.open(kv)?))
    }

    async fn watch(&self, prefix: &str, from: Revision) -> StoreResult<WatchStream> {
        let encryption = self.encryption.clone();
        let events = self.inner.watch(prefix, from).await?;
        Ok(Box::pin(events.map(move |event| {
            let mut event = event?;
            event.kv = encryption.open(event.kv)?;
            event.prev = event.prev.map(|kv| encryption.open(kv)).transpose()?;
            Ok(event)
        })))
    }

    async fn compact(&self, revision: Revision) -> StoreResult<()> {
        self.inner.compact(revision).await
    }

    async fn versions(&self, key: &str, from: Revision) -> StoreResult<Vec<Version>> {
        self.open_all(self.inner.versions(key, from).await?)
    }

    async fn journal(
        &self,
        prefix: &str,
        from: Revision,
        limit: usize,
    ) -> StoreResult<Vec<Version>> {
        self.open_all(self.inner.journal(prefix, from, limit).await?)
    }

    fn keeps_notes(&self) -> bool {
        self.inner.keeps_notes()
    }

    async fn request_progress(&self) -> StoreResult<()> {
        self.inner.request_progress().await
    }

    fn progress_is_local(&self) -> bool {
        self.inner.progress_is_local()
    }

    fn progress_is_reliable(&self) -> bool {
        self.inner.progress_is_reliable()
    }

    fn shared(&self) -> bool {
        self.inner.shared()
    }

    async fn current_revision(&self) -> StoreResult<Revision> {
        self.inner.current_revision().await
    }

    fn stale(&self, kv: &KeyValue) -> bool {
        self.encryption
            .stale
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(&kv.key)
            == Some(&kv.mod_revision)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn config(providers: Value) -> Encryption {
        Encryption::from_value(&json!({
            "apiVersion": "apiserver.config.k8s.io/v1",
            "kind": "EncryptionConfiguration",
            "resources": [{"resources": ["secrets", "widgets.example.com"], "providers": providers}],
        }))
        .unwrap()
    }

    const KEY1: &str = "c2VjcmV0IGlzIHNlY3VyZSwgSSB0aGluayBzbyAgISE="; // 32 bytes
    const KEY2: &str = "dGhpcyBpcyBhbm90aGVyIGtleSBvZiAzMiBieXRlcyE="; // 32 bytes

    #[test]
    fn values_round_trip_and_only_listed_resources_are_sealed() {
        let e = config(
            json!([{"aesgcm": {"keys": [{"name": "k1", "secret": KEY1}]}}, {"identity": {}}]),
        );
        let plain = Bytes::from_static(b"{\"data\":{\"password\":\"hunter2\"}}");
        let sealed = e.encrypt("/secrets/ns/s", plain.clone()).unwrap();
        assert!(sealed.starts_with(b"k8s:enc:aesgcm:v1:k1:"));
        assert!(!sealed.windows(7).any(|w| w == b"hunter2"));
        assert_eq!(
            e.decrypt("/secrets/ns/s", &sealed).unwrap(),
            (plain.clone(), false)
        );
        // Sealed for one key, it cannot be read as another.
        assert!(e.decrypt("/secrets/ns/other", &sealed).is_err());
        assert_eq!(e.encrypt("/configmaps/ns/c", plain.clone()).unwrap(), plain);
        assert!(
            e.encrypt("/example.com/widgets/ns/w", plain.clone())
                .unwrap()
                .starts_with(b"k8s:enc:")
        );
        // Plain values from before still read (identity is listed), as stale.
        assert_eq!(e.decrypt("/secrets/ns/s", &plain).unwrap(), (plain, true));
    }

    #[test]
    fn rotation_reads_old_keys_and_marks_them_stale() {
        let old = config(json!([{"aesgcm": {"keys": [{"name": "k1", "secret": KEY1}]}}]));
        let value = Bytes::from_static(b"v");
        let sealed = old.encrypt("/secrets/a/b", value.clone()).unwrap();
        let rotated = config(json!([{"aesgcm": {"keys": [
            {"name": "k2", "secret": KEY2}, {"name": "k1", "secret": KEY1}]}}]));
        assert_eq!(
            rotated.decrypt("/secrets/a/b", &sealed).unwrap(),
            (value.clone(), true)
        );
        let resealed = rotated.encrypt("/secrets/a/b", value.clone()).unwrap();
        assert!(resealed.starts_with(b"k8s:enc:aesgcm:v1:k2:"));
        assert_eq!(
            rotated.decrypt("/secrets/a/b", &resealed).unwrap(),
            (value, false)
        );
        // Without identity, plain values cannot be read.
        assert!(
            old.decrypt("/secrets/a/b", &Bytes::from_static(b"plain"))
                .is_err()
        );
    }

    #[test]
    fn aescbc_and_secretbox_round_trip_and_rotate_between_each_other() {
        const KEY24: &str = "MTIzNDU2Nzg5MDEyMzQ1Njc4OTAxMjM0"; // 24 bytes
        let e = config(json!([
            {"aescbc": {"keys": [{"name": "c1", "secret": KEY24}, {"name": "c2", "secret": KEY1}]}},
            {"secretbox": {"keys": [{"name": "s1", "secret": KEY2}]}},
        ]));
        let plain = Bytes::from_static(b"{\"data\":{\"p\":\"hunter2\"}}");
        let sealed = e.encrypt("/secrets/a/b", plain.clone()).unwrap();
        assert!(sealed.starts_with(b"k8s:enc:aescbc:v1:c1:"));
        assert!(!sealed.windows(7).any(|w| w == b"hunter2"));
        assert_eq!(
            e.decrypt("/secrets/a/b", &sealed).unwrap(),
            (plain.clone(), false)
        );
        let boxed = config(json!([{"secretbox": {"keys": [{"name": "s1", "secret": KEY2}]}}]));
        let sealed = boxed.encrypt("/secrets/a/b", plain.clone()).unwrap();
        assert!(sealed.starts_with(b"k8s:enc:secretbox:v1:s1:"));
        assert_eq!(
            boxed.decrypt("/secrets/a/b", &sealed).unwrap(),
            (plain.clone(), false)
        );
        // Read by the configuration that lists secretbox after aescbc: stale.
        assert_eq!(e.decrypt("/secrets/a/b", &sealed).unwrap(), (plain, true));
        // A tampered box is refused.
        let mut tampered = sealed.to_vec();
        let last = tampered.len() - 1;
        tampered[last] ^= 1;
        assert!(boxed.decrypt("/secrets/a/b", &tampered.into()).is_err());
    }

    #[test]
    fn bad_configurations_are_refused_with_a_reason() {
        for (config, why) in [
            (
                json!({"kind": "Other"}),
                "kind must be EncryptionConfiguration",
            ),
            (
                json!({"kind": "EncryptionConfiguration", "resources": [{"resources": ["secrets"], "providers": [{"kms": {}}]}]}),
                "provider \"kms\" is not supported",
            ),
            (
                json!({"kind": "EncryptionConfiguration", "resources": [{"resources": ["secrets"], "providers": [{"aesgcm": {"keys": [{"name": "k", "secret": "c2hvcnQ="}]}}]}]}),
                "aesgcm keys are 16 or 32 bytes",
            ),
            (
                json!({"kind": "EncryptionConfiguration", "resources": [{"resources": ["*."], "providers": [{"identity": {}}]}]}),
                "is not supported here",
            ),
        ] {
            let error = Encryption::from_value(&config).unwrap_err();
            assert!(error.contains(why), "{error}");
        }
    }
}
