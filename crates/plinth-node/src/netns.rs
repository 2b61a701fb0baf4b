//! Reaching a pod's port as the kubelet's port forwarding does: inside the pod's network
//! namespace, at `localhost` (so a server bound to `127.0.0.1` in the pod is reached too), or
//! at the pod's address where pods share the machine's network.

use std::path::PathBuf;

/// How a pod's ports are reached.
#[derive(Clone, Debug)]
pub(crate) enum Reach {
    /// At its address (pods share the machine's network).
    Address(String),
    /// At `localhost` in the network namespace at this path.
    Namespace(PathBuf),
}

impl Reach {
    /// A connection to `port` of the pod.
    ///
    /// # Errors
    /// Why it could not be made, in the kubelet's words.
    pub(crate) async fn connect(&self, port: u16) -> Result<tokio::net::TcpStream, String> {
        match self {
            Reach::Address(ip) => tokio::net::TcpStream::connect((ip.as_str(), port))
                .await
                .map_err(|e| format!("failed to connect to {ip}:{port}: {e}")),
            Reach::Namespace(path) => {
                let path = path.clone();
                let (sender, receiver) = tokio::sync::oneshot::channel();
                // A thread of its own enters the namespace (and ends with it): a socket made
                // there stays in that namespace wherever it is used from.
                std::thread::spawn(move || {
                    let _ = sender.send(connect_inside(&path, port));
                });
                let stream = receiver
                    .await
                    .map_err(|_| "the connecting thread ended".to_owned())??;
                tokio::net::TcpStream::from_std(stream).map_err(|e| e.to_string())
            }
        }
    }
}

/// Connects to `localhost:port` inside the network namespace at `path`, on this thread.
fn connect_inside(path: &std::path::Path, port: u16) -> Result<std::net::TcpStream, String> {
    let inside = || format!("inside namespace {:?}", path.display().to_string());
    let file = std::fs::File::open(path).map_err(|e| format!("{}: {e}", inside()))?;
    nix::sched::setns(&file, nix::sched::CloneFlags::CLONE_NEWNET).map_err(|e| {
        format!(
            "failed to enter the network namespace {}: {e}",
            path.display()
        )
    })?;
    let stream = std::net::TcpStream::connect(("127.0.0.1", port)).map_err(|e| {
        format!(
            "failed to connect to localhost:{port} {}, IPv4: dial tcp4 127.0.0.1:{port}: {e}",
            inside()
        )
    })?;
    stream.set_nonblocking(true).map_err(|e| e.to_string())?;
    Ok(stream)
}
