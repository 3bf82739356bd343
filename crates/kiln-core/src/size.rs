//! Symbolic sizes: how the size of every variable follows from the sizes of a frozen function's
//! inputs.
//!
//! While a function is being recorded, each variable's size is an expression over the input sizes
//! (`Input(k)`), constants, and sizes read back from data-dependent ops (`Data(k)`, the length of a
//! `compress` result). Replays evaluate the expressions for new inputs instead of guessing from
//! ratios. [`Size`] is the user-facing form: a number that remembers its expression, so that
//! `UInt32::arange(x.size() / 2)` replays correctly at any width.

//!
//! The recording that owns the expressions is `freeze::record`, a layer above every user of
//! sizes: it installs a [`SizeRecorder`] here, through which sizes report what Rust code saw of
//! them (their values, comparisons, arithmetic).

use std::fmt;
use std::ops::{Add, Div, Mul, Sub};
use std::panic::Location;
use std::sync::OnceLock;

/// What a symbolic size reports to the recording in progress on this thread (each method acts
/// only where this thread has one).
pub trait SizeRecorder: Sync {
    /// A new expression node `node(a, b)`, and the epoch of the recording it belongs to.
    fn combine(
        &self,
        a: Size,
        b: Size,
        node: fn(ExprId, ExprId) -> SizeNode,
    ) -> Option<(ExprId, u64)>;
    /// Rust code saw the value of `sym` (a replay must find the same value).
    fn observe_value(
        &self,
        sym: ExprId,
        value: usize,
        at: &'static Location<'static>,
        how: &'static str,
    );
    /// Rust code compared two sizes; returns whether they are equal.
    fn observe_same(&self, a: Size, b: Size) -> bool;
    /// Rust code saw whether `sym` lies in `[lo, hi]`.
    fn observe_range(&self, sym: ExprId, value: usize, lo: u64, hi: u64);
}

static RECORDER: OnceLock<&'static dyn SizeRecorder> = OnceLock::new();

/// Install the recorder sizes report to (`freeze::record`, on its first recording).
pub(crate) fn install_recorder(r: &'static dyn SizeRecorder) {
    let _ = RECORDER.set(r);
}

fn recorder() -> Option<&'static dyn SizeRecorder> {
    RECORDER.get().copied()
}

/// Index of a node in a recording's expression table. 0 means "no expression: a constant".
pub type ExprId = u32;

/// One node of a size expression.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SizeNode {
    Const(u64),
    /// Size of input slot `k`.
    Input(u32),
    /// Length produced by recorded op `k` (known only once it ran).
    Data(u32),
    Add(ExprId, ExprId),
    Sub(ExprId, ExprId),
    Mul(ExprId, ExprId),
    Div(ExprId, ExprId),
    DivCeil(ExprId, ExprId),
    Min(ExprId, ExprId),
    Max(ExprId, ExprId),
}

impl SizeNode {
    /// Evaluate given already evaluated operands. `None`: unknown yet (data) or invalid (overflow,
    /// underflow, division by zero) — `invalid` tells which.
    pub fn eval(&self, vals: &[Option<u64>], inputs: &[u64], data: &[Option<u64>]) -> Eval {
        use SizeNode::*;
        let get = |e: ExprId| vals[e as usize];
        let bin = |a: ExprId, b: ExprId, f: &dyn Fn(u64, u64) -> Option<u64>| -> Eval {
            match (get(a), get(b)) {
                (Some(x), Some(y)) => match f(x, y) {
                    Some(v) => Eval::Known(v),
                    None => Eval::Invalid,
                },
                _ => Eval::Unknown,
            }
        };
        match *self {
            Const(v) => Eval::Known(v),
            Input(k) => Eval::Known(inputs[k as usize]),
            Data(k) => data
                .get(k as usize)
                .copied()
                .flatten()
                .map_or(Eval::Unknown, Eval::Known),
            Add(a, b) => bin(a, b, &|x, y| x.checked_add(y)),
            Sub(a, b) => bin(a, b, &|x, y| x.checked_sub(y)),
            Mul(a, b) => bin(a, b, &|x, y| x.checked_mul(y)),
            Div(a, b) => bin(a, b, &|x, y| x.checked_div(y)),
            DivCeil(a, b) => bin(a, b, &|x, y| (y != 0).then(|| x.div_ceil(y))),
            Min(a, b) => bin(a, b, &|x, y| Some(x.min(y))),
            Max(a, b) => bin(a, b, &|x, y| Some(x.max(y))),
        }
    }
}

/// Result of evaluating one node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Eval {
    Known(u64),
    /// Depends on a data-dependent length not read yet.
    Unknown,
    /// Overflow, underflow or division by zero.
    Invalid,
}

/// The size class a decision at trace time depended on: empty, broadcast (1), or larger.
pub fn class_of(n: u64) -> u8 {
    match n {
        0 => 0,
        1 => 1,
        _ => 2,
    }
}

/// A number of elements that remembers how it was computed from a frozen function's input sizes.
///
/// Outside a recording a `Size` is just a number. Inside one, `x.size()` carries the expression
/// "size of input k", arithmetic builds on it, and constructors (`arange`, `zeros`, `full`,
/// `linspace`) size their result by the expression, so replays with other input sizes are exact.
/// Turning a symbolic size into a plain integer ([`Size::get`], or `len()` on an array) makes the
/// recording valid only for the current input sizes.
///
/// ```
/// use kiln_core::Size;
/// let n = Size::fixed(10);
/// assert_eq!((n / 2 + 1).get(), 6);
/// assert_eq!(n.div_ceil(3).get(), 4);
/// assert_eq!((n - 4).max(Size::fixed(7)).get(), 7);
/// ```
#[derive(Clone, Copy)]
pub struct Size {
    pub(crate) value: usize,
    /// Expression in the recording `epoch` (0: constant).
    pub(crate) expr: ExprId,
    pub(crate) epoch: u64,
}

impl Size {
    /// A size that does not depend on the inputs (the same in every replay).
    pub const fn fixed(n: usize) -> Size {
        Size {
            value: n,
            expr: 0,
            epoch: 0,
        }
    }
    /// The number, as a plain integer. Inside a recording, a size that depends on the inputs
    /// becomes a constant of the recording: replays then need the same input sizes.
    #[track_caller]
    pub fn get(self) -> usize {
        let e = self.live_expr();
        if let Some(r) = recorder().filter(|_| e != 0) {
            r.observe_value(e, self.value, Location::caller(), "Size::get()");
        }
        self.value
    }
    /// The number, for messages only: nothing is recorded, so code must not decide anything by it
    /// inside a frozen function (use [`Size::get`], [`Size::is_one`], `==`).
    pub fn peek(self) -> usize {
        self.value
    }
    /// Whether the two sizes are equal: what a check that compares two sizes (an assignment's
    /// target and value, a loop's state entries) must use. Inside a recording the answer becomes a
    /// condition of the recording: a replay for which it would change records anew, so the check
    /// runs again and fails (or passes) exactly as it would unfrozen. Equal sizes stay symbolic
    /// (replays at any width where they remain equal still replay); different ones tie the
    /// recording to both values (the failed check's message names them). `==` instead ties the
    /// recording to the values in every case.
    ///
    /// ```
    /// use kiln_core::Size;
    /// assert!(Size::fixed(4).same_as(4));
    /// assert!(!Size::fixed(4).same_as(Size::fixed(8)));
    /// ```
    pub fn same_as(self, other: impl Into<Size>) -> bool {
        let other = other.into();
        match recorder() {
            Some(r) => r.observe_same(self, other),
            None => self.value == other.value,
        }
    }
    /// Whether the size is 1 (a broadcast). Inside a recording, a replay records anew if the answer
    /// changes.
    pub fn is_one(self) -> bool {
        self.observe_range(1, 1)
    }
    /// Whether the size is 0. Inside a recording, a replay records anew if the answer changes.
    pub fn is_zero(self) -> bool {
        self.observe_range(0, 0)
    }
    /// Whether lane indices `0..self` fit in 32 bits. Inside a recording, a replay records anew if
    /// the answer changes.
    pub fn fits_u32(self) -> bool {
        self.observe_range(0, u32::MAX as u64 + 1)
    }
    fn observe_range(self, lo: u64, hi: u64) -> bool {
        let e = self.live_expr();
        if let Some(r) = recorder().filter(|_| e != 0) {
            r.observe_range(e, self.value, lo, hi);
        }
        (lo..=hi).contains(&(self.value as u64))
    }
    /// Whether the size carries an expression of the current recording's inputs.
    pub fn is_symbolic(self) -> bool {
        self.expr != 0 && crate::context::recording_epoch() == Some(self.epoch)
    }
    /// `⌈self / rhs⌉`. Panics if `rhs` is 0.
    #[track_caller]
    pub fn div_ceil(self, rhs: impl Into<Size>) -> Size {
        let rhs = rhs.into();
        assert!(
            rhs.value != 0,
            "kiln: Size::div_ceil({}, 0): division by zero",
            self.value
        );
        self.combine(rhs, self.value.div_ceil(rhs.value), SizeNode::DivCeil)
    }
    /// The smaller of two sizes.
    pub fn min(self, rhs: impl Into<Size>) -> Size {
        let rhs = rhs.into();
        self.combine(rhs, self.value.min(rhs.value), SizeNode::Min)
    }
    /// The larger of two sizes.
    pub fn max(self, rhs: impl Into<Size>) -> Size {
        let rhs = rhs.into();
        self.combine(rhs, self.value.max(rhs.value), SizeNode::Max)
    }

    fn combine(self, rhs: Size, value: usize, node: fn(ExprId, ExprId) -> SizeNode) -> Size {
        let (a, b) = (self.live_expr(), rhs.live_expr());
        if a == 0 && b == 0 {
            return Size::fixed(value);
        }
        match recorder().and_then(|r| r.combine(self, rhs, node)) {
            Some((expr, epoch)) => Size { value, expr, epoch },
            None => Size::fixed(value),
        }
    }
    /// The expression if it belongs to the recording in progress on this thread.
    pub(crate) fn live_expr(self) -> ExprId {
        if self.expr != 0 && crate::context::recording_epoch() == Some(self.epoch) {
            self.expr
        } else {
            0
        }
    }
}

impl From<usize> for Size {
    fn from(n: usize) -> Size {
        Size::fixed(n)
    }
}

impl fmt::Debug for Size {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.expr != 0 {
            write!(f, "Size({}, symbolic)", self.value)
        } else {
            write!(f, "Size({})", self.value)
        }
    }
}
impl fmt::Display for Size {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.value)
    }
}
/// Comparing sizes uses their values: inside a recording each symbolic side becomes a constant of
/// the recording (a replay with another value records anew).
impl PartialEq for Size {
    #[track_caller]
    fn eq(&self, other: &Size) -> bool {
        self.observe_eq();
        other.observe_eq();
        self.value == other.value
    }
}
impl PartialEq<usize> for Size {
    #[track_caller]
    fn eq(&self, other: &usize) -> bool {
        self.observe_eq();
        self.value == *other
    }
}
impl Size {
    #[track_caller]
    fn observe_eq(&self) {
        let e = self.live_expr();
        if let Some(r) = recorder().filter(|_| e != 0) {
            r.observe_value(e, self.value, Location::caller(), "==");
        }
    }
}

macro_rules! size_op {
    ($tr:ident, $m:ident, $node:ident, $checked:ident, $what:literal) => {
        impl<R: Into<Size>> $tr<R> for Size {
            type Output = Size;
            #[track_caller]
            fn $m(self, rhs: R) -> Size {
                let rhs = rhs.into();
                let value = self.value.$checked(rhs.value).unwrap_or_else(|| {
                    panic!(
                        concat!("kiln: Size ", $what, " of {} and {} is out of range"),
                        self.value, rhs.value
                    )
                });
                self.combine(rhs, value, SizeNode::$node)
            }
        }
    };
}
size_op!(Add, add, Add, checked_add, "addition");
size_op!(Sub, sub, Sub, checked_sub, "subtraction");
size_op!(Mul, mul, Mul, checked_mul, "multiplication");
size_op!(Div, div, Div, checked_div, "division");
