//! Shared harness for end-to-end tests: a local cluster (sandbox API server, simulated actors and
//! cloud, and the controller) in-process, real kubectl against it, and polling helpers.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub mod crash;

use controller::cloudprovider::build::CloudOptions;
use controller::cloudprovider::sim::network::SimAmi;
use controller::cloudprovider::sim::release::ImageHealth;
use controller::runtime::Settings;
use karpenter::sandbox::report::Observation;
use karpenter::sandbox::{ClusterConfig, LocalCluster, start_cluster, with_defaults};
use karpenter::workload::parse_yaml;
use karpenter_core::clock::ShiftedClock;
use sandbox::registry::TypeKey;
use serde_json::Value;

/// How long [`TestCluster::advance`] waits after moving the clock: a loop tick of the
/// controllers woken by the jump (each runs a pass, writes, and the caches see the writes).
pub const JUMP_SETTLE: Duration = Duration::from_millis(250);

/// The simulated cloud's interruption queue in test clusters (always on, as in `karpenter
/// sandbox`): `TestCluster::sim().interruption_queue()` sends to it.
pub const INTERRUPTION_QUEUE: &str = "karpenter-sandbox";

/// Options of a test cluster.
#[derive(Clone, Debug)]
pub struct Options {
    /// Kubelet registration delay.
    pub registration_delay: Duration,
    /// Batch idle window.
    pub batch_idle: Duration,
    /// Batch max window.
    pub batch_max: Duration,
    /// Add the default NodePool and EC2NodeClass when the workload has none.
    pub defaults: bool,
    /// Start the controller with the cluster (off: stage the world by hand first).
    pub controller: bool,
    /// Other controller settings (timeouts, grace periods); the cluster name is `sandbox`.
    pub settings: Settings,
    /// Capacity reservations the simulated cloud holds (DescribeCapacityReservations' shape).
    pub capacity_reservations: Vec<karpenter_core::capacity::reservation::Record>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            registration_delay: Duration::from_millis(500),
            batch_idle: Duration::from_millis(300),
            batch_max: Duration::from_secs(3),
            defaults: true,
            controller: true,
            settings: Settings::default(),
            capacity_reservations: Vec::new(),
        }
    }
}

impl Options {
    /// Nodes never register (the simulated kubelet waits an hour) and Karpenter gives up on a
    /// NodeClaim's registration after `registration_ttl`, so every NodeClaim ends in a
    /// `RegistrationTimeout`; everything else as [`Options::default`].
    pub fn never_registering(registration_ttl: Duration) -> Options {
        Options {
            registration_delay: Duration::from_secs(3600),
            settings: Settings {
                registration_ttl,
                ..Settings::default()
            },
            ..Options::default()
        }
    }
}

/// A running local cluster with its kubeconfig in a temporary directory.
pub struct TestCluster {
    /// The cluster.
    pub cluster: LocalCluster,
    /// The clock the whole cluster reads: real time until the test moves it on
    /// ([`TestCluster::advance`]).
    pub clock: Arc<ShiftedClock>,
    _dir: tempfile::TempDir,
}

/// `GET path` from `addr` over a plain HTTP/1.1 connection (one request, `Connection: close`):
/// the status code, the response head (status line and headers) and the body. For the
/// operator's `/metrics`, `/healthz` and `/readyz` servers.
pub async fn http_get(addr: std::net::SocketAddr, path: &str) -> (u16, String, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr)
        .await
        .unwrap_or_else(|e| panic!("connect to {addr}: {e}"));
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream
        .write_all(request.as_bytes())
        .await
        .expect("send the request");
    let mut response = String::new();
    stream
        .read_to_string(&mut response)
        .await
        .expect("read the response");
    let (head, body) = response
        .split_once("\r\n\r\n")
        .expect("an HTTP response with a head and a body");
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("a status code");
    (status, head.to_owned(), body.to_owned())
}

/// Where `kubectl` is: `$KUBECTL`, else `kubectl` on PATH. Tests that need it fail when it is
/// missing (the test command installs it).
pub fn kubectl_path() -> PathBuf {
    std::env::var_os("KUBECTL")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("kubectl"))
}

/// A workspace binary built next to this test executable (`cargo test --workspace` builds them).
pub fn workspace_binary(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("target directory");
    let path = dir.join(name);
    assert!(
        path.exists(),
        "{} is missing: build it with `cargo build --workspace --bins`",
        path.display()
    );
    path
}

/// Send the controller's and sandbox's logs to the test's captured output, so a failing test
/// prints what the controller did (libtest shows a test's output only when it fails; the
/// runtime's threads inherit the capture of the test thread that made them). `RUST_LOG`
/// overrides the default filter: `warn`, and `info` for the controller.
pub fn capture_logs() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let filter = tracing_subscriber::EnvFilter::try_from_default_env()
            .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn,controller=info"));
        // Another subscriber (a test that set its own) wins; the logs then go there.
        let _ = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_test_writer()
            .try_init();
    });
}

impl TestCluster {
    /// Start a cluster applying `yaml` (plus the default NodePool unless disabled).
    pub async fn start(yaml: &str, opts: Options) -> TestCluster {
        capture_logs();
        let dir = tempfile::tempdir().expect("temp dir");
        let mut manifests = parse_yaml(Path::new("test.yaml"), yaml).expect("test workload parses");
        if opts.defaults {
            manifests = with_defaults(manifests, "sandbox").expect("defaults");
        }
        let clock = Arc::new(ShiftedClock::new());
        let cfg = ClusterConfig {
            port: 0,
            registration_delay: opts.registration_delay,
            settings: Settings {
                cluster_name: "sandbox".into(),
                batch_idle: opts.batch_idle,
                batch_max: opts.batch_max,
                ..opts.settings.clone()
            },
            kubeconfig: Some(dir.path().join("kubeconfig")),
            cloud: CloudOptions {
                interruption_queue: INTERRUPTION_QUEUE.into(),
                capacity_reservations: opts.capacity_reservations.clone(),
                ..CloudOptions::default_sim()
            },
            clock: Arc::clone(&clock) as Arc<dyn karpenter_core::clock::Clock>,
            controller: opts.controller,
        };
        let cluster = start_cluster(&cfg, &manifests)
            .await
            .expect("cluster starts");
        TestCluster {
            cluster,
            clock,
            _dir: dir,
        }
    }

    /// Move the cluster's clock on by `by` (API server, kubelets, cloud and controller alike)
    /// and let the controller look at what came due: a test skips `consolidateAfter`, a
    /// validation delay or a TTL instead of sleeping through it. Controllers wake up on the
    /// jump; this waits [`JUMP_SETTLE`] of real time for the work a jump triggers to start.
    pub async fn advance(&self, by: jiff::SignedDuration) {
        self.clock.advance(by);
        tokio::time::sleep(JUMP_SETTLE).await;
    }

    /// Move the clock on by `total` in steps of `step` ([`TestCluster::advance`] each), checking
    /// `check` after every step: a period of controller time passes in seconds while the
    /// test watches what happens in it.
    pub async fn advance_through(
        &self,
        total: jiff::SignedDuration,
        step: jiff::SignedDuration,
        mut check: impl FnMut(&TestCluster),
    ) {
        let mut passed = jiff::SignedDuration::ZERO;
        while passed < total {
            let by = step.min(total - passed);
            self.advance(by).await;
            passed += by;
            check(self);
        }
    }

    /// The simulated cloud these clusters run on.
    pub fn sim(&self) -> &controller::cloudprovider::sim::SimCloud {
        self.cluster
            .sim
            .as_deref()
            .expect("test clusters run on the simulated cloud")
    }

    /// Publish a new AMI release of `family` (`al2023`, `al2`, `bottlerocket`) in the simulated
    /// cloud, one image per architecture, at `version` (`vYYYYMMDD`) or, with `None`, the day
    /// after the family's newest release, so `<family>@latest` moves to it. The node class
    /// controller re-resolves every EC2NodeClass at once (the cloud signals the change), so
    /// their `status.amis` follow within a reconcile. Panics when the release is refused.
    pub fn publish_ami<'a>(
        &self,
        family: &str,
        version: impl Into<Option<&'a str>>,
    ) -> Vec<SimAmi> {
        self.publish(family, version.into(), ImageHealth::Healthy)
    }

    /// Publish a broken AMI release, as [`TestCluster::publish_ami`] does otherwise: instances
    /// booted from its images run (the cloud lists them) but their kubelet never starts, so no
    /// Node registers and their NodeClaims stay Launched, never Registered.
    pub fn publish_broken_ami<'a>(
        &self,
        family: &str,
        version: impl Into<Option<&'a str>>,
    ) -> Vec<SimAmi> {
        self.publish(family, version.into(), ImageHealth::Broken)
    }

    fn publish(&self, family: &str, version: Option<&str>, health: ImageHealth) -> Vec<SimAmi> {
        self.sim()
            .publish_release(family, version, &[], health)
            .unwrap_or_else(|e| panic!("publishing {family}@{version:?}: {e}"))
    }

    /// The kubeconfig path.
    pub fn kubeconfig(&self) -> &Path {
        &self.cluster.kubeconfig
    }

    /// Poll (every 200ms) until `done` holds for the observation, or panic with the last one.
    pub async fn wait_for(
        &self,
        what: &str,
        timeout: Duration,
        done: impl Fn(&Observation) -> bool,
    ) -> Observation {
        let start = Instant::now();
        loop {
            let o = self.cluster.observe().await;
            if done(&o) {
                return o;
            }
            assert!(
                start.elapsed() < timeout,
                "timed out after {timeout:?} waiting for {what}; last observation: {o:#?}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Poll until `cond` holds, or panic.
    pub async fn eventually(
        &self,
        what: &str,
        timeout: Duration,
        cond: impl Fn(&TestCluster) -> bool,
    ) {
        let start = Instant::now();
        while !cond(self) {
            assert!(
                start.elapsed() < timeout,
                "timed out after {timeout:?} waiting for {what}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Every stored object of a type, as JSON.
    pub fn objects(&self, group: &str, plural: &str) -> Vec<Value> {
        let key = TypeKey {
            group: group.into(),
            plural: plural.into(),
        };
        self.cluster
            .sandbox
            .store()
            .objects(&key)
            .iter()
            .map(|v| (**v).clone())
            .collect()
    }

    /// The disruption history's records (the ConfigMap `karpenter-disruption-history`, one
    /// JSON object per line, oldest first), as JSON; empty before the first removal.
    pub fn disruption_history(&self) -> Vec<Value> {
        self.objects("", "configmaps")
            .into_iter()
            .filter(|cm| {
                cm.pointer("/metadata/name") == Some(&Value::from(crds::history::CONFIGMAP_NAME))
            })
            .flat_map(|cm| {
                let text = cm
                    .pointer(&format!(
                        "/data/{}",
                        crds::history::RECORDS_KEY.replace('/', "~1")
                    ))
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned();
                text.lines()
                    .filter(|l| !l.trim().is_empty())
                    .map(|l| serde_json::from_str(l).expect("a history record is JSON"))
                    .collect::<Vec<Value>>()
            })
            .collect()
    }

    /// The provider IDs of the simulated cloud's instances.
    pub fn instance_ids(&self) -> BTreeSet<String> {
        self.sim()
            .instances()
            .into_iter()
            .map(|i| i.provider_id)
            .collect()
    }

    /// NodeClaims.
    pub fn nodeclaims(&self) -> Vec<Value> {
        self.objects("karpenter.sh", "nodeclaims")
    }

    /// Events about the named object with the given reason.
    pub fn events(&self, object: &str, reason: &str) -> Vec<Value> {
        self.objects("", "events")
            .into_iter()
            .filter(|e| {
                e.pointer("/involvedObject/name").and_then(Value::as_str) == Some(object)
                    && e["reason"] == reason
            })
            .collect()
    }

    /// Events with the given reason, about any object.
    pub fn events_with_reason(&self, reason: &str) -> Vec<Value> {
        self.objects("", "events")
            .into_iter()
            .filter(|e| e["reason"] == reason)
            .collect()
    }

    /// An API client for this cluster whose requests carry `user_agent`, so the sandbox's
    /// audit log tells its writes apart ([`TestCluster::writes_by`]).
    ///
    /// Panics: the client cannot be built (a test bug).
    pub fn client_as(&self, user_agent: &str) -> kube::Client {
        let mut config = self.cluster.sandbox.client_config();
        config.headers.push((
            http::header::USER_AGENT,
            http::HeaderValue::from_str(user_agent).expect("a valid User-Agent"),
        ));
        controller::runtime::client(config).expect("kube client")
    }

    /// Start a controller replica (an operator with its own caches) on this cluster's cloud and
    /// settings, talking to the API as `user_agent`; with `lease`, its controllers run only
    /// while it holds the Lease (read and written through a second client with the same
    /// User-Agent and no rate limit, as `karpenter run` does). Several can run at once;
    /// dropping one kills it.
    pub fn start_replica(
        &self,
        user_agent: &str,
        lease: Option<controller::runtime::leader::LeaseConfig>,
    ) -> controller::operator::Operator {
        let elector = lease
            .map(|cfg| controller::runtime::leader::Elector::new(self.client_as(user_agent), cfg));
        controller::operator::start_operator(
            self.client_as(user_agent),
            std::sync::Arc::clone(&self.cluster.cloud),
            std::sync::Arc::new(karpenter_core::clock::SystemClock),
            self.cluster.settings.clone(),
            elector,
        )
    }

    /// The writes (POST, PUT, PATCH, DELETE) made over HTTP with this User-Agent, oldest first.
    pub fn writes_by(&self, user_agent: &str) -> Vec<sandbox::audit::AuditEntry> {
        self.cluster
            .sandbox
            .audit()
            .into_iter()
            .filter(|e| e.user_agent == user_agent)
            .collect()
    }

    /// Run kubectl against the cluster (in a blocking thread, so the cluster keeps serving).
    pub async fn kubectl(&self, args: &[&str], stdin: Option<&str>) -> Output {
        let mut cmd = Command::new(kubectl_path());
        cmd.arg("--kubeconfig").arg(self.kubeconfig()).args(args);
        let input = stdin.map(String::from);
        tokio::task::spawn_blocking(move || {
            cmd.stdin(if input.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
            let mut child = cmd
                .spawn()
                .expect("kubectl runs (install it or set KUBECTL)");
            if let (Some(text), Some(mut pipe)) = (input, child.stdin.take()) {
                use std::io::Write;
                pipe.write_all(text.as_bytes()).expect("write stdin");
            }
            child.wait_with_output().expect("kubectl finishes")
        })
        .await
        .expect("kubectl thread")
    }

    /// `kubectl patch KIND NAME --type=merge -p PATCH`; returns stdout, panicking with stderr on
    /// failure.
    pub async fn merge_patch(&self, kind: &str, name: &str, patch: &str) -> String {
        self.kubectl_ok(&["patch", kind, name, "--type=merge", "-p", patch])
            .await
    }

    /// Run kubectl and return stdout, panicking with stderr on failure.
    pub async fn kubectl_ok(&self, args: &[&str]) -> String {
        let out = self.kubectl(args, None).await;
        assert!(
            out.status.success(),
            "kubectl {args:?} failed: {}\n{}",
            String::from_utf8_lossy(&out.stderr),
            String::from_utf8_lossy(&out.stdout)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

/// The `status.providerID`s of these NodeClaims (those without one are skipped).
pub fn provider_ids(claims: &[Value]) -> BTreeSet<String> {
    claims
        .iter()
        .filter_map(|c| c.pointer("/status/providerID").and_then(Value::as_str))
        .map(String::from)
        .collect()
}

/// A condition's status on an object.
pub fn condition(obj: &Value, type_: &str) -> Option<String> {
    obj.pointer("/status/conditions")?
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
        .and_then(|c| c["status"].as_str().map(String::from))
}

/// A Deployment manifest: `replicas` pods requesting `cpu` and `memory`.
pub fn deployment(name: &str, replicas: u32, cpu: &str, memory: &str) -> String {
    format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: {name}\nspec:\n  replicas: {replicas}\n  selector:\n    matchLabels: {{app: {name}}}\n  template:\n    metadata:\n      labels: {{app: {name}}}\n    spec:\n      containers:\n      - name: app\n        image: public.ecr.aws/eks-distro/kubernetes/pause:3.2\n        resources:\n          requests: {{cpu: \"{cpu}\", memory: \"{memory}\"}}\n"
    )
}
