//! `karpenter sandbox publish-ami`: publish a new AMI release into a running sandbox's
//! simulated cloud, through its API server (an `AMIRelease` object the sandbox fulfils), and
//! print the images it published. `family@latest` aliases then resolve to them, so AMI drift
//! can be seen locally. `--broken` publishes images no node registers from, to see an upgrade
//! meet a bad AMI.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::{Args, ValueEnum};
use kube::api::{Api, ApiResource, DynamicObject, PostParams};
use sandbox::actors::instances::GROUP;
use serde_json::{Value, json};

use super::amirelease::{KIND, PLURAL, PUBLISHED, VERSION};
use controller::cloudprovider::sim::images::FAMILIES;
use controller::runtime::options::parse_duration;

/// Architectures to publish for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Arch {
    /// x86_64 images only.
    Amd64,
    /// arm64 (Graviton) images only.
    Arm64,
    /// One image for each architecture the family is published for (the default): amd64 and
    /// arm64, amd64 only for Windows.
    All,
}

/// Flags of `karpenter sandbox publish-ami`.
#[derive(Args, Clone, Debug)]
pub struct PublishAmiArgs {
    /// Kubeconfig of the running sandbox (the path `karpenter sandbox` printed). Default: the
    /// KUBECONFIG environment variable, else ~/.kube/config.
    #[arg(long, value_name = "PATH")]
    pub kubeconfig: Option<PathBuf>,
    /// AMI alias family to release.
    #[arg(long, value_parser = FAMILIES)]
    pub family: String,
    /// Release version, vYYYYMMDD. Default: the day after the family's newest release, so
    /// `<family>@latest` moves to it.
    #[arg(long)]
    pub version: Option<String>,
    /// Architectures to publish an image for.
    #[arg(long, value_enum, default_value = "all")]
    pub arch: Arch,
    /// Publish a broken release: instances booted from its images run, but their kubelet never
    /// starts, so their NodeClaims stay Launched and never register (to test an upgrade to a
    /// bad AMI).
    #[arg(long)]
    pub broken: bool,
    /// How long to wait for the sandbox to publish.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    pub timeout: Duration,
}

/// A publish that failed, with the exit code it maps to.
#[derive(Debug, thiserror::Error)]
pub enum PublishAmiError {
    /// The sandbox could not be reached or does not serve `AMIRelease` (exit 2).
    #[error("{0}")]
    Connect(String),
    /// The sandbox refused the release (exit 1).
    #[error("the sandbox refused the release ({reason}): {message}")]
    Refused {
        /// CamelCase reason, e.g. `AlreadyPublished`.
        reason: String,
        /// The API server's message (409, 422) or the `Published=False` condition's.
        message: String,
    },
    /// No answer in time (exit 1).
    #[error("the sandbox did not publish {name} within {timeout:?}")]
    Timeout {
        /// The AMIRelease's name, e.g. `al2023-v20260401`.
        name: String,
        /// How long we waited (`--timeout`, default 30s).
        timeout: Duration,
    },
}

/// The `AMIRelease` object the flags ask for: named `<family>-<version>` when the version is
/// given (so a repeat is refused as AlreadyExists), else generated from `<family>-`.
pub fn release_object(args: &PublishAmiArgs) -> Value {
    let architectures: Vec<&str> = match args.arch {
        Arch::Amd64 => vec!["amd64"],
        Arch::Arm64 => vec!["arm64"],
        // Empty: the sandbox publishes for every architecture the family has.
        Arch::All => vec![],
    };
    let metadata = match &args.version {
        Some(v) => json!({"name": format!("{}-{v}", args.family)}),
        None => json!({"generateName": format!("{}-", args.family)}),
    };
    let mut spec = json!({"family": args.family});
    if !architectures.is_empty() {
        spec["architectures"] = json!(architectures);
    }
    if let Some(v) = &args.version {
        spec["version"] = json!(v);
    }
    if args.broken {
        spec["broken"] = json!(true);
    }
    json!({"apiVersion": format!("{GROUP}/{VERSION}"), "kind": KIND, "metadata": metadata, "spec": spec})
}

/// The published images' lines: `<id>  <architecture>  <name>`, after a header naming the
/// release (and saying so when it is `broken`).
///
/// Errors: writing failed.
pub fn render(
    out: &mut dyn Write,
    name: &str,
    status: &Value,
    broken: bool,
) -> std::io::Result<()> {
    let version = status["version"].as_str().unwrap_or_default();
    let note = if broken {
        " (broken: instances booted from these images never register a node)"
    } else {
        ""
    };
    writeln!(out, "amirelease/{name} published {version}{note}:")?;
    for ami in status["amis"].as_array().into_iter().flatten() {
        writeln!(
            out,
            "  {}  {:<6} {}",
            ami["id"].as_str().unwrap_or_default(),
            ami["architecture"].as_str().unwrap_or_default(),
            ami["name"].as_str().unwrap_or_default()
        )?;
    }
    Ok(())
}

fn published(obj: &DynamicObject) -> Option<(bool, String, String)> {
    let status = obj.data.get("status")?;
    let c = status
        .get("conditions")?
        .as_array()?
        .iter()
        .find(|c| c["type"] == PUBLISHED)?;
    let text = |k: &str| c[k].as_str().unwrap_or_default().to_string();
    Some((c["status"] == "True", text("reason"), text("message")))
}

/// A client for the running sandbox `kubeconfig` names (default: `KUBECONFIG`, else
/// ~/.kube/config), for the subcommands that act on one ([`crate::kubeconfig::client_config`]).
///
/// Errors: the kubeconfig cannot be read, its user's credentials would go to a plain-http
/// server, or no client can be built from it (message).
pub(crate) async fn sandbox_client(kubeconfig: Option<&Path>) -> Result<kube::Client, String> {
    let config = crate::kubeconfig::client_config(kubeconfig)
        .await
        .map_err(|e| e.to_string())?;
    controller::runtime::client(config).map_err(|e| format!("connecting to the sandbox: {e}"))
}

async fn client(args: &PublishAmiArgs) -> Result<kube::Client, PublishAmiError> {
    sandbox_client(args.kubeconfig.as_deref())
        .await
        .map_err(PublishAmiError::Connect)
}

/// Create the `AMIRelease` and wait until the sandbox published it; returns its name and
/// status.
///
/// Errors: see [`PublishAmiError`].
pub async fn publish(args: &PublishAmiArgs) -> Result<(String, Value), PublishAmiError> {
    let client = client(args).await?;
    let resource = ApiResource {
        group: GROUP.into(),
        version: VERSION.into(),
        api_version: format!("{GROUP}/{VERSION}"),
        kind: KIND.into(),
        plural: PLURAL.into(),
    };
    let api: Api<DynamicObject> = Api::all_with(client, &resource);
    let obj: DynamicObject = serde_json::from_value(release_object(args))
        .map_err(|e| PublishAmiError::Connect(format!("building the AMIRelease: {e}")))?;
    let created = api
        .create(&PostParams::default(), &obj)
        .await
        .map_err(|e| match e {
            kube::Error::Api(s) if s.code == 404 => PublishAmiError::Connect(format!(
                "this API server does not serve {PLURAL}.{GROUP}: is it a `karpenter sandbox` \
                 on the simulated cloud (--cloud-provider sim)?"
            )),
            kube::Error::Api(s) if s.code == 409 => PublishAmiError::Refused {
                reason: "AlreadyExists".into(),
                message: s.message,
            },
            kube::Error::Api(s) if s.code == 422 => PublishAmiError::Refused {
                reason: "Invalid".into(),
                message: s.message,
            },
            other => PublishAmiError::Connect(format!("creating the AMIRelease: {other}")),
        })?;
    let name = created.metadata.name.clone().unwrap_or_default();
    let start = Instant::now();
    loop {
        let current = api
            .get(&name)
            .await
            .map_err(|e| PublishAmiError::Connect(format!("reading amirelease/{name}: {e}")))?;
        match published(&current) {
            Some((true, _, _)) => {
                let status = current.data.get("status").cloned().unwrap_or_default();
                return Ok((name, status));
            }
            Some((false, reason, message)) => {
                return Err(PublishAmiError::Refused { reason, message });
            }
            None if start.elapsed() >= args.timeout => {
                return Err(PublishAmiError::Timeout {
                    name,
                    timeout: args.timeout,
                });
            }
            None => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

/// Run `karpenter sandbox publish-ami`. Exit code: 0 published, 1 refused or not published in
/// time, 2 the sandbox could not be reached.
pub async fn run(args: &PublishAmiArgs) -> ExitCode {
    match publish(args).await {
        Ok((name, status)) => {
            let mut out = std::io::stdout().lock();
            match render(&mut out, &name, &status, args.broken) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("error: writing the output: {e}");
                    ExitCode::from(2)
                }
            }
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(match e {
                PublishAmiError::Connect(_) => 2,
                PublishAmiError::Refused { .. } | PublishAmiError::Timeout { .. } => 1,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(version: Option<&str>, arch: Arch) -> PublishAmiArgs {
        PublishAmiArgs {
            kubeconfig: None,
            family: "al2023".into(),
            version: version.map(String::from),
            arch,
            broken: false,
            timeout: Duration::from_secs(1),
        }
    }

    #[test]
    fn the_object_is_named_by_version_or_generated() {
        let o = release_object(&args(Some("v20260401"), Arch::Arm64));
        assert_eq!(o["apiVersion"], "sandbox.karpenter.sh/v1");
        assert_eq!(o["kind"], "AMIRelease");
        assert_eq!(o["metadata"]["name"], "al2023-v20260401");
        assert_eq!(
            o["spec"],
            json!({"family": "al2023", "version": "v20260401", "architectures": ["arm64"]})
        );
        let o = release_object(&args(None, Arch::All));
        assert_eq!(o["metadata"], json!({"generateName": "al2023-"}));
        assert!(
            o["spec"].get("architectures").is_none(),
            "every architecture the family has (Windows: amd64 only)"
        );
        assert!(o["spec"].get("version").is_none());
        assert!(o["spec"].get("broken").is_none());
        let broken = PublishAmiArgs {
            broken: true,
            ..args(None, Arch::All)
        };
        assert_eq!(release_object(&broken)["spec"]["broken"], true);
    }

    #[test]
    fn output_lists_each_image() {
        let status = json!({"version": "v20260302", "amis": [
            {"id": "ami-01", "architecture": "amd64", "name": "amazon-eks-node-al2023-x86_64-standard-1.32-v20260302"},
            {"id": "ami-02", "architecture": "arm64", "name": "amazon-eks-node-al2023-arm64-standard-1.32-v20260302"}]});
        let mut out = Vec::new();
        render(&mut out, "al2023-x7k2p", &status, false).expect("render");
        assert_eq!(
            String::from_utf8_lossy(&out),
            "amirelease/al2023-x7k2p published v20260302:\n  \
             ami-01  amd64  amazon-eks-node-al2023-x86_64-standard-1.32-v20260302\n  \
             ami-02  arm64  amazon-eks-node-al2023-arm64-standard-1.32-v20260302\n"
        );
        let mut out = Vec::new();
        render(&mut out, "al2023-x7k2p", &status, true).expect("render");
        let text = String::from_utf8_lossy(&out);
        assert!(
            text.starts_with(
                "amirelease/al2023-x7k2p published v20260302 (broken: instances booted from \
                 these images never register a node):\n  ami-01"
            ),
            "{text}"
        );
    }
}
