//! kubectl's `--request-timeout` for the plugin: how long any request to the API server may wait
//! for the server to answer. [`RequestTimeout`] is the flag's value (kubectl's syntax: a bare
//! integer is seconds, else a Go duration such as `5s`, `1m` or `1h30m`; `0` waits forever);
//! [`AnswerTimeoutLayer`] applies it to every request a command's client sends, as one layer of
//! kube's tower stack, and fails a request left unanswered with [`NoAnswer`], which names the
//! server.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::str::FromStr;
use std::task::{Context, Poll};
use std::time::Duration;

use tower::{BoxError, Layer, Service};

/// `--request-timeout`'s default: 30 s. kubectl's default is 0 (wait forever), which leaves a
/// command hanging on a server that accepts connections and never answers; 30 s is kube-rs's own
/// connect timeout and the dial timeout of kubectl's HTTP client, and far more than a live API
/// server takes to start answering a list.
pub const DEFAULT: RequestTimeout = RequestTimeout(Duration::from_secs(30));

/// How long one request may wait for the server's answer to start (connecting, TLS, the server's
/// work, up to the response headers); [`Duration::ZERO`] waits forever. What follows the headers
/// (the body of a large list) is not limited, so a slow but live server is not cut off.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RequestTimeout(pub Duration);

impl RequestTimeout {
    /// The limit, or `None` for `0` (no limit).
    pub fn limit(self) -> Option<Duration> {
        (!self.0.is_zero()).then_some(self.0)
    }
}

impl Default for RequestTimeout {
    /// [`DEFAULT`].
    fn default() -> Self {
        DEFAULT
    }
}

impl fmt::Display for RequestTimeout {
    /// `0` for no limit, else a Go-style duration such as `30s` or `1.5s` (what `--help` shows
    /// as the default and what error messages quote).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_zero() {
            f.write_str("0")
        } else {
            write!(f, "{}", kube::core::Duration::from(self.0))
        }
    }
}

impl FromStr for RequestTimeout {
    type Err = String;

    /// kubectl's rule (`k8s.io/client-go/rest`'s `ParseTimeout` as kubectl's flag uses it): a
    /// whole number is seconds (`0` is no limit), anything else a Go duration with units (`ns`,
    /// `us`, `ms`, `s`, `m`, `h`; e.g. `500ms`, `1m30s`).
    ///
    /// Errors: an empty, negative or unit-less fractional value, or an unknown unit, with
    /// kubectl's hint of what a valid value looks like.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        parse_duration(s).map(RequestTimeout).map_err(|why| {
            format!(
                "invalid timeout {s:?}: {why}; it must be a whole number of seconds, or a number \
                 followed by a unit (e.g. 1s, 2m, 3h); 0 waits forever"
            )
        })
    }
}

/// A duration as kubectl's duration flags take it (`--request-timeout`, and `status
/// --interval`): a whole number is seconds, anything else a Go duration with units (`ns`, `us`,
/// `ms`, `s`, `m`, `h`; e.g. `500ms`, `1m30s`).
///
/// Errors: why the text is not a duration (empty, negative, unit-less fraction, unknown unit),
/// for the caller to put in its flag's message.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    if s.is_empty() {
        return Err("it is empty".to_owned());
    }
    if let Ok(seconds) = s.parse::<u64>() {
        return Ok(Duration::from_secs(seconds));
    }
    let parsed: kube::core::Duration = s.parse().map_err(|e| format!("{e}"))?;
    if parsed.is_negative() {
        return Err("it is negative".to_owned());
    }
    Ok(parsed.into())
}

/// A request the server did not start answering within `--request-timeout`.
#[derive(Debug, thiserror::Error)]
#[error(
    "the server at {server} did not answer within {after} (--request-timeout; 0 waits forever)"
)]
pub struct NoAnswer {
    /// API server URL without a trailing `/`, e.g. `https://127.0.0.1:6443`.
    pub server: String,
    /// The limit that passed.
    pub after: RequestTimeout,
}

/// A tower layer for kube's client stack ([`kube::client::ClientBuilder::with_layer`]): each
/// request fails with [`NoAnswer`] when its response has not begun within the limit.
#[derive(Clone, Debug)]
pub struct AnswerTimeoutLayer {
    /// The limit; [`RequestTimeout(Duration::ZERO)`](RequestTimeout) passes requests through.
    timeout: RequestTimeout,
    /// API server URL without a trailing `/`, named in the error.
    server: String,
}

impl AnswerTimeoutLayer {
    /// A layer limiting requests to `server` to `timeout`.
    pub fn new(timeout: RequestTimeout, server: &str) -> AnswerTimeoutLayer {
        AnswerTimeoutLayer {
            timeout,
            server: server.to_owned(),
        }
    }
}

impl<S> Layer<S> for AnswerTimeoutLayer {
    type Service = AnswerTimeout<S>;

    fn layer(&self, inner: S) -> AnswerTimeout<S> {
        AnswerTimeout {
            inner,
            layer: self.clone(),
        }
    }
}

/// The service [`AnswerTimeoutLayer`] wraps around kube's stack.
#[derive(Clone, Debug)]
pub struct AnswerTimeout<S> {
    inner: S,
    layer: AnswerTimeoutLayer,
}

impl<S, R> Service<R> for AnswerTimeout<S>
where
    S: Service<R>,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: R) -> Self::Future {
        let answer = self.inner.call(request);
        let Some(limit) = self.layer.timeout.limit() else {
            return Box::pin(async move { answer.await.map_err(Into::into) });
        };
        let layer = self.layer.clone();
        Box::pin(async move {
            match tokio::time::timeout(limit, answer).await {
                Ok(answer) => answer.map_err(Into::into),
                Err(_elapsed) => Err(Box::new(NoAnswer {
                    server: layer.server,
                    after: layer.timeout,
                }) as BoxError),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;

    use super::*;

    fn parse(s: &str) -> Result<Duration, String> {
        s.parse::<RequestTimeout>().map(|t| t.0)
    }

    #[test]
    fn kubectl_syntax() {
        for (text, want) in [
            ("0", Duration::ZERO),
            ("5", Duration::from_secs(5)),
            ("5s", Duration::from_secs(5)),
            ("1m", Duration::from_secs(60)),
            ("1m30s", Duration::from_secs(90)),
            ("1h", Duration::from_secs(3600)),
            ("500ms", Duration::from_millis(500)),
            ("1.5s", Duration::from_millis(1500)),
            ("0s", Duration::ZERO),
        ] {
            assert_eq!(parse(text), Ok(want), "{text}");
        }
        for bad in ["", "-5s", "-1", "soon", "1.5", "5d"] {
            let err = parse(bad).expect_err(bad);
            assert!(
                err.starts_with(&format!("invalid timeout {bad:?}"))
                    && err.contains("(e.g. 1s, 2m, 3h)"),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn zero_is_no_limit_and_the_default_is_30s() {
        assert_eq!(RequestTimeout(Duration::ZERO).limit(), None);
        assert_eq!(
            RequestTimeout::default().limit(),
            Some(Duration::from_secs(30))
        );
        assert_eq!(RequestTimeout::default().to_string(), "30s");
        assert_eq!(RequestTimeout(Duration::ZERO).to_string(), "0");
        assert_eq!(
            RequestTimeout(Duration::from_millis(1500)).to_string(),
            "1.5s"
        );
    }

    /// A service whose answer never comes.
    struct Silent;

    impl Service<()> for Silent {
        type Response = ();
        type Error = Infallible;
        type Future = std::future::Pending<Result<(), Infallible>>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, (): ()) -> Self::Future {
            std::future::pending()
        }
    }

    #[tokio::test]
    async fn an_unanswered_request_fails_naming_the_server() {
        let timeout = RequestTimeout(Duration::from_millis(50));
        let mut silent = AnswerTimeoutLayer::new(timeout, "https://10.0.0.1:6443").layer(Silent);
        let started = std::time::Instant::now();
        let err = silent.call(()).await.expect_err("no answer");
        assert!(started.elapsed() >= Duration::from_millis(50));
        let no_answer = err.downcast_ref::<NoAnswer>().expect("a NoAnswer");
        assert_eq!(no_answer.server, "https://10.0.0.1:6443");
        assert_eq!(
            err.to_string(),
            "the server at https://10.0.0.1:6443 did not answer within 50ms (--request-timeout; 0 \
             waits forever)"
        );
    }

    #[tokio::test]
    async fn zero_never_gives_up() {
        let mut silent =
            AnswerTimeoutLayer::new(RequestTimeout(Duration::ZERO), "http://x").layer(Silent);
        // Far longer than any limit of these tests: still waiting, not failed.
        let waited = tokio::time::timeout(Duration::from_millis(200), silent.call(())).await;
        assert!(waited.is_err(), "the layer ended a request with no limit");
    }
}
