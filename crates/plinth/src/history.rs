//! `plinth history`, `plinth get --as-of`: the history API (`history.plinth.dev/v1alpha1`)
//! from the command line, through the kubeconfig — also as a kubectl plugin (`kubectl plinth
//! history …`, with this binary on the `PATH` as `kubectl-plinth`).

use std::io::IsTerminal;

use kube::Client;
use kube::discovery::{ApiResource, Discovery};
use serde_json::Value;

/// The history API's root.
const ROOT: &str = "/apis/history.plinth.dev/v1alpha1";

/// What to show of an object's history.
#[derive(Clone, Debug, Default)]
pub(crate) struct HistoryArgs {
    /// `KIND/NAME`.
    pub(crate) target: String,
    /// `-n`.
    pub(crate) namespace: Option<String>,
    /// `--since`: a duration before now or an RFC 3339 time.
    pub(crate) since: Option<String>,
    /// `-o yaml|json`.
    pub(crate) output: Option<String>,
    /// `--diff`: the changes of each version, as unified diffs.
    pub(crate) diff: bool,
}

/// A client, and the path of the object or resource `target` names.
struct Located {
    client: Client,
    /// `/api/v1/namespaces/ns/configmaps[/name]`.
    path: String,
    name: Option<String>,
}

async fn locate(target: &str, namespace: Option<&str>) -> Result<Located, String> {
    let client = Client::try_default()
        .await
        .map_err(|e| format!("cannot build a client from the kubeconfig: {e}"))?;
    let (resource, name) = match target.split_once('/') {
        Some((resource, name)) if !name.is_empty() => (resource, Some(name.to_owned())),
        Some(_) => return Err(format!("{target:?}: expected KIND/NAME or KIND")),
        None => (target, None),
    };
    let discovery = Discovery::new(client.clone())
        .run()
        .await
        .map_err(|e| format!("discovery failed: {e}"))?;
    let (resource, namespaced): (ApiResource, bool) =
        match crate::rewrite::resolve(&discovery, resource) {
            Ok(found) => found,
            Err(e) => match short_name(&client, resource).await {
                Some(plural) => crate::rewrite::resolve(&discovery, &plural)?,
                None => return Err(e),
            },
        };
    let namespace = namespace.map_or_else(|| client.default_namespace().to_owned(), str::to_owned);
    let mut path = if resource.group.is_empty() {
        format!("/api/{}", resource.version)
    } else {
        format!("/apis/{}/{}", resource.group, resource.version)
    };
    if namespaced {
        path.push_str(&format!("/namespaces/{namespace}"));
    }
    path.push_str(&format!("/{}", resource.plural));
    if let Some(name) = &name {
        path.push_str(&format!("/{name}"));
    }
    Ok(Located { client, path, name })
}

/// The plural (`plural.group`) of the resource whose short name is `short` (`cm`, `deploy`).
async fn short_name(client: &Client, short: &str) -> Option<String> {
    let has = |r: &k8s_openapi::apimachinery::pkg::apis::meta::v1::APIResource| {
        r.short_names
            .as_ref()
            .is_some_and(|names| names.iter().any(|n| n == short))
    };
    if let Ok(core) = client.list_core_api_resources("v1").await
        && let Some(found) = core.resources.iter().find(|r| has(r))
    {
        return Some(found.name.clone());
    }
    let groups = client.list_api_groups().await.ok()?;
    for group in groups.groups {
        let Some(version) = group
            .preferred_version
            .or_else(|| group.versions.first().cloned())
        else {
            continue;
        };
        if let Ok(list) = client
            .list_api_group_resources(&version.group_version)
            .await
            && let Some(found) = list.resources.iter().find(|r| has(r))
        {
            return Some(format!("{}.{}", found.name, group.name));
        }
    }
    None
}

async fn get(client: &Client, path_and_query: &str, accept: &str) -> Result<String, String> {
    let request = http::Request::get(path_and_query)
        .header("Accept", accept)
        .body(Vec::new())
        .map_err(|e| e.to_string())?;
    match client.request_text(request).await {
        Ok(text) => Ok(text),
        Err(kube::Error::Api(status)) => Err(format!(
            "Error from server ({}): {}",
            status.reason, status.message
        )),
        Err(e) => Err(e.to_string()),
    }
}

fn query_value(text: &str) -> String {
    form_urlencoded::byte_serialize(text.as_bytes()).collect()
}

/// Prints an object's revisions (a table, or the `ObjectHistory` as YAML or JSON), or with
/// `--diff` each version's changes.
pub(crate) async fn history(args: &HistoryArgs) -> Result<(), String> {
    let located = locate(&args.target, args.namespace.as_deref()).await?;
    if located.name.is_none() {
        return Err(format!("{:?}: expected KIND/NAME", args.target));
    }
    let mut query = String::new();
    if let Some(since) = &args.since {
        query = format!("?since={}", query_value(since));
    }
    let url = format!("{ROOT}/revisions{}{query}", located.path);
    let text = get(&located.client, &url, "application/json").await?;
    let history: Value = serde_json::from_str(&text).map_err(|e| e.to_string())?;
    match args.output.as_deref() {
        Some("json") => {
            println!(
                "{}",
                serde_json::to_string_pretty(&history).unwrap_or_default()
            );
            return Ok(());
        }
        Some("yaml") => {
            print!("{}", serde_norway::to_string(&history).unwrap_or_default());
            return Ok(());
        }
        Some(other) => return Err(format!("unknown output format {other:?}: yaml or json")),
        None => {}
    }
    let revisions = history["revisions"].as_array().cloned().unwrap_or_default();
    if args.diff {
        let colour = std::io::stdout().is_terminal();
        for version in &revisions {
            let revision = version["revision"].as_str().unwrap_or("");
            let url = format!("{ROOT}/diff{}?to={revision}", located.path);
            let diff = get(&located.client, &url, "text/plain").await?;
            println!("{}", describe(version));
            for line in diff.lines() {
                match (colour, line.chars().next()) {
                    (true, Some('+')) if !line.starts_with("+++") => {
                        println!("\x1b[32m{line}\x1b[0m")
                    }
                    (true, Some('-')) if !line.starts_with("---") => {
                        println!("\x1b[31m{line}\x1b[0m")
                    }
                    (true, Some('@')) => println!("\x1b[36m{line}\x1b[0m"),
                    _ => println!("{line}"),
                }
            }
            println!();
        }
        return Ok(());
    }
    let rows: Vec<[String; 6]> = revisions
        .iter()
        .map(|v| {
            let p = &v["provenance"];
            let text = |f: &str| p[f].as_str().unwrap_or("").to_owned();
            let mut user = text("user");
            if let Some(by) = p["impersonator"].as_str() {
                user = format!("{user} (by {by})");
            }
            let mut operation = text("operation");
            if let Some(sub) = p["subresource"].as_str() {
                operation = format!("{operation}/{sub}");
            }
            [
                v["revision"].as_str().unwrap_or("").to_owned(),
                text("time"),
                v["type"].as_str().unwrap_or("").to_owned(),
                user,
                operation,
                text("fieldManager"),
            ]
        })
        .collect();
    print_table(
        &["REVISION", "TIME", "TYPE", "USER", "OPERATION", "MANAGER"],
        &rows,
    );
    Ok(())
}

/// One line saying what a version was and who made it.
fn describe(version: &Value) -> String {
    let p = &version["provenance"];
    format!(
        "revision {} {} by {} ({}) at {}",
        version["revision"].as_str().unwrap_or("?"),
        version["type"].as_str().unwrap_or("?"),
        p["user"].as_str().unwrap_or("unknown"),
        p["operation"].as_str().unwrap_or("?"),
        p["time"].as_str().unwrap_or("?"),
    )
}

/// Prints the timeline of an object: its writes, its descendants', their Events and container
/// starts and exits, oldest first (a table, or the `Timeline` as YAML or JSON).
pub(crate) async fn timeline(args: &HistoryArgs) -> Result<(), String> {
    let located = locate(&args.target, args.namespace.as_deref()).await?;
    if located.name.is_none() {
        return Err(format!("{:?}: expected KIND/NAME", args.target));
    }
    let query = args
        .since
        .as_ref()
        .map(|since| format!("?since={}", query_value(since)))
        .unwrap_or_default();
    let url = format!("{ROOT}/timeline{}{query}", located.path);
    let text = get(&located.client, &url, "application/json").await?;
    let timeline: Value = serde_json::from_str(&text).map_err(|e| e.to_string())?;
    match args.output.as_deref() {
        Some("json") => {
            println!(
                "{}",
                serde_json::to_string_pretty(&timeline).unwrap_or_default()
            );
            return Ok(());
        }
        Some("yaml") => {
            print!("{}", serde_norway::to_string(&timeline).unwrap_or_default());
            return Ok(());
        }
        Some(other) => return Err(format!("unknown output format {other:?}: yaml or json")),
        None => {}
    }
    let rows: Vec<[String; 6]> = timeline["steps"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|step| {
            let object = &step["object"];
            let text = |v: &Value| v.as_str().unwrap_or("").to_owned();
            let mut who = text(&step["provenance"]["user"]);
            if let Some(short) = who.strip_prefix("system:serviceaccount:kube-system:") {
                who = short.to_owned();
            }
            [
                text(&step["time"]),
                text(&step["revision"]),
                format!("{}/{}", text(&object["kind"]), text(&object["name"])),
                text(&step["type"]),
                who,
                text(&step["summary"]),
            ]
        })
        .collect();
    print_table(&["TIME", "REVISION", "OBJECT", "TYPE", "BY", "WHAT"], &rows);
    if timeline["truncated"] == true {
        eprintln!("(the timeline was cut short: give a later --since)");
    }
    Ok(())
}

fn print_table(header: &[&str], rows: &[[String; 6]]) {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.len());
        }
    }
    let line = |cells: Vec<&str>| {
        let mut out = String::new();
        for (i, (cell, w)) in cells.iter().zip(&widths).enumerate() {
            if i + 1 == cells.len() {
                out.push_str(cell);
            } else {
                out.push_str(&format!("{cell:<w$}   "));
            }
        }
        println!("{}", out.trim_end());
    };
    line(header.to_vec());
    for row in rows {
        line(row.iter().map(String::as_str).collect());
    }
}

/// Prints an object (YAML by default) or a list's names as they were at `as_of`: a revision,
/// a duration before now, or an RFC 3339 time.
pub(crate) async fn get_as_of(
    target: &str,
    namespace: Option<&str>,
    as_of: &str,
    output: Option<&str>,
) -> Result<(), String> {
    let located = locate(target, namespace).await?;
    let revision = if !as_of.is_empty() && as_of.chars().all(|c| c.is_ascii_digit()) {
        as_of.to_owned()
    } else {
        let url = format!("{ROOT}/revision?time={}", query_value(as_of));
        let answer: Value =
            serde_json::from_str(&get(&located.client, &url, "application/json").await?)
                .map_err(|e| e.to_string())?;
        answer["revision"].as_str().unwrap_or("").to_owned()
    };
    let value: Value = if located.name.is_some() {
        let url = format!("{ROOT}/object{}?revision={revision}", located.path);
        serde_json::from_str(&get(&located.client, &url, "application/json").await?)
            .map_err(|e| e.to_string())?
    } else {
        let url = format!(
            "{}?resourceVersion={revision}&resourceVersionMatch=Exact",
            located.path
        );
        serde_json::from_str(&get(&located.client, &url, "application/json").await?)
            .map_err(|e| e.to_string())?
    };
    match output {
        Some("json") => println!(
            "{}",
            serde_json::to_string_pretty(&value).unwrap_or_default()
        ),
        Some("yaml") => print!("{}", serde_norway::to_string(&value).unwrap_or_default()),
        Some("name") | None if located.name.is_none() => {
            for item in value["items"].as_array().into_iter().flatten() {
                println!("{}", item["metadata"]["name"].as_str().unwrap_or_default());
            }
        }
        None => print!("{}", serde_norway::to_string(&value).unwrap_or_default()),
        Some(other) => {
            return Err(format!(
                "unknown output format {other:?}: yaml, json or name"
            ));
        }
    }
    Ok(())
}
