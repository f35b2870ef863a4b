//! Which records `history` shows, in which order: the records of every ConfigMap found, those
//! of `--nodepool` finished within `--since`, oldest first. Pure.

use crds::history::{Parsed, Record};
use jiff::{SignedDuration, Timestamp};

/// What to keep.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Filter {
    /// Only this NodePool's records.
    pub nodepool: Option<String>,
    /// Only records finished at or after this time.
    pub since: Option<Timestamp>,
}

impl Filter {
    /// The filter of `--nodepool` and `--since` (a duration back from `now`; one too long to
    /// subtract keeps everything).
    pub fn new(
        nodepool: Option<String>,
        since: Option<std::time::Duration>,
        now: Timestamp,
    ) -> Filter {
        let since = since
            .and_then(|d| SignedDuration::try_from(d).ok())
            .and_then(|d| now.checked_sub(d).ok());
        Filter { nodepool, since }
    }

    fn keeps(&self, r: &Record) -> bool {
        self.nodepool.as_deref().is_none_or(|p| r.nodepool == p)
            && self.since.is_none_or(|s| r.finished >= s)
    }
}

/// The records of every parsed history (several ConfigMaps when several controllers record),
/// filtered, oldest first (by finish time, then decision time, then NodeClaim name), each id
/// once.
pub fn select(histories: &[Parsed], filter: &Filter) -> Vec<Record> {
    let mut records: Vec<Record> = histories
        .iter()
        .flat_map(|h| h.records.iter())
        .filter(|r| filter.keeps(r))
        .cloned()
        .collect();
    records.sort_by(|a, b| {
        (a.finished, a.decided, &a.nodeclaim, &a.id).cmp(&(
            b.finished,
            b.decided,
            &b.nodeclaim,
            &b.id,
        ))
    });
    records.dedup_by(|a, b| a.id == b.id);
    records
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::render::tests::sample;

    #[test]
    fn filters_by_nodepool_and_age_oldest_first() {
        let records = sample();
        let history = Parsed {
            records: records.iter().rev().cloned().collect(),
            malformed: vec![],
        };
        let now: Timestamp = "2026-03-01T12:00:00Z".parse().expect("time");
        let all = select(std::slice::from_ref(&history), &Filter::default());
        let names: Vec<&str> = all.iter().map(|r| r.nodeclaim.as_str()).collect();
        assert_eq!(names, ["default-a", "default-b", "gpu-c", "default-d"]);
        let f = Filter::new(
            Some("default".into()),
            Some(std::time::Duration::from_secs(3600)),
            now,
        );
        let recent: Vec<String> = select(&[history.clone(), history], &f)
            .into_iter()
            .map(|r| r.nodeclaim)
            .collect();
        assert_eq!(recent, ["default-b", "default-d"], "each record once");
    }
}
