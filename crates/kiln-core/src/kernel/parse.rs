//! The kernel IR's text form read back: `Kernel::parse` is the inverse of `Display`, so that
//! tests can state a kernel as text (a backend filetest: program in, result out) and a printed
//! kernel from a log can be compiled again.
//!
//! The grammar is the printer's, line by line: an optional header (`kernel <hash> (…)`, whose
//! hash is ignored), one `pN: in|in.broadcast|out|indexed <type>` line per parameter, then one line
//! per instruction in order. `rN = ` must name the instruction's position. Indentation is free;
//! `;` starts a comment. By hand a literal may also be written as a plain number (`const.f32 1.5`).
//! Parsing checks the syntax only: `Kernel::verify` checks the rules of the IR.

use super::{default_marker_type, Inst, Kernel, Param, ParamKind, Reg, SCATTER_EXCLUSIVE};
use crate::op::{Op, ReduceOp};
use crate::ty::VarType;

/// Kernel text that does not parse: the line (1-based), its text, and why.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("kernel text, line {line}: {why}\n    {text}\n  (the text form is what `Kernel`'s Display prints; see `kernel::parse`)")]
pub struct ParseError {
    pub line: usize,
    pub text: String,
    pub why: String,
}

/// Every op, for looking names up (the `match` below fails to compile when an op is added, so
/// the list cannot fall behind).
fn all_ops() -> Vec<Op> {
    use Op::*;
    let _exhaustive = |op: Op| match op {
        Literal | Counter | Data | Load | Store | Neg | Not | Abs | Sqrt | Floor | Ceil | Round
        | Trunc | Cast | Bitcast | Add | Sub | Mul | Div | Rem | Min | Max | And | Or | Xor
        | Shl | Shr | Eq | Ne | Lt | Le | Gt | Ge | Fma | Select | Gather | Tap | Split
        | Reduce(_) | Scatter(_) | LoopBegin | Phi | LoopCond | LoopNext | LoopEnd | Switch
        | Case | Yield | SwitchEnd | Out => (),
    };
    let mut ops = vec![
        Literal, Counter, Data, Load, Store, Neg, Not, Abs, Sqrt, Floor, Ceil, Round, Trunc, Cast,
        Bitcast, Add, Sub, Mul, Div, Rem, Min, Max, And, Or, Xor, Shl, Shr, Eq, Ne, Lt, Le, Gt, Ge,
        Fma, Select, Gather, Tap, Split, LoopBegin, Phi, LoopCond, LoopNext, LoopEnd, Switch, Case,
        Yield, SwitchEnd, Out,
    ];
    ops.extend(ReduceOp::ALL.map(Reduce));
    ops.extend(ReduceOp::ALL.map(Scatter));
    ops
}

fn ty_named(name: &str) -> Option<VarType> {
    VarType::ALL.into_iter().find(|t| t.name() == name)
}

impl std::str::FromStr for Kernel {
    type Err = ParseError;
    fn from_str(text: &str) -> Result<Kernel, ParseError> {
        Kernel::parse(text)
    }
}

impl Kernel {
    /// The kernel whose text form (`Display`) is `text`.
    ///
    /// ```
    /// use kiln_core::kernel::Kernel;
    /// let k = Kernel::parse("
    ///     p0: in f32
    ///     p1: out f32
    ///     r0 = load.f32 p0
    ///     r1 = const.f32 2.5
    ///     r2 = mul.f32 r0, r1
    ///     store.f32 p1, r2
    /// ").unwrap();
    /// assert!(k.verify().is_ok());
    /// assert_eq!(Kernel::parse(&k.to_string()).unwrap(), k);
    /// ```
    pub fn parse(text: &str) -> Result<Kernel, ParseError> {
        let ops = all_ops();
        let mut k = Kernel::default();
        let mut header: Option<(usize, usize, usize)> = None;
        for (n, raw) in text.lines().enumerate() {
            let line = raw.split(';').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let fail = |why: String| ParseError {
                line: n + 1,
                text: raw.trim().to_string(),
                why,
            };
            if let Some(rest) = line.strip_prefix("kernel ") {
                header = Some((n + 1, counted(rest, "params"), counted(rest, "insts")));
            } else if line.starts_with('p') && line.contains(':') {
                k.params.push(param(line, k.params.len()).map_err(fail)?);
            } else {
                let inst = Line { k: &k, ops: &ops }.inst(line).map_err(fail)?;
                k.insts.push(inst);
            }
        }
        if let Some((line, params, insts)) = header {
            if (params, insts) != (usize::MAX, usize::MAX)
                && (params != k.params.len() || insts != k.insts.len())
            {
                return Err(ParseError {
                    line,
                    text: format!("({params} params, {insts} insts)"),
                    why: format!(
                        "the header counts differ from the text's {} params and {} insts",
                        k.params.len(),
                        k.insts.len()
                    ),
                });
            }
        }
        Ok(k)
    }
}

/// The number before `what` in a header's `(N params, M insts)` (`usize::MAX` when absent).
fn counted(header: &str, what: &str) -> usize {
    header
        .split(['(', ',', ')'])
        .filter_map(|part| part.trim().strip_suffix(what))
        .find_map(|n| n.trim().parse().ok())
        .unwrap_or(usize::MAX)
}

/// `pN: kind type`.
fn param(line: &str, at: usize) -> Result<Param, String> {
    let (name, rest) = line.split_once(':').ok_or("expected `pN: kind type`")?;
    if name.trim() != format!("p{at}") {
        return Err(format!("parameter {at} is named `{}`", name.trim()));
    }
    let mut words = rest.split_whitespace();
    let kind = match words.next() {
        Some("in") => ParamKind::Input,
        Some("in.broadcast") => ParamKind::Broadcast,
        Some("out") => ParamKind::Output,
        Some("indexed") => ParamKind::Indexed,
        other => return Err(format!("unknown parameter kind {other:?}")),
    };
    let ty = words
        .next()
        .and_then(ty_named)
        .ok_or("expected a type (bool, i32, u32, i64, u64, f32, f64)")?;
    Ok(Param { ty, kind })
}

/// The state one instruction line is read against.
struct Line<'a> {
    k: &'a Kernel,
    ops: &'a [Op],
}

impl Line<'_> {
    fn inst(&self, line: &str) -> Result<Inst, String> {
        let at = self.k.insts.len();
        let body = match line.split_once(" = ") {
            Some((def, body)) if def.starts_with('r') && !def.contains(' ') => {
                let r: usize = def[1..]
                    .parse()
                    .map_err(|_| format!("bad register `{def}`"))?;
                if r != at {
                    return Err(format!(
                        "`{def}` is defined by instruction {at} (registers are positions)"
                    ));
                }
                body
            }
            _ => line,
        };
        let (mnemonic, rest) = body.split_once(' ').unwrap_or((body, ""));
        let (op, tys) = self.mnemonic(mnemonic)?;
        let mut inst = Inst::new(op, tys.last().copied().unwrap_or(VarType::Bool), &[], 0);
        let (rest, imm) = match rest.rsplit_once(" imm=") {
            Some((r, v)) => (r, Some(number(v)?)),
            None => (rest.trim(), None),
        };
        self.operands(&mut inst, &tys, rest.trim())?;
        if let Some(v) = imm {
            inst.imm = v;
        }
        if tys.is_empty() {
            if !op.is_region() && !matches!(op, Op::Yield | Op::LoopNext) {
                return Err(format!("`{mnemonic}` needs a type (`{mnemonic}.f32`)"));
            }
            inst.ty = default_marker_type(&self.k.insts, &inst);
        }
        for &a in inst.operands() {
            if a as usize >= at {
                return Err(format!("r{a} is used before it is defined"));
            }
        }
        Ok(inst)
    }

    /// The op and the types of a mnemonic: the longest known op name, then `.type`s.
    fn mnemonic(&self, m: &str) -> Result<(Op, Vec<VarType>), String> {
        let parts: Vec<&str> = m.split('.').collect();
        for take in (1..=parts.len().min(2)).rev() {
            let name = parts[..take].join(".");
            if let Some(&op) = self.ops.iter().find(|o| o.name() == name) {
                let tys = parts[take..]
                    .iter()
                    .map(|t| ty_named(t).ok_or(format!("unknown type `{t}` in `{m}`")))
                    .collect::<Result<Vec<_>, _>>()?;
                let most = if matches!(op, Op::Cast | Op::Bitcast) {
                    2
                } else {
                    1
                };
                if tys.len() > most {
                    return Err(format!("`{m}` names too many types"));
                }
                return Ok((op, tys));
            }
        }
        Err(format!("unknown op `{m}`"))
    }

    /// Fill `inst`'s operands and immediate from the text after the mnemonic.
    fn operands(&self, inst: &mut Inst, tys: &[VarType], rest: &str) -> Result<(), String> {
        let list =
            |s: &str| -> Result<Vec<Reg>, String> { s.split(',').map(|w| reg(w.trim())).collect() };
        let set = |inst: &mut Inst, regs: &[Reg]| -> Result<(), String> {
            if regs.len() != inst.op.arity() {
                return Err(format!(
                    "`{}` takes {} operands, the text gives {}",
                    inst.op,
                    inst.op.arity(),
                    regs.len()
                ));
            }
            inst.args[..regs.len()].copy_from_slice(regs);
            Ok(())
        };
        match inst.op {
            Op::Literal => inst.imm = literal(inst.ty, rest)?,
            Op::LoopBegin => {
                inst.imm = match rest.strip_prefix("max=") {
                    Some(v) => number(v)?,
                    None if rest.is_empty() => 0,
                    None => return Err(format!("expected `max=N`, found `{rest}`")),
                }
            }
            Op::Switch => {
                inst.imm = match rest {
                    "(if)" => 0,
                    "(call)" => 1,
                    _ => number(
                        rest.strip_prefix("(kind ")
                            .and_then(|r| r.strip_suffix(')'))
                            .ok_or(format!("expected `(if)` or `(call)`, found `{rest}`"))?,
                    )?,
                }
            }
            Op::Load => inst.imm = param_ref(rest)?,
            Op::Store => {
                let (p, v) = rest.split_once(',').ok_or("expected `pK, rV`")?;
                inst.imm = param_ref(p.trim())?;
                set(inst, &[reg(v.trim())?])?;
            }
            Op::Gather => {
                // pK[rI], mask rM
                let (target, mask) = rest
                    .split_once(", mask ")
                    .ok_or("expected `pK[rI], mask rM`")?;
                let (p, i) = indexed(target)?;
                inst.imm = p;
                set(inst, &[i, reg(mask.trim())?])?;
            }
            Op::Scatter(_) => {
                // pK[rI] = rV, mask rM[, exclusive]
                let (target, rhs) = rest
                    .split_once(" = ")
                    .ok_or("expected `pK[rI] = rV, mask rM`")?;
                let (p, i) = indexed(target)?;
                let (rhs, exclusive) = match rhs.strip_suffix(", exclusive") {
                    Some(r) => (r, true),
                    None => (rhs, false),
                };
                let (v, mask) = rhs.split_once(", mask ").ok_or("expected `rV, mask rM`")?;
                inst.imm = p | if exclusive { SCATTER_EXCLUSIVE } else { 0 };
                set(inst, &[reg(v.trim())?, i, reg(mask.trim())?])?;
            }
            Op::Out => {
                let (r, k) = rest.split_once('[').ok_or("expected `rN[K]`")?;
                inst.imm = number(k.strip_suffix(']').ok_or("expected `rN[K]`")?)?;
                set(inst, &[reg(r.trim())?])?;
            }
            Op::Yield => {
                let (k, v) = rest.split_once(',').ok_or("expected `K, rV`")?;
                inst.imm = number(k.trim())?;
                set(inst, &[reg(v.trim())?])?;
            }
            Op::Cast | Op::Bitcast => {
                if tys.len() != 2 {
                    return Err(format!("`{}` names its source and result types", inst.op));
                }
                set(inst, &list(rest)?)?;
                let from = self.k.insts.get(inst.args[0] as usize).map(|x| x.ty);
                if from.is_some_and(|t| t != tys[0]) {
                    return Err(format!("r{} is not of type {}", inst.args[0], tys[0]));
                }
            }
            op if op.is_comparison() => {
                let (args, ty) = rest.split_once(" -> ").ok_or("expected `rA, rB -> bool`")?;
                set(inst, &list(args)?)?;
                inst.ty = ty_named(ty.trim()).ok_or(format!("unknown type `{}`", ty.trim()))?;
            }
            _ if rest.is_empty() => set(inst, &[])?,
            _ => set(inst, &list(rest)?)?,
        }
        Ok(())
    }
}

fn reg(w: &str) -> Result<Reg, String> {
    w.strip_prefix('r')
        .and_then(|n| n.parse().ok())
        .ok_or(format!("expected a register `rN`, found `{w}`"))
}

fn param_ref(w: &str) -> Result<u64, String> {
    w.strip_prefix('p')
        .and_then(|n| n.parse().ok())
        .ok_or(format!("expected a parameter `pN`, found `{w}`"))
}

/// `pK[rI]`.
fn indexed(w: &str) -> Result<(u64, Reg), String> {
    let (p, i) = w
        .trim()
        .split_once('[')
        .ok_or(format!("expected `pK[rI]`, found `{w}`"))?;
    let i = i
        .strip_suffix(']')
        .ok_or(format!("expected `pK[rI]`, found `{w}`"))?;
    Ok((param_ref(p)?, reg(i)?))
}

/// A decimal or `0x` hexadecimal `u64`.
fn number(w: &str) -> Result<u64, String> {
    let w = w.trim();
    match w.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16),
        None => w.parse(),
    }
    .map_err(|_| format!("expected a number, found `{w}`"))
}

/// A literal's bits from its text: `bits=0x…` (raw), `true`/`false`, `0x…` (the bits; a float's
/// value may follow in parentheses), a decimal integer, or (floats) a decimal value.
fn literal(ty: VarType, text: &str) -> Result<u64, String> {
    let t = text.trim();
    if let Some(raw) = t.strip_prefix("bits=") {
        return number(raw);
    }
    let first = t.split_whitespace().next().unwrap_or("");
    let bad = || format!("`{t}` is not a {ty} literal");
    let bits = match ty {
        VarType::Bool => match first {
            "true" => 1,
            "false" => 0,
            _ => return Err(bad()),
        },
        VarType::F32 | VarType::F64 if !first.starts_with("0x") => {
            let v: f64 = first.parse().map_err(|_| bad())?;
            if ty == VarType::F32 {
                (v as f32).to_bits() as u64
            } else {
                v.to_bits()
            }
        }
        _ if first.starts_with("0x") => number(first)?,
        VarType::I32 => first.parse::<i32>().map_err(|_| bad())? as u32 as u64,
        VarType::I64 => first.parse::<i64>().map_err(|_| bad())? as u64,
        _ => first.parse::<u64>().map_err(|_| bad())?,
    };
    if bits & ty.bit_mask() != bits && ty != VarType::Bool {
        return Err(format!("`{t}` does not fit {ty}"));
    }
    Ok(bits)
}
