//! Serve the sandbox API server alone (no simulated actors), for poking at it with kubectl:
//! `cargo run -p sandbox --example api_only -- /tmp/kubeconfig`.
use std::path::PathBuf;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let path = PathBuf::from(
        std::env::args()
            .nth(1)
            .unwrap_or_else(|| "kubeconfig".into()),
    );
    let sandbox = sandbox::Sandbox::start(0).await?;
    sandbox.write_kubeconfig(&path)?;
    println!(
        "API server at {}; kubeconfig written to {}",
        sandbox.url(),
        path.display()
    );
    tokio::signal::ctrl_c().await?;
    Ok(())
}
