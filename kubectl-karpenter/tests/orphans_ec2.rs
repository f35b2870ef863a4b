//! `orphans` against EC2 (feature `aws`): moto's EC2 server on loopback holds an instance tagged
//! for the cluster that no NodeClaim owns; the plugin finds it with the cluster name and region
//! from an EKS cluster ARN in the kubeconfig, and `orphans delete --yes` terminates it. Needs
//! `moto_server` on PATH (`pip install 'moto[server]'`; `./scripts/test.sh` installs it).

use crate::support;

use std::process::{Command, Output, Stdio};

use ec2api::moto::MotoServer;

use support::{BIN, Cluster, stderr, stdout};

const ARN: &str = "arn:aws:eks:us-east-1:123456789012:cluster/demo";
const AUTH: &str = "Authorization: AWS4-HMAC-SHA256 \
                    Credential=x/20250101/us-east-1/ec2/aws4_request, SignedHeaders=host, Signature=x";

/// A moto server on a free port, killed on drop.
struct Moto {
    _server: MotoServer,
    url: String,
}

impl Moto {
    fn start() -> Moto {
        let server = MotoServer::start(std::iter::empty::<(&str, &str)>())
            .expect("moto_server starts (./scripts/test.sh installs it)");
        Moto {
            url: server.url.clone(),
            _server: server,
        }
    }

    /// One EC2 Query API call (moto does not check signatures); the response body.
    fn call(&self, params: &str) -> String {
        let out = Command::new("curl")
            .args(["-s", "-X", "POST", &self.url, "-H", AUTH, "-d"])
            .arg(format!("Version=2016-11-15&{params}"))
            .output()
            .expect("curl");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// RunInstances of one m5.large tagged for cluster `demo` and NodeClaim `nodeclaim`.
    fn run_instance(&self, nodeclaim: &str) -> String {
        let body = self.call(&format!(
            "Action=RunInstances&ImageId=ami-12c6146b&MinCount=1&MaxCount=1&InstanceType=m5.large\
             &TagSpecification.1.ResourceType=instance\
             &TagSpecification.1.Tag.1.Key=kubernetes.io/cluster/demo&TagSpecification.1.Tag.1.Value=owned\
             &TagSpecification.1.Tag.2.Key=karpenter.sh/nodeclaim&TagSpecification.1.Tag.2.Value={nodeclaim}"
        ));
        let start = body.find("<instanceId>").expect("instance launched") + "<instanceId>".len();
        let end = body[start..].find('<').expect("end tag") + start;
        body[start..end].to_owned()
    }
}

/// A kubeconfig for the sandbox whose cluster and context are named by an EKS ARN.
fn eks_kubeconfig(cluster: &Cluster) -> std::path::PathBuf {
    let text = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: {ARN}\n  cluster: {{server: '{}', \
         certificate-authority-data: {}}}\n\
         users:\n- name: me\n  user: {{token: '{}'}}\ncontexts:\n- name: {ARN}\n  context: {{cluster: {ARN}, user: me}}\n\
         current-context: {ARN}\n",
        cluster.sandbox.url(),
        cluster.sandbox.certificate_authority_data(),
        cluster.sandbox.token(),
    );
    let path = cluster.dir.path().join("eks");
    std::fs::write(&path, text).expect("write kubeconfig");
    path
}

async fn plugin(cluster: &Cluster, moto: &Moto, kubeconfig: &str, args: &[&str]) -> Output {
    let mut cmd = tokio::process::Command::new(BIN);
    cmd.args(args)
        .args(["--kubeconfig", kubeconfig, "--min-instance-age", "0s"])
        .args(["--aws-endpoint-url", &moto.url])
        .stdin(Stdio::null())
        .env("HOME", cluster.dir.path())
        .env("AWS_ACCESS_KEY_ID", "x")
        .env("AWS_SECRET_ACCESS_KEY", "x")
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .env_remove("AWS_REGION")
        .env_remove("AWS_DEFAULT_REGION")
        .env_remove("AWS_PROFILE")
        .env_remove("CLUSTER_NAME")
        .env_remove("AWS_ENDPOINT_URL");
    cmd.output().await.expect("run plugin")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ec2_instances_without_nodeclaims() {
    let moto = Moto::start();
    let cluster = Cluster::start(true).await;
    let id = moto.run_instance("default-gone");
    let kc = eks_kubeconfig(&cluster);
    let kc = kc.to_str().expect("utf-8 path");

    let listed = plugin(&cluster, &moto, kc, &["orphans"]).await;
    let table = stdout(&listed);
    assert_eq!(
        listed.status.code(),
        Some(1),
        "{}\n{table}",
        stderr(&listed)
    );
    let row = table.lines().nth(1).unwrap_or_default();
    assert!(
        row.starts_with(&format!("InstanceWithoutNodeClaim   {id} ")),
        "\n{table}"
    );
    assert!(
        row.contains("tagged for nodeclaim default-gone, which does not exist"),
        "{row}"
    );
    assert!(
        table.contains("cloud: EC2 us-east-1, cluster demo, 1 instance checked"),
        "\n{table}"
    );

    // The plain sandbox kubeconfig names no EKS cluster: say how to name one.
    let plain = cluster.kubeconfig();
    let unnamed = plugin(
        &cluster,
        &moto,
        plain.to_str().expect("utf-8"),
        &["orphans"],
    )
    .await;
    assert_eq!(unnamed.status.code(), Some(2));
    assert!(
        stderr(&unnamed).contains("pass --cluster-name NAME"),
        "{}",
        stderr(&unnamed)
    );

    let deleted = plugin(
        &cluster,
        &moto,
        kc,
        &["orphans", "delete", "--all", "--yes"],
    )
    .await;
    assert_eq!(deleted.status.code(), Some(0), "{}", stderr(&deleted));
    assert!(
        stdout(&deleted).ends_with(&format!("instance/{id} terminated\n")),
        "{}",
        stdout(&deleted)
    );
    let described = moto.call(&format!("Action=DescribeInstances&InstanceId.1={id}"));
    assert!(
        described.contains("<name>terminated</name>")
            || described.contains("<name>shutting-down</name>"),
        "{described}"
    );
    let again = plugin(&cluster, &moto, kc, &["orphans"]).await;
    assert_eq!(again.status.code(), Some(0), "{}", stdout(&again));
}
