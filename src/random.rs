//! `Pcg32`: one independent PCG32 random number generator per lane, traced lazily like any array.
//!
//! This is O'Neill's `pcg32` (64-bit LCG state, XSH RR output; <https://www.pcg-random.org>) with
//! the state and stream increment kept as `UInt64` arrays: lane `i` reproduces, draw for draw, the
//! reference C `pcg32_random_r` seeded with lane `i`'s `(initstate, initseq)`. Drawing only traces
//! ops (a multiply-add on the state, a few shifts); everything fuses into the kernel that uses the
//! numbers, and only what is still referenced (the generator's state, if you keep it) is stored.
//!
//! ```
//! use kiln::prelude::*;
//! let mut rng = Pcg32::new(1000);                 // lane i uses stream i
//! let u = rng.next_f32();                          // traced, nothing runs yet
//! let mean = u.sum().item() / 1000.0;
//! assert!((mean - 0.5).abs() < 0.05);
//! ```

use crate::array::{ok, Bool, Float32, Float64, IntoArray, UInt32, UInt64};
use crate::ops::select;

/// The LCG multiplier of pcg32 (`6364136223846793005`).
pub const PCG32_MULT: u64 = 0x5851_f42d_4c95_7f2d;
/// The reference implementation's default initial state (`PCG32_INITIALIZER`), used by [`Pcg32::new`].
pub const PCG32_DEFAULT_STATE: u64 = 0x853c_49e6_748f_ea9b;
/// The reference implementation's default stream selector (`PCG32_INITIALIZER`'s `initseq`).
pub const PCG32_DEFAULT_STREAM: u64 = 0xda3e_39cb_94b9_5bdb;

/// [`Pcg32::next_u32_bounded`] unrolls enough rejection-sampling attempts (straight-line code that
/// fuses with its users, rather than a per-lane loop) that a lane runs out of them with
/// probability at most `2^-BOUNDED_FAILURE_BITS`.
pub const BOUNDED_FAILURE_BITS: u32 = 64;

/// One PCG32 generator per lane (pcg32: 64-bit LCG, XSH RR output, 32-bit results).
///
/// The state is two `UInt64` arrays: `state` and the stream increment `inc` (always odd). Every
/// draw advances every lane by one step (except masked or rejected lanes, where documented).
/// Cloning is cheap and gives an independent copy that continues the same sequence.
///
/// ```
/// use kiln::prelude::*;
/// let mut rng = Pcg32::seeded(42, 54u64);         // one lane: the reference demo's seed
/// assert_eq!(rng.next_u32().item(), 0xa15c02b7);
/// assert_eq!(rng.next_u32().item(), 0x7b47f409);
/// ```
#[derive(Clone, Debug)]
pub struct Pcg32 {
    state: UInt64,
    inc: UInt64,
}

/// One LCG step from `state`: the next state and the XSH RR output of `state`.
fn step(state: &UInt64, inc: &UInt64) -> (UInt64, UInt32) {
    let next = &(state * PCG32_MULT) + inc;
    let xorshifted = ((&(state >> 18u64) ^ state) >> 27u64).cast::<u32>();
    let rot = (state >> 59u64).cast::<u32>();
    // rotate right by `rot`; the left shift is by (-rot) & 31, so rot == 0 gives x | x == x
    let left = (32u32 - &rot) & 31u32;
    let out = &(&xorshifted >> &rot) | &(&xorshifted << &left);
    (next, out)
}

/// Rejection-sampling attempts for `next_u32_bounded` so that a lane still rejected after all of
/// them has probability `(threshold / 2^32)^attempts <= 2^-BOUNDED_FAILURE_BITS`.
fn bounded_attempts(threshold: u32) -> u32 {
    if threshold == 0 {
        return 1;
    }
    // threshold = 2^32 mod bound < 2^31, so each attempt rejects with probability < 1/2
    let bits_per_attempt = 32.0 - (threshold as f64).log2();
    ((BOUNDED_FAILURE_BITS as f64 / bits_per_attempt).ceil() as u32).clamp(1, BOUNDED_FAILURE_BITS)
}

impl Pcg32 {
    /// `size` generators: lane `i` is seeded like `pcg32_srandom_r(PCG32_DEFAULT_STATE, i)`, i.e.
    /// all lanes share the initial state and each has its own stream (the seed's
    /// `PCG32(UInt64.arange(n))`).
    ///
    /// ```
    /// use kiln::prelude::*;
    /// let mut rng = Pcg32::new(3);
    /// assert_eq!(rng.len(), 3);
    /// let x = rng.next_u32().to_vec();
    /// assert!(x[0] != x[1] && x[1] != x[2]);
    /// ```
    ///
    /// `size` is any integer type or a [`Size`](kiln_core::Size) (`x.size()`).
    #[track_caller]
    pub fn new(size: impl crate::array::IntoSize) -> Self {
        Self::seeded(PCG32_DEFAULT_STATE, UInt64::arange(size))
    }

    /// Generators seeded like the reference `pcg32_srandom_r(initstate, initseq)` lane by lane:
    /// `state = 0; inc = (initseq << 1) | 1; step; state += initstate; step`.
    ///
    /// Either argument may be a `u64` (the same for all lanes) or a `UInt64` (one per lane); the
    /// number of lanes is the larger size (a size-1 argument broadcasts).
    ///
    /// ```
    /// use kiln::prelude::*;
    /// let seqs = UInt64::from_slice(&[54, 54, 7]);
    /// let mut rng = Pcg32::seeded(42, &seqs);
    /// let x = rng.next_u32().to_vec();
    /// assert_eq!(x[0], 0xa15c02b7);
    /// assert_eq!(x[0], x[1]);
    /// ```
    #[track_caller]
    pub fn seeded(initstate: impl IntoArray<u64>, initseq: impl IntoArray<u64>) -> Self {
        let (initstate, initseq) = (initstate.into_array(), initseq.into_array());
        let inc = &(&initseq << 1u64) | 1u64;
        // state = 0; step  →  state = 0 * MULT + inc = inc
        let state = &inc + &initstate;
        let state = &(&state * PCG32_MULT) + &inc;
        // a size-1 seed with per-lane streams (or vice versa) broadcasts to the larger size
        // (sizes are equal or one is 1: the additions above checked that)
        let (state_one, inc_one) = (state.size().is_one(), inc.size().is_one());
        let (state, inc) = match (state_one, inc_one) {
            (true, false) => (&state + &UInt64::zeros(inc.size()), inc),
            (false, true) => {
                let n = state.size();
                (state, &inc + &UInt64::zeros(n))
            }
            _ => (state, inc),
        };
        Pcg32 { state, inc }
    }

    /// Number of lanes (independent generators).
    ///
    /// ```
    /// assert_eq!(kiln::Pcg32::new(10).len(), 10);
    /// ```
    #[track_caller]
    pub fn len(&self) -> usize {
        self.state.len()
    }
    /// Number of lanes as a [`kiln_core::Size`] (follows a frozen function's inputs).
    pub fn size(&self) -> kiln_core::Size {
        self.state.size()
    }

    /// Whether there are no lanes.
    ///
    /// ```
    /// assert!(kiln::Pcg32::new(0).is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.size().is_zero()
    }

    /// The current 64-bit LCG state of every lane.
    ///
    /// ```
    /// let rng = kiln::Pcg32::seeded(0, 0u64);
    /// assert_eq!(rng.state().item(), 1u64.wrapping_mul(6364136223846793005).wrapping_add(1));
    /// ```
    pub fn state(&self) -> &UInt64 {
        &self.state
    }

    /// The stream increment of every lane (`(initseq << 1) | 1`, always odd).
    ///
    /// ```
    /// assert_eq!(kiln::Pcg32::new(3).inc().to_vec(), vec![1, 3, 5]);
    /// ```
    pub fn inc(&self) -> &UInt64 {
        &self.inc
    }

    /// A generator at the given state and increment, as [`Pcg32::state`] and [`Pcg32::inc`]
    /// read them (how a loop or a frozen function carries one through its state). An even
    /// increment is made odd, as seeding would (PCG needs it odd); sizes must agree or be 1.
    ///
    /// ```
    /// let mut a = kiln::Pcg32::new(4);
    /// a.next_u32();
    /// let mut b = kiln::Pcg32::from_state(a.state().clone(), a.inc().clone());
    /// assert_eq!(a.next_u32().to_vec(), b.next_u32().to_vec());
    /// ```
    pub fn from_state(state: UInt64, inc: UInt64) -> Self {
        let inc = &inc | 1u64;
        Pcg32 { state, inc }
    }

    /// Evaluate the state now. A long loop that draws numbers without evaluating anything else
    /// grows the trace; evaluating the state every so often cuts it (one kernel, one `UInt64` per
    /// lane of memory).
    ///
    /// ```
    /// use kiln::prelude::*;
    /// let mut rng = Pcg32::new(4);
    /// let mut acc = Float32::zeros(4);
    /// for i in 0..20 {
    ///     acc += rng.next_f32();
    ///     if i % 10 == 9 {
    ///         kiln::eval!(acc, rng.state());
    ///     }
    /// }
    /// rng.eval();
    /// assert!(rng.state().is_evaluated());
    /// ```
    #[track_caller]
    pub fn eval(&self) -> &Self {
        ok(crate::eval_ids(&[self.state.id(), self.inc.id()]));
        self
    }

    /// A uniformly distributed 32-bit value per lane (`pcg32_random_r`), advancing every lane.
    ///
    /// ```
    /// use kiln::prelude::*;
    /// let mut rng = Pcg32::seeded(42, 54u64);
    /// let v: Vec<u32> = (0..3).map(|_| rng.next_u32().item()).collect();
    /// assert_eq!(v, vec![0xa15c02b7, 0x7b47f409, 0xba1d3330]);
    /// ```
    #[track_caller]
    pub fn next_u32(&mut self) -> UInt32 {
        let (next, out) = step(&self.state, &self.inc);
        self.state = next;
        out
    }

    /// As [`Pcg32::next_u32`], but only lanes where `mask` is true advance. The other lanes
    /// return the value they would draw next, without consuming it.
    ///
    /// ```
    /// use kiln::prelude::*;
    /// let mut rng = Pcg32::seeded(42, 54u64);
    /// let off = Bool::from(false);
    /// assert_eq!(rng.next_u32_masked(&off).item(), 0xa15c02b7);
    /// assert_eq!(rng.next_u32().item(), 0xa15c02b7);   // not consumed above
    /// ```
    #[track_caller]
    pub fn next_u32_masked(&mut self, mask: &Bool) -> UInt32 {
        let (next, out) = step(&self.state, &self.inc);
        self.state = select(mask, next, &self.state);
        out
    }

    /// A uniformly distributed 64-bit value per lane from two draws: the first is the high 32 bits,
    /// the second the low 32 bits (`(next_u32() << 32) | next_u32()`).
    ///
    /// ```
    /// use kiln::prelude::*;
    /// let mut rng = Pcg32::seeded(42, 54u64);
    /// assert_eq!(rng.next_u64().item(), 0xa15c02b7_7b47f409);
    /// ```
    #[track_caller]
    pub fn next_u64(&mut self) -> UInt64 {
        let hi = self.next_u32().cast::<u64>();
        let lo = self.next_u32().cast::<u64>();
        &(&hi << 32u64) | &lo
    }

    /// A uniformly distributed value in `[0, bound)` per lane, without modulo bias: the reference
    /// `pcg32_boundedrand_r` (threshold `2^32 mod bound`; draw until `r >= threshold`; `r % bound`).
    ///
    /// The retry loop is unrolled into a fixed number of masked attempts (it was written before
    /// the engine had per-lane loops, [`kiln::while_loop`](crate::while_loop); it stays unrolled
    /// because straight-line code fuses into the kernel of whatever uses the draw, with no loop
    /// and no evaluation of the generator state, and because every existing sequence stays the
    /// same). A lane that accepted stops advancing, and the number of attempts is chosen from
    /// `bound` so that a lane is rejected every time with probability
    /// `(threshold / 2^32)^attempts <= 2^-64` ([`BOUNDED_FAILURE_BITS`]). Such a lane would return
    /// a (slightly biased) `r % bound` and leave the reference sequence; otherwise every lane
    /// matches the reference exactly. Small bounds need few attempts (bound < 2^16: at most 4; a
    /// power of two: 1, never rejects); bounds near `2^31` need up to 64, which makes a long trace
    /// (a `while_loop` of draws would be shorter there, and exact in the 2^-64 case too).
    ///
    /// Panics if `bound == 0`.
    ///
    /// ```
    /// use kiln::prelude::*;
    /// let mut rng = Pcg32::new(1000);
    /// let d = rng.next_u32_bounded(6);
    /// assert!(d.lt(6).all());
    /// assert_eq!(d.eq(0).count() + d.eq(5).count() > 0, true);
    /// ```
    #[track_caller]
    pub fn next_u32_bounded(&mut self, bound: u32) -> UInt32 {
        assert!(
            bound > 0,
            "kiln: Pcg32::next_u32_bounded: bound must be positive"
        );
        let threshold = bound.wrapping_neg() % bound;
        if threshold == 0 {
            // a power of two: every draw is accepted, and r % bound keeps the low bits
            return self.next_u32() & (bound - 1);
        }
        let mut r = self.next_u32();
        let mut rejected = r.lt(threshold);
        for _ in 1..bounded_attempts(threshold) {
            let candidate = self.next_u32_masked(&rejected);
            r = select(&rejected, candidate, &r);
            rejected = &rejected & &r.lt(threshold);
        }
        r % bound
    }

    /// A uniformly distributed `f32` in `[0, 1)` per lane (multiples of 2^-23): the top 23 bits of a
    /// draw as the mantissa of a number in `[1, 2)`, minus 1 (as in Enoki/Dr.Jit and pcg).
    ///
    /// ```
    /// use kiln::prelude::*;
    /// let mut rng = Pcg32::new(100);
    /// let u = rng.next_f32();
    /// assert!(u.ge(0.0).all() && u.lt(1.0).all());
    /// ```
    #[track_caller]
    pub fn next_f32(&mut self) -> Float32 {
        let bits = &(self.next_u32() >> 9u32) | 0x3f80_0000u32;
        bits.bitcast::<f32>() - 1.0f32
    }

    /// A uniformly distributed `f64` in `[0, 1)` per lane (multiples of 2^-52) from
    /// [`Pcg32::next_u64`] (two draws): its top 52 bits as the mantissa of a number in `[1, 2)`,
    /// minus 1.
    ///
    /// ```
    /// use kiln::prelude::*;
    /// let mut rng = Pcg32::new(100);
    /// let u = rng.next_f64();
    /// assert!(u.ge(0.0).all() && u.lt(1.0).all());
    /// ```
    #[track_caller]
    pub fn next_f64(&mut self) -> Float64 {
        let bits = &(self.next_u64() >> 12u64) | 0x3ff0_0000_0000_0000u64;
        bits.bitcast::<f64>() - 1.0f64
    }

    /// Jump every lane `delta` steps ahead in O(log delta) host work and two traced ops
    /// (`pcg32_advance_r`); `advance(delta.wrapping_neg())` goes back `delta` steps.
    ///
    /// ```
    /// use kiln::prelude::*;
    /// let mut a = Pcg32::new(4);
    /// let mut b = a.clone();
    /// for _ in 0..5 { a.next_u32(); }
    /// b.advance(5);
    /// assert_eq!(a.next_u32().to_vec(), b.next_u32().to_vec());
    /// b.advance(6u64.wrapping_neg());
    /// assert_eq!(b.state().to_vec(), Pcg32::new(4).state().to_vec());
    /// ```
    #[track_caller]
    pub fn advance(&mut self, delta: u64) {
        // state' = mult * state + plus * inc, with mult and plus computed on the host (the
        // reference's acc_plus is linear in inc)
        let (mut cur_mult, mut cur_plus) = (PCG32_MULT, 1u64);
        let (mut acc_mult, mut acc_plus) = (1u64, 0u64);
        let mut d = delta;
        while d > 0 {
            if d & 1 == 1 {
                acc_mult = acc_mult.wrapping_mul(cur_mult);
                acc_plus = acc_plus.wrapping_mul(cur_mult).wrapping_add(cur_plus);
            }
            cur_plus = cur_mult.wrapping_add(1).wrapping_mul(cur_plus);
            cur_mult = cur_mult.wrapping_mul(cur_mult);
            d /= 2;
        }
        self.state = &(&self.state * acc_mult) + &(&self.inc * acc_plus);
    }
}
