//! A running sandbox: the API server serving https on loopback, the bearer token it requires,
//! its kubeconfig (which carries the token and the server's CA, in a file only its owner can
//! read), and the simulated actors started beside it. Dropping it stops everything.

use std::io::Write;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::Path;
use std::sync::Arc;

use tokio::task::JoinHandle;

use crate::audit::{AuditEntry, AuditLog};
use crate::server::tls::ServingCert;
use crate::server::{BearerToken, Limits};
use crate::store::Store;

/// Context, cluster and user name written into the sandbox kubeconfig.
pub const CONTEXT_NAME: &str = "karpenter-sandbox";

/// The API server and the background tasks of one sandbox.
pub struct Sandbox {
    store: Arc<Store>,
    audit: Arc<AuditLog>,
    faults: Arc<crate::faults::Faults>,
    token: BearerToken,
    cert: ServingCert,
    addr: SocketAddr,
    tasks: Vec<JoinHandle<()>>,
}

impl Sandbox {
    /// Start the API server on `127.0.0.1:port` (0 picks a free port) over a fresh store. It
    /// serves https with a certificate of its own CA and requires a bearer token generated for
    /// it ([`Sandbox::token`]); clients get both from [`Sandbox::kubeconfig`] or
    /// [`Sandbox::client_config`].
    ///
    /// Errors: the port cannot be bound, or the certificates cannot be made (the system's
    /// random source failed).
    pub async fn start(port: u16) -> std::io::Result<Sandbox> {
        Sandbox::start_with(Store::new(), port).await
    }

    /// [`Sandbox::start`] over an existing store.
    ///
    /// Errors: as [`Sandbox::start`].
    pub async fn start_with(store: Arc<Store>, port: u16) -> std::io::Result<Sandbox> {
        Sandbox::start_with_limits(store, port, Limits::default()).await
    }

    /// [`Sandbox::start_with`] with the API server holding clients to `limits` (timeouts, body
    /// size, unauthenticated connections) instead of [`Limits::default`]; tests shorten them.
    ///
    /// Errors: as [`Sandbox::start`].
    pub async fn start_with_limits(
        store: Arc<Store>,
        port: u16,
        limits: Limits,
    ) -> std::io::Result<Sandbox> {
        let audit = Arc::new(AuditLog::default());
        let faults = Arc::new(crate::faults::Faults::default());
        let token = BearerToken::random();
        let cert = ServingCert::generate().map_err(std::io::Error::other)?;
        let (addr, task) = crate::server::serve_with_limits(
            Arc::clone(&store),
            Arc::clone(&audit),
            Arc::clone(&faults),
            token.clone(),
            &cert,
            SocketAddr::from((Ipv4Addr::LOCALHOST, port)),
            limits,
        )
        .await?;
        Ok(Sandbox {
            store,
            audit,
            faults,
            token,
            cert,
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

    /// `https://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("https://{}", self.addr)
    }

    /// The PEM certificate of the CA that signed the API server's serving certificate, which
    /// clients must trust (made for this sandbox; the kubeconfig carries it).
    pub fn ca_pem(&self) -> &str {
        self.cert.ca_pem()
    }

    /// [`Sandbox::ca_pem`] base64-encoded, as a kubeconfig's `certificate-authority-data`.
    pub fn certificate_authority_data(&self) -> String {
        use base64::Engine;
        base64::engine::general_purpose::STANDARD.encode(self.ca_pem())
    }

    /// The bearer token the API server requires of every request but `/healthz`, `/livez`,
    /// `/readyz` and `/version` (64 hex digits, new for each sandbox), sent as
    /// `Authorization: Bearer <token>`; without it the server answers 401 `Unauthorized`.
    pub fn token(&self) -> &str {
        self.token.as_str()
    }

    /// A kube client configuration for this sandbox: its URL, its CA as the only root, and its
    /// token, with kube's defaults otherwise (callers add headers, timeouts or layers).
    pub fn client_config(&self) -> kube::Config {
        let url = self
            .url()
            .parse()
            .expect("https://<socket address> is a valid URI");
        let mut config = kube::Config::new(url);
        config.root_cert = Some(vec![self.cert.ca_der().to_vec()]);
        config.auth_info.token = Some(self.token().into());
        config
    }

    /// Keep a background task alive as long as the sandbox (aborted on drop).
    pub fn adopt(&mut self, task: JoinHandle<()>) {
        self.tasks.push(task);
    }

    /// A kubeconfig (YAML) whose current context points at this sandbox (its URL and CA),
    /// namespace `default`, as a user holding the sandbox's token (`users[0].user.token`,
    /// quoted: hex digits alone could read as a YAML number).
    pub fn kubeconfig(&self) -> String {
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: {CONTEXT_NAME}\n  cluster:\n    server: {url}\n    certificate-authority-data: {ca}\ncontexts:\n- name: {CONTEXT_NAME}\n  context:\n    cluster: {CONTEXT_NAME}\n    user: {CONTEXT_NAME}\n    namespace: default\ncurrent-context: {CONTEXT_NAME}\nusers:\n- name: {CONTEXT_NAME}\n  user:\n    token: \"{token}\"\n",
            url = self.url(),
            ca = self.certificate_authority_data(),
            token = self.token(),
        )
    }

    /// Write the kubeconfig to `path` (creating parent directories) so that only its owner can
    /// read it: a new file, mode 0600 from its creation, is written beside `path` and renamed
    /// over it. A file already at `path` is replaced (a stale one keeps neither its contents
    /// nor its mode); a symlink there is replaced, not followed. Readers never see a partial
    /// file.
    ///
    /// Errors: the directory cannot be created or written to, `path` names no file, or the file
    /// there cannot be replaced (e.g. another user's, in a sticky directory such as /tmp).
    pub fn write_kubeconfig(&self, path: &Path) -> std::io::Result<()> {
        let dir = path
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        std::fs::create_dir_all(dir)?;
        let name = path.file_name().ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("{} names no file", path.display()),
            )
        })?;
        let staged = dir.join(format!(
            ".{}.{:016x}.tmp",
            name.to_string_lossy(),
            rand::random::<u64>()
        ));
        write_private(&staged, self.kubeconfig().as_bytes())?;
        std::fs::rename(&staged, path).inspect_err(|_| {
            let _ = std::fs::remove_file(&staged);
        })
    }
}

/// Create `path`, which must not exist, readable and writable by its owner only (on Unix), and
/// write `contents` to it; a file this created but could not fill is removed.
///
/// Errors: `path` exists or cannot be created or written.
fn write_private(path: &Path, contents: &[u8]) -> std::io::Result<()> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    options.open(path)?.write_all(contents).inspect_err(|_| {
        let _ = std::fs::remove_file(path);
    })
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}
