//! Cluster discovery (upstream `aws:pkg/operator/operator.go`): what a node needs to join the
//! cluster, from the settings first and EKS DescribeCluster for what they leave out.
//!
//! - The API server endpoint: `CLUSTER_ENDPOINT`, else DescribeCluster's `endpoint`. A kube
//!   client's URL is not used: inside a pod it is the `kubernetes` Service's address, which an
//!   instance cannot reach before it is a node. Neither given nor discovered is a start-up error.
//! - The CA bundle: `CLUSTER_CA_BUNDLE`, else the kube client's CA, else DescribeCluster's
//!   `certificateAuthority.data`.
//! - The service CIDR and IP family come from the same DescribeCluster answer when one was
//!   needed; otherwise the provider asks when a node class first needs them
//!   ([`super::AwsCloud::resolve_service_cidr`]).
//! - The cluster DNS address is the `kube-dns` Service's cluster IP where the caller read it.

use ec2api::{ClusterNetwork, Ec2, Ec2Error};

use super::launchtemplate::ClusterInfo;

/// What the settings and the controller's own connection give before discovery.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Given {
    /// `CLUSTER_ENDPOINT`, or an endpoint nodes are known to join (the sandbox's own URL).
    pub endpoint: Option<String>,
    /// `CLUSTER_CA_BUNDLE` (base64 of PEM).
    pub ca_bundle: Option<String>,
    /// The kube client's CA bundle (base64 of PEM; empty without one).
    pub client_ca_bundle: String,
    /// The `kube-dns` Service's cluster IP in `kube-system`, if the controller read one.
    pub kube_dns_ip: Option<String>,
}

/// The [`ClusterInfo`] nodes of cluster `name` join: [`Given`] completed by one EKS
/// DescribeCluster call when the endpoint or CA bundle is missing ([`complete`]).
///
/// Errors: as [`complete`].
pub async fn discover(ec2: &dyn Ec2, name: &str, given: Given) -> Result<ClusterInfo, String> {
    if given.endpoint.is_some() && given.ca().is_some() {
        return complete(name, given, None);
    }
    let described = ec2.describe_cluster(name).await;
    complete(name, given, Some(described))
}

impl Given {
    /// The CA bundle given: `CLUSTER_CA_BUNDLE`, else the kube client's.
    fn ca(&self) -> Option<String> {
        self.ca_bundle
            .clone()
            .or_else(|| (!self.client_ca_bundle.is_empty()).then(|| self.client_ca_bundle.clone()))
    }
}

/// [`Given`] completed by a DescribeCluster answer (`None` when none was needed): the endpoint
/// and CA bundle where not given, and the service CIDR and IP family it reports.
///
/// Errors: no endpoint was given and DescribeCluster failed or reported none; the message
/// names the cluster, the setting to give and the permission to grant. A missing CA bundle
/// is not an error (nodes then join without one, as upstream's), only logged.
pub fn complete(
    name: &str,
    given: Given,
    described: Option<Result<ClusterNetwork, Ec2Error>>,
) -> Result<ClusterInfo, String> {
    let ca_given = given.ca();
    let mut cluster = ClusterInfo {
        name: name.to_string(),
        endpoint: given.endpoint.clone().unwrap_or_default(),
        ca_bundle: ca_given.clone().unwrap_or_default(),
        kube_dns_ip: given.kube_dns_ip.clone(),
        ..ClusterInfo::default()
    };
    let network = match described {
        None => return Ok(cluster),
        Some(Ok(n)) => n,
        Some(Err(e)) if given.endpoint.is_none() => {
            return Err(format!(
                "unable to detect the cluster endpoint: EKS DescribeCluster {name:?}: {e}; set \
                 CLUSTER_ENDPOINT (--cluster-endpoint), or check that CLUSTER_NAME is the EKS \
                 cluster's name and that the controller may call eks:DescribeCluster"
            ));
        }
        Some(Err(e)) => {
            tracing::warn!(cluster = %name, error = %e, "no CA bundle given and DescribeCluster failed; nodes get none (set CLUSTER_CA_BUNDLE)");
            return Ok(cluster);
        }
    };
    if given.endpoint.is_none() {
        cluster.endpoint = network.endpoint.clone().ok_or_else(|| {
            format!(
                "unable to detect the cluster endpoint: EKS DescribeCluster {name:?} reports \
                 none; set CLUSTER_ENDPOINT (--cluster-endpoint)"
            )
        })?;
        tracing::info!(cluster = %name, endpoint = %cluster.endpoint, "discovered cluster endpoint");
    }
    if ca_given.is_none() {
        cluster.ca_bundle = network.ca_bundle.clone().unwrap_or_default();
    }
    cluster.service_cidr = network.service_ipv4_cidr.or(network.service_ipv6_cidr);
    cluster.ip_family = network.ip_family;
    Ok(cluster)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn eks() -> ClusterNetwork {
        ClusterNetwork {
            service_ipv4_cidr: Some("172.20.0.0/16".into()),
            service_ipv6_cidr: None,
            ip_family: Some("ipv4".into()),
            endpoint: Some("https://ABCD.gr7.us-east-1.eks.amazonaws.com".into()),
            ca_bundle: Some("RUtTIENB".into()),
        }
    }

    fn absent() -> Ec2Error {
        Ec2Error {
            code: "ResourceNotFoundException".into(),
            message: "No cluster found for name: demo.".into(),
        }
    }

    #[test]
    fn settings_win_and_describe_cluster_fills_in_the_rest() {
        // Both given: no DescribeCluster answer is needed, and the settings are kept.
        let given = Given {
            endpoint: Some("https://given".into()),
            ca_bundle: Some("R0lWRU4=".into()),
            kube_dns_ip: Some("172.20.0.10".into()),
            ..Given::default()
        };
        let c = complete("demo", given, None).expect("given");
        assert_eq!(
            (
                c.endpoint.as_str(),
                c.ca_bundle.as_str(),
                c.dns_ip().as_deref()
            ),
            ("https://given", "R0lWRU4=", Some("172.20.0.10"))
        );
        // Nothing given: EKS's endpoint, CA, service CIDR and IP family.
        let c = complete("demo", Given::default(), Some(Ok(eks()))).expect("discovered");
        assert_eq!(c.endpoint, "https://ABCD.gr7.us-east-1.eks.amazonaws.com");
        assert_eq!(c.ca_bundle, "RUtTIENB");
        assert_eq!(c.service_cidr.as_deref(), Some("172.20.0.0/16"));
        assert_eq!(c.dns_ip().as_deref(), Some("172.20.0.10"));
        assert!(!c.ipv6());
        // The kube client's CA stands in for CLUSTER_CA_BUNDLE; the endpoint is still EKS's.
        let given = Given {
            client_ca_bundle: "Q0xJRU5U".into(),
            ..Given::default()
        };
        let c = complete("demo", given, Some(Ok(eks()))).expect("discovered");
        assert_eq!(c.ca_bundle, "Q0xJRU5U");
        assert_eq!(c.endpoint, "https://ABCD.gr7.us-east-1.eks.amazonaws.com");
    }

    #[test]
    fn an_endpoint_neither_given_nor_discovered_is_an_error_that_says_what_to_set() {
        let err = complete("demo", Given::default(), Some(Err(absent()))).expect_err("no endpoint");
        assert!(
            err.contains("\"demo\"")
                && err.contains("CLUSTER_ENDPOINT")
                && err.contains("eks:DescribeCluster"),
            "{err}"
        );
        let none = ClusterNetwork {
            endpoint: None,
            ..eks()
        };
        let err = complete("demo", Given::default(), Some(Ok(none))).expect_err("none reported");
        assert!(err.contains("reports none"), "{err}");
        // With the endpoint given, a failed DescribeCluster only leaves the CA bundle empty.
        let given = Given {
            endpoint: Some("https://given".into()),
            ..Given::default()
        };
        let c = complete("demo", given, Some(Err(absent()))).expect("endpoint given");
        assert_eq!(
            (c.endpoint.as_str(), c.ca_bundle.as_str()),
            ("https://given", "")
        );
    }

    #[test]
    fn an_ipv6_cluster_is_known_by_its_ip_family() {
        let six = ClusterNetwork {
            service_ipv4_cidr: None,
            ip_family: Some("ipv6".into()),
            ..eks()
        };
        let c = complete("demo", Given::default(), Some(Ok(six))).expect("discovered");
        assert!(c.ipv6());
        assert_eq!(c.service_cidr, None);
    }
}
