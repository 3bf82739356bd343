//! What a frozen function did: recordings, replays, re-traces and their reasons, and timing.

use std::fmt;

/// Counters of one frozen function (see [`crate::freeze::Frozen::stats`]).
///
/// ```
/// use kiln::prelude::*;
/// let mut f = kiln::freeze(|x: &Float32| -> Float32 { x + 1.0 });
/// f.call(&Float32::ones(4)).unwrap();
/// f.call(&Float32::ones(4)).unwrap();
/// let s = f.stats();
/// assert_eq!((s.recordings, s.replays), (1, 1));
/// assert!(s.mean_replay_us() > 0.0);
/// assert!(s.to_string().starts_with("1 recording(s), 1 replay(s)"));
/// ```
#[derive(Clone, Debug, Default)]
pub struct FreezeStats {
    /// Calls that traced and recorded the function.
    pub recordings: usize,
    /// Calls that replayed a recording.
    pub replays: usize,
    /// Calls that ran unfrozen because the recording limit was reached.
    pub unfrozen: usize,
    /// Why each recording after the first was needed, one entry each: what changed (the
    /// argument's path, its old and new value, type, size class or aliasing; a size decision of
    /// the trace; a literal's new value) and the fix where there is one.
    pub retraces: Vec<String>,
    /// Total time of recording calls (tracing, compiling, running), in nanoseconds.
    pub record_ns: u64,
    /// Total time of replaying calls, in nanoseconds.
    pub replay_ns: u64,
}

impl FreezeStats {
    /// Mean time of a replaying call, in microseconds.
    pub fn mean_replay_us(&self) -> f64 {
        self.replay_ns as f64 / 1e3 / self.replays.max(1) as f64
    }
    /// Mean time of a recording call, in microseconds.
    pub fn mean_record_us(&self) -> f64 {
        self.record_ns as f64 / 1e3 / self.recordings.max(1) as f64
    }
}

impl fmt::Display for FreezeStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} recording(s), {} replay(s), {} re-trace(s)",
            self.recordings,
            self.replays,
            self.retraces.len()
        )?;
        if self.unfrozen > 0 {
            write!(f, ", {} unfrozen call(s) past the limit", self.unfrozen)?;
        }
        write!(
            f,
            "; replay {:.1} µs mean vs recording call {:.1} µs mean",
            self.mean_replay_us(),
            self.mean_record_us()
        )?;
        for (i, r) in self.retraces.iter().enumerate() {
            write!(f, "\n  re-trace {}: {r}", i + 1)?;
        }
        Ok(())
    }
}
