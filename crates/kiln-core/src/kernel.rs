//! Kernel IR: what a backend compiles.
//!
//! A kernel is plain data: a list of buffer parameters and a flat, typed SSA list of instructions whose
//! registers are named by position (`r3` is the value of instruction 3). Literals are baked in as
//! immediates; buffers and the launch size are parameters, so the same work at another size, or over
//! other buffers, is the same kernel with the same 128-bit hash — the cache key. This module owns the
//! IR, its text form (`Display`, used in logs and golden tests), its hash and its checker (`verify`).
//! It knows nothing about the registry (which builds kernels: `schedule`) or machine code (`backend`).
//! Structured regions (loops, conditionals, calls) will extend `Inst` with nested bodies later.

use crate::op::Op;
use crate::ty::VarType;
use std::fmt;

/// Register index: the position of the instruction that defines it.
pub type Reg = u32;

/// How a kernel uses one buffer parameter.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ParamKind {
    /// Read at the lane index (`Load`).
    Input,
    /// A size-1 buffer read once and used by every lane (`Load`).
    Broadcast,
    /// Written at the lane index (`Store`).
    Output,
    /// Random access: `Gather` source or `Scatter` target, bounds-checked against its length.
    Indexed,
}

/// One buffer parameter.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Param {
    pub ty: VarType,
    pub kind: ParamKind,
}

/// One instruction. Unused argument slots are 0.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Inst {
    pub op: Op,
    /// Result type; for `Store` and `Scatter`, the type of the value written.
    pub ty: VarType,
    pub args: [Reg; 3],
    /// Literal bits (`Literal`) or the parameter index (`Load`, `Store`, `Gather`, `Scatter`).
    pub imm: u64,
}

impl Inst {
    pub fn new(op: Op, ty: VarType, args: &[Reg], imm: u64) -> Inst {
        let mut a = [0; 3];
        a[..args.len()].copy_from_slice(args);
        Inst {
            op,
            ty,
            args: a,
            imm,
        }
    }
    /// The operands actually used by this instruction.
    pub fn operands(&self) -> &[Reg] {
        &self.args[..self.op.arity()]
    }
    /// Whether the instruction defines a value (stores and scatters do not).
    pub fn has_value(&self) -> bool {
        !matches!(self.op, Op::Store | Op::Scatter(_))
    }
}

/// A compiled unit of work: runs once per lane over `[0, n)`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Kernel {
    pub params: Vec<Param>,
    pub insts: Vec<Inst>,
}

/// A kernel's identity: xxh3-128 of its binary encoding.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct KernelHash(pub u128);

impl fmt::Display for KernelHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:032x}", self.0)
    }
}

impl Kernel {
    /// The cache key. Stable across runs and processes (it hashes the IR, not addresses).
    pub fn hash(&self) -> KernelHash {
        let mut bytes = Vec::with_capacity(8 + self.params.len() * 2 + self.insts.len() * 24);
        bytes.extend_from_slice(&(self.params.len() as u32).to_le_bytes());
        for p in &self.params {
            bytes.push(p.ty as u8);
            bytes.push(p.kind as u8);
        }
        for i in &self.insts {
            bytes.extend_from_slice(&op_code(i.op).to_le_bytes());
            bytes.push(i.ty as u8);
            for a in i.args {
                bytes.extend_from_slice(&a.to_le_bytes());
            }
            bytes.extend_from_slice(&i.imm.to_le_bytes());
        }
        KernelHash(xxhash_rust::xxh3::xxh3_128(&bytes))
    }

    /// Number of instructions.
    pub fn len(&self) -> usize {
        self.insts.len()
    }
    pub fn is_empty(&self) -> bool {
        self.insts.is_empty()
    }
    /// Type of register `r`.
    pub fn ty(&self, r: Reg) -> VarType {
        self.insts[r as usize].ty
    }

    /// Check the IR's invariants; returns every problem found, each naming the instruction.
    pub fn verify(&self) -> Result<(), Vec<String>> {
        let mut errs = Vec::new();
        for (idx, inst) in self.insts.iter().enumerate() {
            let here = |msg: String| format!("kernel r{idx} ({}): {msg}", inst.op);
            for &a in inst.operands() {
                if a as usize >= idx {
                    errs.push(here(format!("operand r{a} is not defined before use")));
                } else if !self.insts[a as usize].has_value() {
                    errs.push(here(format!(
                        "operand r{a} ({}) has no value",
                        self.insts[a as usize].op
                    )));
                }
            }
            if errs
                .iter()
                .any(|e| e.starts_with(&format!("kernel r{idx} ")))
            {
                continue;
            }
            let t = |k: usize| self.insts[inst.args[k] as usize].ty;
            let expect = |errs: &mut Vec<String>, k: usize, want: VarType| {
                if t(k) != want {
                    errs.push(here(format!(
                        "operand r{} has type {}, expected {want}",
                        inst.args[k],
                        t(k)
                    )));
                }
            };
            let param = |errs: &mut Vec<String>, kinds: &[ParamKind]| -> Option<Param> {
                match self.params.get(inst.imm as usize) {
                    None => {
                        errs.push(here(format!("parameter p{} does not exist", inst.imm)));
                        None
                    }
                    Some(p) if !kinds.contains(&p.kind) => {
                        errs.push(here(format!(
                            "parameter p{} is {:?}, expected one of {kinds:?}",
                            inst.imm, p.kind
                        )));
                        None
                    }
                    Some(p) => Some(*p),
                }
            };
            // masks: Add/Sub/Mul/Min/Max act as or/xor/and/and/or (see op.rs); division has no meaning
            if inst.ty.is_bool() && matches!(inst.op, Op::Div | Op::Rem) {
                errs.push(here("masks do not support division".into()));
            }
            match inst.op {
                Op::Literal => {
                    if inst.imm & !inst.ty.bit_mask() != 0 {
                        errs.push(here(format!(
                            "literal {:#x} does not fit {}",
                            inst.imm, inst.ty
                        )));
                    }
                }
                Op::Data => {}
                Op::Counter => {
                    if !inst.ty.is_int() {
                        errs.push(here(format!("index must be an integer, not {}", inst.ty)));
                    }
                }
                Op::Load => {
                    if let Some(p) = param(&mut errs, &[ParamKind::Input, ParamKind::Broadcast]) {
                        if p.ty != inst.ty {
                            errs.push(here(format!("loads {} from a {} parameter", inst.ty, p.ty)));
                        }
                    }
                }
                Op::Store => {
                    expect(&mut errs, 0, inst.ty);
                    if let Some(p) = param(&mut errs, &[ParamKind::Output]) {
                        if p.ty != inst.ty {
                            errs.push(here(format!(
                                "stores {} into a {} parameter",
                                inst.ty, p.ty
                            )));
                        }
                    }
                }
                Op::Gather => {
                    if !t(0).is_int() {
                        errs.push(here(format!(
                            "index r{} has type {}, expected an integer",
                            inst.args[0],
                            t(0)
                        )));
                    }
                    expect(&mut errs, 1, VarType::Bool);
                    if let Some(p) = param(&mut errs, &[ParamKind::Indexed]) {
                        if p.ty != inst.ty {
                            errs.push(here(format!(
                                "gathers {} from a {} parameter",
                                inst.ty, p.ty
                            )));
                        }
                    }
                }
                Op::Scatter(_) => {
                    expect(&mut errs, 0, inst.ty);
                    if !t(1).is_int() {
                        errs.push(here(format!(
                            "index r{} has type {}, expected an integer",
                            inst.args[1],
                            t(1)
                        )));
                    }
                    expect(&mut errs, 2, VarType::Bool);
                    if let Some(p) = param(&mut errs, &[ParamKind::Indexed]) {
                        if p.ty != inst.ty {
                            errs.push(here(format!(
                                "scatters {} into a {} parameter",
                                inst.ty, p.ty
                            )));
                        }
                    }
                }
                Op::Cast => {}
                Op::Bitcast => {
                    if t(0).size_bytes() != inst.ty.size_bytes() || t(0).is_bool() {
                        errs.push(here(format!(
                            "bitcast from {} to {} changes the width",
                            t(0),
                            inst.ty
                        )));
                    }
                }
                Op::Select => {
                    expect(&mut errs, 0, VarType::Bool);
                    expect(&mut errs, 1, inst.ty);
                    expect(&mut errs, 2, inst.ty);
                }
                op if op.is_comparison() => {
                    if inst.ty != VarType::Bool {
                        errs.push(here(format!(
                            "comparison yields {}, expected bool",
                            inst.ty
                        )));
                    }
                    expect(&mut errs, 1, t(0));
                }
                op => {
                    for k in 0..op.arity() {
                        expect(&mut errs, k, inst.ty);
                    }
                    let float_only =
                        matches!(op, Op::Sqrt | Op::Floor | Op::Ceil | Op::Round | Op::Trunc);
                    let int_only = matches!(op, Op::Rem | Op::Shl | Op::Shr);
                    if float_only && !inst.ty.is_float() {
                        errs.push(here(format!("{op} needs a float type, not {}", inst.ty)));
                    }
                    if int_only && !inst.ty.is_int() {
                        errs.push(here(format!("{op} needs an integer type, not {}", inst.ty)));
                    }
                }
            }
        }
        if errs.is_empty() {
            Ok(())
        } else {
            Err(errs)
        }
    }
}

fn op_code(op: Op) -> u16 {
    // Stable numbering for hashing: the position in `Op::name` order plus the reduce op.
    use crate::op::ReduceOp;
    match op {
        Op::Scatter(r) => {
            100 + match r {
                ReduceOp::None => 0,
                ReduceOp::Add => 1,
                ReduceOp::Mul => 2,
                ReduceOp::Min => 3,
                ReduceOp::Max => 4,
                ReduceOp::And => 5,
                ReduceOp::Or => 6,
            }
        }
        other => {
            let name = other.name();
            name.bytes()
                .fold(0u16, |h, b| h.wrapping_mul(31).wrapping_add(b as u16))
        }
    }
}

/// Formats a literal for the text form: the bits, plus the value for floats.
fn fmt_literal(ty: VarType, bits: u64) -> String {
    match ty {
        VarType::F32 => format!("{:#010x} ({:?})", bits as u32, f32::from_bits(bits as u32)),
        VarType::F64 => format!("{:#018x} ({:?})", bits, f64::from_bits(bits)),
        VarType::I32 => format!("{}", bits as u32 as i32),
        VarType::I64 => format!("{}", bits as i64),
        VarType::Bool => format!("{}", bits & 1 != 0),
        _ => format!("{bits}"),
    }
}

impl fmt::Display for Kernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "kernel {} ({} params, {} insts)",
            self.hash(),
            self.params.len(),
            self.insts.len()
        )?;
        for (i, p) in self.params.iter().enumerate() {
            let kind = match p.kind {
                ParamKind::Input => "in",
                ParamKind::Broadcast => "in.broadcast",
                ParamKind::Output => "out",
                ParamKind::Indexed => "indexed",
            };
            writeln!(f, "  p{i}: {kind} {}", p.ty)?;
        }
        for (i, inst) in self.insts.iter().enumerate() {
            let a = &inst.args;
            match inst.op {
                Op::Literal => writeln!(
                    f,
                    "  r{i} = const.{} {}",
                    inst.ty,
                    fmt_literal(inst.ty, inst.imm)
                )?,
                Op::Load => writeln!(f, "  r{i} = load.{} p{}", inst.ty, inst.imm)?,
                Op::Store => writeln!(f, "  store.{} p{}, r{}", inst.ty, inst.imm, a[0])?,
                Op::Gather => writeln!(
                    f,
                    "  r{i} = gather.{} p{}[r{}], mask r{}",
                    inst.ty, inst.imm, a[0], a[1]
                )?,
                Op::Scatter(_) => writeln!(
                    f,
                    "  {}.{} p{}[r{}] = r{}, mask r{}",
                    inst.op, inst.ty, inst.imm, a[1], a[0], a[2]
                )?,
                Op::Cast | Op::Bitcast => {
                    let from = self.insts[a[0] as usize].ty;
                    writeln!(f, "  r{i} = {}.{}.{} r{}", inst.op, from, inst.ty, a[0])?
                }
                op => {
                    let ops: Vec<String> =
                        inst.operands().iter().map(|r| format!("r{r}")).collect();
                    let sep = if ops.is_empty() { "" } else { " " };
                    if op.is_comparison() {
                        let t = self.insts[a[0] as usize].ty;
                        writeln!(f, "  r{i} = {op}.{t}{sep}{} -> bool", ops.join(", "))?
                    } else {
                        writeln!(f, "  r{i} = {}.{}{sep}{}", op, inst.ty, ops.join(", "))?
                    }
                }
            }
        }
        Ok(())
    }
}
