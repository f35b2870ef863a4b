//! Time as an injected dependency, so lifecycle timeouts and simulated launches are testable
//! without sleeping.

use std::sync::Mutex;

use jiff::{SignedDuration, Timestamp};

/// A source of the current time.
pub trait Clock: Send + Sync {
    /// The current time; decision code reads time only through this.
    fn now(&self) -> Timestamp;
}

/// The real wall clock (`Timestamp::now()`), used everywhere but tests.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        Timestamp::now()
    }
}

/// A clock tests move by hand.
#[derive(Debug)]
pub struct FakeClock(Mutex<Timestamp>);

impl FakeClock {
    /// A fake clock at `start`.
    pub fn new(start: Timestamp) -> FakeClock {
        FakeClock(Mutex::new(start))
    }

    /// Moves the time by `by` (a negative duration moves it back); a result out of
    /// `Timestamp`'s range leaves the time unchanged.
    pub fn advance(&self, by: SignedDuration) {
        let mut t = self.0.lock().unwrap_or_else(|e| e.into_inner());
        *t = t.checked_add(by).unwrap_or(*t);
    }
}

impl Clock for FakeClock {
    fn now(&self) -> Timestamp {
        *self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}
