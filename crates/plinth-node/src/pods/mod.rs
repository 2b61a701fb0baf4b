//! The pods of this node: a watch on the Pods bound to it, one worker per pod, and in each
//! worker one supervisor per container — init containers in order (sidecars left running),
//! then the containers; restarts by `restartPolicy` with kube's back-off (the first at once,
//! then 10 s doubling to five minutes, `CrashLoopBackOff` meanwhile); probes; graceful
//! termination (`preStop`, `SIGTERM`, `SIGKILL` at the end of the grace period); the pod's
//! status as kube reports it.

mod container;
mod env;
mod probing;
mod runtime;
mod state;
mod status;
mod table;
mod worker;

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use kube::runtime::watcher;
use tokio::sync::watch;

use crate::agent::Agent;
use worker::Worker;

pub(crate) use table::{Registry, Stdin};

/// Watches the pods bound to this node and gives each to its worker until `stopping`.
pub(crate) async fn run(agent: Arc<Agent>, mut stopping: watch::Receiver<bool>) {
    let pods: Api<Pod> = Api::all(agent.client.clone());
    let config = watcher::Config::default().fields(&format!("spec.nodeName={}", agent.config.name));
    let mut events = watcher(pods, config).boxed();
    let mut workers = Vec::new();
    // The pods of the latest list (the first, or one after the watch broke off): once it is
    // complete, pods that went meanwhile stop, and what is left of others goes.
    let mut listed = std::collections::HashSet::new();
    // The list's pods are handed out once it is complete, after every address they hold is
    // claimed: a pod new to this node must not be given the address of one that ran here
    // before the agent restarted and whose worker has not claimed it yet.
    let mut initial = Vec::new();
    loop {
        let event = tokio::select! {
            event = events.next() => event,
            _ = stopping.wait_for(|s| *s) => break,
        };
        let Some(event) = event else { break };
        match event {
            Ok(watcher::Event::Init) => {
                listed.clear();
                initial.clear();
            }
            Ok(watcher::Event::InitApply(pod)) => {
                listed.insert(pod.metadata.uid.clone().unwrap_or_default());
                initial.push(pod);
            }
            Ok(watcher::Event::InitDone) => {
                claim_addresses(&agent, &initial);
                for pod in initial.drain(..) {
                    if let Some(worker) = deliver(&agent, pod) {
                        workers.push(worker);
                    }
                }
                relisted(&agent, &listed);
            }
            Ok(watcher::Event::Apply(pod)) => {
                listed.insert(pod.metadata.uid.clone().unwrap_or_default());
                if let Some(worker) = deliver(&agent, pod) {
                    workers.push(worker);
                }
            }
            Ok(watcher::Event::Delete(pod)) => {
                let uid = pod.metadata.uid.clone().unwrap_or_default();
                listed.remove(&uid);
                gone(&agent, &uid);
            }
            Err(e) => {
                tracing::warn!(error = %e, "pod watch failed; retrying");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
    }
    // The node goes away: every container is stopped.
    if let Ok(map) = agent.pods.workers.lock() {
        for sender in map.values() {
            let _ = sender.send(None);
        }
    }
    for worker in workers {
        let _ = worker.await;
    }
}

/// Whether `pod` has run to its end (`Succeeded` or `Failed`): nothing of it runs again.
fn finished(pod: &Pod) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

/// Whether `pod` runs in the machine's network namespace (`hostNetwork: true`).
pub(super) fn on_host_network(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.host_network)
        .unwrap_or(false)
}

/// Marks the address of every pod in `pods` that will run here (not finished, not on the
/// host's network) in use.
fn claim_addresses(agent: &Agent, pods: &[Pod]) {
    let Ok(mut ips) = agent.ips.lock() else {
        return;
    };
    for pod in pods {
        if finished(pod) || on_host_network(pod) {
            continue;
        }
        if let Some(ip) = pod
            .status
            .as_ref()
            .and_then(|s| s.pod_ip.as_deref())
            .and_then(|ip| ip.parse().ok())
        {
            ips.claim(ip);
        }
    }
}

/// Pod `uid` is no longer bound here (deleted): its worker, if it has one, stops its
/// containers and then removes its files; without one (it had finished), they go now — the
/// kubelet's housekeeping of orphaned pod directories.
fn gone(agent: &Arc<Agent>, uid: &str) {
    let Ok(map) = agent.pods.workers.lock() else {
        return;
    };
    match map.get(uid) {
        Some(sender) => {
            // Marked under the workers' lock, which the worker's end takes too.
            if let Ok(mut gone) = agent.pods.gone.lock() {
                gone.insert(uid.to_owned());
            }
            let _ = sender.send(None);
        }
        None => remove_files(agent, uid),
    }
}

/// After a complete list (`listed`: the pods bound here): the workers of pods missing from
/// it stop (their deletion fell into a gap of the watch), and the directories of pods that
/// are neither listed nor being stopped go — among them what a killed agent left.
fn relisted(agent: &Arc<Agent>, listed: &std::collections::HashSet<String>) {
    let workers: Vec<String> = match agent.pods.workers.lock() {
        Ok(map) => map.keys().cloned().collect(),
        Err(_) => return,
    };
    for uid in workers.iter().filter(|uid| !listed.contains(*uid)) {
        gone(agent, uid);
    }
    let pods = agent.config.data_dir.join("pods");
    for entry in std::fs::read_dir(&pods).into_iter().flatten().flatten() {
        let uid = entry.file_name().to_string_lossy().into_owned();
        if listed.contains(&uid) || workers.contains(&uid) || !entry.path().is_dir() {
            continue;
        }
        tracing::info!(pod = %uid, "removing what is left of a pod no longer here");
        remove_files(agent, &uid);
    }
}

/// Removes pod `uid`'s directory: its memory-backed volumes unmounted, its files (logs among
/// them) deleted.
fn remove_files(agent: &Agent, uid: &str) {
    if uid.is_empty() || uid.contains('/') || uid.starts_with('.') {
        return;
    }
    let dir = agent.config.data_dir.join("pods").join(uid);
    if dir.is_dir() {
        crate::volumes::unmount_all(&dir);
        let _ = std::fs::remove_dir_all(&dir);
    }
}

fn deliver(agent: &Arc<Agent>, pod: Pod) -> Option<tokio::task::JoinHandle<()>> {
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let mut map = agent.pods.workers.lock().ok()?;
    if let Some(sender) = map.get(&uid) {
        let _ = sender.send(Some(pod));
        return None;
    }
    if finished(&pod) {
        return None;
    }
    let pod_spec = serde_json::to_value(pod.spec.as_ref()).unwrap_or(serde_json::Value::Null);
    let first = pod.clone();
    let (sender, receiver) = watch::channel(Some(pod));
    map.insert(uid.clone(), sender);
    let agent = agent.clone();
    Some(tokio::spawn(async move {
        if let Some((reason, message)) = refusal(&agent, &uid, &pod_spec) {
            reject(&agent, &first, reason, &message).await;
        } else {
            Worker::start(agent.clone(), receiver).await;
            agent.host_ports.close(&uid);
        }
        if let Ok(mut map) = agent.pods.workers.lock() {
            map.remove(&uid);
            // Deleted while it stopped: nothing of it is wanted any more.
            if agent
                .pods
                .gone
                .lock()
                .is_ok_and(|mut gone| gone.remove(&uid))
            {
                remove_files(&agent, &uid);
            }
        }
    }))
}

/// Why this node refuses to run a pod it was given, as the kubelet's admission handlers say
/// it (reason, message): a sysctl outside the safe set, a host port another pod holds. An
/// admitted pod's host ports are claimed at once.
fn refusal(agent: &Agent, uid: &str, spec: &serde_json::Value) -> Option<(&'static str, String)> {
    if let Err(name) = crate::security::sysctls(spec) {
        return Some((
            "SysctlForbidden",
            format!("forbidden sysctl: {name:?} not allowlisted"),
        ));
    }
    if spec["hostNetwork"] != true {
        if agent.host_ports.conflicts(uid, spec) {
            return Some((
                "NodePorts",
                "Predicate NodePorts failed: node(s) didn't have free ports for the requested pod ports".into(),
            ));
        }
        agent.host_ports.claim(uid, spec);
    }
    None
}

/// Rejects a pod as the kubelet does: a warning event, and the pod `Failed` with the reason
/// and `Pod was rejected: <message>`; none of its containers start.
async fn reject(agent: &Arc<Agent>, pod: &Pod, reason: &str, message: &str) {
    tracing::info!(pod = ?pod.metadata.name, %reason, %message, "pod rejected");
    agent
        .events
        .record(
            &agent.client,
            &agent.config.name,
            pod,
            crate::events::Said {
                container: None,
                warning: true,
                reason,
                message,
            },
        )
        .await;
    let api: kube::Api<Pod> = kube::Api::namespaced(
        agent.client.clone(),
        pod.metadata.namespace.as_deref().unwrap_or("default"),
    );
    let status = serde_json::json!({"status": {
        "phase": "Failed",
        "reason": reason,
        "message": format!("Pod was rejected: {message}"),
        "startTime": state::now_text(),
    }});
    if let Err(e) = api
        .patch_status(
            pod.metadata.name.as_deref().unwrap_or(""),
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(status),
        )
        .await
    {
        tracing::warn!(error = %e, "could not record a rejected pod's status");
    }
}
