//! The query parameters that say which state a read sees and how long a watch lasts
//! (`resourceVersion`, `resourceVersionMatch`, `sendInitialEvents`, `timeoutSeconds`), checked
//! as k8s.io/apiserver's list handler checks them: values that do not parse are 400
//! `BadRequest` (`DecodeParameters`), combinations apimachinery's `ValidateListOptions` forbids
//! are 422 `Invalid`; the label and field selectors; and the wait for a resourceVersion the
//! store has not reached yet, which ends in 504 `Too large resource version` as the watch
//! cache's `waitUntilFreshAndBlock` does.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::broadcast::error::RecvError;

use super::Request;
use crate::error::{ApiError, ApiResult};
use crate::registry::ResourceType;
use crate::selector::{FieldSelector, parse_field_selector, parse_label_selector};
use crate::store::Store;

/// `resourceVersionMatch`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum VersionMatch {
    /// Not given: for a list, the same as `NotOlderThan` when a resourceVersion is given.
    Unset,
    /// The state at the resourceVersion or newer.
    NotOlderThan,
    /// The state at exactly the resourceVersion.
    Exact,
}

/// What a list, get or watch asks of the store's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ReadOptions {
    /// `resourceVersion`: `None` when absent or empty (the newest state), `Some(0)` for `0`
    /// (any state).
    pub resource_version: Option<u64>,
    /// `resourceVersionMatch`.
    pub version_match: VersionMatch,
    /// `sendInitialEvents` (watch only), when given.
    pub send_initial_events: Option<bool>,
    /// `timeoutSeconds`, when given (a watch's length; negative ends it at once, 0 is the
    /// default).
    pub timeout_seconds: Option<i64>,
}

/// Go's `strconv.ParseBool`, which decodes boolean query parameters.
fn parse_bool(value: &str) -> Option<bool> {
    match value {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Some(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Some(false),
        _ => None,
    }
}

/// A resourceVersion as the store counts it: empty and `0` are 0.
///
/// Errors: 400 when it is not a non-negative integer.
pub(crate) fn parse_resource_version(value: &str) -> ApiResult<u64> {
    if value.is_empty() {
        return Ok(0);
    }
    value.parse().map_err(|_| {
        ApiError::bad_request(format!(
            "invalid resource version {value:?}: resourceVersion must be a decimal number \
             returned by the server (e.g. a list's metadata.resourceVersion), \"0\" or empty"
        ))
    })
}

impl ReadOptions {
    /// The read options of `req`, a list (or get) or, with `watch`, a watch.
    ///
    /// Errors: 400 for a `timeoutSeconds`, `sendInitialEvents` or `resourceVersion` that does
    /// not parse; 422 for combinations `ValidateListOptions` forbids (`resourceVersionMatch`
    /// without `resourceVersion` or with `continue`, an unknown match, `Exact` with `0`,
    /// `sendInitialEvents` on a list or without `resourceVersionMatch=NotOlderThan`).
    pub(crate) fn of(req: &Request, watch: bool) -> ApiResult<ReadOptions> {
        let timeout_seconds = match req.param("timeoutSeconds").filter(|t| !t.is_empty()) {
            None => None,
            Some(t) => Some(t.parse::<i64>().map_err(|_| {
                ApiError::bad_request(format!(
                    "invalid value for timeoutSeconds: {t:?}: not an integer"
                ))
            })?),
        };
        let send_initial_events = match req.param("sendInitialEvents").filter(|s| !s.is_empty()) {
            None => None,
            Some(s) => Some(parse_bool(s).ok_or_else(|| {
                ApiError::bad_request(format!(
                    "invalid value for sendInitialEvents: {s:?}: not a boolean"
                ))
            })?),
        };
        let rv = req.param("resourceVersion").unwrap_or("");
        let matched = req.param("resourceVersionMatch").unwrap_or("");
        let continued = req.param("continue").is_some_and(|c| !c.is_empty());
        let forbidden = |message: String| ("resourceVersionMatch", "FieldValueForbidden", message);
        let mut causes = Vec::new();
        if watch {
            if send_initial_events.is_some() && matched != "NotOlderThan" {
                causes.push(forbidden(
                    "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan"
                        .into(),
                ));
            }
            if !matched.is_empty() {
                if send_initial_events.is_none() {
                    causes.push(forbidden(
                        "resourceVersionMatch is forbidden for watch unless sendInitialEvents \
                         is provided"
                            .into(),
                    ));
                }
                if matched != "NotOlderThan" {
                    causes.push((
                        "resourceVersionMatch",
                        "FieldValueNotSupported",
                        format!("{matched:?}: supported values: \"NotOlderThan\""),
                    ));
                }
                if continued {
                    causes.push(forbidden(
                        "resourceVersionMatch is forbidden when continue is provided".into(),
                    ));
                }
            }
        } else {
            if !matched.is_empty() {
                if rv.is_empty() {
                    causes.push(forbidden(
                        "resourceVersionMatch is forbidden unless resourceVersion is provided"
                            .into(),
                    ));
                }
                if continued {
                    causes.push(forbidden(
                        "resourceVersionMatch is forbidden when continue is provided".into(),
                    ));
                }
                if matched != "Exact" && matched != "NotOlderThan" {
                    causes.push((
                        "resourceVersionMatch",
                        "FieldValueNotSupported",
                        format!("{matched:?}: supported values: \"Exact\", \"NotOlderThan\", \"\""),
                    ));
                }
                if matched == "Exact" && rv == "0" {
                    causes.push(forbidden(
                        "resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\""
                            .into(),
                    ));
                }
            }
            if send_initial_events.is_some() {
                causes.push((
                    "sendInitialEvents",
                    "FieldValueForbidden",
                    "sendInitialEvents is forbidden for list".into(),
                ));
            }
        }
        if !causes.is_empty() {
            return Err(ApiError::invalid_list_options(&causes));
        }
        let resource_version = match rv {
            "" => None,
            rv => Some(parse_resource_version(rv)?),
        };
        let version_match = match matched {
            "Exact" => VersionMatch::Exact,
            "NotOlderThan" => VersionMatch::NotOlderThan,
            _ => VersionMatch::Unset,
        };
        Ok(ReadOptions {
            resource_version,
            version_match,
            send_initial_events,
            timeout_seconds,
        })
    }

    /// The resourceVersion the answer must be at least as new as, when it is one the store may
    /// not have reached (a nonzero version).
    pub(crate) fn minimum(&self) -> Option<u64> {
        self.resource_version.filter(|rv| *rv > 0)
    }
}

/// The request's label and field selectors (`labelSelector`, `fieldSelector`), the field
/// selector checked against the fields `rt`'s kind can be selected by.
///
/// Errors: 400 for a malformed selector or a field the kind cannot be selected by.
pub(crate) fn selectors(
    rt: &ResourceType,
    req: &Request,
) -> ApiResult<(kube::core::Selector, FieldSelector)> {
    let labels = parse_label_selector(req.param("labelSelector").unwrap_or(""))?;
    let fields = parse_field_selector(req.param("fieldSelector").unwrap_or(""))?
        .for_kind(&rt.group, &rt.kind)?;
    Ok((labels, fields))
}

/// Wait until the store's resourceVersion is at least `rv`, for at most `wait`.
///
/// Errors: 504 `Too large resource version: <rv>, current: <current>` with the
/// `ResourceVersionTooLarge` cause and `retryAfterSeconds: 1` (the watch cache's
/// `resourceVersionTooHighRetrySeconds`) when it is not reached in time.
pub(crate) async fn wait_for(store: &Arc<Store>, rv: u64, wait: Duration) -> ApiResult<()> {
    let mut changes = store.subscribe_changes();
    let reached = async {
        // Subscribed first: a change between this read and the loop is still received.
        if store.resource_version() >= rv {
            return;
        }
        loop {
            match changes.recv().await {
                Ok(change) if change.rv >= rv => return,
                Ok(_) => {}
                Err(RecvError::Lagged(_)) => {
                    if store.resource_version() >= rv {
                        return;
                    }
                }
                Err(RecvError::Closed) => std::future::pending::<()>().await,
            }
        }
    };
    tokio::time::timeout(wait, reached)
        .await
        .map_err(|_| ApiError::too_large_resource_version(rv, store.resource_version(), 1))
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use axum::http::Method;
    use serde_json::json;

    use super::*;
    use crate::error::Reason;

    fn request(query: Query) -> Request {
        Request {
            method: Method::GET,
            query: query
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<HashMap<_, _>>(),
            accept: String::new(),
            content_type: String::new(),
            body: Default::default(),
            drop_watch_after: None,
            resource_version_wait: Duration::ZERO,
        }
    }

    /// Query parameters, as `(name, value)` pairs.
    type Query<'a> = &'a [(&'a str, &'a str)];

    #[test]
    fn list_options_are_checked_as_validate_list_options_checks_them() {
        let cases: [(Query, Reason, &str); 8] = [
            (
                &[("resourceVersionMatch", "Exact")],
                Reason::Invalid,
                "ListOptions.meta.k8s.io \"\" is invalid: resourceVersionMatch: Forbidden: \
                 resourceVersionMatch is forbidden unless resourceVersion is provided",
            ),
            (
                &[("resourceVersion", "5"), ("resourceVersionMatch", "Latest")],
                Reason::Invalid,
                "ListOptions.meta.k8s.io \"\" is invalid: resourceVersionMatch: Unsupported \
                 value: \"Latest\": supported values: \"Exact\", \"NotOlderThan\", \"\"",
            ),
            (
                &[("resourceVersion", "0"), ("resourceVersionMatch", "Exact")],
                Reason::Invalid,
                "resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\"",
            ),
            (
                &[
                    ("resourceVersion", "5"),
                    ("resourceVersionMatch", "NotOlderThan"),
                    ("continue", "abc"),
                ],
                Reason::Invalid,
                "resourceVersionMatch is forbidden when continue is provided",
            ),
            (
                &[("sendInitialEvents", "true")],
                Reason::Invalid,
                "sendInitialEvents: Forbidden: sendInitialEvents is forbidden for list",
            ),
            (
                &[
                    ("resourceVersion", "garbage"),
                    ("resourceVersionMatch", "Exact"),
                ],
                Reason::BadRequest,
                "invalid resource version \"garbage\"",
            ),
            (
                &[("resourceVersion", "-3")],
                Reason::BadRequest,
                "invalid resource version \"-3\"",
            ),
            (
                &[("timeoutSeconds", "soon")],
                Reason::BadRequest,
                "invalid value for timeoutSeconds: \"soon\": not an integer",
            ),
        ];
        for (query, reason, message) in cases {
            let err = ReadOptions::of(&request(query), false).expect_err("refused");
            assert_eq!(err.reason, reason, "{query:?}: {err}");
            assert!(err.message.contains(message), "{query:?}: {}", err.message);
        }
        let two = ReadOptions::of(&request(&[("resourceVersionMatch", "Nope")]), false)
            .expect_err("refused");
        assert_eq!(
            two.details.expect("causes")["causes"]
                .as_array()
                .map(Vec::len),
            Some(2),
            "every broken rule is a cause"
        );
    }

    #[test]
    fn watch_options_follow_the_watch_rules() {
        let refused: [Query; 3] = [
            &[("sendInitialEvents", "true")],
            &[("resourceVersionMatch", "NotOlderThan")],
            &[
                ("sendInitialEvents", "true"),
                ("resourceVersionMatch", "Exact"),
            ],
        ];
        for query in refused {
            let err = ReadOptions::of(&request(query), true).expect_err("refused");
            assert_eq!(err.reason, Reason::Invalid, "{query:?}: {err}");
        }
        let streaming = ReadOptions::of(
            &request(&[
                ("sendInitialEvents", "true"),
                ("resourceVersionMatch", "NotOlderThan"),
                ("resourceVersion", ""),
                ("timeoutSeconds", "-5"),
            ]),
            true,
        )
        .expect("kube-rs's streaming list");
        assert_eq!(
            streaming,
            ReadOptions {
                resource_version: None,
                version_match: VersionMatch::NotOlderThan,
                send_initial_events: Some(true),
                timeout_seconds: Some(-5),
            }
        );
    }

    #[test]
    fn accepted_list_options_parse() {
        let exact = ReadOptions::of(
            &request(&[("resourceVersion", "12"), ("resourceVersionMatch", "Exact")]),
            false,
        )
        .expect("valid");
        assert_eq!(exact.resource_version, Some(12));
        assert_eq!(exact.version_match, VersionMatch::Exact);
        assert_eq!(exact.minimum(), Some(12));
        let any = ReadOptions::of(
            &request(&[
                ("resourceVersion", "0"),
                ("resourceVersionMatch", "NotOlderThan"),
            ]),
            false,
        )
        .expect("kube-rs's match_any");
        assert_eq!(any.minimum(), None);
    }

    #[tokio::test]
    async fn a_future_resource_version_is_waited_for_then_refused_as_too_large() {
        let store = Store::new();
        let now = store.resource_version();
        wait_for(&store, now, Duration::ZERO)
            .await
            .expect("the current version is there");
        let err = wait_for(&store, now + 5, Duration::from_millis(20))
            .await
            .expect_err("not reached");
        assert_eq!(err.reason, Reason::Timeout);
        assert_eq!(
            err.status(),
            json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": format!("Too large resource version: {}, current: {now}", now + 5),
                "reason": "Timeout", "code": 504,
                "details": {"causes": [{"reason": "ResourceVersionTooLarge",
                    "message": "Too large resource version"}], "retryAfterSeconds": 1}})
        );
        // A write that reaches the version ends the wait.
        let namespaces = store.resource("", "v1", "namespaces").expect("served");
        let waiting = wait_for(&store, now + 1, Duration::from_secs(5));
        let write = async {
            tokio::task::yield_now().await;
            store
                .create(&namespaces, "", json!({"metadata": {"name": "late"}}))
                .expect("created");
        };
        let (waited, ()) = tokio::join!(waiting, write);
        waited.expect("reached by the write");
    }
}
