//! Client certificates: the subject's common name is the user, its organizations the groups
//! (kube's x509 authenticator). The TLS layer has verified the chain against the cluster CA.

use x509_parser::prelude::{FromDer, X509Certificate};

use super::User;

/// The user a verified client certificate stands for; `None` for one without a common name
/// (or not parseable, which the TLS layer would have refused).
pub(super) fn user(der: &[u8]) -> Option<User> {
    let (_, cert) = X509Certificate::from_der(der).ok()?;
    let subject = cert.subject();
    let name = subject.iter_common_name().next()?.as_str().ok()?;
    if name.is_empty() {
        return None;
    }
    let groups: Vec<&str> = subject
        .iter_organization()
        .filter_map(|o| o.as_str().ok())
        .collect();
    Some(User::new(name, &groups))
}
