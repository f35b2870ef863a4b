//! Which NodeClaim `drift explain NAME` means: a NodeClaim by name, or the NodeClaim of a Node
//! (its `status.nodeName`, or the Node's `spec.providerID` against the NodeClaim's
//! `status.providerID`, as Karpenter links them). Pure.

use crds::NodeClaim;
use k8s_openapi::api::core::v1::Node;

/// A name that leads to no NodeClaim.
#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    /// Neither a NodeClaim nor a Node has the name.
    #[error(
        "no NodeClaim or Node named \"{name}\" (context \"{context}\"); `kubectl karpenter \
         status` lists NodeClaims and their Nodes (NAME and NODE columns), or run `kubectl \
         karpenter drift explain` without a name to explain every NodeClaim"
    )]
    NotFound {
        /// The name given.
        name: String,
        /// The kubeconfig context.
        context: String,
    },
    /// The Node exists but no NodeClaim is linked to it.
    #[error(
        "node \"{node}\" has no NodeClaim: none has status.nodeName {node} or providerID \
         {provider_id}, so Karpenter does not manage it (or its NodeClaim is gone: `kubectl \
         karpenter orphans` lists such Nodes); name a NodeClaim or a Node Karpenter launched"
    )]
    NoNodeClaim {
        /// The Node named, which no NodeClaim points to.
        node: String,
        /// Its providerID, or `<none>`.
        provider_id: String,
    },
}

/// `name` without a `nodeclaim/`, `nodeclaim.karpenter.sh/`, `nodeclaims/` or `node/` prefix
/// (the `-o name` forms), and whether the prefix limited it to NodeClaims or to Nodes.
pub fn strip_kind(name: &str) -> (&str, Option<Kind>) {
    for prefix in [
        "nodeclaim.karpenter.sh/",
        "nodeclaims.karpenter.sh/",
        "nodeclaim/",
        "nodeclaims/",
    ] {
        if let Some(rest) = name.strip_prefix(prefix) {
            return (rest, Some(Kind::NodeClaim));
        }
    }
    for prefix in ["node/", "nodes/"] {
        if let Some(rest) = name.strip_prefix(prefix) {
            return (rest, Some(Kind::Node));
        }
    }
    (name, None)
}

/// What a prefixed name names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `nodeclaim/`, `nodeclaims/` or `nodeclaim[s].karpenter.sh/`: only NodeClaims are searched.
    NodeClaim,
    /// `node/` or `nodes/`: only Nodes are searched.
    Node,
}

/// The NodeClaim `name` names without looking at Nodes: by NodeClaim name, then by
/// `status.nodeName`. `None` when the Node itself must be read.
pub fn by_name<'a>(name: &str, claims: &'a [NodeClaim]) -> Option<&'a NodeClaim> {
    let (name, kind) = strip_kind(name);
    let by_claim = || {
        claims
            .iter()
            .find(|c| c.metadata.name.as_deref() == Some(name))
    };
    let by_node = || {
        claims
            .iter()
            .find(|c| c.status.as_ref().and_then(|s| s.node_name.as_deref()) == Some(name))
    };
    match kind {
        Some(Kind::NodeClaim) => by_claim(),
        Some(Kind::Node) => by_node(),
        None => by_claim().or_else(by_node),
    }
}

/// The NodeClaim `name` names, given the Node of that name if there is one.
///
/// Errors: [`ResolveError::NotFound`] when nothing has the name, [`ResolveError::NoNodeClaim`]
/// when the Node exists but no NodeClaim is linked to it.
pub fn resolve<'a>(
    name: &str,
    claims: &'a [NodeClaim],
    node: Option<&Node>,
    context: &str,
) -> Result<&'a NodeClaim, ResolveError> {
    if let Some(claim) = by_name(name, claims) {
        return Ok(claim);
    }
    let (bare, kind) = strip_kind(name);
    let node = node.filter(|_| kind != Some(Kind::NodeClaim));
    let Some(node) = node else {
        return Err(ResolveError::NotFound {
            name: bare.to_owned(),
            context: context.to_owned(),
        });
    };
    let provider_id = node.spec.as_ref().and_then(|s| s.provider_id.as_deref());
    let linked = provider_id.filter(|p| !p.is_empty()).and_then(|pid| {
        claims
            .iter()
            .find(|c| c.status.as_ref().and_then(|s| s.provider_id.as_deref()) == Some(pid))
    });
    linked.ok_or_else(|| ResolveError::NoNodeClaim {
        node: bare.to_owned(),
        provider_id: provider_id.unwrap_or("<none>").to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures;
    use serde_json::json;

    fn claims() -> Vec<NodeClaim> {
        let mut a = fixtures::claim("default-a", "default", "2025-06-01T06:00:00Z");
        let status = a.status.get_or_insert_with(Default::default);
        status.node_name = Some("ip-10-0-1-1".into());
        status.provider_id = Some("aws:///us-east-1a/i-a".into());
        let mut b = fixtures::claim("default-b", "default", "2025-06-01T06:00:00Z");
        b.status.get_or_insert_with(Default::default).provider_id =
            Some("aws:///us-east-1a/i-b".into());
        vec![a, b]
    }

    /// A Node `name` whose spec has `providerID` when given (a `null` in the merge patch
    /// leaves the spec empty).
    fn node(name: &str, provider_id: Option<&str>) -> Node {
        testutil::node(name)
            .merge(json!({"spec": {"providerID": provider_id}}))
            .build()
    }

    fn name_of(r: Result<&NodeClaim, ResolveError>) -> String {
        r.expect("resolves")
            .metadata
            .name
            .clone()
            .unwrap_or_default()
    }

    #[test]
    fn names_resolve_by_nodeclaim_node_name_and_provider_id() {
        let claims = claims();
        assert_eq!(
            name_of(resolve("default-a", &claims, None, "c")),
            "default-a"
        );
        assert_eq!(
            name_of(resolve(
                "nodeclaim.karpenter.sh/default-b",
                &claims,
                None,
                "c"
            )),
            "default-b"
        );
        assert_eq!(
            name_of(resolve("ip-10-0-1-1", &claims, None, "c")),
            "default-a"
        );
        assert_eq!(
            name_of(resolve("node/ip-10-0-1-1", &claims, None, "c")),
            "default-a"
        );
        // Not registered under that name yet, but the Node's providerID matches.
        let n = node("ip-10-0-1-2", Some("aws:///us-east-1a/i-b"));
        assert_eq!(
            name_of(resolve("ip-10-0-1-2", &claims, Some(&n), "c")),
            "default-b"
        );
        assert!(by_name("ip-10-0-1-2", &claims).is_none());
        assert!(by_name("nodeclaim/ip-10-0-1-1", &claims).is_none());
    }

    #[test]
    fn unknown_names_say_what_to_do() {
        let claims = claims();
        let err = resolve("nope", &claims, None, "dev").expect_err("unknown");
        assert_eq!(
            err.to_string(),
            "no NodeClaim or Node named \"nope\" (context \"dev\"); `kubectl karpenter status` \
             lists NodeClaims and their Nodes (NAME and NODE columns), or run `kubectl karpenter \
             drift explain` without a name to explain every NodeClaim"
        );
        let stray = node("ip-10-9-9-9", Some("aws:///us-east-1a/i-zzz"));
        let err = resolve("ip-10-9-9-9", &claims, Some(&stray), "dev").expect_err("no claim");
        let text = err.to_string();
        assert!(
            text.starts_with(
                "node \"ip-10-9-9-9\" has no NodeClaim: none has status.nodeName ip-10-9-9-9 or \
                 providerID aws:///us-east-1a/i-zzz"
            ),
            "{text}"
        );
        // A NodeClaim-qualified name never falls back to the Node.
        let err = resolve("nodeclaim/ip-10-9-9-9", &claims, Some(&stray), "dev")
            .expect_err("not a NodeClaim");
        assert!(matches!(err, ResolveError::NotFound { .. }), "{err}");
        let bare = node("ip-10-9-9-8", None);
        let err = resolve("ip-10-9-9-8", &claims, Some(&bare), "dev").expect_err("no id");
        assert!(err.to_string().contains("providerID <none>"), "{err}");
    }
}
