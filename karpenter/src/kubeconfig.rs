//! Where `karpenter run` and the commands that act on a running sandbox (`sandbox interrupt`,
//! `publish-ami`, `fail-node`) find their API server: a kubeconfig (`--kubeconfig PATH`, else
//! `KUBECONFIG`, else `~/.kube/config`) or in-cluster credentials, as `kube::Config::infer`
//! finds them; refused when the user's credentials would go to a plain `http://` server, which
//! kubectl never does (client-go's `clientcmd` reads a user's credentials only for an https
//! server, `IsConfigTransportTLS`).

use std::path::Path;

use kube::config::{AuthInfo, InClusterError, KubeConfigOptions, Kubeconfig, KubeconfigError};

/// Why no client configuration was built.
#[derive(Debug, thiserror::Error)]
pub enum ClientConfigError {
    /// The kubeconfig named by `--kubeconfig` cannot be read, or its current context is unusable.
    #[error("reading {path}: {error}")]
    Read {
        /// The file as given.
        path: String,
        /// kube's error (missing file, bad YAML, no current context, a cluster without a server).
        error: KubeconfigError,
    },
    /// No kubeconfig could be used (`KUBECONFIG`, `~/.kube/config`) and the process is not in a
    /// cluster.
    #[error(
        "reading the kubeconfig: {kubeconfig}; and no in-cluster credentials: {in_cluster}; set \
         KUBECONFIG (or pass --kubeconfig where the command has it)"
    )]
    Infer {
        /// Why the kubeconfig could not be used.
        kubeconfig: KubeconfigError,
        /// Why in-cluster credentials could not be read.
        in_cluster: InClusterError,
    },
    /// The context's user has a credential sent in an `Authorization` header and the server is
    /// plain http, where it would cross the network unencrypted: refused before any request.
    #[error(
        "using context \"{context}\" from {source_name}: its user has {credential}, and the server \
         {server} is plain http: credentials are sent only over https (kubectl does not send \
         them over http either); use the server's https:// address, or a user without \
         credentials"
    )]
    CredentialsOverHttp {
        /// The context used (its kubeconfig's `current-context`).
        context: String,
        /// The kubeconfig read: `--kubeconfig <path>` or `KUBECONFIG` / `~/.kube/config`.
        source_name: String,
        /// What credential the user has, e.g. `a bearer token (token)`.
        credential: &'static str,
        /// The server's URL, e.g. `http://127.0.0.1:8080`.
        server: String,
    },
}

/// The client configuration for `kubeconfig` (its current context), or, without one, what
/// `kube::Config::infer` finds: `KUBECONFIG` (a merged path list) or `~/.kube/config`, else
/// in-cluster credentials, with kube's debug overrides (`KUBE_RS_DEBUG_*`) applied.
///
/// Errors: see [`ClientConfigError`]; a user's credentials for a plain-http server are
/// [`ClientConfigError::CredentialsOverHttp`].
pub async fn client_config(kubeconfig: Option<&Path>) -> Result<kube::Config, ClientConfigError> {
    let (config, context, source_name) = match kubeconfig {
        Some(path) => {
            let read = |error| ClientConfigError::Read {
                path: path.display().to_string(),
                error,
            };
            let kc = Kubeconfig::read_from(path).map_err(read)?;
            let context = kc.current_context.clone().unwrap_or_default();
            let config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
                .await
                .map_err(read)?;
            (config, context, format!("--kubeconfig {}", path.display()))
        }
        None => infer().await?,
    };
    refuse_credentials_over_http(&config, &context, &source_name)?;
    Ok(config)
}

/// `kube::Config::infer`, also naming the context and the source it used.
async fn infer() -> Result<(kube::Config, String, String), ClientConfigError> {
    let from_file = match Kubeconfig::read() {
        Ok(kc) => {
            let context = kc.current_context.clone().unwrap_or_default();
            kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
                .await
                .map(|config| (config, context))
        }
        Err(e) => Err(e),
    };
    let (mut config, context, source_name) = match from_file {
        Ok((config, context)) => (config, context, kubeconfig_source()),
        Err(kubeconfig) => match kube::Config::incluster() {
            Ok(config) => (
                config,
                "in-cluster".to_string(),
                "the pod's service account".into(),
            ),
            Err(in_cluster) => {
                return Err(ClientConfigError::Infer {
                    kubeconfig,
                    in_cluster,
                });
            }
        },
    };
    config.apply_debug_overrides();
    Ok((config, context, source_name))
}

/// The kubeconfig `Kubeconfig::read` reads, for messages: `KUBECONFIG (<paths>)` when set,
/// else `~/.kube/config`.
fn kubeconfig_source() -> String {
    match std::env::var_os("KUBECONFIG").filter(|v| !v.is_empty()) {
        Some(paths) => format!("KUBECONFIG ({})", Path::new(&paths).display()),
        None => "~/.kube/config".to_string(),
    }
}

/// Refuse `config` when its user has a credential that travels in an `Authorization` header
/// ([`header_credential`]) and its server is not https.
///
/// Errors: [`ClientConfigError::CredentialsOverHttp`] naming `context`, `source_name` and the
/// server.
pub fn refuse_credentials_over_http(
    config: &kube::Config,
    context: &str,
    source_name: &str,
) -> Result<(), ClientConfigError> {
    if config.cluster_url.scheme_str() == Some("https") {
        return Ok(());
    }
    match header_credential(&config.auth_info) {
        None => Ok(()),
        Some(credential) => Err(ClientConfigError::CredentialsOverHttp {
            context: context.to_string(),
            source_name: source_name.to_string(),
            credential,
            server: config
                .cluster_url
                .to_string()
                .trim_end_matches('/')
                .to_string(),
        }),
    }
}

/// A user's credential that kube sends in an `Authorization` header, described by its
/// kubeconfig key, e.g. `a bearer token (token)`; `None` when it has none (a client
/// certificate is part of TLS and never leaves over http).
pub fn header_credential(user: &AuthInfo) -> Option<&'static str> {
    if user.token.is_some() {
        Some("a bearer token (token)")
    } else if user.token_file.is_some() {
        Some("a bearer token file (tokenFile)")
    } else if user.username.is_some() && user.password.is_some() {
        Some("a username and password")
    } else if user.exec.is_some() {
        Some("an exec credential plugin (exec)")
    } else if user.auth_provider.is_some() {
        Some("an auth provider (auth-provider)")
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A kubeconfig with one context, `dev`, at `server`, whose user is `user` (YAML).
    fn kubeconfig(dir: &Path, server: &str, user: &str) -> std::path::PathBuf {
        let path = dir.join("kubeconfig");
        std::fs::write(
            &path,
            format!(
                "apiVersion: v1\nkind: Config\nclusters: [{{name: c, cluster: {{server: \
                 '{server}'}}}}]\nusers: [{{name: u, user: {user}}}]\ncontexts: [{{name: dev, \
                 context: {{cluster: c, user: u}}}}]\ncurrent-context: dev\n"
            ),
        )
        .expect("write kubeconfig");
        path
    }

    #[tokio::test]
    async fn a_token_for_a_plain_http_server_is_refused_naming_the_server_and_context() {
        let dir = tempfile::tempdir().expect("temp dir");
        for (user, credential) in [
            ("{token: secret}", "a bearer token (token)"),
            (
                "{tokenFile: /var/run/token}",
                "a bearer token file (tokenFile)",
            ),
            ("{username: admin, password: pw}", "a username and password"),
        ] {
            let path = kubeconfig(dir.path(), "http://127.0.0.1:9", user);
            let err = client_config(Some(&path)).await.expect_err(user);
            assert_eq!(
                err.to_string(),
                format!(
                    "using context \"dev\" from --kubeconfig {}: its user has {credential}, and \
                     the server http://127.0.0.1:9 is plain http: credentials are sent only over \
                     https (kubectl does not send them over http either); use the server's \
                     https:// address, or a user without credentials",
                    path.display()
                )
            );
        }
        // Over https the token is used; over http without credentials nothing is refused.
        let path = kubeconfig(dir.path(), "https://127.0.0.1:9", "{token: secret}");
        let config = client_config(Some(&path)).await.expect("https");
        assert!(config.auth_info.token.is_some());
        let path = kubeconfig(dir.path(), "http://127.0.0.1:9", "{}");
        client_config(Some(&path)).await.expect("no credentials");
    }
}
