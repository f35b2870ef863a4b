//! A running sandbox: the API server bound on loopback, its kubeconfig, and the simulated
//! actors started beside it. Dropping it stops everything.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::Path;
use std::sync::Arc;

use tokio::task::JoinHandle;

use crate::audit::{AuditEntry, AuditLog};
use crate::store::Store;

/// Context, cluster and user name written into the sandbox kubeconfig.
pub const CONTEXT_NAME: &str = "karpenter-sandbox";

/// The API server and the background tasks of one sandbox.
pub struct Sandbox {
    store: Arc<Store>,
    audit: Arc<AuditLog>,
    faults: Arc<crate::faults::Faults>,
    addr: SocketAddr,
    tasks: Vec<JoinHandle<()>>,
}

impl Sandbox {
    /// Start the API server on `127.0.0.1:port` (0 picks a free port) over a fresh store.
    ///
    /// Errors: the port cannot be bound.
    pub async fn start(port: u16) -> std::io::Result<Sandbox> {
        Sandbox::start_with(Store::new(), port).await
    }

    /// Start the API server over an existing store.
    ///
    /// Errors: the port cannot be bound.
    pub async fn start_with(store: Arc<Store>, port: u16) -> std::io::Result<Sandbox> {
        let audit = Arc::new(AuditLog::default());
        let faults = Arc::new(crate::faults::Faults::default());
        let (addr, task) = crate::server::serve_with_faults(
            Arc::clone(&store),
            Arc::clone(&audit),
            Arc::clone(&faults),
            SocketAddr::from((Ipv4Addr::LOCALHOST, port)),
        )
        .await?;
        Ok(Sandbox {
            store,
            audit,
            faults,
            addr,
            tasks: vec![task],
        })
    }

    /// The object store (for in-process actors and tests).
    pub fn store(&self) -> &Arc<Store> {
        &self.store
    }

    /// Every write clients made over HTTP so far.
    pub fn audit(&self) -> Vec<AuditEntry> {
        self.audit.entries()
    }

    /// The audit log itself: writes in order and, per user agent, the distinct requests (reads
    /// too) as RBAC sees them ([`AuditLog::accesses`]).
    pub fn audit_log(&self) -> &Arc<AuditLog> {
        &self.audit
    }

    /// The API server's fault injector (off until configured and enabled).
    pub fn faults(&self) -> &Arc<crate::faults::Faults> {
        &self.faults
    }

    /// The loopback address the API server listens on, `127.0.0.1:<port>`.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Keep a background task alive as long as the sandbox (aborted on drop).
    pub fn adopt(&mut self, task: JoinHandle<()>) {
        self.tasks.push(task);
    }

    /// A kubeconfig (YAML) whose current context points at this sandbox, namespace `default`.
    pub fn kubeconfig(&self) -> String {
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: {CONTEXT_NAME}\n  cluster:\n    server: {url}\ncontexts:\n- name: {CONTEXT_NAME}\n  context:\n    cluster: {CONTEXT_NAME}\n    user: {CONTEXT_NAME}\n    namespace: default\ncurrent-context: {CONTEXT_NAME}\nusers:\n- name: {CONTEXT_NAME}\n  user: {{}}\n",
            url = self.url()
        )
    }

    /// Write the kubeconfig to `path` (creating parent directories).
    ///
    /// Errors: the file cannot be written.
    pub fn write_kubeconfig(&self, path: &Path) -> std::io::Result<()> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::write(path, self.kubeconfig())
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}
