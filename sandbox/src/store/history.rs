//! One resource type's watch history: the changes a resuming watch replays, as kube-apiserver's
//! watch cache keeps them.
//!
//! The newest changes stay as they were made, shared with the live channel and with watchers.
//! Older ones are packed, a block of changes at a time, into one zstd frame: consecutive
//! versions of similar objects compress to a small fraction of their JSON, and at 20,400 pods
//! the superseded versions kept for 75 s were the sandbox's largest use of memory (BENCHMARKS.md,
//! "The watch history, packed"). A watch that resumes from a version inside a packed block gets
//! the same events, decoded again from the block.

use std::collections::VecDeque;
use std::ops::Range;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;

use super::{EventType, HistoryLimits, WatchEvent};
use crate::registry::TypeKey;

/// zstd's level for packed blocks: its fastest standard level. Packing runs under the store's
/// lock, and blocks of one type's changes compress well at any level.
const PACK_LEVEL: i32 = 1;

/// One resource type's recent changes, oldest first: [`packed`](Self::packed) blocks, then the
/// [`recent`](Self::recent) changes as made.
pub(super) struct TypeHistory {
    key: TypeKey,
    /// Older changes, a block per zstd frame, oldest first.
    packed: VecDeque<Block>,
    /// How many changes the packed blocks hold.
    packed_len: usize,
    /// The newest changes as they were made, with when each was made.
    recent: VecDeque<(Instant, Arc<WatchEvent>)>,
    /// Changes of this type with rv <= floor may have been dropped.
    pub(super) floor: u64,
}

/// Changes packed into one zstd frame: their objects (and the objects before them) laid end to
/// end, then compressed.
struct Block {
    /// The changes the history still keeps, oldest first (older ones are dropped from the
    /// front; the frame goes when the last one does).
    changes: VecDeque<PackedChange>,
    /// The compressed objects.
    frame: Box<[u8]>,
    /// Their length uncompressed, in bytes.
    size: usize,
}

/// A change whose objects are in a [`Block`]'s frame, at these byte ranges of its uncompressed
/// content.
struct PackedChange {
    at: Instant,
    rv: u64,
    namespace: Box<str>,
    event_type: EventType,
    object: Range<usize>,
    previous: Option<Range<usize>>,
}

/// A packed block whose frame does not decompress (the history answers 410 Gone so the client
/// lists again; never seen, as the store writes every frame itself).
#[derive(Debug, thiserror::Error)]
#[error("a packed block of the {key} watch history does not decompress: {source}")]
pub(super) struct Unreadable {
    key: String,
    source: std::io::Error,
}

impl TypeHistory {
    /// An empty history of the type `key`.
    pub(super) fn new(key: TypeKey) -> TypeHistory {
        TypeHistory {
            key,
            packed: VecDeque::new(),
            packed_len: 0,
            recent: VecDeque::new(),
            floor: 0,
        }
    }

    /// How many changes the history keeps.
    fn len(&self) -> usize {
        self.packed_len + self.recent.len()
    }

    /// Append a change, drop the ones `limits` no longer keep, and pack the recent changes
    /// beyond `limits.recent` in blocks of `limits.block`.
    pub(super) fn push(&mut self, event: Arc<WatchEvent>, limits: &HistoryLimits) {
        let now = Instant::now();
        self.recent.push_back((now, event));
        while self.len() > limits.min {
            let stale = self
                .oldest_at()
                .is_some_and(|at| now.duration_since(at) > limits.fresh);
            if !stale && self.len() <= limits.max {
                break;
            }
            self.drop_oldest();
        }
        let block = limits.block.max(1);
        while self.recent.len() >= limits.recent.saturating_add(block) {
            if !self.pack(block) {
                break;
            }
        }
    }

    /// When the oldest kept change was made.
    fn oldest_at(&self) -> Option<Instant> {
        match self.packed.front().and_then(|b| b.changes.front()) {
            Some(c) => Some(c.at),
            None => self.recent.front().map(|(at, _)| *at),
        }
    }

    /// Drop the oldest kept change and raise the floor to it.
    fn drop_oldest(&mut self) {
        if let Some(block) = self.packed.front_mut() {
            if let Some(c) = block.changes.pop_front() {
                self.floor = c.rv;
                self.packed_len -= 1;
            }
            if block.changes.is_empty() {
                self.packed.pop_front();
            }
        } else if let Some((_, e)) = self.recent.pop_front() {
            self.floor = e.rv;
        }
    }

    /// Pack the `n` oldest recent changes into a block. False, leaving them as they are, if
    /// zstd fails to compress (it fails only when it cannot allocate).
    fn pack(&mut self, n: usize) -> bool {
        let mut content = Vec::new();
        let mut changes = VecDeque::with_capacity(n);
        let mut append = |bytes: &Bytes| {
            let start = content.len();
            content.extend_from_slice(bytes);
            start..content.len()
        };
        for (at, e) in self.recent.iter().take(n) {
            changes.push_back(PackedChange {
                at: *at,
                rv: e.rv,
                namespace: e.namespace.as_str().into(),
                event_type: e.event_type,
                object: append(&e.object),
                previous: e.previous.as_ref().map(&mut append),
            });
        }
        let frame = match zstd::bulk::compress(&content, PACK_LEVEL) {
            Ok(frame) => frame,
            Err(e) => {
                tracing::warn!(error = %e, "watch history: could not pack a block; keeping it unpacked");
                return false;
            }
        };
        self.recent.drain(..n);
        self.packed_len += changes.len();
        self.packed.push_back(Block {
            changes,
            frame: frame.into_boxed_slice(),
            size: content.len(),
        });
        true
    }

    /// The kept changes after resourceVersion `rv`, in `namespace` if given, oldest first: the
    /// packed ones decoded again (their objects share one buffer per block), the recent ones
    /// shared.
    ///
    /// Errors: [`Unreadable`] if a packed block needed does not decompress.
    pub(super) fn since(
        &self,
        rv: u64,
        namespace: Option<&str>,
    ) -> Result<Vec<Arc<WatchEvent>>, Unreadable> {
        let wanted = |ns: &str| namespace.is_none_or(|want| want == ns);
        let mut out = Vec::new();
        for block in &self.packed {
            if block.changes.back().is_none_or(|c| c.rv <= rv) {
                continue;
            }
            let content = block.unpack().map_err(|source| Unreadable {
                key: if self.key.group.is_empty() {
                    self.key.plural.clone()
                } else {
                    format!("{}.{}", self.key.plural, self.key.group)
                },
                source,
            })?;
            for c in block.changes.iter().filter(|c| c.rv > rv) {
                if !wanted(&c.namespace) {
                    continue;
                }
                out.push(Arc::new(WatchEvent {
                    rv: c.rv,
                    key: self.key.clone(),
                    namespace: c.namespace.to_string(),
                    event_type: c.event_type,
                    object: content.slice(c.object.clone()),
                    previous: c.previous.clone().map(|r| content.slice(r)),
                }));
            }
        }
        out.extend(
            self.recent
                .iter()
                .map(|(_, e)| e)
                .filter(|e| e.rv > rv && wanted(&e.namespace))
                .cloned(),
        );
        Ok(out)
    }
}

impl Block {
    /// The block's content, decompressed into one buffer its changes' objects are slices of.
    fn unpack(&self) -> std::io::Result<Bytes> {
        Ok(Bytes::from(zstd::bulk::decompress(&self.frame, self.size)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn change(rv: u64) -> Arc<WatchEvent> {
        Arc::new(WatchEvent {
            rv,
            key: TypeKey {
                group: String::new(),
                plural: "pods".into(),
            },
            namespace: "default".into(),
            event_type: EventType::Added,
            object: Bytes::from(format!(r#"{{"metadata":{{"name":"p{rv}"}}}}"#)),
            previous: None,
        })
    }

    /// The resourceVersions a watch resuming after `from` replays.
    fn rvs(history: &TypeHistory, from: u64) -> Result<Vec<u64>, Unreadable> {
        Ok(history.since(from, None)?.iter().map(|e| e.rv).collect())
    }

    #[test]
    fn a_block_that_does_not_decompress_fails_only_the_watches_that_need_it() {
        let limits = HistoryLimits {
            recent: 1,
            block: 2,
            ..HistoryLimits::default()
        };
        let mut history = TypeHistory::new(change(0).key.clone());
        for rv in 1..=4 {
            history.push(change(rv), &limits);
        }
        assert_eq!((history.packed.len(), history.recent.len()), (1, 2));
        assert_eq!(rvs(&history, 0).expect("readable"), vec![1, 2, 3, 4]);
        history.packed[0].frame = vec![0u8; 8].into_boxed_slice();
        let err = rvs(&history, 0).expect_err("corrupt block");
        assert!(err.to_string().contains("pods"), "{err}");
        // A watch resuming after the packed block reads only the recent changes.
        assert_eq!(rvs(&history, 2).expect("recent"), vec![3, 4]);
    }
}
