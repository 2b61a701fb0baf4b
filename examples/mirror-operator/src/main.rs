//! Runs the mirror operator against the cluster of the current kubeconfig (`plinth serve`'s,
//! or any other) until interrupted; `--install` creates its CRD first.

use std::process::ExitCode;

use kube::CustomResourceExt;
use kube::api::{Api, PostParams};

#[tokio::main]
async fn main() -> ExitCode {
    match run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("mirror-operator: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run() -> Result<(), Box<dyn std::error::Error>> {
    let client = kube::Client::try_default().await?;
    if std::env::args().any(|a| a == "--install") {
        let crds = Api::all(client.clone());
        match crds
            .create(
                &PostParams::default(),
                &mirror_operator::ConfigMirror::crd(),
            )
            .await
        {
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            other => drop(other?),
        }
    }
    let mut manager = plinth_runtime::Manager::new();
    mirror_operator::register(&mut manager, &client)?;
    manager.run(plinth_runtime::shutdown_signal()).await?;
    Ok(())
}
