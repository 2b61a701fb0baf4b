//! `plinth-bench history`: what the history API costs (issue #32). Writes one ConfigMap of
//! 1 KiB `revisions` times, then times its history (with and without the objects) and a diff;
//! fills a namespace with `objects` ConfigMaps (as `reads` does), notes the revision, changes
//! a tenth of them, then times a list as of that revision against a current list; with the
//! data directory, reports the store's growth per retained revision against the object's size.
//! The server should run with a `--history-retention` longer than the run.

use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};

use crate::common::Error;
use crate::reads::{NAMESPACE, fill, median, ms};

const SCRATCH: &str = "plinth-bench-history";
const ROOT: &str = "/apis/history.plinth.dev/v1alpha1";

/// The bytes of the files in `dir` (the embedded store: its database and write-ahead log).
fn bytes_in(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.metadata().ok())
        .filter(|m| m.is_file())
        .map(|m| m.len())
        .sum()
}

/// Runs the measurement and prints one table.
///
/// # Errors
/// Any API failure.
pub(crate) async fn run(
    client: Client,
    revisions: usize,
    objects: usize,
    data_dir: Option<PathBuf>,
) -> Result<(), Error> {
    crate::common::ensure_namespace(&client, SCRATCH).await?;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), SCRATCH);
    let mut cm = ConfigMap::default();
    cm.metadata.name = Some("busy".to_owned());
    cm.data = Some([("payload".to_owned(), "0".repeat(1024))].into());
    match api.create(&PostParams::default(), &cm).await {
        Ok(_) | Err(kube::Error::Api(_)) => {}
        Err(e) => return Err(e.into()),
    }
    let object_size = serde_json::to_vec(&api.get("busy").await?)?.len();
    let store = data_dir.map(|d| d.join("store"));
    let before = store.as_deref().map(bytes_in);
    for i in 1..revisions {
        let patch = serde_json::json!({"data": {"payload": format!("{i:01024}")}});
        api.patch("busy", &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
    }
    // Let the write-ahead log settle into the file sizes measured.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let after = store.as_deref().map(bytes_in);
    let object = format!("/api/v1/namespaces/{SCRATCH}/configmaps/busy");
    let mut rows = Vec::new();
    let json = "application/json";
    let (took, size) = median(
        &client,
        &format!("{ROOT}/revisions{object}?objects=false"),
        json,
        21,
    )
    .await?;
    rows.push((
        format!("history of an object with {revisions} revisions, provenance only (median of 21)"),
        format!("{:.1} ms ({} KiB)", ms(took), size / 1024),
    ));
    let (took, size) = median(&client, &format!("{ROOT}/revisions{object}"), json, 21).await?;
    rows.push((
        format!("history of an object with {revisions} revisions, with the objects (median of 21)"),
        format!("{:.1} ms ({} KiB)", ms(took), size / 1024),
    ));
    let (took, _) = median(&client, &format!("{ROOT}/diff{object}"), "text/plain", 21).await?;
    rows.push((
        "diff of its last two revisions (median of 21)".to_owned(),
        format!("{:.1} ms", ms(took)),
    ));
    if let (Some(before), Some(after)) = (before, after) {
        let per = after.saturating_sub(before) as f64 / (revisions.max(2) - 1) as f64;
        rows.push((
            "store growth per retained revision (embedded store, database and log)".to_owned(),
            format!(
                "{per:.0} bytes for an object of {object_size} bytes ({:.2}×)",
                per / object_size as f64
            ),
        ));
    }

    fill(&client, objects).await?;
    let list = format!("/api/v1/namespaces/{NAMESPACE}/configmaps");
    let listed: serde_json::Value = serde_json::from_slice(
        &client
            .request_text(http::Request::get(list.as_str()).body(Vec::new())?)
            .await?
            .into_bytes(),
    )?;
    let revision = listed["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or("")
        .to_owned();
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), NAMESPACE);
    for i in (0..objects).step_by(10) {
        let patch = serde_json::json!({"data": {"changed": "yes"}});
        cms.patch(
            &format!("read-{i:06}"),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await?;
    }
    let (now, size_now) = median(&client, &list, json, 7).await?;
    let past = format!("{list}?resourceVersion={revision}&resourceVersionMatch=Exact");
    let (then, size_then) = median(&client, &past, json, 7).await?;
    rows.push((
        format!("list of {objects} ConfigMaps, current (median of 7)"),
        format!("{:.1} ms ({} KiB)", ms(now), size_now / 1024),
    ));
    rows.push((
        "the same list as of a past revision, a tenth changed since (median of 7)".to_owned(),
        format!(
            "{:.1} ms ({} KiB): {:.2}× the current list",
            ms(then),
            size_then / 1024,
            then.as_secs_f64() / now.as_secs_f64()
        ),
    ));
    println!("| measurement | result |");
    println!("|---|---|");
    for (what, result) in rows {
        println!("| {what} | {result} |");
    }
    Ok(())
}
