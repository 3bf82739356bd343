//! Kernel IR: what a backend compiles.
//!
//! A kernel is plain data: a list of buffer parameters and a flat, typed SSA list of instructions whose
//! registers are named by position (`r3` is the value of instruction 3). Literals are baked in as
//! immediates; buffers and the launch size are parameters, so the same work at another size, or over
//! other buffers, is the same kernel with the same 128-bit hash — the cache key. This module owns the
//! IR, its text form (`Display`, used in logs and golden tests, and `Kernel::parse`, its inverse, in
//! `parse`), its hash and its checker (`verify`).
//! It knows nothing about the registry (which builds kernels: `schedule`) or machine code (`backend`).
//!
//! Structured regions (loops, conditionals, indirect calls) are bracketed runs of instructions, kept
//! in the same flat list so that registers stay positions and hashing stays a byte walk:
//!
//! ```text
//! r5 = loop max=0          r9 = switch (call)
//! r6 = phi.u32 r2            case r7        ; lanes where r7 holds (masks are defined before)
//!   …condition…                …  yield 0, r11
//!   while r8                 case r8
//!   …body…                     …  yield 0, r14
//!   next r6, r12             endswitch r9
//! endloop r5               r16 = out.f32 r9[0]
//! ```
//!
//! A loop's phis follow its `loop` and are its results after `endloop`; nothing else defined inside
//! a region is visible after it. `verify` checks these rules.

use crate::op::Op;
use crate::ty::VarType;
use std::fmt;

mod parse;
mod remap;
pub use parse::ParseError;

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

/// Flag in a `Scatter`'s `imm` (above the parameter index): the scatter updates its target with
/// plain read-modify-writes, lane after lane; the launch must give each thread its own target
/// (see `privatise`). Part of the kernel's text and hash, so such kernels never share a cache
/// entry with their atomic twins.
pub const SCATTER_EXCLUSIVE: u64 = 1 << 32;

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
    /// The parameter a `Load`, `Store`, `Gather` or `Scatter` uses (`imm` less its flags).
    pub fn param(&self) -> usize {
        (self.imm & 0xffff_ffff) as usize
    }
    /// Whether a `Scatter` updates its target with plain (non-atomic) read-modify-writes: its
    /// launches guarantee that no two threads update one target copy (see `privatise`).
    pub fn exclusive(&self) -> bool {
        matches!(self.op, Op::Scatter(_)) && self.imm & SCATTER_EXCLUSIVE != 0
    }
    /// The operands actually used by this instruction.
    pub fn operands(&self) -> &[Reg] {
        &self.args[..self.op.arity()]
    }
    /// Whether the instruction defines a value (stores and scatters do not).
    pub fn has_value(&self) -> bool {
        !matches!(
            self.op,
            Op::Store
                | Op::Scatter(_)
                | Op::LoopBegin
                | Op::LoopCond
                | Op::LoopNext
                | Op::LoopEnd
                | Op::Switch
                | Op::Case
                | Op::Yield
                | Op::SwitchEnd
        )
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
    /// Whether output parameter `output` may be bound to the same buffer as input parameter
    /// `input` (update-in-place): the input is read only at each lane's own index (`Input`), it
    /// comes before the output in the parameter list (so a recording sees it first), and every
    /// read of it precedes, in program order, the store into the output — a lane then reads its
    /// element before it overwrites it, and no lane touches another's.
    pub fn may_alias(&self, input: usize, output: usize) -> bool {
        let (Some(i), Some(o)) = (self.params.get(input), self.params.get(output)) else {
            return false;
        };
        if i.kind != ParamKind::Input || o.kind != ParamKind::Output || input >= output {
            return false;
        }
        let first_store = self
            .insts
            .iter()
            .position(|x| x.op == Op::Store && x.imm as usize == output);
        let last_load = self
            .insts
            .iter()
            .rposition(|x| x.op == Op::Load && x.imm as usize == input);
        match (first_store, last_load) {
            (Some(s), Some(l)) => l < s,
            (Some(_), None) => true,
            (None, _) => false,
        }
    }

    /// Per parameter: for an output, the input parameters (bit `q` for parameter `q`, the first
    /// 64) every read of which precedes, in program order, the store into it — the inputs whose
    /// buffers a replay may hand the output when the caller gave them up (a lane reads its
    /// element before it overwrites it); 0 for every other parameter.
    pub fn takes(&self) -> Vec<u64> {
        // each parameter's last load and first store, in one walk
        let mut last_load = vec![None; self.params.len()];
        let mut first_store = vec![None; self.params.len()];
        for (i, x) in self.insts.iter().enumerate() {
            match x.op {
                Op::Load => last_load[x.param()] = Some(i),
                Op::Store if first_store[x.param()].is_none() => first_store[x.param()] = Some(i),
                _ => {}
            }
        }
        let mut out = vec![0u64; self.params.len()];
        for (o, store) in first_store.iter().enumerate() {
            let Some(store) = *store else { continue };
            for (q, p) in self.params.iter().enumerate().take(64) {
                if p.kind == ParamKind::Input && last_load[q].is_none_or(|l| l < store) {
                    out[o] |= 1 << q;
                }
            }
        }
        out
    }

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
        self.verify_regions(&mut errs);
        for (idx, inst) in self.insts.iter().enumerate() {
            let here = |msg: String| format!("kernel r{idx} ({}): {msg}", inst.op);
            if inst.op.is_region() {
                // operands of region markers are checked by `verify_regions`
                continue;
            }
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
                match self.params.get(inst.param()) {
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
                Op::Tap | Op::Split => {
                    errs.push(here("stencil nodes are resolved by the scheduler".into()))
                }
                Op::Reduce(_) => errs.push(here(
                    "pending reductions are resolved by the scheduler".into(),
                )),
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

/// One open region while checking (`verify_regions`).
struct Open {
    /// The instruction that opened it (`loop`, `switch` or `case`).
    at: usize,
    op: Op,
    /// Loop: its phis and whether each has its `next`; whether `while` was seen.
    phis: Vec<(Reg, bool)>,
    cond: bool,
    /// Loop: whether the phis are complete (another instruction came after them).
    phis_done: bool,
}

impl Kernel {
    /// The region rules (see the module comment): balanced, properly nested markers; phis right
    /// after their loop with initial values from outside it; one `while` per loop and one `next` per
    /// phi; cases directly inside a switch with masks from before it; yields inside cases; every
    /// operand visible where it is used (defined outside every region that has closed since).
    fn verify_regions(&self, errs: &mut Vec<String>) {
        let n = self.insts.len();
        // scope[r]: the innermost region open when r was defined (phis and outs: the enclosing one)
        let mut scope: Vec<Option<usize>> = vec![None; n];
        let mut parent: std::collections::HashMap<usize, Option<usize>> = Default::default();
        let mut open: Vec<Open> = Vec::new();
        // switch register -> yielded slot types
        let mut yields: std::collections::HashMap<usize, Vec<Option<VarType>>> = Default::default();
        let ty = |r: Reg| self.insts[r as usize].ty;
        for (idx, inst) in self.insts.iter().enumerate() {
            let here = |msg: String| format!("kernel r{idx} ({}): {msg}", inst.op);
            let cur = open.last().map(|o| o.at);
            let visible = |a: Reg, from: Option<usize>| -> bool {
                let mut s = from;
                let target = scope[a as usize];
                loop {
                    if s == target {
                        return true;
                    }
                    match s {
                        None => return false,
                        Some(x) => s = parent[&x],
                    }
                }
            };
            for &a in inst.operands() {
                if a as usize >= idx {
                    errs.push(here(format!("operand r{a} is not defined before use")));
                    return;
                }
            }
            if let Some(o) = open.last_mut() {
                if o.op == Op::LoopBegin && inst.op != Op::Phi {
                    o.phis_done = true;
                }
                if o.op == Op::Switch && inst.op != Op::Case && inst.op != Op::SwitchEnd {
                    errs.push(here("only cases may follow a switch directly".into()));
                }
            }
            let needs_value = |errs: &mut Vec<String>, a: Reg| {
                if !self.insts[a as usize].has_value() {
                    errs.push(here(format!(
                        "operand r{a} ({}) has no value",
                        self.insts[a as usize].op
                    )));
                    false
                } else if !visible(a, cur) {
                    errs.push(here(format!(
                        "operand r{a} is defined inside a region that has ended"
                    )));
                    false
                } else {
                    true
                }
            };
            let mut my_scope = cur;
            let mut new_parent: Option<Option<usize>> = None;
            match inst.op {
                Op::LoopBegin | Op::Switch => {
                    new_parent = Some(cur);
                    open.push(Open {
                        at: idx,
                        op: inst.op,
                        phis: Vec::new(),
                        cond: false,
                        phis_done: false,
                    });
                }
                Op::Phi => match open.last_mut() {
                    Some(o) if o.op == Op::LoopBegin && !o.phis_done => {
                        o.phis.push((idx as Reg, false));
                        let a = inst.args[0];
                        my_scope = parent[&o.at];
                        if (a as usize) > o.at {
                            errs.push(here(format!(
                                "initial value r{a} is defined inside the loop"
                            )));
                        } else if needs_value(errs, a) && ty(a) != inst.ty {
                            errs.push(here(format!(
                                "initial value r{a} has type {}, expected {}",
                                ty(a),
                                inst.ty
                            )));
                        }
                    }
                    _ => errs.push(here(
                        "a phi must directly follow its loop or another phi".into(),
                    )),
                },
                Op::LoopCond => {
                    let a = inst.args[0];
                    if needs_value(errs, a) && ty(a) != VarType::Bool {
                        errs.push(here(format!(
                            "condition r{a} has type {}, expected bool",
                            ty(a)
                        )));
                    }
                    match open.last_mut() {
                        Some(o) if o.op == Op::LoopBegin => {
                            if o.cond {
                                errs.push(here("a loop has one condition".into()));
                            }
                            o.cond = true;
                        }
                        _ => errs.push(here("a condition must be directly inside a loop".into())),
                    }
                }
                Op::LoopNext => {
                    let (p, v) = (inst.args[0], inst.args[1]);
                    needs_value(errs, v);
                    match open.last_mut() {
                        Some(o) if o.op == Op::LoopBegin && o.cond => {
                            match o.phis.iter_mut().find(|(r, _)| *r == p) {
                                Some((_, seen)) if !*seen => *seen = true,
                                Some(_) => errs.push(here(format!("phi r{p} has two next values"))),
                                None => errs.push(here(format!("r{p} is not a phi of this loop"))),
                            }
                            if self.insts[p as usize].op == Op::Phi && ty(v) != ty(p) {
                                errs.push(here(format!(
                                    "next value r{v} has type {}, phi r{p} is {}",
                                    ty(v),
                                    ty(p)
                                )));
                            }
                        }
                        _ => errs.push(here(
                            "next values go directly inside a loop, after its condition".into(),
                        )),
                    }
                }
                Op::LoopEnd => match open.pop() {
                    Some(o) if o.op == Op::LoopBegin && o.at == inst.args[0] as usize => {
                        if !o.cond {
                            errs.push(here("the loop has no condition".into()));
                        }
                        for (r, seen) in o.phis {
                            if !seen {
                                errs.push(here(format!("phi r{r} has no next value")));
                            }
                        }
                    }
                    _ => {
                        errs.push(here(format!(
                            "r{} is not the innermost open loop",
                            inst.args[0]
                        )));
                        return;
                    }
                },
                Op::Case => {
                    // close the previous case of the same switch
                    if open.last().is_some_and(|o| o.op == Op::Case) {
                        open.pop();
                    }
                    match open.last() {
                        Some(o) if o.op == Op::Switch => {
                            let sw = o.at;
                            let a = inst.args[0];
                            if (a as usize) > sw {
                                errs.push(here(format!("mask r{a} is defined inside the switch")));
                            } else {
                                let outer = parent[&sw];
                                if !self.insts[a as usize].has_value() || !visible(a, outer) {
                                    errs.push(here(format!("mask r{a} is not visible here")));
                                } else if ty(a) != VarType::Bool {
                                    errs.push(here(format!(
                                        "mask r{a} has type {}, expected bool",
                                        ty(a)
                                    )));
                                }
                            }
                            new_parent = Some(Some(sw));
                            open.push(Open {
                                at: idx,
                                op: Op::Case,
                                phis: Vec::new(),
                                cond: false,
                                phis_done: true,
                            });
                        }
                        _ => {
                            errs.push(here("a case must be directly inside a switch".into()));
                            return;
                        }
                    }
                }
                Op::Yield => {
                    let a = inst.args[0];
                    needs_value(errs, a);
                    match open.last() {
                        Some(o) if o.op == Op::Case => {
                            let sw = parent[&o.at].expect("a case has a switch");
                            let slots = yields.entry(sw).or_default();
                            let j = inst.imm as usize;
                            if j >= 1 << 16 {
                                errs.push(here(format!("output {j} is out of range")));
                                return;
                            }
                            if slots.len() <= j {
                                slots.resize(j + 1, None);
                            }
                            match slots[j] {
                                Some(t) if t != ty(a) => errs.push(here(format!(
                                    "output {j} is {t} in another case, here {}",
                                    ty(a)
                                ))),
                                _ => slots[j] = Some(ty(a)),
                            }
                        }
                        _ => errs.push(here("a yield must be directly inside a case".into())),
                    }
                }
                Op::SwitchEnd => {
                    if open.last().is_some_and(|o| o.op == Op::Case) {
                        open.pop();
                    }
                    match open.pop() {
                        Some(o) if o.op == Op::Switch && o.at == inst.args[0] as usize => {}
                        _ => {
                            errs.push(here(format!(
                                "r{} is not the innermost open switch",
                                inst.args[0]
                            )));
                            return;
                        }
                    }
                }
                Op::Out => {
                    let sw = inst.args[0] as usize;
                    if self.insts[sw].op != Op::Switch || open.iter().any(|o| o.at == sw) {
                        errs.push(here(format!("r{sw} is not a closed switch")));
                    } else if !visible(sw as Reg, cur) {
                        errs.push(here(format!("switch r{sw} is not visible here")));
                    } else {
                        match yields
                            .get(&sw)
                            .and_then(|s| s.get(inst.imm as usize).copied().flatten())
                        {
                            Some(t) if t != inst.ty => errs.push(here(format!(
                                "output {} is {t}, read as {}",
                                inst.imm, inst.ty
                            ))),
                            Some(_) => {}
                            None => errs.push(here(format!("no case yields output {}", inst.imm))),
                        }
                    }
                }
                Op::Store if cur.is_some() => {
                    errs.push(here("stores go outside every region".into()))
                }
                _ => {
                    for &a in inst.operands() {
                        if self.insts[a as usize].has_value() && !visible(a, cur) {
                            errs.push(here(format!(
                                "operand r{a} is defined inside a region that has ended"
                            )));
                        }
                    }
                }
            }
            scope[idx] = my_scope;
            if let Some(p) = new_parent {
                parent.insert(idx, p);
            }
        }
        for o in open {
            errs.push(format!(
                "kernel r{} ({}): region is never closed",
                o.at, o.op
            ));
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

/// Formats a literal for the text form: the bits, plus the value for floats. Bits a plain form
/// would not give back (set above the type's width, a `bool` other than 0 or 1) are printed raw,
/// `bits=0x…`, so that the text always parses back to the same kernel.
fn fmt_literal(ty: VarType, bits: u64) -> String {
    let canonical = match ty {
        VarType::Bool => bits <= 1,
        _ => bits & ty.bit_mask() == bits,
    };
    if !canonical {
        return format!("bits={bits:#x}");
    }
    match ty {
        VarType::F32 => format!("{:#010x} ({:?})", bits as u32, f32::from_bits(bits as u32)),
        VarType::F64 => format!("{:#018x} ({:?})", bits, f64::from_bits(bits)),
        VarType::I32 => format!("{}", bits as u32 as i32),
        VarType::I64 => format!("{}", bits as i64),
        VarType::Bool => format!("{}", bits & 1 != 0),
        _ => format!("{bits}"),
    }
}

/// The type a region marker or a loop/switch operand has when the text does not name it: `bool`
/// for the markers, the phi's type for `next`, the value's type for `yield` (what the scheduler
/// builds). Any other type is printed after the keyword (`next.f64 r7, r9`).
pub(crate) fn default_marker_type(insts: &[Inst], inst: &Inst) -> VarType {
    match inst.op {
        // (`next`'s first operand is the phi, `yield`'s the value)
        Op::LoopNext | Op::Yield => insts
            .get(inst.args[0] as usize)
            .map_or(VarType::Bool, |x| x.ty),
        _ => VarType::Bool,
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
        let mut depth = 0usize;
        for (i, inst) in self.insts.iter().enumerate() {
            let a = &inst.args;
            if matches!(inst.op, Op::LoopEnd | Op::SwitchEnd) {
                // a switch's open case closes with it
                let case_open = inst.op == Op::SwitchEnd
                    && self.insts[a[0] as usize + 1..i]
                        .iter()
                        .any(|x| x.op == Op::Case);
                depth = depth.saturating_sub(1 + usize::from(case_open));
            } else if inst.op == Op::Case {
                let first = self.insts[i - 1].op == Op::Switch;
                if !first {
                    depth = depth.saturating_sub(1);
                }
            }
            write!(f, "{}", "  ".repeat(depth))?;
            // region markers name their type only where it is not the default (see
            // `default_marker_type`); any other op's nonzero `imm` is printed as `imm=N`
            let marker_ty = if inst.ty == default_marker_type(&self.insts, inst) {
                String::new()
            } else {
                format!(".{}", inst.ty)
            };
            let extra = |shown: bool| {
                if shown || inst.imm == 0 {
                    String::new()
                } else {
                    format!(" imm={}", inst.imm)
                }
            };
            match inst.op {
                Op::LoopBegin => {
                    depth += 1;
                    if inst.imm == 0 {
                        writeln!(f, "  r{i} = loop{marker_ty}")?
                    } else {
                        writeln!(f, "  r{i} = loop{marker_ty} max={}", inst.imm)?
                    }
                }
                Op::Phi => writeln!(f, "  r{i} = phi.{} r{}{}", inst.ty, a[0], extra(false))?,
                Op::LoopCond => writeln!(f, "  while{marker_ty} r{}{}", a[0], extra(false))?,
                Op::LoopNext => {
                    writeln!(f, "  next{marker_ty} r{}, r{}{}", a[0], a[1], extra(false))?
                }
                Op::LoopEnd => writeln!(f, "  endloop{marker_ty} r{}{}", a[0], extra(false))?,
                Op::Switch => {
                    depth += 1;
                    let kind = match inst.imm {
                        0 => "if".to_string(),
                        1 => "call".to_string(),
                        k => format!("kind {k}"),
                    };
                    writeln!(f, "  r{i} = switch{marker_ty} ({kind})")?
                }
                Op::Case => {
                    depth += 1;
                    writeln!(f, "  case{marker_ty} r{}{}", a[0], extra(false))?
                }
                Op::Yield => writeln!(f, "  yield{marker_ty} {}, r{}", inst.imm, a[0])?,
                Op::SwitchEnd => writeln!(f, "  endswitch{marker_ty} r{}{}", a[0], extra(false))?,
                Op::Out => writeln!(f, "  r{i} = out.{} r{}[{}]", inst.ty, a[0], inst.imm)?,
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
                    "  {}.{} p{}[r{}] = r{}, mask r{}{}",
                    inst.op,
                    inst.ty,
                    inst.param(),
                    a[1],
                    a[0],
                    a[2],
                    if inst.exclusive() { ", exclusive" } else { "" }
                )?,
                Op::Cast | Op::Bitcast => {
                    let from = self.insts[a[0] as usize].ty;
                    writeln!(
                        f,
                        "  r{i} = {}.{}.{} r{}{}",
                        inst.op,
                        from,
                        inst.ty,
                        a[0],
                        extra(false)
                    )?
                }
                op => {
                    let ops: Vec<String> =
                        inst.operands().iter().map(|r| format!("r{r}")).collect();
                    let sep = if ops.is_empty() { "" } else { " " };
                    let imm = extra(false);
                    if op.is_comparison() {
                        let t = self.insts[a[0] as usize].ty;
                        let (ops, ty) = (ops.join(", "), inst.ty);
                        writeln!(f, "  r{i} = {op}.{t}{sep}{ops} -> {ty}{imm}")?
                    } else {
                        writeln!(f, "  r{i} = {}.{}{sep}{}{imm}", op, inst.ty, ops.join(", "))?
                    }
                }
            }
        }
        Ok(())
    }
}
