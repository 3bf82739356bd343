//! The op set and its exact semantics.
//!
//! Every op that a variable or a kernel instruction can carry is listed here, with a doc comment saying
//! what it computes for every input, including the awkward ones (overflow, division by zero, NaN,
//! shifts past the width, out-of-range casts). The scalar functions at the bottom (`eval_*`) are the
//! executable form of those comments: the interpreter runs them lane by lane, constant folding runs
//! them at trace time, and every compiled backend is tested against them. Transcendental functions
//! are deliberately absent: the front end builds them from these ops, so every backend runs the same
//! polynomials.

use crate::ty::VarType;
use std::fmt;

/// Horizontal combination applied by a reducing scatter or a reduction.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    /// Plain store (scatter) — for a reduction this is not allowed.
    None,
    /// Wrapping sum for integers, IEEE sum for floats.
    Add,
    /// Wrapping product for integers, IEEE product for floats (reductions only).
    Mul,
    /// Minimum (`Op::Min` semantics).
    Min,
    /// Maximum (`Op::Max` semantics).
    Max,
    /// Logical/bitwise and (reductions of masks and integers).
    And,
    /// Logical/bitwise or.
    Or,
}

impl ReduceOp {
    /// Every reduce op, in declaration order (for tables, parsers and property tests).
    ///
    /// ```
    /// assert_eq!(kiln_core::ReduceOp::ALL.len(), 7);
    /// ```
    pub const ALL: [ReduceOp; 7] = [
        ReduceOp::None,
        ReduceOp::Add,
        ReduceOp::Mul,
        ReduceOp::Min,
        ReduceOp::Max,
        ReduceOp::And,
        ReduceOp::Or,
    ];
}

/// An operation. Operand types equal the result type unless stated otherwise.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    /// A constant; its bits live in the variable (`imm` in kernels).
    Literal,
    /// The lane index `i` converted to the result type (wrapping); in a size-1 variable it is 0.
    Counter,
    /// An evaluated buffer (registry only; kernels see `Load`).
    Data,
    /// Kernel only: read parameter `imm` at the lane index (or element 0 when the parameter is a
    /// broadcast size-1 buffer).
    Load,
    /// Kernel only: write `arg0` to output parameter `imm` at the lane index.
    Store,
    /// Wrapping negation for integers, sign flip for floats; logical not is `Not`.
    Neg,
    /// Logical not for masks, bitwise not for integers (floats: bitwise on the bits).
    Not,
    /// Absolute value: wrapping for integers (`i32::MIN.abs() == i32::MIN`), clears the sign bit of floats.
    Abs,
    /// IEEE square root (floats only): negative → NaN.
    Sqrt,
    /// Round toward −∞ (floats only).
    Floor,
    /// Round toward +∞ (floats only).
    Ceil,
    /// Round to nearest, ties to even (floats only) — like NumPy's `round`, not Rust's `f32::round`.
    Round,
    /// Round toward zero (floats only).
    Trunc,
    /// Value conversion to the result type from `arg0`'s type, as Rust's `as`: integers wrap or
    /// extend, int→float rounds to nearest, float→int saturates (NaN → 0), f64→f32 rounds,
    /// bool→number gives 0/1, number→bool is `x != 0`.
    Cast,
    /// Reinterpret the bits of `arg0` (same width) as the result type.
    Bitcast,
    /// Wrapping for integers; IEEE for floats; `or` for masks.
    Add,
    /// Wrapping for integers; IEEE for floats.
    Sub,
    /// Wrapping for integers; IEEE for floats; `and` for masks.
    Mul,
    /// IEEE for floats. Integers: truncating; `x / 0 == 0`; `MIN / -1 == MIN` (wrapping).
    Div,
    /// Integers only: remainder with the dividend's sign; `x % 0 == x`; `MIN % -1 == 0`.
    Rem,
    /// Smaller operand. Floats: NaN if either is NaN, and −0 < +0 (IEEE 754-2019 `minimum`).
    Min,
    /// Larger operand. Floats: NaN if either is NaN, and −0 < +0 (IEEE 754-2019 `maximum`).
    Max,
    /// Bitwise and (logical for masks; on floats acts on the bits).
    And,
    /// Bitwise or.
    Or,
    /// Bitwise exclusive or.
    Xor,
    /// Shift left by `arg1 & (bits − 1)` (integers only; the amount has the operand's type).
    Shl,
    /// Shift right by `arg1 & (bits − 1)`: arithmetic for signed, logical for unsigned.
    Shr,
    /// Comparisons produce `Bool`. Floats follow IEEE: any comparison with NaN is false except `Ne`.
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    /// `arg0 * arg1 + arg2`. Floats: fused, one rounding. Integers: wrapping.
    Fma,
    /// `arg0 ? arg1 : arg2`; `arg0` is `Bool`.
    Select,
    /// Read `source[index]` where `source` is an evaluated buffer (`imm` is its parameter in kernels),
    /// `arg0`/`arg1` are the index (any integer type) and a `Bool` mask. A masked-off lane, a negative
    /// index or one ≥ the source length reads 0 and never touches memory; an unmasked out-of-range
    /// read is counted in the launch status (`oob_reads`).
    Gather,
    /// Side effect: `target[index] (op)= value` for lanes whose mask is true (`arg0` value, `arg1`
    /// index, `arg2` mask, target buffer parameter `imm`). Out-of-range indices are dropped and
    /// counted (`oob_writes`). With a `ReduceOp` other than `None`, every duplicate index counts.
    Scatter(ReduceOp),
    /// A stencil's relative read (registry only, never in kernel IR): `arg0` is the source, `arg1`
    /// the general value (the source at this lane's neighbour under the boundary rule), which is
    /// its meaning. In a stencil's interior the scheduler reads the source through a shifted
    /// pointer instead (see `stencil`).
    Tap,
    /// A stencil value that differs on the border (registry only): `arg0` holds in the interior,
    /// `arg1` everywhere (its meaning).
    Split,
    /// A pending reduction of all of `arg0`'s lanes to one value (registry only, never in kernel
    /// IR): the result of `sum`/`prod`/`reduce_min`/`reduce_max` until the scheduler evaluates it,
    /// together with the other pending reductions over the same size in one pass (see
    /// `schedule::resolve_reductions`).
    Reduce(ReduceOp),

    // --- Structured regions (kernels only; see `kernel` for their layout and invariants). Inside a
    // region only the *active* lanes run: effects (gathers, scatters) and state updates are masked;
    // values of inactive lanes are never observed.
    /// Opens a loop region (no value); `imm` is the iteration limit (0: none). Lanes that are still
    /// active when it is reached stop and are counted in the launch status (`loop_lanes_truncated`).
    LoopBegin,
    /// A loop-carried value: `arg0` (defined before the loop) on entry, then what `LoopNext` set.
    /// After the loop's end it holds each lane's final value.
    Phi,
    /// `arg0` (`Bool`): lanes where it is false leave the loop (no value).
    LoopCond,
    /// Sets the next value of phi `arg0` to `arg1` for the active lanes (no value).
    LoopNext,
    /// Closes the loop `arg0` (no value).
    LoopEnd,
    /// Opens a branch region (no value): a sequence of `Case`s with disjoint masks. `imm` is only
    /// presentation: 0 prints as a conditional (`if`), 1 as an indirect call (`call`).
    Switch,
    /// Starts a case: the active lanes become the enclosing ones where `arg0` (`Bool`, defined
    /// before the switch) is true (no value).
    Case,
    /// Sets output `imm` of the enclosing switch to `arg0` for the case's lanes (no value).
    Yield,
    /// Closes the switch `arg0` (no value).
    SwitchEnd,
    /// Output `imm` of switch `arg0`: what the lane's case yielded, 0 where no case ran.
    Out,
}

impl Op {
    /// Number of value operands.
    pub fn arity(self) -> usize {
        use Op::*;
        match self {
            Literal | Counter | Data | Load | LoopBegin | Switch => 0,
            Phi | LoopCond | LoopEnd | Case | Yield | SwitchEnd | Out => 1,
            LoopNext => 2,
            Store | Neg | Not | Abs | Sqrt | Floor | Ceil | Round | Trunc | Cast | Bitcast => 1,
            Add | Sub | Mul | Div | Rem | Min | Max | And | Or | Xor | Shl | Shr | Eq | Ne | Lt
            | Le | Gt | Ge | Gather | Tap | Split => 2,
            Reduce(_) => 1,
            Fma | Select | Scatter(_) => 3,
        }
    }
    /// Comparison ops produce `Bool`.
    pub fn is_comparison(self) -> bool {
        matches!(self, Op::Eq | Op::Ne | Op::Lt | Op::Le | Op::Gt | Op::Ge)
    }
    /// Ops without side effects whose result depends only on their operands (CSE and folding apply).
    pub fn is_pure(self) -> bool {
        !matches!(
            self,
            Op::Data | Op::Load | Op::Store | Op::Scatter(_) | Op::Gather | Op::Reduce(_)
        ) && !self.is_region()
    }
    /// Region markers and the values they define (`Phi`, `Out`): never folded, hoisted or shared.
    pub fn is_region(self) -> bool {
        matches!(
            self,
            Op::LoopBegin
                | Op::Phi
                | Op::LoopCond
                | Op::LoopNext
                | Op::LoopEnd
                | Op::Switch
                | Op::Case
                | Op::Yield
                | Op::SwitchEnd
                | Op::Out
        )
    }
    /// Lower-case name used in the IR text and trace logs.
    pub fn name(self) -> &'static str {
        use Op::*;
        match self {
            Literal => "const",
            Counter => "index",
            Data => "data",
            Load => "load",
            Store => "store",
            Neg => "neg",
            Not => "not",
            Abs => "abs",
            Sqrt => "sqrt",
            Floor => "floor",
            Ceil => "ceil",
            Round => "round",
            Trunc => "trunc",
            Cast => "cast",
            Bitcast => "bitcast",
            Add => "add",
            Sub => "sub",
            Mul => "mul",
            Div => "div",
            Rem => "rem",
            Min => "min",
            Max => "max",
            And => "and",
            Or => "or",
            Xor => "xor",
            Shl => "shl",
            Shr => "shr",
            Eq => "eq",
            Ne => "ne",
            Lt => "lt",
            Le => "le",
            Gt => "gt",
            Ge => "ge",
            Fma => "fma",
            Select => "select",
            Gather => "gather",
            Tap => "tap",
            Split => "split",
            Reduce(ReduceOp::None) => "reduce",
            Reduce(ReduceOp::Add) => "reduce.add",
            Reduce(ReduceOp::Mul) => "reduce.mul",
            Reduce(ReduceOp::Min) => "reduce.min",
            Reduce(ReduceOp::Max) => "reduce.max",
            Reduce(ReduceOp::And) => "reduce.and",
            Reduce(ReduceOp::Or) => "reduce.or",
            Scatter(ReduceOp::None) => "scatter",
            Scatter(ReduceOp::Add) => "scatter.add",
            Scatter(ReduceOp::Mul) => "scatter.mul",
            Scatter(ReduceOp::Min) => "scatter.min",
            Scatter(ReduceOp::Max) => "scatter.max",
            Scatter(ReduceOp::And) => "scatter.and",
            Scatter(ReduceOp::Or) => "scatter.or",
            LoopBegin => "loop",
            Phi => "phi",
            LoopCond => "while",
            LoopNext => "next",
            LoopEnd => "endloop",
            Switch => "switch",
            Case => "case",
            Yield => "yield",
            SwitchEnd => "endswitch",
            Out => "out",
        }
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

// ---------------------------------------------------------------------------------------------
// Scalar semantics. Values are bit patterns in the low bits of a u64.

#[inline]
fn f32v(b: u64) -> f32 {
    f32::from_bits(b as u32)
}
#[inline]
fn f64v(b: u64) -> f64 {
    f64::from_bits(b)
}
#[inline]
fn f32b(v: f32) -> u64 {
    v.to_bits() as u64
}
#[inline]
fn f64b(v: f64) -> u64 {
    v.to_bits()
}

/// IEEE 754-2019 `minimum`: NaN-propagating, −0 < +0.
pub fn fminimum64(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else if a == b {
        if a.is_sign_negative() {
            a
        } else {
            b
        }
    } else if a < b {
        a
    } else {
        b
    }
}
/// IEEE 754-2019 `maximum`: NaN-propagating, −0 < +0.
pub fn fmaximum64(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else if a == b {
        if a.is_sign_positive() {
            a
        } else {
            b
        }
    } else if a > b {
        a
    } else {
        b
    }
}
fn fminimum32(a: f32, b: f32) -> f32 {
    if a.is_nan() || b.is_nan() {
        f32::NAN
    } else {
        fminimum64(a as f64, b as f64) as f32
    }
}
fn fmaximum32(a: f32, b: f32) -> f32 {
    if a.is_nan() || b.is_nan() {
        f32::NAN
    } else {
        fmaximum64(a as f64, b as f64) as f32
    }
}

/// Sign-extend or zero-extend the bits of an integer type into an i128 (exact value).
#[inline]
fn int_value(ty: VarType, b: u64) -> i128 {
    match ty {
        VarType::Bool => (b & 1) as i128,
        VarType::I32 => b as u32 as i32 as i128,
        VarType::U32 => b as u32 as i128,
        VarType::I64 => b as i64 as i128,
        VarType::U64 => b as i128,
        _ => unreachable!("int_value on float"),
    }
}

/// `op` applied to one operand of type `ty` (for `Cast`/`Bitcast`, `ty` is the *result* type and
/// `from` the operand type).
pub fn eval_unary(op: Op, ty: VarType, from: VarType, a: u64) -> u64 {
    use VarType::*;
    let r = match (op, ty) {
        (Op::Neg, F32) => f32b(-f32v(a)),
        (Op::Neg, F64) => f64b(-f64v(a)),
        (Op::Neg, Bool) => a,
        (Op::Neg, _) => a.wrapping_neg(),
        (Op::Not, Bool) => a ^ 1,
        (Op::Not, _) => !a,
        (Op::Abs, F32) => a & 0x7fff_ffff,
        (Op::Abs, F64) => a & 0x7fff_ffff_ffff_ffff,
        (Op::Abs, I32) => (a as u32 as i32).wrapping_abs() as u32 as u64,
        (Op::Abs, I64) => (a as i64).wrapping_abs() as u64,
        (Op::Abs, _) => a,
        (Op::Sqrt, F32) => f32b(f32v(a).sqrt()),
        (Op::Sqrt, F64) => f64b(f64v(a).sqrt()),
        (Op::Floor, F32) => f32b(f32v(a).floor()),
        (Op::Floor, F64) => f64b(f64v(a).floor()),
        (Op::Ceil, F32) => f32b(f32v(a).ceil()),
        (Op::Ceil, F64) => f64b(f64v(a).ceil()),
        (Op::Round, F32) => f32b(f32v(a).round_ties_even()),
        (Op::Round, F64) => f64b(f64v(a).round_ties_even()),
        (Op::Trunc, F32) => f32b(f32v(a).trunc()),
        (Op::Trunc, F64) => f64b(f64v(a).trunc()),
        (Op::Sqrt | Op::Floor | Op::Ceil | Op::Round | Op::Trunc, _) => a,
        (Op::Cast, _) => cast(from, ty, a),
        (Op::Bitcast, _) => a,
        _ => panic!("eval_unary: {op:?} is not unary"),
    };
    r & ty.bit_mask()
}

/// Value conversion with Rust `as` semantics (see `Op::Cast`).
pub fn cast(from: VarType, to: VarType, a: u64) -> u64 {
    use VarType::*;
    if from == to {
        return a;
    }
    let r = if to == Bool {
        match from {
            F32 => (f32v(a) != 0.0) as u64,
            F64 => (f64v(a) != 0.0) as u64,
            _ => (a & from.bit_mask() != 0) as u64,
        }
    } else if from.is_float() {
        let v = if from == F32 { f32v(a) as f64 } else { f64v(a) };
        match to {
            F32 => {
                if from == F64 {
                    f32b(f64v(a) as f32)
                } else {
                    a
                }
            }
            F64 => f64b(v),
            I32 => (v as i32) as u32 as u64,
            U32 => (v as u32) as u64,
            I64 => (v as i64) as u64,
            U64 => v as u64,
            Bool => unreachable!(),
        }
    } else {
        let v = int_value(from, a);
        match to {
            F32 => f32b(match from {
                I32 | I64 => v as i64 as f32,
                _ => v as u64 as f32,
            }),
            F64 => f64b(match from {
                I32 | I64 => v as i64 as f64,
                _ => v as u64 as f64,
            }),
            _ => v as u64,
        }
    };
    r & to.bit_mask()
}

/// `op` applied to two operands of type `ty` (comparisons return 0/1).
pub fn eval_binary(op: Op, ty: VarType, a: u64, b: u64) -> u64 {
    use VarType::*;
    if op.is_comparison() {
        let r = match ty {
            F32 => cmp_f(op, f32v(a) as f64, f32v(b) as f64),
            F64 => cmp_f(op, f64v(a), f64v(b)),
            _ => {
                let (x, y) = (int_value(ty, a), int_value(ty, b));
                match op {
                    Op::Eq => x == y,
                    Op::Ne => x != y,
                    Op::Lt => x < y,
                    Op::Le => x <= y,
                    Op::Gt => x > y,
                    _ => x >= y,
                }
            }
        };
        return r as u64;
    }
    let r = match ty {
        F32 => {
            let (x, y) = (f32v(a), f32v(b));
            match op {
                Op::Add => f32b(x + y),
                Op::Sub => f32b(x - y),
                Op::Mul => f32b(x * y),
                Op::Div => f32b(x / y),
                Op::Min => f32b(fminimum32(x, y)),
                Op::Max => f32b(fmaximum32(x, y)),
                Op::And => a & b,
                Op::Or => a | b,
                Op::Xor => a ^ b,
                _ => panic!("eval_binary: {op:?} on f32"),
            }
        }
        F64 => {
            let (x, y) = (f64v(a), f64v(b));
            match op {
                Op::Add => f64b(x + y),
                Op::Sub => f64b(x - y),
                Op::Mul => f64b(x * y),
                Op::Div => f64b(x / y),
                Op::Min => f64b(fminimum64(x, y)),
                Op::Max => f64b(fmaximum64(x, y)),
                Op::And => a & b,
                Op::Or => a | b,
                Op::Xor => a ^ b,
                _ => panic!("eval_binary: {op:?} on f64"),
            }
        }
        Bool => match op {
            Op::And | Op::Mul | Op::Min => a & b,
            Op::Or | Op::Add | Op::Max => a | b,
            Op::Xor | Op::Sub => a ^ b,
            _ => panic!("eval_binary: {op:?} on bool"),
        },
        _ => {
            let bits = ty.bits();
            let m = ty.bit_mask();
            let (x, y) = (int_value(ty, a), int_value(ty, b));
            match op {
                Op::Add => a.wrapping_add(b),
                Op::Sub => a.wrapping_sub(b),
                Op::Mul => a.wrapping_mul(b),
                Op::Div => {
                    if y == 0 {
                        0
                    } else if ty.is_signed() && y == -1 {
                        (x.wrapping_neg()) as u64 // MIN / -1 wraps to MIN after masking
                    } else {
                        (x / y) as u64
                    }
                }
                Op::Rem => {
                    if y == 0 {
                        a
                    } else if ty.is_signed() && y == -1 {
                        0
                    } else {
                        (x % y) as u64
                    }
                }
                Op::Min => (if x <= y { x } else { y }) as u64,
                Op::Max => (if x >= y { x } else { y }) as u64,
                Op::And => a & b,
                Op::Or => a | b,
                Op::Xor => a ^ b,
                Op::Shl => (a & m) << (b as u32 & (bits - 1)),
                Op::Shr => {
                    let s = b as u32 & (bits - 1);
                    if ty.is_signed() {
                        (x >> s) as u64
                    } else {
                        (a & m) >> s
                    }
                }
                _ => panic!("eval_binary: {op:?} on {ty}"),
            }
        }
    };
    r & ty.bit_mask()
}

fn cmp_f(op: Op, x: f64, y: f64) -> bool {
    match op {
        Op::Eq => x == y,
        Op::Ne => x != y,
        Op::Lt => x < y,
        Op::Le => x <= y,
        Op::Gt => x > y,
        _ => x >= y,
    }
}

/// `Fma` and `Select` (`ty` is the result type; for `Select`, `a` is the mask).
pub fn eval_ternary(op: Op, ty: VarType, a: u64, b: u64, c: u64) -> u64 {
    let r = match op {
        Op::Select => {
            if a & 1 != 0 {
                b
            } else {
                c
            }
        }
        Op::Fma => match ty {
            VarType::F32 => f32b(f32v(a).mul_add(f32v(b), f32v(c))),
            VarType::F64 => f64b(f64v(a).mul_add(f64v(b), f64v(c))),
            VarType::Bool => (a & b) | c,
            _ => a.wrapping_mul(b).wrapping_add(c),
        },
        _ => panic!("eval_ternary: {op:?} is not ternary"),
    };
    r & ty.bit_mask()
}

/// Combine an accumulator with a value under a `ReduceOp` (reductions and reducing scatters).
pub fn eval_reduce(op: ReduceOp, ty: VarType, acc: u64, v: u64) -> u64 {
    match op {
        ReduceOp::None => v,
        ReduceOp::Add => eval_binary(Op::Add, ty, acc, v),
        ReduceOp::Mul => eval_binary(Op::Mul, ty, acc, v),
        ReduceOp::Min => eval_binary(Op::Min, ty, acc, v),
        ReduceOp::Max => eval_binary(Op::Max, ty, acc, v),
        ReduceOp::And => eval_binary(Op::And, ty, acc, v),
        ReduceOp::Or => eval_binary(Op::Or, ty, acc, v),
    }
}

/// The identity element of a reduction (what an empty array reduces to).
pub fn reduce_identity(op: ReduceOp, ty: VarType) -> u64 {
    use VarType::*;
    let r = match (op, ty) {
        (ReduceOp::Add | ReduceOp::None | ReduceOp::Or, _) => 0,
        (ReduceOp::Mul, F32) => f32b(1.0),
        (ReduceOp::Mul, F64) => f64b(1.0),
        (ReduceOp::Mul, _) => 1,
        (ReduceOp::Min, F32) => f32b(f32::INFINITY),
        (ReduceOp::Min, F64) => f64b(f64::INFINITY),
        (ReduceOp::Min, I32) => i32::MAX as u64,
        (ReduceOp::Min, I64) => i64::MAX as u64,
        (ReduceOp::Min, _) => u64::MAX,
        (ReduceOp::Max, F32) => f32b(f32::NEG_INFINITY),
        (ReduceOp::Max, F64) => f64b(f64::NEG_INFINITY),
        (ReduceOp::Max, I32) => i32::MIN as u32 as u64,
        (ReduceOp::Max, I64) => i64::MIN as u64,
        (ReduceOp::Max, _) => 0,
        (ReduceOp::And, _) => u64::MAX,
    };
    r & ty.bit_mask()
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn integer_edge_cases_are_defined() {
        let i32b = |v: i32| v as u32 as u64;
        assert_eq!(eval_binary(Op::Div, VarType::I32, i32b(7), 0), 0);
        assert_eq!(eval_binary(Op::Rem, VarType::I32, i32b(7), 0), 7);
        assert_eq!(
            eval_binary(Op::Div, VarType::I32, i32b(i32::MIN), i32b(-1)),
            i32b(i32::MIN)
        );
        assert_eq!(
            eval_binary(Op::Rem, VarType::I32, i32b(i32::MIN), i32b(-1)),
            0
        );
        assert_eq!(eval_binary(Op::Shl, VarType::U32, 1, 33), 2);
        assert_eq!(eval_binary(Op::Shr, VarType::I32, i32b(-8), 1), i32b(-4));
        assert_eq!(cast(VarType::F32, VarType::I32, f32b(f32::NAN)), 0);
        assert_eq!(cast(VarType::F32, VarType::U32, f32b(-5.0)), 0);
        assert_eq!(
            cast(VarType::F64, VarType::I32, f64b(1e300)),
            i32::MAX as u64
        );
    }
    #[test]
    fn float_min_max_propagate_nan_and_order_zeros() {
        let r = eval_binary(Op::Min, VarType::F32, f32b(1.0), f32b(f32::NAN));
        assert!(f32v(r).is_nan());
        let r = eval_binary(Op::Min, VarType::F32, f32b(0.0), f32b(-0.0));
        assert_eq!(r, f32b(-0.0));
        let r = eval_binary(Op::Max, VarType::F64, f64b(-0.0), f64b(0.0));
        assert_eq!(r, f64b(0.0));
    }
}
