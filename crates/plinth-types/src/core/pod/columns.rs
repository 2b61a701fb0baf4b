//! The columns `kubectl get pods` prints: READY, STATUS, RESTARTS, READINESS GATES.

use serde_json::{Value, json};

pub(super) fn text_or_none(object: &Value, pointer: &str) -> String {
    match object.pointer(pointer).and_then(Value::as_str) {
        Some(s) if !s.is_empty() => s.to_owned(),
        _ => "<none>".into(),
    }
}

pub(super) fn statuses<'a>(object: &'a Value, key: &str) -> &'a [Value] {
    object
        .pointer(&format!("/status/{key}"))
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

pub(super) fn ready_cell(pod: &Value) -> String {
    let total = pod
        .pointer("/spec/containers")
        .and_then(Value::as_array)
        .map_or(0, Vec::len);
    let ready = statuses(pod, "containerStatuses")
        .iter()
        .filter(|s| s["ready"] == json!(true))
        .count();
    // Sidecars (restartable init containers) count too, as kubectl counts them.
    let sidecars: Vec<&str> = pod
        .pointer("/spec/initContainers")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|c| c["restartPolicy"] == "Always")
        .filter_map(|c| c["name"].as_str())
        .collect();
    let ready_sidecars = statuses(pod, "initContainerStatuses")
        .iter()
        .filter(|s| sidecars.contains(&s["name"].as_str().unwrap_or("")) && s["ready"] == true)
        .count();
    format!("{}/{}", ready + ready_sidecars, total + sidecars.len())
}

/// kubectl's `STATUS` column (its `printPod`).
pub(super) fn status_cell(pod: &Value) -> String {
    let mut reason = pod
        .pointer("/status/reason")
        .and_then(Value::as_str)
        .filter(|r| !r.is_empty())
        .or_else(|| pod.pointer("/status/phase").and_then(Value::as_str))
        .unwrap_or("")
        .to_owned();
    let init_total = pod
        .pointer("/spec/initContainers")
        .and_then(Value::as_array)
        .map_or(0, Vec::len);
    let mut initializing = false;
    for (i, status) in statuses(pod, "initContainerStatuses").iter().enumerate() {
        let terminated = status.pointer("/state/terminated");
        let waiting = status.pointer("/state/waiting");
        let sidecar_started = status["started"] == true;
        match (terminated, waiting) {
            (Some(t), _) if t["exitCode"] == 0 => continue,
            (Some(t), _) => {
                reason = match t["reason"].as_str().filter(|r| !r.is_empty()) {
                    Some(r) => format!("Init:{r}"),
                    None if t["signal"].as_i64().unwrap_or(0) != 0 => {
                        format!("Init:Signal:{}", t["signal"])
                    }
                    None => format!("Init:ExitCode:{}", t["exitCode"]),
                };
            }
            (None, Some(w))
                if w["reason"]
                    .as_str()
                    .is_some_and(|r| !r.is_empty() && r != "PodInitializing") =>
            {
                reason = format!("Init:{}", w["reason"].as_str().unwrap_or(""));
            }
            _ if sidecar_started => continue,
            _ => reason = format!("Init:{i}/{init_total}"),
        }
        initializing = true;
        break;
    }
    if !initializing {
        let mut has_running = false;
        for status in statuses(pod, "containerStatuses").iter().rev() {
            if let Some(w) = status.pointer("/state/waiting")
                && let Some(r) = w["reason"].as_str().filter(|r| !r.is_empty())
            {
                reason = r.to_owned();
            } else if let Some(t) = status.pointer("/state/terminated") {
                reason = match t["reason"].as_str().filter(|r| !r.is_empty()) {
                    Some(r) => r.to_owned(),
                    None if t["signal"].as_i64().unwrap_or(0) != 0 => {
                        format!("Signal:{}", t["signal"])
                    }
                    None => format!("ExitCode:{}", t["exitCode"]),
                };
            } else if status.pointer("/state/running").is_some() && status["ready"] == true {
                has_running = true;
            }
        }
        if reason == "Completed" && has_running {
            reason = "Running".into();
        }
    }
    if pod
        .pointer("/metadata/deletionTimestamp")
        .is_some_and(|t| !t.is_null())
    {
        reason = if pod.pointer("/status/reason") == Some(&json!("NodeLost")) {
            "Unknown".into()
        } else {
            "Terminating".into()
        };
    }
    reason
}

pub(super) fn restarts_cell(pod: &Value, now: i64) -> Value {
    let mut restarts = 0;
    let mut last: Option<i64> = None;
    for status in statuses(pod, "containerStatuses")
        .iter()
        .chain(statuses(pod, "initContainerStatuses"))
    {
        restarts += status["restartCount"].as_i64().unwrap_or(0);
        if let Some(t) = status
            .pointer("/lastState/terminated/finishedAt")
            .and_then(Value::as_str)
            .and_then(plinth_core::meta::parse_time)
        {
            last = Some(last.map_or(t, |l| l.max(t)));
        }
    }
    match last {
        Some(t) if restarts > 0 => json!(format!(
            "{restarts} ({} ago)",
            plinth_core::meta::human_duration(now - t)
        )),
        _ => json!(restarts.to_string()),
    }
}

pub(super) fn readiness_gates_cell(pod: &Value) -> String {
    let gates: Vec<&str> = pod
        .pointer("/spec/readinessGates")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|g| g["conditionType"].as_str())
        .collect();
    if gates.is_empty() {
        return "<none>".into();
    }
    let conditions = statuses(pod, "conditions");
    let met = gates
        .iter()
        .filter(|g| {
            conditions
                .iter()
                .any(|c| c["type"] == **g && c["status"] == "True")
        })
        .count();
    format!("{met}/{}", gates.len())
}
