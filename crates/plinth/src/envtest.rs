//! Plinth as controller-runtime's envtest control plane. `plinth envtest-assets DIR` writes
//! `kube-apiserver` and `etcd` into DIR as links to this binary; called by those names it
//! takes their flags:
//!
//! - as `etcd`, it serves the endpoints envtest polls (`/health`, `/version`) on the client
//!   URLs, and tells the API server started after it where its data directory is;
//! - as `kube-apiserver`, it runs `plinth serve` with the flags translated: the secure port
//!   and bind address, the serving certificate of `--cert-dir` (or `--tls-cert-file`), the
//!   client CA, the Service range, the ServiceAccount admission plugin disabled, the store in
//!   the `etcd` link's data directory (a real etcd in `--etcd-servers` is used as one), no
//!   node agent, no built-in controllers (as envtest runs no controller manager) and no
//!   DNS Service (no DNS add-on). Flags
//!   it does not honour are named in one warning line.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

/// The path on the `etcd` stand-in that answers with its data directory.
const DATA_DIR_PATH: &str = "/plinth/v1/data-dir";

/// The names this binary answers to as an envtest asset.
pub(crate) const NAMES: [&str; 2] = ["kube-apiserver", "etcd"];

/// Writes the assets into `dir`: `kube-apiserver` and `etcd` linking to this binary, and
/// `kubectl` linking to the machine's when it has one.
pub(crate) fn write_assets(dir: &Path) -> Result<(), String> {
    let me = std::env::current_exe()
        .and_then(std::fs::canonicalize)
        .map_err(|e| format!("cannot find this binary: {e}"))?;
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut links: Vec<(&str, PathBuf)> = NAMES.iter().map(|n| (*n, me.clone())).collect();
    if let Some(kubectl) = plinth_node::images::which("kubectl") {
        links.push(("kubectl", PathBuf::from(kubectl)));
    }
    for (name, target) in links {
        let link = dir.join(name);
        if std::fs::symlink_metadata(&link).is_ok() {
            std::fs::remove_file(&link).map_err(|e| format!("{}: {e}", link.display()))?;
        }
        std::os::unix::fs::symlink(&target, &link)
            .map_err(|e| format!("{}: {e}", link.display()))?;
    }
    Ok(())
}

/// Which asset this process was started as, from its program name.
pub(crate) fn called_as() -> Option<&'static str> {
    let arg0 = std::env::args_os().next()?;
    let name = Path::new(&arg0).file_name()?.to_str()?.to_owned();
    NAMES.into_iter().find(|n| *n == name)
}

/// Ends this process once the process that started it is gone: a test binary that dies
/// without stopping its envtest (a panic, a kill) leaves nothing running behind it.
pub(crate) fn exit_with_parent(name: &'static str) {
    let parent = std::os::unix::process::parent_id();
    std::thread::spawn(move || {
        loop {
            std::thread::sleep(Duration::from_millis(500));
            if std::os::unix::process::parent_id() != parent {
                eprintln!("{name} (plinth): the process that started it is gone; stopping");
                std::process::exit(0);
            }
        }
    });
}

/// `--name=value`, `--name value` and bare `--name` flags, in order.
fn flags(args: &[String], takes_value: &[&str]) -> Result<Vec<(String, Option<String>)>, String> {
    let mut out = Vec::new();
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        let Some(flag) = arg.strip_prefix("--").or_else(|| arg.strip_prefix('-')) else {
            return Err(format!("unexpected argument {arg:?}"));
        };
        match flag.split_once('=') {
            Some((name, value)) => out.push((name.to_owned(), Some(value.to_owned()))),
            None if takes_value.contains(&flag) => {
                let value = args
                    .next()
                    .ok_or_else(|| format!("flag needs an argument: --{flag}"))?;
                out.push((flag.to_owned(), Some(value.clone())));
            }
            None => out.push((flag.to_owned(), None)),
        }
    }
    Ok(out)
}

/// The value the last `--name` gave.
fn last(parsed: &[(String, Option<String>)], name: &str) -> Option<String> {
    parsed
        .iter()
        .rev()
        .find(|(n, _)| n == name)
        .and_then(|(_, v)| v.clone())
}

/// Flags that mean the same to `plinth serve` under the same name.
const SAME: [&str; 16] = [
    "service-cluster-ip-range",
    "etcd-prefix",
    "token-auth-file",
    "anonymous-auth",
    "encryption-provider-config",
    "admission-control-config-file",
    "max-requests-inflight",
    "max-mutating-requests-inflight",
    "audit-policy-file",
    "audit-log-path",
    "audit-log-maxsize",
    "audit-log-maxbackup",
    "default-not-ready-toleration-seconds",
    "default-unreachable-toleration-seconds",
    "tls-cert-file",
    "tls-private-key-file",
];

/// The API server's flags this stand-in reads besides [`SAME`].
const READ: [&str; 7] = [
    "secure-port",
    "bind-address",
    "cert-dir",
    "client-ca-file",
    "etcd-servers",
    "disable-admission-plugins",
    "authorization-mode",
];

/// `kube-apiserver …`: the arguments `plinth serve` gets, or the exit for `--help` and
/// `--version`.
pub(crate) fn apiserver_args(args: &[String]) -> Result<Vec<String>, ExitCode> {
    if args.iter().any(|a| a == "--help" || a == "-h") {
        println!(
            "kube-apiserver (Plinth {}): runs `plinth serve` for envtest.\n\nFlags:",
            env!("CARGO_PKG_VERSION")
        );
        for flag in SAME.iter().chain(READ.iter()) {
            println!("      --{flag} string");
        }
        return Err(ExitCode::SUCCESS);
    }
    if args.iter().any(|a| a == "--version") {
        println!("Kubernetes v1.32.0 (Plinth {})", env!("CARGO_PKG_VERSION"));
        return Err(ExitCode::SUCCESS);
    }
    let takes: Vec<&str> = SAME.iter().chain(READ.iter()).copied().collect();
    let parsed = flags(args, &takes).map_err(|e| {
        eprintln!("kube-apiserver (plinth): {e}");
        ExitCode::FAILURE
    })?;
    let value = |name: &str| last(&parsed, name);
    let mut out: Vec<String> = vec![
        "serve".into(),
        "--no-node".into(),
        "--controllers=false".into(),
        "--pod-network=shared".into(),
        "--cluster-dns=false".into(),
    ];
    let mut unhonoured = Vec::new();
    for (name, value) in &parsed {
        if SAME.contains(&name.as_str()) {
            out.push(match value {
                Some(value) => format!("--{name}={value}"),
                None => format!("--{name}"),
            });
        } else if !READ.contains(&name.as_str()) {
            unhonoured.push(format!("--{name}"));
        }
    }
    // kube-apiserver's default, which `plinth serve` does not share.
    if value("anonymous-auth").is_none() {
        out.push("--anonymous-auth=true".into());
    }
    let port = value("secure-port").unwrap_or_else(|| "6443".into());
    let host = value("bind-address").unwrap_or_else(|| "127.0.0.1".into());
    let host = if host.contains(':') {
        format!("[{host}]")
    } else {
        host
    };
    out.push(format!("--listen={host}:{port}"));
    let cert_dir = value("cert-dir").map(PathBuf::from);
    if value("tls-cert-file").is_none()
        && let Some(dir) = &cert_dir
        && dir.join("apiserver.crt").is_file()
        && dir.join("apiserver.key").is_file()
    {
        out.push(format!(
            "--tls-cert-file={}",
            dir.join("apiserver.crt").display()
        ));
        out.push(format!(
            "--tls-private-key-file={}",
            dir.join("apiserver.key").display()
        ));
    }
    if let Some(ca) = value("client-ca-file") {
        out.push(format!("--client-ca-file={ca}"));
    }
    for plugin in value("disable-admission-plugins")
        .iter()
        .flat_map(|v| v.split(','))
        .filter(|p| !p.is_empty())
    {
        if plugin == "ServiceAccount" {
            out.push(format!("--disable-admission-plugins={plugin}"));
        } else {
            unhonoured.push(format!("--disable-admission-plugins={plugin}"));
        }
    }
    if let Some(modes) = value("authorization-mode")
        && !modes.split(',').any(|m| m == "RBAC")
    {
        unhonoured.push(format!(
            "--authorization-mode={modes} (Plinth authorizes with Node,RBAC)"
        ));
    }
    // The store: the `etcd` stand-in's data directory, or a real etcd.
    let etcd: Vec<String> = value("etcd-servers")
        .iter()
        .flat_map(|v| v.split(','))
        .filter(|u| !u.is_empty())
        .map(str::to_owned)
        .collect();
    let data_dir = match etcd.iter().find_map(|url| stand_in_data_dir(url)) {
        Some(dir) => dir,
        None => {
            if !etcd.is_empty() {
                out.push(format!("--etcd-servers={}", etcd.join(",")));
            }
            match &cert_dir {
                Some(dir) => dir.join("plinth"),
                None => {
                    std::env::temp_dir().join(format!("plinth-apiserver-{}", std::process::id()))
                }
            }
        }
    };
    out.push(format!("--data-dir={}", data_dir.display()));
    if !unhonoured.is_empty() {
        eprintln!(
            "kube-apiserver (plinth): warning: not honoured: {}",
            unhonoured.join(", ")
        );
    }
    Ok(out)
}

/// The data directory of the `etcd` stand-in at `url`; `None` when it is not one (a real
/// etcd, or nothing there).
fn stand_in_data_dir(url: &str) -> Option<PathBuf> {
    let authority = url.strip_prefix("http://")?.trim_end_matches('/');
    let address = std::net::ToSocketAddrs::to_socket_addrs(authority)
        .ok()?
        .next()?;
    let mut stream = TcpStream::connect_timeout(&address, Duration::from_secs(2)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        stream,
        "GET {DATA_DIR_PATH} HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).ok()?;
    let (head, body) = answer.split_once("\r\n\r\n")?;
    head.starts_with("HTTP/1.1 200")
        .then(|| PathBuf::from(body.trim()))
        .filter(|dir| dir.is_absolute())
}

/// `etcd …`: serves `/health`, `/version` and the data directory on each client URL until
/// it is stopped (SIGTERM ends it; it holds nothing to save).
pub(crate) fn etcd(args: &[String]) -> ExitCode {
    const TAKES: [&str; 5] = [
        "listen-client-urls",
        "advertise-client-urls",
        "listen-peer-urls",
        "data-dir",
        "name",
    ];
    if args.iter().any(|a| a == "--help" || a == "-h") {
        println!(
            "etcd (Plinth {}): a stand-in for envtest.\n\nFlags:",
            env!("CARGO_PKG_VERSION")
        );
        for flag in TAKES {
            println!("  --{flag}");
        }
        return ExitCode::SUCCESS;
    }
    if args.iter().any(|a| a == "--version") {
        println!("etcd Version: 3.5.0 (Plinth {})", env!("CARGO_PKG_VERSION"));
        return ExitCode::SUCCESS;
    }
    let parsed = match flags(args, &TAKES) {
        Ok(parsed) => parsed,
        Err(e) => {
            eprintln!("etcd (plinth): {e}");
            return ExitCode::FAILURE;
        }
    };
    let value = |name: &str| last(&parsed, name);
    let unhonoured: Vec<String> = parsed
        .iter()
        .filter(|(n, _)| !TAKES.contains(&n.as_str()) && n != "unsafe-no-fsync")
        .map(|(n, _)| format!("--{n}"))
        .collect();
    if !unhonoured.is_empty() {
        eprintln!(
            "etcd (plinth): warning: not honoured: {}",
            unhonoured.join(", ")
        );
    }
    let data_dir = value("data-dir").map_or_else(|| PathBuf::from("default.etcd"), PathBuf::from);
    let data_dir =
        match std::fs::create_dir_all(&data_dir).and_then(|()| std::fs::canonicalize(&data_dir)) {
            Ok(dir) => dir,
            Err(e) => {
                eprintln!("etcd (plinth): {}: {e}", data_dir.display());
                return ExitCode::FAILURE;
            }
        };
    let urls = value("listen-client-urls").unwrap_or_else(|| "http://localhost:2379".into());
    let mut listeners = Vec::new();
    for url in urls.split(',').filter(|u| !u.is_empty()) {
        let Some(authority) = url.strip_prefix("http://") else {
            eprintln!("etcd (plinth): {url}: only http:// client URLs are served");
            return ExitCode::FAILURE;
        };
        match TcpListener::bind(authority.trim_end_matches('/')) {
            Ok(listener) => listeners.push(listener),
            Err(e) => {
                eprintln!("etcd (plinth): listen on {url}: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    let threads: Vec<_> = listeners
        .into_iter()
        .map(|listener| {
            let dir = data_dir.clone();
            std::thread::spawn(move || {
                for stream in listener.incoming().flatten() {
                    let dir = dir.clone();
                    std::thread::spawn(move || answer(stream, &dir));
                }
            })
        })
        .collect();
    for thread in threads {
        let _ = thread.join();
    }
    ExitCode::SUCCESS
}

/// Answers one connection's requests.
fn answer(stream: TcpStream, data_dir: &Path) {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(30)));
    let Ok(mut writer) = stream.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(stream);
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let path = line.split_whitespace().nth(1).unwrap_or("").to_owned();
        // The headers (and no body: only GETs are answered).
        let mut close = false;
        loop {
            let mut header = String::new();
            if reader.read_line(&mut header).unwrap_or(0) == 0 {
                return;
            }
            let header = header.trim();
            if header.is_empty() {
                break;
            }
            if header.eq_ignore_ascii_case("connection: close") {
                close = true;
            }
        }
        let (status, kind, body) = match path.split('?').next().unwrap_or("") {
            "/health" | "/readyz" | "/livez" => (
                "200 OK",
                "application/json",
                r#"{"health":"true","reason":""}"#.to_owned(),
            ),
            "/version" => (
                "200 OK",
                "application/json",
                r#"{"etcdserver":"3.5.0","etcdcluster":"3.5.0"}"#.to_owned(),
            ),
            DATA_DIR_PATH => ("200 OK", "text/plain", data_dir.display().to_string()),
            _ => (
                "404 Not Found",
                "text/plain",
                "404 page not found\n".to_owned(),
            ),
        };
        let sent = write!(
            writer,
            "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        if sent.is_err() || close {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(args: &[&str]) -> Vec<String> {
        args.iter().map(|a| (*a).to_owned()).collect()
    }

    #[test]
    fn envtests_flags_become_serves() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(dir.path().join("apiserver.crt"), "x").unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(dir.path().join("apiserver.key"), "x").unwrap_or_else(|e| panic!("{e}"));
        let cert_dir = dir.path().display().to_string();
        let args = apiserver_args(&strings(&[
            "--advertise-address=127.0.0.1",
            "--etcd-servers=http://127.0.0.1:1",
            &format!("--cert-dir={cert_dir}"),
            "--secure-port=40123",
            "--bind-address=127.0.0.1",
            "--disable-admission-plugins=ServiceAccount",
            "--service-cluster-ip-range=10.0.0.0/24",
            "--allow-privileged=true",
            "--authorization-mode=RBAC",
            &format!("--client-ca-file={cert_dir}/client-cert-auth-ca.crt"),
        ]))
        .unwrap_or_else(|_| panic!("refused"));
        for wanted in [
            "--listen=127.0.0.1:40123".to_owned(),
            "--service-cluster-ip-range=10.0.0.0/24".to_owned(),
            "--disable-admission-plugins=ServiceAccount".to_owned(),
            format!("--tls-cert-file={cert_dir}/apiserver.crt"),
            format!("--tls-private-key-file={cert_dir}/apiserver.key"),
            format!("--client-ca-file={cert_dir}/client-cert-auth-ca.crt"),
            // Nothing answers at port 1: the URL is taken for a real etcd.
            "--etcd-servers=http://127.0.0.1:1".to_owned(),
            format!("--data-dir={cert_dir}/plinth"),
            "--controllers=false".to_owned(),
            "--no-node".to_owned(),
        ] {
            assert!(args.contains(&wanted), "{wanted} missing from {args:?}");
        }
        assert_eq!(args.first().map(String::as_str), Some("serve"));
        assert!(
            !args.iter().any(|a| a.contains("allow-privileged")),
            "{args:?}"
        );
    }

    #[test]
    fn a_flag_without_its_value_is_refused() {
        assert!(apiserver_args(&strings(&["--secure-port"])).is_err());
        assert!(apiserver_args(&strings(&["stray"])).is_err());
    }
}
