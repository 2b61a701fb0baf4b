//! The pod network's figures: `dns` (cluster DNS queries per second and their latency, over
//! UDP from the machine), `services` (small HTTP requests per second through a ClusterIP,
//! the load generator and the servers being pods of this binary: `http-load` and
//! `http-serve`).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Full};
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::Client;
use kube::api::{Api, DeleteParams, LogParams, PostParams};

use crate::common::{Error, percentile, run_id};

/// The `kube-system/kube-dns` Service's address (port 53).
///
/// # Errors
/// An API failure, or a Service without a ClusterIP.
pub(crate) async fn dns_service(client: Client) -> Result<SocketAddr, Error> {
    let services: Api<Service> = Api::namespaced(client, "kube-system");
    let ip = services
        .get("kube-dns")
        .await?
        .spec
        .and_then(|s| s.cluster_ip)
        .ok_or("kube-dns has no ClusterIP")?;
    Ok(SocketAddr::new(ip.parse()?, 53))
}

/// Sends `concurrency` streams of A queries for `name` to `server` for `seconds`; prints
/// queries per second and the latency percentiles.
///
/// # Errors
/// The socket cannot be made, or no answer comes at all.
pub(crate) async fn dns(
    server: SocketAddr,
    name: &str,
    seconds: u64,
    concurrency: usize,
) -> Result<(), Error> {
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let mut tasks = Vec::new();
    for stream in 0..concurrency {
        let name = name.to_owned();
        tasks.push(tokio::spawn(async move {
            let socket = tokio::net::UdpSocket::bind("0.0.0.0:0").await?;
            socket.connect(server).await?;
            let mut latencies = Vec::new();
            let mut lost = 0u64;
            let mut buffer = vec![0u8; 1500];
            let mut id = u16::try_from(stream % 60_000).unwrap_or(0);
            while Instant::now() < deadline {
                id = id.wrapping_add(1);
                let query = plinth_net::dns::wire::write_query(id, &name, 1);
                let sent = Instant::now();
                socket.send(&query).await?;
                match tokio::time::timeout(Duration::from_secs(1), socket.recv(&mut buffer)).await {
                    Ok(Ok(n)) if n >= 2 && buffer[..2] == id.to_be_bytes() => {
                        latencies.push(sent.elapsed());
                    }
                    _ => lost += 1,
                }
            }
            Ok::<_, std::io::Error>((latencies, lost))
        }));
    }
    let mut latencies = Vec::new();
    let mut lost = 0;
    for task in tasks {
        let (l, n) = task.await??;
        latencies.extend(l);
        lost += n;
    }
    if latencies.is_empty() {
        return Err(format!("no answer from {server}").into());
    }
    latencies.sort();
    println!("| measurement | value |\n|---|---|");
    println!(
        "| DNS queries/s ({concurrency} streams, `{name}`) | {:.0} |",
        latencies.len() as f64 / seconds as f64
    );
    println!(
        "| DNS latency p50 / p99 / max | {:.3} / {:.3} / {:.3} ms |",
        ms(percentile(&latencies, 0.5)),
        ms(percentile(&latencies, 0.99)),
        ms(percentile(&latencies, 1.0))
    );
    println!("| unanswered | {lost} |");
    Ok(())
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Answers every HTTP/1.1 request on `listen` with `ok` (keeping connections open).
///
/// # Errors
/// The address cannot be bound.
pub(crate) async fn http_serve(listen: SocketAddr) -> Result<(), Error> {
    let listener = tokio::net::TcpListener::bind(listen).await?;
    eprintln!("serving on {listen}");
    loop {
        let (stream, _) = listener.accept().await?;
        let _ = stream.set_nodelay(true);
        tokio::spawn(async move {
            let service = hyper::service::service_fn(|_request| async {
                Ok::<_, std::convert::Infallible>(hyper::Response::new(Full::new(
                    Bytes::from_static(b"ok\n"),
                )))
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                .await;
        });
    }
}

/// Sends GETs to `url` (`http://host:port/path`) over `connections` kept-open connections for
/// `seconds`; prints requests per second and the latency percentiles.
///
/// # Errors
/// The URL does not parse, or its host cannot be reached.
pub(crate) async fn http_load(url: &str, seconds: u64, connections: usize) -> Result<(), Error> {
    let uri: http::Uri = url.parse()?;
    let host = uri.host().ok_or("the URL has no host")?.to_owned();
    let port = uri.port_u16().unwrap_or(80);
    let address = tokio::net::lookup_host((host.as_str(), port))
        .await?
        .next()
        .ok_or_else(|| format!("{host} does not resolve"))?;
    let path = Arc::new(uri.path().to_owned());
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let mut tasks = Vec::new();
    for _ in 0..connections {
        let (path, host) = (path.clone(), host.clone());
        tasks.push(tokio::spawn(async move {
            let stream = tokio::net::TcpStream::connect(address).await?;
            let _ = stream.set_nodelay(true);
            let (mut sender, connection) =
                hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await?;
            tokio::spawn(connection);
            let mut latencies = Vec::new();
            while Instant::now() < deadline {
                let request = hyper::Request::get(path.as_str())
                    .header(hyper::header::HOST, host.as_str())
                    .body(Empty::<Bytes>::new())?;
                let sent = Instant::now();
                sender.ready().await?;
                let response = sender.send_request(request).await?;
                let _ = response.into_body().collect().await?;
                latencies.push(sent.elapsed());
            }
            Ok::<_, Error>(latencies)
        }));
    }
    let mut latencies = Vec::new();
    for task in tasks {
        latencies.extend(task.await??);
    }
    latencies.sort();
    println!(
        "| HTTP requests/s through {url} ({connections} connections) | {:.0} |",
        latencies.len() as f64 / seconds as f64
    );
    println!(
        "| HTTP latency p50 / p99 / max | {:.3} / {:.3} / {:.3} ms |",
        ms(percentile(&latencies, 0.5)),
        ms(percentile(&latencies, 0.99)),
        ms(percentile(&latencies, 1.0))
    );
    Ok(())
}

/// The servers (`replicas` pods of `image` running `http-serve`) behind a Service, and one
/// pod running `http-load` against the Service's DNS name; prints what the load pod printed.
///
/// # Errors
/// An API failure, or the load pod failing.
pub(crate) async fn services(
    client: Client,
    namespace: &str,
    image: &str,
    replicas: usize,
    seconds: u64,
    connections: usize,
) -> Result<(), Error> {
    let id = run_id();
    let name = format!("bench-http-{id}");
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let services: Api<Service> = Api::namespaced(client.clone(), namespace);
    let server = |n: usize| -> Result<Pod, Error> {
        Ok(serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": format!("{name}-{n}"), "labels": {"bench-http": id}},
            "spec": {"terminationGracePeriodSeconds": 1, "automountServiceAccountToken": false,
                "containers": [{"name": "serve", "image": image,
                    "args": ["http-serve", "--listen", "$(POD_IP):8080"],
                    "env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
                    "readinessProbe": {"tcpSocket": {"port": 8080}, "periodSeconds": 1}}]},
        }))?)
    };
    let service: Service = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": name},
        "spec": {"selector": {"bench-http": id}, "ports": [{"port": 80, "targetPort": 8080}]},
    }))?;
    services.create(&PostParams::default(), &service).await?;
    for n in 0..replicas {
        pods.create(&PostParams::default(), &server(n)?).await?;
    }
    let started = Instant::now();
    loop {
        let ready = pods
            .list(&kube::api::ListParams::default().labels(&format!("bench-http={id}")))
            .await?
            .items
            .iter()
            .filter(|p| crate::pods::ready(p))
            .count();
        if ready == replicas {
            break;
        }
        if started.elapsed() > Duration::from_secs(120) {
            return Err("the servers did not become ready".into());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let load_name = format!("bench-load-{id}");
    let load: Pod = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": load_name},
        "spec": {"restartPolicy": "Never", "automountServiceAccountToken": false,
            "containers": [{"name": "load", "image": image,
                "args": ["http-load", "--url", format!("http://{name}.{namespace}.svc.cluster.local/"),
                         "--seconds", seconds.to_string(), "--connections", connections.to_string()]}]},
    }))?;
    pods.create(&PostParams::default(), &load).await?;
    let phase = loop {
        let pod = pods.get(&load_name).await?;
        let phase = pod.status.and_then(|s| s.phase).unwrap_or_default();
        if phase == "Succeeded" || phase == "Failed" {
            break phase;
        }
        if started.elapsed() > Duration::from_secs(seconds + 180) {
            break "Timeout".into();
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let logs = pods
        .logs(&load_name, &LogParams::default())
        .await
        .unwrap_or_default();
    let delete = DeleteParams::default();
    let _ = pods.delete(&load_name, &delete).await;
    for n in 0..replicas {
        let _ = pods.delete(&format!("{name}-{n}"), &delete).await;
    }
    let _ = services.delete(&name, &delete).await;
    println!("| measurement | value |\n|---|---|");
    print!("{logs}");
    if phase != "Succeeded" {
        return Err(format!("the load pod ended {phase}").into());
    }
    Ok(())
}
