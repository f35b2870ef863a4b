//! The sandbox validates objects as kube-apiserver does, seen through real kubectl and at the
//! HTTP level: invalid quantities, requests above limits, oversized labels, negative replicas,
//! names that break their kind's DNS rule and custom resources that break their CRD's CEL rules
//! (a NodePool name longer than a label value included) are refused with 422 `Invalid` and one
//! cause per field; values of the wrong type
//! (`replicas: "many"`) with 400 `BadRequest`, as Go's decoder words it; nothing is stored.

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

use sandbox::Sandbox;
use serde_json::{Value, json};

/// A sandbox with its kubeconfig on disk.
struct Cluster {
    sandbox: Sandbox,
    _dir: tempfile::TempDir,
    kubeconfig: PathBuf,
}

impl Cluster {
    async fn start() -> Cluster {
        let sandbox = Sandbox::start(0).await.expect("sandbox starts");
        let dir = tempfile::tempdir().expect("temp dir");
        let kubeconfig = dir.path().join("kubeconfig");
        sandbox
            .write_kubeconfig(&kubeconfig)
            .expect("kubeconfig written");
        Cluster {
            sandbox,
            _dir: dir,
            kubeconfig,
        }
    }

    /// Run kubectl (`$KUBECTL`, else `kubectl` on PATH) with `stdin`, off the runtime.
    async fn kubectl(&self, args: &[&str], stdin: &str) -> Output {
        let kubectl = std::env::var_os("KUBECTL").unwrap_or_else(|| "kubectl".into());
        let mut cmd = Command::new(kubectl);
        cmd.arg("--kubeconfig").arg(&self.kubeconfig).args(args);
        let input = stdin.to_string();
        tokio::task::spawn_blocking(move || {
            let mut child = cmd
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("kubectl runs (install it or set KUBECTL)");
            if let Some(mut pipe) = child.stdin.take() {
                use std::io::Write;
                pipe.write_all(input.as_bytes()).expect("write stdin");
            }
            child.wait_with_output().expect("kubectl finishes")
        })
        .await
        .expect("kubectl thread")
    }

    /// `kubectl create -f -` of `manifest`, which must fail: its stderr.
    async fn refused(&self, manifest: &str) -> String {
        let out = self.kubectl(&["create", "-f", "-"], manifest).await;
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(
            !out.status.success(),
            "kubectl create succeeded: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        stderr
    }

    /// Install Karpenter's CRDs, as `karpenter sandbox` does.
    fn install_karpenter_crds(&self) {
        let store = self.sandbox.store();
        let rt = store
            .resource("apiextensions.k8s.io", "v1", "customresourcedefinitions")
            .expect("CRDs are served");
        for crd in crds::generate::crds() {
            let crd = serde_json::to_value(&crd).expect("CRD JSON");
            store.create(&rt, "", crd).expect("CRD installed");
        }
    }

    /// Whether `kubectl get <kind> <name>` finds the object.
    async fn exists(&self, kind: &str, name: &str) -> bool {
        self.kubectl(&["get", kind, name], "")
            .await
            .status
            .success()
    }

    /// POST `body` to `path` with the sandbox's credentials: the status code and the JSON
    /// answer, whatever the status.
    async fn post(&self, path: &str, body: &Value) -> (u16, Value) {
        let config = self.sandbox.client_config();
        let body = body.to_string().into_bytes();
        let (code, body) = crate::support::send_with(config, "POST", path, None, body).await;
        (code, serde_json::from_slice(&body).expect("a JSON Status"))
    }
}

fn pod(name: &str, resources: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  containers:\n  - name: app\n    image: public.ecr.aws/eks-distro/kubernetes/pause:3.2\n    resources: {resources}\n"
    )
}

fn deployment(name: &str, replicas: &str) -> String {
    format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: {name}\nspec:\n  replicas: {replicas}\n  selector:\n    matchLabels: {{app: {name}}}\n  template:\n    metadata:\n      labels: {{app: {name}}}\n    spec:\n      containers:\n      - name: app\n        image: public.ecr.aws/eks-distro/kubernetes/pause:3.2\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_create_refuses_invalid_quantities_and_requests_above_limits() {
    let c = Cluster::start().await;
    let stderr = c
        .refused(&pod("negative", "{requests: {cpu: \"-1\"}}"))
        .await;
    assert!(
        stderr.contains("The Pod \"negative\" is invalid: spec.containers[0].resources.requests[cpu]: Invalid value: \"-1\": must be greater than or equal to 0"),
        "{stderr}"
    );
    assert!(!c.exists("pod", "negative").await, "nothing is stored");

    let stderr = c
        .refused(&pod(
            "greedy",
            "{requests: {cpu: \"2\"}, limits: {cpu: \"1\"}}",
        ))
        .await;
    assert!(
        stderr.contains("The Pod \"greedy\" is invalid: spec.containers[0].resources.requests: Invalid value: \"2\": must be less than or equal to cpu limit of 1"),
        "{stderr}"
    );
    assert!(!c.exists("pod", "greedy").await);

    let stderr = c.refused(&pod("garbled", "{requests: {cpu: lots}}")).await;
    assert!(
        stderr.contains("Error from server (BadRequest)")
            && stderr.contains("Pod in version \"v1\" cannot be handled as a Pod: quantities must match the regular expression"),
        "{stderr}"
    );

    let fine = c
        .kubectl(
            &["create", "-f", "-"],
            &pod(
                "fine",
                "{requests: {cpu: 0.5, memory: 1024Mi}, limits: {cpu: \"1\"}}",
            ),
        )
        .await;
    assert!(
        fine.status.success(),
        "{}",
        String::from_utf8_lossy(&fine.stderr)
    );
    let stored = c
        .kubectl(
            &[
                "get",
                "pod",
                "fine",
                "-o",
                "jsonpath={.spec.containers[0].resources}",
            ],
            "",
        )
        .await;
    let resources: Value = serde_json::from_slice(&stored.stdout).expect("resources as JSON");
    assert_eq!(
        resources,
        json!({"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"cpu": "1"}}),
        "quantities are stored in canonical form"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_create_refuses_a_megabyte_label_value() {
    let c = Cluster::start().await;
    let big = "a".repeat(1 << 20);
    let manifest = format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: big\n  labels:\n    huge: {big}\n"
    );
    let stderr = c.refused(&manifest).await;
    assert!(
        stderr.contains("The ConfigMap \"big\" is invalid: metadata.labels: Invalid value: \"aaaa"),
        "{}",
        &stderr[..stderr.len().min(300)]
    );
    assert!(
        stderr
            .trim_end()
            .ends_with("must be no more than 63 characters"),
        "{}",
        &stderr[stderr.len().saturating_sub(300)..]
    );
    assert!(!c.exists("configmap", "big").await);

    let stderr = c
        .refused("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: key\n  labels:\n    \"bad key!\": x\n")
        .await;
    assert!(
        stderr.contains("metadata.labels: Invalid value: \"bad key!\": name part must consist of alphanumeric characters"),
        "{stderr}"
    );
    let annotations = format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: notes\n  annotations:\n    note: {}\n",
        "n".repeat(300 * 1024)
    );
    let stderr = c.refused(&annotations).await;
    assert!(
        stderr.contains("metadata.annotations: Too long: may not be more than 262144 bytes"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_create_refuses_negative_and_mistyped_replicas() {
    let c = Cluster::start().await;
    let stderr = c.refused(&deployment("negative", "-5")).await;
    assert!(
        stderr.contains("The Deployment \"negative\" is invalid: spec.replicas: Invalid value: -5: must be greater than or equal to 0"),
        "{stderr}"
    );
    assert!(!c.exists("deployment", "negative").await);

    let stderr = c.refused(&deployment("many", "\"many\"")).await;
    assert!(
        stderr.contains("Error from server (BadRequest)")
            && stderr.contains("Deployment in version \"v1\" cannot be handled as a Deployment: json: cannot unmarshal string into Go struct field DeploymentSpec.spec.replicas of type int32"),
        "{stderr}"
    );
    assert!(!c.exists("deployment", "many").await);

    let ok = c
        .kubectl(&["create", "-f", "-"], &deployment("web", "2"))
        .await;
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    let patched = c
        .kubectl(
            &[
                "patch",
                "deployment",
                "web",
                "--type=merge",
                "-p",
                "{\"spec\":{\"replicas\":-3}}",
            ],
            "",
        )
        .await;
    assert!(!patched.status.success(), "a patch is validated too");
    assert!(
        String::from_utf8_lossy(&patched.stderr)
            .contains("spec.replicas: Invalid value: -3: must be greater than or equal to 0"),
        "{}",
        String::from_utf8_lossy(&patched.stderr)
    );
}

/// The answer itself: kube-apiserver's Status shape for 422 and 400.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_carry_kube_apiserver_status_shapes() {
    let c = Cluster::start().await;
    let body = json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "labels": {"tier": "x".repeat(64)}},
        "spec": {"replicas": -5, "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "app", "image": "pause",
                    "resources": {"requests": {"cpu": "-1"}}}]}}}});
    let (code, status) = c
        .post("/apis/apps/v1/namespaces/default/deployments", &body)
        .await;
    assert_eq!(code, 422, "{status}");
    assert_eq!(status["kind"], "Status");
    assert_eq!(status["status"], "Failure");
    assert_eq!(status["reason"], "Invalid");
    assert_eq!(status["code"], 422);
    assert_eq!(status["details"]["name"], "web");
    assert_eq!(status["details"]["group"], "apps");
    assert_eq!(status["details"]["kind"], "Deployment");
    let fields: Vec<&str> = status["details"]["causes"]
        .as_array()
        .expect("causes")
        .iter()
        .map(|c| {
            assert_eq!(c["reason"], "FieldValueInvalid");
            c["field"].as_str().expect("field")
        })
        .collect();
    assert_eq!(
        fields,
        vec![
            "metadata.labels",
            "spec.replicas",
            "spec.template.spec.containers[0].resources.requests[cpu]",
        ]
    );
    let message = status["message"].as_str().expect("message");
    assert!(
        message.starts_with(
            "Deployment.apps \"web\" is invalid: [metadata.labels: Invalid value: \"xxxx"
        ),
        "{message}"
    );
    assert!(
        message
            .contains(", spec.replicas: Invalid value: -5: must be greater than or equal to 0, "),
        "{message}"
    );

    let (code, status) = c
        .post(
            "/api/v1/namespaces/default/pods",
            &json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
                "spec": {"containers": [{"name": "c", "ports": [{"containerPort": "http"}]}]}}),
        )
        .await;
    assert_eq!(code, 400, "{status}");
    assert_eq!(status["reason"], "BadRequest");
    assert_eq!(
        status["message"],
        "Pod in version \"v1\" cannot be handled as a Pod: json: cannot unmarshal string into Go struct field ContainerPort.spec.containers.ports.containerPort of type int32"
    );
}

fn ec2nodeclass(name: &str, identity: &str) -> String {
    format!(
        "apiVersion: karpenter.k8s.aws/v1\nkind: EC2NodeClass\nmetadata:\n  name: {name}\nspec:\n{identity}  amiSelectorTerms: [{{alias: al2023@latest}}]\n  subnetSelectorTerms: [{{tags: {{karpenter.sh/discovery: c}}}}]\n  securityGroupSelectorTerms: [{{tags: {{karpenter.sh/discovery: c}}}}]\n"
    )
}

/// upstream's EC2NodeClass CRD refuses both `role` and `instanceProfile` with a CEL rule; the
/// sandbox evaluates the CRD's CEL rules on create and update and words the refusal as
/// kube-apiserver does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_create_and_patch_refuse_what_a_crd_cel_rule_forbids() {
    let c = Cluster::start().await;
    c.install_karpenter_crds();
    let both = "  role: KarpenterNodeRole-c\n  instanceProfile: KarpenterNodeInstanceProfile-c\n";
    let stderr = c.refused(&ec2nodeclass("both", both)).await;
    assert!(
        stderr.contains(
            "The EC2NodeClass \"both\" is invalid: spec: Invalid value: \"object\": must specify exactly one of ['role', 'instanceProfile']"
        ),
        "{stderr}"
    );
    assert!(!c.exists("ec2nodeclass", "both").await, "nothing stored");
    let stderr = c.refused(&ec2nodeclass("neither", "")).await;
    assert!(
        stderr.contains("must specify exactly one of ['role', 'instanceProfile']"),
        "{stderr}"
    );

    let role = "  role: KarpenterNodeRole-c\n";
    let out = c
        .kubectl(&["create", "-f", "-"], &ec2nodeclass("ok", role))
        .await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let patched = c
        .kubectl(
            &[
                "patch",
                "ec2nodeclass",
                "ok",
                "--type=merge",
                "-p",
                r#"{"spec":{"instanceProfile":"KarpenterNodeInstanceProfile-c"}}"#,
            ],
            "",
        )
        .await;
    assert!(!patched.status.success(), "an update is checked too");
    assert!(
        String::from_utf8_lossy(&patched.stderr)
            .contains("must specify exactly one of ['role', 'instanceProfile']"),
        "{}",
        String::from_utf8_lossy(&patched.stderr)
    );

    // A cron schedule out of range passes the CRD (upstream's pattern admits it); the NodePool
    // controller reports it instead (`ValidationSucceeded=False`).
    let pool = "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata:\n  name: late\nspec:\n  disruption:\n    budgets: [{nodes: \"0\", schedule: \"61 25 * * *\", duration: 1h}]\n  template:\n    spec:\n      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: ok}\n      requirements: [{key: kubernetes.io/arch, operator: In, values: [amd64]}]\n";
    let out = c.kubectl(&["create", "-f", "-"], pool).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Names follow their kind's rule: DNS subdomains, DNS labels for Namespaces (no dots),
/// DNS-1035 labels for Services (a letter first).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_follow_their_kinds_dns_rule() {
    let c = Cluster::start().await;
    let cases = [
        (
            "apiVersion: v1\nkind: Namespace\nmetadata: {name: team.a}\n",
            "The Namespace \"team.a\" is invalid: metadata.name: Invalid value: \"team.a\": must not contain dots",
        ),
        (
            "apiVersion: v1\nkind: Service\nmetadata: {name: 1web}\nspec: {ports: [{port: 80}]}\n",
            "The Service \"1web\" is invalid: metadata.name: Invalid value: \"1web\": a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character",
        ),
        (
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: Web_1}\n",
            "The ConfigMap \"Web_1\" is invalid: metadata.name: Invalid value: \"Web_1\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is",
        ),
    ];
    for (manifest, want) in cases {
        let stderr = c.refused(manifest).await;
        assert!(stderr.contains(want), "{stderr}");
    }
    let out = c
        .kubectl(
            &["create", "-f", "-"],
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: web.config-1}\n",
        )
        .await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A NodePool's name is the `karpenter.sh/nodepool` label value on its NodeClaims and Nodes; the
/// NodePool CRD's root rule refuses one longer than a label value (63 characters), which could
/// never launch a node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_create_refuses_a_nodepool_name_longer_than_a_label_value() {
    let c = Cluster::start().await;
    c.install_karpenter_crds();
    let pool = |name: &str| {
        format!(
            "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata:\n  name: {name}\nspec:\n  template:\n    spec:\n      nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}}\n      requirements: [{{key: kubernetes.io/arch, operator: In, values: [amd64]}}]\n"
        )
    };
    let long = "p".repeat(64);
    let stderr = c.refused(&pool(&long)).await;
    assert!(
        stderr.contains(&format!("The NodePool \"{long}\" is invalid"))
            && stderr.contains(crds::nodepool::NODEPOOL_NAME_MESSAGE),
        "{stderr}"
    );
    assert!(!c.exists("nodepool", &long).await, "nothing stored");
    let fits = "p".repeat(63);
    let out = c.kubectl(&["create", "-f", "-"], &pool(&fits)).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
