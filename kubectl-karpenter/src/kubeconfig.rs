//! Which cluster the plugin talks to, chosen by kubectl's rules: `--kubeconfig` loads only that
//! file; otherwise `KUBECONFIG` is a path list whose files are merged (first to set a value wins,
//! missing files are skipped); otherwise `~/.kube/config`; otherwise in-cluster credentials.
//! `--context`, `--cluster` and `--user` pick from it, and a wrong name lists the valid ones.
//! The client configuration it builds carries the plugin's User-Agent ([`USER_AGENT`]), and is
//! refused when it would send the user's credentials to a plain `http://` server (kubectl
//! sends credentials only over https).

use std::fmt;
use std::path::{Path, PathBuf};

use kube::config::{KubeConfigOptions, Kubeconfig, KubeconfigError};

/// The kubeconfig flags (kubectl's genericclioptions subset the plugin honours).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Selection {
    /// `--kubeconfig`: the only file to load.
    pub kubeconfig: Option<PathBuf>,
    /// `--context`: the context to use instead of `current-context`.
    pub context: Option<String>,
    /// `--cluster`: the cluster to use instead of the context's.
    pub cluster: Option<String>,
    /// `--user`: the user to use instead of the context's.
    pub user: Option<String>,
}

/// Where the kubeconfig came from, for error messages.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// `--kubeconfig PATH`.
    Flag(PathBuf),
    /// The files of `KUBECONFIG` that exist.
    Env(Vec<PathBuf>),
    /// One file of `KUBECONFIG`.
    EnvFile(PathBuf),
    /// `~/.kube/config`.
    Home(PathBuf),
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Flag(p) => write!(f, "--kubeconfig {}", p.display()),
            Source::Env(paths) => {
                let joined: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
                write!(f, "KUBECONFIG ({})", joined.join(", "))
            }
            Source::EnvFile(p) => write!(f, "{} (from KUBECONFIG)", p.display()),
            Source::Home(p) => write!(f, "{}", p.display()),
        }
    }
}

/// Why no client configuration could be built.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A kubeconfig file could not be read or parsed.
    #[error(
        "reading kubeconfig {source_name}: {}; fix the file or point --kubeconfig at another",
        describe(error)
    )]
    Read {
        /// The kubeconfig file(s) read: `--kubeconfig`, the `KUBECONFIG` list or
        /// `~/.kube/config`.
        source_name: Source,
        /// kube's read or parse error (printed without the path it repeats).
        error: KubeconfigError,
    },
    /// No kubeconfig file exists and the plugin is not running in a cluster.
    #[error(
        "no kubeconfig found ({0}); pass --kubeconfig PATH, set KUBECONFIG, or create ~/.kube/config"
    )]
    NotFound(String),
    /// No `--context` was given and the kubeconfig sets no `current-context`.
    #[error(
        "no current context in {source_name}; pass --context with one of: {}",
        list(available)
    )]
    NoCurrentContext {
        /// The kubeconfig file(s) read.
        source_name: Source,
        /// The contexts it defines.
        available: Vec<String>,
    },
    /// The named context, cluster or user is not defined.
    #[error(
        "{what} \"{name}\" not found in {source_name}; available {what}s: {}{hint}",
        list(available)
    )]
    NotDefined {
        /// `context`, `cluster` or `user`.
        what: &'static str,
        /// The name asked for (`--context`, `--cluster`, `--user`, or the context's entry).
        name: String,
        /// The kubeconfig file(s) read.
        source_name: Source,
        /// The names it defines.
        available: Vec<String>,
        /// How to fix it.
        hint: &'static str,
    },
    /// The selected context's cluster, user or credentials are unusable.
    #[error(
        "using context \"{context}\" from {source_name}: {error}; fix that context's cluster and \
         user entries, or pick another context with --context"
    )]
    Invalid {
        /// The context selected (`--context`, else the kubeconfig's `current-context`).
        context: String,
        /// The kubeconfig file(s) read.
        source_name: Source,
        /// kube's error for that context's cluster, user or credentials.
        error: KubeconfigError,
    },
    /// The selected user has credentials that travel in an `Authorization` header (a token, a
    /// username and password, an exec plugin's or an auth provider's token) and the server is
    /// plain `http://`: they would cross the network unencrypted. client-go's `clientcmd` reads
    /// a user's credentials only when the server is https (`IsConfigTransportTLS`), so kubectl
    /// never sends them over http; the plugin refuses before any request instead of sending the
    /// requests unauthenticated.
    #[error(
        "using context \"{context}\" from {source_name}: user \"{user}\" has {credential}, and the \
         server {server} is plain http: credentials are sent only over https (kubectl does not \
         send them over http either); use the server's https:// address, or a user without \
         credentials (e.g. for `kubectl proxy`)"
    )]
    CredentialsOverHttp {
        /// The context selected.
        context: String,
        /// The kubeconfig file(s) read.
        source_name: Source,
        /// The user entry selected (`--user`, else the context's).
        user: String,
        /// What credential it has, e.g. `a bearer token (token)`.
        credential: &'static str,
        /// The server's URL as the kubeconfig (or `--cluster`) gives it.
        server: String,
    },
    /// In-cluster credentials could not be read.
    #[error(
        "reading in-cluster credentials: {0}; outside a pod, pass --kubeconfig PATH or set \
         KUBECONFIG"
    )]
    InCluster(String),
}

/// The error without kube's repetition of the path for read failures.
fn describe(error: &KubeconfigError) -> String {
    match error {
        KubeconfigError::ReadConfig(io, _) => io.to_string(),
        other => other.to_string(),
    }
}

fn list(names: &[String]) -> String {
    if names.is_empty() {
        "(none)".to_owned()
    } else {
        names.join(", ")
    }
}

/// The plugin's User-Agent, in kubectl's form (`kubectl/v1.32.0 (linux/amd64) ...`):
/// `kubectl-karpenter/v<version> (<os>/<arch>)`, with Go's names for the platform as `version`
/// prints it. API server audit logs (and the sandbox's) tell the plugin's requests apart by it.
pub fn user_agent() -> String {
    let info = crate::version::VersionInfo::current();
    format!("{}/v{} ({})", info.name, info.version, info.platform)
}

/// A kubeconfig user's credential that kube sends in an `Authorization` header, described by
/// its kubeconfig key, e.g. `a bearer token (token)`; `None` when it has none (client
/// certificates are part of TLS and are never sent over http).
pub fn header_credential(user: &kube::config::AuthInfo) -> Option<&'static str> {
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

/// A client configuration and a description of what was chosen.
pub struct Loaded {
    /// Configuration for `kube::Client`.
    pub config: kube::Config,
    /// The context used (`in-cluster` for in-cluster credentials).
    pub context: String,
    /// The name of the kubeconfig cluster entry used (`--cluster`, else the context's), e.g. an
    /// EKS cluster ARN; `None` for in-cluster credentials.
    pub cluster: Option<String>,
}

/// Reads the kubeconfig the flags and environment point at (no network I/O).
///
/// Returns `Ok(None)` when there is none at all (no flag, no `KUBECONFIG` file that exists,
/// no `~/.kube/config`).
///
/// Errors: a file cannot be read or parsed.
pub fn read(selection: &Selection) -> Result<Option<(Kubeconfig, Source)>, Error> {
    read_with(
        selection,
        std::env::var_os("KUBECONFIG").as_deref(),
        home_kubeconfig(),
    )
}

/// [`read`] with the environment passed in: `kubeconfig_env` is the value of `KUBECONFIG` and
/// `home` the `~/.kube/config` path. Files of a `KUBECONFIG` list are merged in order with
/// kubectl's rule (client-go `ClientConfigLoadingRules.Load`): the first file to define a
/// named cluster, user or context, or `current-context`, wins; later ones only add.
///
/// Errors: a file cannot be read or parsed, or the files disagree on `kind`/`apiVersion`.
pub fn read_with(
    selection: &Selection,
    kubeconfig_env: Option<&std::ffi::OsStr>,
    home: Option<PathBuf>,
) -> Result<Option<(Kubeconfig, Source)>, Error> {
    if let Some(path) = &selection.kubeconfig {
        let source_name = Source::Flag(path.clone());
        return match Kubeconfig::read_from(path) {
            Ok(kc) => Ok(Some((kc, source_name))),
            Err(error) => Err(Error::Read { source_name, error }),
        };
    }
    if let Some(value) = kubeconfig_env.filter(|v| !v.is_empty()) {
        let paths: Vec<PathBuf> = std::env::split_paths(value)
            .filter(|p| !p.as_os_str().is_empty() && p.exists())
            .collect();
        if paths.is_empty() {
            return Ok(None);
        }
        let mut merged = Kubeconfig::default();
        for path in &paths {
            let next = Kubeconfig::read_from(path).map_err(|error| Error::Read {
                source_name: Source::EnvFile(path.clone()),
                error,
            })?;
            merged = merged.merge(next).map_err(|error| Error::Read {
                source_name: Source::Env(paths.clone()),
                error,
            })?;
        }
        return Ok(Some((merged, Source::Env(paths))));
    }
    match home {
        Some(path) if path.exists() => {
            let source_name = Source::Home(path.clone());
            match Kubeconfig::read_from(&path) {
                Ok(kc) => Ok(Some((kc, source_name))),
                Err(error) => Err(Error::Read { source_name, error }),
            }
        }
        _ => Ok(None),
    }
}

fn home_kubeconfig() -> Option<PathBuf> {
    std::env::home_dir()
        .filter(|h| !h.as_os_str().is_empty())
        .map(|h| h.join(".kube").join("config"))
}

fn names<T>(items: &[T], name: impl Fn(&T) -> &str) -> Vec<String> {
    items.iter().map(|i| name(i).to_owned()).collect()
}

/// Checks the selection against the kubeconfig and returns the context to use (pure).
///
/// Errors: no context is selected, or a named context, cluster or user is not defined.
pub fn resolve(kc: &Kubeconfig, source: &Source, selection: &Selection) -> Result<String, Error> {
    let contexts = names(&kc.contexts, |c| &c.name);
    let context = match selection.context.as_ref().or(kc.current_context.as_ref()) {
        Some(c) if !c.is_empty() => c.clone(),
        _ => {
            return Err(Error::NoCurrentContext {
                source_name: source.clone(),
                available: contexts,
            });
        }
    };
    if !contexts.contains(&context) {
        let hint = if selection.context.is_some() {
            "; pass one of them with --context"
        } else {
            "; current-context names a context that does not exist: pass --context"
        };
        return Err(Error::NotDefined {
            what: "context",
            name: context,
            source_name: source.clone(),
            available: contexts,
            hint,
        });
    }
    let check = |what: &'static str, name: &Option<String>, defined: Vec<String>, hint| match name {
        Some(n) if !defined.contains(n) => Err(Error::NotDefined {
            what,
            name: n.clone(),
            source_name: source.clone(),
            available: defined,
            hint,
        }),
        _ => Ok(()),
    };
    check(
        "cluster",
        &selection.cluster,
        names(&kc.clusters, |c| &c.name),
        "; pass one of them with --cluster",
    )?;
    check(
        "user",
        &selection.user,
        names(&kc.auth_infos, |u| &u.name),
        "; pass one of them with --user",
    )?;
    Ok(context)
}

/// Loads the client configuration for `selection` (kubeconfig, then in-cluster credentials).
///
/// Errors: see [`Error`].
pub async fn load(selection: &Selection) -> Result<Loaded, Error> {
    let Some((kc, source)) = read(selection)? else {
        if std::env::var_os("KUBERNETES_SERVICE_HOST").is_some() {
            let mut config =
                kube::Config::incluster().map_err(|e| Error::InCluster(e.to_string()))?;
            with_user_agent(&mut config);
            return Ok(Loaded {
                config,
                context: "in-cluster".to_owned(),
                cluster: None,
            });
        }
        return Err(Error::NotFound(searched()));
    };
    let context = resolve(&kc, &source, selection)?;
    let cluster = selection.cluster.clone().or_else(|| {
        kc.contexts
            .iter()
            .find(|c| c.name == context)
            .and_then(|c| c.context.as_ref())
            .map(|c| c.cluster.clone())
            .filter(|c| !c.is_empty())
    });
    let user = selection.user.clone().or_else(|| {
        kc.contexts
            .iter()
            .find(|c| c.name == context)
            .and_then(|c| c.context.as_ref())
            .and_then(|c| c.user.clone())
    });
    let options = KubeConfigOptions {
        context: Some(context.clone()),
        cluster: selection.cluster.clone(),
        user: selection.user.clone(),
    };
    let mut config = kube::Config::from_custom_kubeconfig(kc, &options)
        .await
        .map_err(|error| Error::Invalid {
            context: context.clone(),
            source_name: source.clone(),
            error,
        })?;
    if config.cluster_url.scheme_str() != Some("https")
        && let Some(credential) = header_credential(&config.auth_info)
    {
        return Err(Error::CredentialsOverHttp {
            context,
            source_name: source,
            user: user.unwrap_or_default(),
            credential,
            server: config
                .cluster_url
                .to_string()
                .trim_end_matches('/')
                .to_owned(),
        });
    }
    with_user_agent(&mut config);
    Ok(Loaded {
        config,
        context,
        cluster,
    })
}

/// Give `config` the plugin's User-Agent ([`user_agent`]) unless it names one already.
fn with_user_agent(config: &mut kube::Config) {
    let named = config
        .headers
        .iter()
        .any(|(name, _)| name == http::header::USER_AGENT);
    if !named && let Ok(value) = http::HeaderValue::from_str(&user_agent()) {
        config.headers.push((http::header::USER_AGENT, value));
    }
}

/// What was looked for, for the "no kubeconfig found" message.
fn searched() -> String {
    match std::env::var_os("KUBECONFIG").filter(|v| !v.is_empty()) {
        Some(v) => format!(
            "none of the KUBECONFIG files exist: {}",
            Path::new(&v).display()
        ),
        None => match home_kubeconfig() {
            Some(p) => format!("KUBECONFIG is unset and {} does not exist", p.display()),
            None => "KUBECONFIG is unset and there is no home directory".to_owned(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TWO_CONTEXTS: &str = "\
apiVersion: v1
kind: Config
clusters:
- name: live
  cluster: {server: 'http://127.0.0.1:1'}
- name: dead
  cluster: {server: 'http://127.0.0.1:2'}
users:
- name: me
  user: {}
contexts:
- name: live
  context: {cluster: live, user: me}
- name: dead
  context: {cluster: dead, user: me}
current-context: live
";

    fn source() -> Source {
        Source::Flag("/tmp/kc".into())
    }

    fn kubeconfig(text: &str) -> Kubeconfig {
        Kubeconfig::from_yaml(text).expect("kubeconfig")
    }

    #[test]
    fn current_context_unless_overridden() {
        let kc = kubeconfig(TWO_CONTEXTS);
        let mut sel = Selection::default();
        assert_eq!(resolve(&kc, &source(), &sel).expect("current"), "live");
        sel.context = Some("dead".into());
        assert_eq!(resolve(&kc, &source(), &sel).expect("flag"), "dead");
    }

    #[test]
    fn unknown_names_list_the_available_ones() {
        let kc = kubeconfig(TWO_CONTEXTS);
        let sel = Selection {
            context: Some("prod".into()),
            ..Selection::default()
        };
        let err = resolve(&kc, &source(), &sel).expect_err("missing context");
        assert_eq!(
            err.to_string(),
            "context \"prod\" not found in --kubeconfig /tmp/kc; available contexts: live, dead; \
             pass one of them with --context"
        );
        let sel = Selection {
            cluster: Some("nope".into()),
            ..Selection::default()
        };
        let err = resolve(&kc, &source(), &sel).expect_err("missing cluster");
        assert!(
            err.to_string().contains(
                "cluster \"nope\" not found in --kubeconfig /tmp/kc; available clusters: live, dead"
            ),
            "{err}"
        );
        let sel = Selection {
            user: Some("you".into()),
            ..Selection::default()
        };
        let err = resolve(&kc, &source(), &sel).expect_err("missing user");
        assert!(err.to_string().contains("available users: me"), "{err}");
    }

    #[test]
    fn no_current_context() {
        let kc = kubeconfig(&TWO_CONTEXTS.replace("current-context: live\n", ""));
        let err = resolve(&kc, &source(), &Selection::default()).expect_err("no context");
        assert_eq!(
            err.to_string(),
            "no current context in --kubeconfig /tmp/kc; pass --context with one of: live, dead"
        );
        let dangling =
            kubeconfig(&TWO_CONTEXTS.replace("current-context: live", "current-context: gone"));
        let err = resolve(&dangling, &source(), &Selection::default()).expect_err("dangling");
        assert!(
            err.to_string()
                .contains("current-context names a context that does not exist"),
            "{err}"
        );
    }

    /// A kubeconfig defining `context` (cluster and user of the same name) at `server`.
    fn one_context(context: &str, server: &str, current: bool) -> String {
        let current = if current {
            format!("current-context: {context}\n")
        } else {
            String::new()
        };
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: {context}\n  cluster: {{server: \
             '{server}'}}\nusers:\n- name: {context}\n  user: {{}}\ncontexts:\n- name: \
             {context}\n  context: {{cluster: {context}, user: {context}, namespace: \
             ns-{context}}}\n{current}"
        )
    }

    #[test]
    fn kubeconfig_list_merges_with_the_first_file_winning() {
        let dir = tempfile::tempdir().expect("tempdir");
        let first = dir.path().join("first");
        let second = dir.path().join("second");
        let absent = dir.path().join("absent");
        // Both define context "shared" (at different servers) and set current-context.
        let first_text = format!(
            "{}{}",
            one_context("shared", "https://first.example:6443", true),
            "preferences: {}\n"
        );
        std::fs::write(&first, first_text).expect("write");
        let second_text = one_context("shared", "https://second.example:6443", false)
            .replace("kind: Config\n", "kind: Config\ncurrent-context: extra\n")
            .replace(
                "contexts:\n",
                "contexts:\n- name: extra\n  context: {cluster: shared, user: shared}\n",
            );
        std::fs::write(&second, second_text).expect("write");
        let list = std::env::join_paths([&absent, &first, &second]).expect("join");
        let (kc, source) = read_with(&Selection::default(), Some(&list), None)
            .expect("read")
            .expect("found");
        assert_eq!(source, Source::Env(vec![first.clone(), second.clone()]));
        assert_eq!(kc.current_context.as_deref(), Some("shared"));
        let contexts: Vec<&str> = kc.contexts.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(contexts, ["shared", "extra"]);
        let server = kc.clusters[0]
            .cluster
            .as_ref()
            .and_then(|c| c.server.clone());
        assert_eq!(server.as_deref(), Some("https://first.example:6443"));
        assert_eq!(kc.clusters.len(), 1);

        // Order matters: listing the second file first makes it win.
        let reversed = std::env::join_paths([&second, &first]).expect("join");
        let (kc, _) = read_with(&Selection::default(), Some(&reversed), None)
            .expect("read")
            .expect("found");
        assert_eq!(kc.current_context.as_deref(), Some("extra"));
        let server = kc.clusters[0]
            .cluster
            .as_ref()
            .and_then(|c| c.server.clone());
        assert_eq!(server.as_deref(), Some("https://second.example:6443"));

        // --kubeconfig loads only that file, whatever KUBECONFIG says.
        let only = Selection {
            kubeconfig: Some(second.clone()),
            ..Selection::default()
        };
        let (kc, source) = read_with(&only, Some(&list), None)
            .expect("read")
            .expect("found");
        assert_eq!(source, Source::Flag(second.clone()));
        assert_eq!(kc.current_context.as_deref(), Some("extra"));

        // KUBECONFIG set to files that do not exist: nothing, not ~/.kube/config.
        let home = first.clone();
        let none = std::env::join_paths([&absent]).expect("join");
        assert!(
            read_with(&Selection::default(), Some(&none), Some(home.clone()))
                .expect("read")
                .is_none()
        );
        // Unset or empty KUBECONFIG: the home file.
        let (_, source) = read_with(&Selection::default(), Some("".as_ref()), Some(home.clone()))
            .expect("read")
            .expect("found");
        assert_eq!(source, Source::Home(home));
        // A broken file in the list names that file.
        let broken = dir.path().join("broken");
        std::fs::write(&broken, "clusters: [").expect("write");
        let bad = std::env::join_paths([&first, &broken]).expect("join");
        let err = read_with(&Selection::default(), Some(&bad), None).expect_err("broken");
        assert!(
            err.to_string().starts_with(&format!(
                "reading kubeconfig {} (from KUBECONFIG)",
                broken.display()
            )),
            "{err}"
        );
    }

    #[tokio::test]
    async fn an_unusable_context_names_it_and_the_fix() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("config");
        // The context's cluster has a server that is not a URL.
        std::fs::write(&path, one_context("dev", "http://[bad", true)).expect("write");
        let sel = Selection {
            kubeconfig: Some(path.clone()),
            ..Selection::default()
        };
        let Err(err) = load(&sel).await else {
            panic!("a server that is not a URL was accepted");
        };
        let text = err.to_string();
        assert!(
            text.starts_with(&format!(
                "using context \"dev\" from --kubeconfig {}",
                path.display()
            )) && text.ends_with("pick another context with --context"),
            "{text}"
        );
    }

    #[tokio::test]
    async fn the_context_namespace_is_the_default_namespace() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("config");
        std::fs::write(&path, one_context("dev", "https://127.0.0.1:1", true)).expect("write");
        let sel = Selection {
            kubeconfig: Some(path.clone()),
            ..Selection::default()
        };
        let loaded = load(&sel).await.expect("load");
        assert_eq!(loaded.context, "dev");
        assert_eq!(loaded.config.default_namespace, "ns-dev");
        std::fs::write(
            &path,
            one_context("dev", "https://127.0.0.1:1", true).replace(", namespace: ns-dev", ""),
        )
        .expect("write");
        let loaded = load(&sel).await.expect("load");
        assert_eq!(loaded.config.default_namespace, "default");
    }

    /// A kubeconfig whose context `dev` (user `me`, with `user` as its entry) is at `server`.
    fn with_user(server: &str, user: &str) -> String {
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: dev\n  cluster: {{server: \
             '{server}'}}\nusers:\n- name: me\n  user: {user}\ncontexts:\n- name: dev\n  \
             context: {{cluster: dev, user: me}}\ncurrent-context: dev\n"
        )
    }

    #[tokio::test]
    async fn credentials_are_refused_for_a_plain_http_server() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("config");
        let sel = Selection {
            kubeconfig: Some(path.clone()),
            ..Selection::default()
        };
        let exec = "{exec: {apiVersion: client.authentication.k8s.io/v1, command: aws}}";
        for (user, credential) in [
            ("{token: secret}", "a bearer token (token)"),
            (
                "{tokenFile: /var/run/token}",
                "a bearer token file (tokenFile)",
            ),
            (
                "{username: admin, password: hunter2}",
                "a username and password",
            ),
            (exec, "an exec credential plugin (exec)"),
        ] {
            std::fs::write(&path, with_user("http://127.0.0.1:8080", user)).expect("write");
            let Err(err) = load(&sel).await else {
                panic!("{user} over http was accepted");
            };
            assert_eq!(
                err.to_string(),
                format!(
                    "using context \"dev\" from --kubeconfig {}: user \"me\" has {credential}, \
                     and the server http://127.0.0.1:8080 is plain http: credentials are sent only \
                     over https (kubectl does not send them over http either); use the server's \
                     https:// address, or a user without credentials (e.g. for `kubectl proxy`)",
                    path.display()
                )
            );
        }
        // The same user over https, and no credentials over http (`kubectl proxy`), load.
        std::fs::write(
            &path,
            with_user("https://127.0.0.1:6443", "{token: secret}"),
        )
        .expect("write");
        load(&sel).await.expect("a token over https");
        std::fs::write(&path, with_user("http://127.0.0.1:8001", "{}")).expect("write");
        load(&sel).await.expect("no credentials over http");
    }

    #[tokio::test]
    async fn requests_carry_the_plugin_user_agent() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("config");
        std::fs::write(&path, with_user("https://127.0.0.1:6443", "{}")).expect("write");
        let sel = Selection {
            kubeconfig: Some(path),
            ..Selection::default()
        };
        let loaded = load(&sel).await.expect("load");
        let agents: Vec<&str> = loaded
            .config
            .headers
            .iter()
            .filter(|(name, _)| name == http::header::USER_AGENT)
            .filter_map(|(_, value)| value.to_str().ok())
            .collect();
        let platform = crate::version::VersionInfo::current().platform;
        assert_eq!(
            agents,
            [format!(
                "kubectl-karpenter/v{} ({platform})",
                env!("CARGO_PKG_VERSION")
            )]
        );
        assert!(
            !platform.contains("x86_64") && !platform.contains("macos"),
            "Go's names"
        );
    }

    #[test]
    fn flag_file_is_read_alone() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("config");
        std::fs::write(&path, TWO_CONTEXTS).expect("write");
        let sel = Selection {
            kubeconfig: Some(path.clone()),
            ..Selection::default()
        };
        let (kc, source) = read(&sel).expect("read").expect("found");
        assert_eq!(kc.contexts.len(), 2);
        assert_eq!(source, Source::Flag(path));
        let missing = Selection {
            kubeconfig: Some(dir.path().join("absent")),
            ..Selection::default()
        };
        let err = read(&missing).expect_err("missing file");
        let absent = dir.path().join("absent");
        assert_eq!(
            err.to_string(),
            format!(
                "reading kubeconfig --kubeconfig {}: No such file or directory (os error 2); \
                 fix the file or point --kubeconfig at another",
                absent.display()
            )
        );
    }
}
