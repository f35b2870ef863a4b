//! How the plugin words a failure after `error: `: an error and its chain of causes (a kube or
//! EC2 error and what it wraps) on one line. Every error type of the plugin that wraps another
//! error uses it in its message.

/// An error and its causes, `outer: inner: …`, skipping causes the outer text already repeats.
pub fn causes(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut next = error.source();
    while let Some(cause) = next {
        let part = cause.to_string();
        if !text.contains(&part) {
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
}
