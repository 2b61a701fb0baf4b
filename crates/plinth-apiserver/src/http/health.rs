//! `/healthz`, `/livez` and `/readyz` as kube-apiserver answers them: named checks — `ping`,
//! `log`, `etcd` (the storage answers a revision read within two seconds; etcd needs its
//! quorum for that), and for `/readyz` `shutdown` (failing once the server stops) — with
//! `?verbose`, `?exclude=NAME`, and one check alone at `/readyz/NAME`. A failing check makes
//! the answer a 500 listing every check, its reason withheld (it is logged).

use std::time::Duration;

use axum::http::StatusCode;
use plinth_store::Store;

use super::query::Query;

/// What a check found wrong.
type Failure = String;

async fn check(
    name: &str,
    store: &dyn Store,
    shutdown: &tokio::sync::watch::Receiver<bool>,
) -> Result<(), Failure> {
    match name {
        "etcd" => {
            match tokio::time::timeout(Duration::from_secs(2), store.current_revision()).await {
                Ok(Ok(_)) => Ok(()),
                Ok(Err(e)) => Err(format!("storage: {e}")),
                Err(_) => Err("storage: no answer in 2s".into()),
            }
        }
        "shutdown" if *shutdown.borrow() => Err("process is shutting down".into()),
        _ => Ok(()),
    }
}

/// The checks of `endpoint` (`healthz`, `livez`, `readyz`), in kube's order.
fn checks(endpoint: &str) -> &'static [&'static str] {
    if endpoint == "readyz" {
        &["ping", "log", "etcd", "shutdown"]
    } else {
        &["ping", "log", "etcd"]
    }
}

/// The answer to health request `path` (`/readyz`, `/livez/etcd`, …): status and body.
pub(crate) async fn answer(
    path: &str,
    query: &Query,
    store: &dyn Store,
    shutdown: &tokio::sync::watch::Receiver<bool>,
) -> (StatusCode, String) {
    let mut parts = path.trim_matches('/').splitn(2, '/');
    let endpoint = parts.next().unwrap_or("healthz");
    let names = checks(endpoint);
    if let Some(one) = parts.next().filter(|n| !n.is_empty()) {
        let Some(name) = names.iter().find(|n| **n == one) else {
            return (StatusCode::NOT_FOUND, "404 page not found\n".into());
        };
        return match check(name, store, shutdown).await {
            Ok(()) => (StatusCode::OK, "ok".into()),
            Err(e) => (
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("internal server error: {e}\n"),
            ),
        };
    }
    let mut excluded: Vec<String> = query
        .pairs()
        .into_iter()
        .filter(|(k, _)| k == "exclude")
        .flat_map(|(_, v)| {
            v.split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
        .collect();
    let mut lines = String::new();
    let mut failed = false;
    for name in names {
        if let Some(i) = excluded.iter().position(|e| e == name) {
            excluded.remove(i);
            lines.push_str(&format!("[+]{name} excluded: ok\n"));
            continue;
        }
        match check(name, store, shutdown).await {
            Ok(()) => lines.push_str(&format!("[+]{name} ok\n")),
            Err(e) => {
                tracing::warn!(check = name, reason = %e, "{endpoint} check failed");
                lines.push_str(&format!("[-]{name} failed: reason withheld\n"));
                failed = true;
            }
        }
    }
    if !excluded.is_empty() {
        let quoted: Vec<String> = excluded.iter().map(|e| format!("{e:?}")).collect();
        lines.push_str(&format!(
            "warn: some health checks cannot be excluded: no matches for {}\n",
            quoted.join(",")
        ));
    }
    if failed {
        return (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("{lines}{endpoint} check failed\n"),
        );
    }
    if query.get("verbose").is_none() {
        return (StatusCode::OK, "ok".into());
    }
    (StatusCode::OK, format!("{lines}{endpoint} check passed\n"))
}
