//! Issue 21's failover, on moto: `karpenter sandbox --no-controller` runs the cluster (API
//! server, kube-scheduler, kubelets of the EC2 instances) and two `karpenter run` replicas elect
//! a leader through its Lease. The leader is killed with SIGKILL during a 300-pod scale-up; the
//! standby takes over and finishes it with no duplicate capacity: every pod bound, one running
//! instance per NodeClaim and every NodeClaim's node holding a pod of the workload
//! (consolidation is off, so a duplicate would stay as an empty node). Each replica reaches
//! EC2 through a proxy of its own that counts DescribeInstanceTypes requests on the wire: never
//! two at once (the provider's single-flight, one node class).

use std::collections::{HashMap, HashSet};
use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use aws_sdk_ec2::types as t;
use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response};
use hyper_util::client::legacy::Client as HttpClient;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};

use crate::common::client;
use crate::leader_election::{
    Process, bound, eventually, holder, karpenter_run, nodeclaims, nodes, wait_for_kubeconfig,
};
use crate::moto_cloud::{CLUSTER, Moto};

/// DescribeInstanceTypes requests through one proxy: in flight now, the most at once, in all.
#[derive(Default)]
struct Counts {
    in_flight: AtomicUsize,
    most: AtomicUsize,
    total: AtomicUsize,
}

/// One request counted in [`Counts::in_flight`] until dropped (also when the caller dies).
struct InFlight(Arc<Counts>);

impl InFlight {
    fn enter(counts: &Arc<Counts>) -> InFlight {
        let now = counts.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        counts.most.fetch_max(now, Ordering::SeqCst);
        counts.total.fetch_add(1, Ordering::SeqCst);
        InFlight(Arc::clone(counts))
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A reverse proxy on a loopback port in front of moto that counts DescribeInstanceTypes.
struct Ec2Proxy {
    url: String,
    counts: Arc<Counts>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Ec2Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Ec2Proxy {
    async fn start(upstream: &str) -> Ec2Proxy {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the proxy");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        let counts = Arc::new(Counts::default());
        let http: HttpClient<HttpConnector, Full<Bytes>> =
            HttpClient::builder(TokioExecutor::new()).build_http();
        let upstream = upstream.to_owned();
        let shared = Arc::clone(&counts);
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let (http, upstream, counts) =
                    (http.clone(), upstream.clone(), Arc::clone(&shared));
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |req| {
                        forward(req, http.clone(), upstream.clone(), Arc::clone(&counts))
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Ec2Proxy { url, counts, task }
    }
}

/// Send `req` on to `upstream` and its answer back (a 502 when moto cannot be reached).
async fn forward(
    req: Request<Incoming>,
    http: HttpClient<HttpConnector, Full<Bytes>>,
    upstream: String,
    counts: Arc<Counts>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let (mut parts, body) = req.into_parts();
    let body = body
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let _counted = body
        .windows(b"Action=DescribeInstanceTypes".len())
        .any(|w| w == b"Action=DescribeInstanceTypes")
        .then(|| InFlight::enter(&counts));
    let path = parts
        .uri
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .to_owned();
    parts.uri = format!("{upstream}{path}").parse().expect("upstream URI");
    let answer = match http
        .request(Request::from_parts(parts, Full::new(body)))
        .await
    {
        Ok(answer) => answer,
        Err(e) => {
            let mut bad = Response::new(Full::new(Bytes::from(e.to_string())));
            *bad.status_mut() = hyper::StatusCode::BAD_GATEWAY;
            return Ok(bad);
        }
    };
    let (mut parts, body) = answer.into_parts();
    let body = body
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    parts.headers.remove(hyper::header::TRANSFER_ENCODING);
    Ok(Response::from_parts(parts, Full::new(body)))
}

/// The NodePool of the scale-up: 4-vCPU on-demand amd64 types (four pods a node), no
/// consolidation, upgrades paused (moto's CreateFleet gives instances the VPC's default
/// security group, so every node would be drifted); the sandbox adds the default EC2NodeClass.
const NODEPOOL: &str = r#"apiVersion: karpenter.sh/v1
kind: NodePool
metadata:
  name: default
  annotations:
    upgrades.karpenter.sh/paused: "true"
spec:
  disruption:
    consolidateAfter: Never
  template:
    spec:
      requirements:
        - {key: karpenter.k8s.aws/instance-cpu, operator: In, values: ["4"]}
        - {key: kubernetes.io/arch, operator: In, values: ["amd64"]}
        - {key: karpenter.sh/capacity-type, operator: In, values: ["on-demand"]}
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: 300
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
      - {name: app, image: public.ecr.aws/eks-distro/kubernetes/pause:3.2, resources: {requests: {cpu: 900m, memory: 1Gi}}}
"#;

/// The AWS settings every process here takes from its environment.
const AWS_ENV: [(&str, &str); 3] = [
    ("AWS_REGION", "us-east-1"),
    ("AWS_ACCESS_KEY_ID", "testing"),
    ("AWS_SECRET_ACCESS_KEY", "testing"),
];

/// `karpenter run` on EC2 through `endpoint` (see [`karpenter_run`]).
fn replica(kubeconfig: &std::path::Path, endpoint: &str, log: std::path::PathBuf) -> Process {
    karpenter_run(
        kubeconfig,
        &[
            "--cloud-provider",
            "aws",
            "--aws-endpoint-url",
            endpoint,
            "--cluster-name",
            CLUSTER,
        ],
        &AWS_ENV,
        log,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_the_leader_during_a_scale_up_leaves_no_duplicate_capacity() {
    let moto = Moto::start();
    moto.seed_network(CLUSTER).await;
    let dir = tempfile::tempdir().expect("temp dir");
    let workload = dir.path().join("web.yaml");
    std::fs::write(&workload, NODEPOOL).expect("write the workload");
    let kubeconfig = dir.path().join("kubeconfig");
    let kubeconfig_str = kubeconfig.to_str().expect("UTF-8 path");
    let mut sandbox_env = AWS_ENV.to_vec();
    sandbox_env.push(("LOG_LEVEL", "warn"));
    let sandbox = Process::karpenter(
        &[
            "sandbox",
            "--no-controller",
            "--workload",
            workload.to_str().expect("UTF-8 path"),
            "--kubeconfig-out",
            kubeconfig_str,
            "--cloud-provider",
            "aws",
            "--aws-endpoint-url",
            &moto.url,
            "--cluster-name",
            CLUSTER,
            "--registration-delay",
            "1s",
        ],
        &sandbox_env,
        dir.path().join("sandbox.log"),
    );
    wait_for_kubeconfig(&kubeconfig, &sandbox).await;
    let c = client(&kubeconfig).await;
    assert_eq!(
        bound(&c, "web").await.1,
        0,
        "no controller runs in the sandbox, so nothing is bound yet"
    );

    let proxies = [
        Ec2Proxy::start(&moto.url).await,
        Ec2Proxy::start(&moto.url).await,
    ];
    let mut replicas = [
        replica(&kubeconfig, &proxies[0].url, dir.path().join("a.log")),
        replica(&kubeconfig, &proxies[1].url, dir.path().join("b.log")),
    ];
    eventually(
        "a replica to take the Lease",
        Duration::from_secs(60),
        &[&sandbox, &replicas[0], &replicas[1]],
        || async {
            let Some(h) = holder(&c).await else {
                return false;
            };
            replicas
                .iter()
                .any(|r| r.identity().as_deref() == Some(h.as_str()))
        },
    )
    .await;
    let first = holder(&c).await.expect("a holder");
    let leader = replicas
        .iter()
        .position(|r| r.identity().as_deref() == Some(first.as_str()))
        .expect("the leader is one of the replicas");
    let standby = 1 - leader;

    // Kill the leader once it is launching: some NodeClaims have instances, pods are pending.
    eventually(
        "the leader to launch its first instance",
        Duration::from_secs(180),
        &[&sandbox, &replicas[0], &replicas[1]],
        || async {
            nodeclaims(&c).await.iter().any(|n| {
                n.status
                    .as_ref()
                    .and_then(|s| s.provider_id.as_ref())
                    .is_some()
            })
        },
    )
    .await;
    replicas[leader].kill();
    let (total, on_nodes) = bound(&c, "web").await;
    assert!(
        on_nodes < total,
        "the scale-up was still under way when the leader died ({on_nodes} of {total} bound)"
    );
    let at_kill = nodeclaims(&c).await.len();

    let survivor = replicas[standby]
        .identity()
        .expect("the standby's identity");
    eventually(
        "the standby to take the Lease",
        Duration::from_secs(60),
        &[&sandbox, &replicas[standby]],
        || async { holder(&c).await.as_deref() == Some(survivor.as_str()) },
    )
    .await;
    eventually(
        "all 300 web pods bound",
        Duration::from_secs(420),
        &[&sandbox, &replicas[standby]],
        || async { bound(&c, "web").await == (300, 300) },
    )
    .await;

    // One running instance per NodeClaim, each NodeClaim's node holding a web pod.
    let ec2 = moto.client().await;
    let running = || async {
        ec2.describe_instances()
            .filters(
                t::Filter::builder()
                    .name(format!("tag:kubernetes.io/cluster/{CLUSTER}"))
                    .values("owned")
                    .build(),
            )
            .send()
            .await
            .expect("describe instances")
            .reservations()
            .iter()
            .flat_map(|r| r.instances())
            .filter(|i| i.state().and_then(|s| s.name()) == Some(&t::InstanceStateName::Running))
            .filter_map(|i| {
                let claim = i
                    .tags()
                    .iter()
                    .find(|t| t.key() == Some("karpenter.sh/nodeclaim"))?
                    .value()?
                    .to_owned();
                Some((i.instance_id()?.to_owned(), claim))
            })
            .collect::<Vec<(String, String)>>()
    };
    eventually(
        "one running instance per NodeClaim, each NodeClaim with its node",
        Duration::from_secs(120),
        &[&sandbox, &replicas[standby]],
        || async {
            let claims = nodeclaims(&c).await;
            let instances = running().await;
            let names: HashSet<String> = claims
                .iter()
                .filter_map(|n| n.metadata.name.clone())
                .collect();
            let tagged: HashSet<String> = instances.iter().map(|(_, c)| c.clone()).collect();
            let node_names: HashSet<String> = nodes(&c)
                .await
                .into_iter()
                .filter_map(|n| n.metadata.name)
                .collect();
            instances.len() == claims.len()
                && tagged == names
                && claims.iter().all(|n| {
                    n.status
                        .as_ref()
                        .and_then(|s| s.node_name.as_ref())
                        .is_some_and(|node| node_names.contains(node))
                })
        },
    )
    .await;
    let pods: kube::Api<k8s_openapi::api::core::v1::Pod> = kube::Api::all(c.clone());
    let mut per_node: HashMap<String, usize> = HashMap::new();
    for p in pods
        .list(&kube::api::ListParams::default().labels("app=web"))
        .await
        .expect("list pods")
        .items
    {
        if let Some(node) = p.spec.and_then(|s| s.node_name) {
            *per_node.entry(node).or_default() += 1;
        }
    }
    let claims = nodeclaims(&c).await;
    eprintln!(
        "{} NodeClaims for 300 pods; {at_kill} existed and {on_nodes} of 300 pods were bound when the leader died",
        claims.len()
    );
    let empty: Vec<String> = claims
        .iter()
        .filter_map(|n| n.status.as_ref()?.node_name.clone())
        .filter(|node| !per_node.contains_key(node))
        .collect();
    assert!(
        empty.is_empty(),
        "{} NodeClaims for 300 pods ({at_kill} when the leader died); nodes without a web pod \
         (duplicate capacity): {empty:?}",
        claims.len()
    );

    for (which, proxy) in ["killed leader", "survivor"]
        .iter()
        .zip([&proxies[leader], &proxies[standby]])
    {
        let most = proxy.counts.most.load(Ordering::SeqCst);
        let total = proxy.counts.total.load(Ordering::SeqCst);
        eprintln!("{which}: {total} DescribeInstanceTypes requests, at most {most} at once");
        assert!(
            most <= 1,
            "the {which} sent {most} DescribeInstanceTypes at once (one node class: one fetch at a time)"
        );
    }
    assert!(
        proxies[standby].counts.total.load(Ordering::SeqCst) >= 1,
        "the survivor fetched the instance types it launched with"
    );
}
