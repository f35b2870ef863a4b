//! How the plugin words a failure after `error: `: an error and its chain of causes (a kube or
//! EC2 error and what it wraps) on one line. Every error type of the plugin that wraps another
//! error uses it in its message.

/// An error and its causes, `outer: inner: …`, skipping causes the outer text already repeats.
/// kube's `ServiceError: ` wrapper (around what a layer of the client stack failed with, e.g.
/// the plugin's `--request-timeout`) is left out: only what it wraps tells the user anything.
pub fn causes(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = String::new();
    let mut next = Some(error);
    while let Some(cause) = next {
        let part = match cause.downcast_ref::<kube::Error>() {
            Some(kube::Error::Service(inner)) => inner.to_string(),
            _ => cause.to_string(),
        };
        if text.is_empty() {
            text = part;
        } else if !text.contains(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        next = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("{text}")]
    struct Chain {
        text: &'static str,
        #[source]
        source: Option<Box<Chain>>,
    }

    fn chain(texts: &[&'static str]) -> Chain {
        let (first, rest) = texts.split_first().expect("one error at least");
        Chain {
            text: first,
            source: (!rest.is_empty()).then(|| Box::new(chain(rest))),
        }
    }

    #[test]
    fn causes_are_joined_and_repeats_skipped() {
        assert_eq!(causes(&chain(&["listing"])), "listing");
        assert_eq!(
            causes(&chain(&["listing", "connection refused", "os error 111"])),
            "listing: connection refused: os error 111"
        );
        // A cause the outer text already quotes is not said twice.
        assert_eq!(
            causes(&chain(&[
                "request failed: timed out",
                "timed out",
                "deadline"
            ])),
            "request failed: timed out: deadline"
        );
    }

    #[test]
    fn kube_service_errors_say_only_what_they_wrap() {
        #[derive(Debug, thiserror::Error)]
        #[error("the server at http://x did not answer within 1s")]
        struct Silent;

        #[derive(Debug, thiserror::Error)]
        #[error("listing Pods")]
        struct Listing(#[source] kube::Error);

        let wrapped = Listing(kube::Error::Service(Box::new(Silent)));
        assert_eq!(
            causes(&wrapped),
            "listing Pods: the server at http://x did not answer within 1s"
        );
    }
}
