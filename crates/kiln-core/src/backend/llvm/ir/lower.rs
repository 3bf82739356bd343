//! Per-op lowering: each kernel instruction as vector LLVM IR (arithmetic, casts, comparisons,
//! math calls, selects), following `op`'s scalar semantics exactly.

use super::*;

impl Gen<'_> {
    pub(super) fn inst(&mut self, idx: Reg, inst: &crate::kernel::Inst) {
        let k = self.k;
        let w = self.w;
        let t = inst.ty;
        let vt = self.vt(t);
        let dst = self.r(idx);
        let pf = self.pfx;
        let a = |j: usize| format!("%{pf}{}", inst.args[j]);
        let aty = |j: usize| k.ty(inst.args[j]);
        match inst.op {
            Op::Literal => {
                let bits_v = inst.imm & t.bit_mask();
                match t {
                    VarType::F32 | VarType::F64 => {
                        let it = self.v(ity(t));
                        let c = self.splat_const(ity(t), &bits_v.to_string());
                        self.line(format!("{dst} = bitcast {it} {c} to {vt}"));
                    }
                    VarType::Bool => {
                        let c = self.splat_const("i1", if bits_v != 0 { "true" } else { "false" });
                        self.line(format!("{dst} = or {vt} {c}, zeroinitializer"));
                    }
                    _ => {
                        let c = self.splat_const(sty(t), &(bits_v as i64).to_string());
                        self.line(format!("{dst} = or {vt} {c}, zeroinitializer"));
                    }
                }
            }
            Op::Counter => {
                let lanes = self.lane_index();
                let it = self.v(ity(t));
                match ity(t) {
                    "i64" => {
                        self.line(format!("{dst}.i = or {it} {lanes}, zeroinitializer"));
                    }
                    _ => self.line(format!("{dst}.i = trunc <{w} x i64> {lanes} to {it}")),
                }
                if t.is_float() {
                    self.line(format!("{dst} = bitcast {it} {dst}.i to {vt}"));
                } else {
                    self.line(format!("{dst} = or {vt} {dst}.i, zeroinitializer"));
                }
            }
            Op::Data | Op::Tap | Op::Split | Op::Reduce(_) => {
                unreachable!("registry-only ops never appear in kernels")
            }
            Op::Load => {
                let p = inst.imm as usize;
                if k.params[p].kind == ParamKind::Broadcast {
                    let s = self.splat(sty(t), &format!("%bc{p}"));
                    self.copy(&dst, t, &s);
                    return;
                }
                let m = mty(t);
                let mv = self.v(m);
                let loaded = if t == VarType::Bool {
                    self.fresh()
                } else {
                    dst.clone()
                };
                let align = t.size_bytes();
                self.line(format!(
                    "{loaded} = load {mv}, ptr %{pf}ptr{p}, align {align}"
                ));
                if t == VarType::Bool {
                    self.line(format!("{dst} = trunc {mv} {loaded} to {vt}"));
                }
            }
            Op::Store => {
                let p = inst.imm as usize;
                let m = mty(t);
                let mv = self.v(m);
                let val = if t == VarType::Bool {
                    let z = self.fresh();
                    self.line(format!("{z} = zext {vt} {} to {mv}", a(0)));
                    z
                } else {
                    a(0)
                };
                let streamed = self.streaming && t.size_bytes() >= 4;
                // (the streaming loop runs from a 32-byte aligned lane; see `streamed_outputs`)
                let align = if streamed && (self.w * t.size_bytes()) % 32 == 0 {
                    32
                } else {
                    t.size_bytes()
                };
                let nt = if streamed { ", !nontemporal !0" } else { "" };
                self.line(format!(
                    "store {mv} {val}, ptr %{pf}ptr{p}, align {align}{nt}"
                ));
            }
            Op::Neg => match t {
                VarType::F32 | VarType::F64 => self.line(format!("{dst} = fneg {vt} {}", a(0))),
                VarType::Bool => self.line(format!("{dst} = or {vt} {}, zeroinitializer", a(0))),
                _ => self.line(format!("{dst} = sub {vt} zeroinitializer, {}", a(0))),
            },
            Op::Not => {
                let it = self.v(ity(t));
                let ones = self.splat_const(ity(t), if t == VarType::Bool { "true" } else { "-1" });
                if t.is_float() {
                    let x = self.fresh();
                    let y = self.fresh();
                    self.line(format!("{x} = bitcast {vt} {} to {it}", a(0)));
                    self.line(format!("{y} = xor {it} {x}, {ones}"));
                    self.line(format!("{dst} = bitcast {it} {y} to {vt}"));
                } else {
                    self.line(format!("{dst} = xor {vt} {}, {ones}", a(0)));
                }
            }
            Op::Abs => match t {
                VarType::F32 | VarType::F64 => self.call1(&dst, "fabs", t, &a(0)),
                VarType::I32 | VarType::I64 => {
                    let f = format!("llvm.abs.v{w}{}", mangle(sty(t)));
                    self.declare(format!("declare {vt} @{f}({vt}, i1)"));
                    self.line(format!("{dst} = call {vt} @{f}({vt} {}, i1 false)", a(0)));
                }
                _ => self.copy(&dst, t, &a(0)),
            },
            Op::Sqrt | Op::Floor | Op::Ceil | Op::Round | Op::Trunc => {
                if t.is_float() {
                    let name = match inst.op {
                        Op::Sqrt => "sqrt",
                        Op::Floor => "floor",
                        Op::Ceil => "ceil",
                        Op::Round => "roundeven",
                        _ => "trunc",
                    };
                    self.call1(&dst, name, t, &a(0));
                } else {
                    self.copy(&dst, t, &a(0));
                }
            }
            Op::Cast => self.cast(&dst, aty(0), t, &a(0)),
            Op::Bitcast => {
                if sty(aty(0)) == sty(t) {
                    self.copy(&dst, t, &a(0));
                } else {
                    let from = self.vt(aty(0));
                    self.line(format!("{dst} = bitcast {from} {} to {vt}", a(0)));
                }
            }
            Op::Min | Op::Max if t.is_float() && self.ordinary_literal(inst).is_some() => {
                // against a literal that is neither NaN nor zero, `c < x ? c : x` (or `>`) is
                // exact: a NaN `x` fails the comparison and comes through, and `x == c` means
                // the same bits. x86 does this in one instruction (minps/maxps).
                let j = self.ordinary_literal(inst).expect("checked");
                let (c, x) = (a(j), a(1 - j));
                let cmp = if inst.op == Op::Min { "olt" } else { "ogt" };
                let m = self.fresh();
                self.line(format!("{m} = fcmp {cmp} {vt} {c}, {x}"));
                self.line(format!("{dst} = select <{w} x i1> {m}, {vt} {c}, {vt} {x}"));
            }
            Op::Add
            | Op::Sub
            | Op::Mul
            | Op::Div
            | Op::Rem
            | Op::Min
            | Op::Max
            | Op::And
            | Op::Or
            | Op::Xor
            | Op::Shl
            | Op::Shr => self.binary(inst.op, &dst, t, &a(0), &a(1)),
            Op::Eq | Op::Ne | Op::Lt | Op::Le | Op::Gt | Op::Ge => {
                let ot = aty(0);
                let ovt = self.vt(ot);
                let (x, y) = (a(0), a(1));
                let cc = if ot.is_float() {
                    match inst.op {
                        Op::Eq => "fcmp oeq",
                        Op::Ne => "fcmp une",
                        Op::Lt => "fcmp olt",
                        Op::Le => "fcmp ole",
                        Op::Gt => "fcmp ogt",
                        _ => "fcmp oge",
                    }
                } else {
                    let s = ot.is_signed();
                    match inst.op {
                        Op::Eq => "icmp eq",
                        Op::Ne => "icmp ne",
                        Op::Lt if s => "icmp slt",
                        Op::Le if s => "icmp sle",
                        Op::Gt if s => "icmp sgt",
                        Op::Ge if s => "icmp sge",
                        Op::Lt => "icmp ult",
                        Op::Le => "icmp ule",
                        Op::Gt => "icmp ugt",
                        _ => "icmp uge",
                    }
                };
                self.line(format!("{dst} = {cc} {ovt} {x}, {y}"));
            }
            Op::Fma => {
                let (x, y, z) = (a(0), a(1), a(2));
                match t {
                    VarType::F32 | VarType::F64 => {
                        let f = format!("llvm.fma.v{w}{}", mangle(sty(t)));
                        self.declare(format!("declare {vt} @{f}({vt}, {vt}, {vt})"));
                        self.line(format!(
                            "{dst} = call {vt} @{f}({vt} {x}, {vt} {y}, {vt} {z})"
                        ));
                    }
                    VarType::Bool => {
                        let p = self.fresh();
                        self.line(format!("{p} = and {vt} {x}, {y}"));
                        self.line(format!("{dst} = or {vt} {p}, {z}"));
                    }
                    _ => {
                        let p = self.fresh();
                        self.line(format!("{p} = mul {vt} {x}, {y}"));
                        self.line(format!("{dst} = add {vt} {p}, {z}"));
                    }
                }
            }
            Op::Select => {
                let mv = self.v("i1");
                self.line(format!(
                    "{dst} = select {mv} {}, {vt} {}, {vt} {}",
                    a(0),
                    a(1),
                    a(2)
                ));
            }
            Op::Gather => self.gather(idx, inst),
            Op::Scatter(_) => self.scatter(inst),
            Op::LoopBegin => self.loop_begin(idx),
            Op::Phi => {
                self.line(format!("{dst} = load {vt}, ptr %{}phi{idx}", self.pfx));
            }
            Op::LoopCond => self.loop_cond(inst),
            Op::LoopNext => {
                let phi = inst.args[0];
                let pt = k.ty(phi);
                let pvt = self.vt(pt);
                // a uniform loop updates every lane: its condition is read from lane 0, so its
                // uniform phis must stay equal in all lanes (the lanes that did not enter are
                // never observed)
                let body_active = self.regions.iter().rev().find_map(|r| match r {
                    Region::Loop { uniform: true, .. } => Some(None),
                    Region::Loop { body_active, .. } => Some(body_active.clone()),
                    _ => None,
                });
                let next = match body_active.flatten() {
                    // lanes outside the body keep their values (unobserved ones may change)
                    None => a(1),
                    Some(m) => {
                        let s = self.fresh();
                        self.line(format!(
                            "{s} = select <{w} x i1> {m}, {pvt} {}, {pvt} {}",
                            a(1),
                            self.r(phi)
                        ));
                        s
                    }
                };
                self.line(format!("store {pvt} {next}, ptr %{}phi{phi}", self.pfx));
            }
            Op::LoopEnd => self.loop_end(),
            Op::Switch => {
                self.switch_begin(idx);
            }
            Op::Case => self.case(inst),
            Op::Yield => {
                let sw = match self.regions.last() {
                    Some(Region::Switch { reg, .. }) => *reg,
                    _ => unreachable!("verified: yields sit in a switch"),
                };
                let yt = aty(0);
                let yvt = self.vt(yt);
                let slot = format!("%{}sw{sw}_{}", self.pfx, inst.imm);
                let old = self.fresh();
                self.line(format!("{old} = load {yvt}, ptr {slot}"));
                let new = match self.active.clone() {
                    None => a(0),
                    Some(m) => {
                        let s = self.fresh();
                        self.line(format!(
                            "{s} = select <{w} x i1> {m}, {yvt} {}, {yvt} {old}",
                            a(0)
                        ));
                        s
                    }
                };
                self.line(format!("store {yvt} {new}, ptr {slot}"));
            }
            Op::SwitchEnd => self.switch_end(),
            Op::Out => {
                let sw = inst.args[0];
                let slot = format!("%{}sw{sw}_{}", self.pfx, inst.imm);
                if self.switch_slots(sw).iter().any(|&(j, _)| j == inst.imm) {
                    self.line(format!("{dst} = load {vt}, ptr {slot}"));
                } else {
                    self.line(format!(
                        "{dst} = select i1 true, {vt} zeroinitializer, {vt} zeroinitializer"
                    ));
                }
            }
        }
    }

    /// Which operand (0 or 1) of a float binary op is a literal other than NaN and ±0.
    pub(super) fn ordinary_literal(&self, inst: &crate::kernel::Inst) -> Option<usize> {
        (0..2).find(|&j| {
            let d = &self.k.insts[inst.args[j] as usize];
            if d.op != Op::Literal {
                return false;
            }
            let v = match d.ty {
                VarType::F32 => f32::from_bits(d.imm as u32) as f64,
                VarType::F64 => f64::from_bits(d.imm),
                _ => return false,
            };
            !v.is_nan() && v != 0.0
        })
    }

    pub(super) fn copy(&mut self, dst: &str, t: VarType, x: &str) {
        let vt = self.vt(t);
        self.line(format!("{dst} = select i1 true, {vt} {x}, {vt} {x}"));
    }

    pub(super) fn cast(&mut self, dst: &str, from: VarType, to: VarType, x: &str) {
        use VarType::*;
        let fv = self.vt(from);
        let tv = self.vt(to);
        if from == to || (sty(from) == sty(to) && !from.is_float() && from != Bool) {
            // same bits: integers of one width reinterpret (Rust `as` wraps)
            self.copy(dst, to, x);
            return;
        }
        if to == Bool {
            let z = if from.is_float() {
                format!("fcmp une {fv} {x}, zeroinitializer")
            } else {
                format!("icmp ne {fv} {x}, zeroinitializer")
            };
            self.line(format!("{dst} = {z}"));
            return;
        }
        let op = match (from, to) {
            (Bool, F32 | F64) => "uitofp",
            (Bool, _) => "zext",
            (F32, F64) => "fpext",
            (F64, F32) => "fptrunc",
            (F32 | F64, _) => {
                self.float_to_int(dst, from, to, x);
                return;
            }
            (I32 | I64, F32 | F64) => "sitofp",
            (_, F32 | F64) => "uitofp",
            _ => {
                if bits(from) > bits(to) {
                    "trunc"
                } else if from.is_signed() {
                    "sext"
                } else {
                    "zext"
                }
            }
        };
        self.line(format!("{dst} = {op} {fv} {x} to {tv}"));
    }

    /// Float to integer as Rust's `as` converts (toward zero, saturating at the type's bounds,
    /// NaN to 0), written out with compares and selects around a plain conversion of the lanes
    /// in range: LLVM 14/15 turn the `fptosi.sat`/`fptoui.sat` intrinsics on vectors into one
    /// branchy scalar conversion per lane, a stencil's coordinate arithmetic's main cost.
    fn float_to_int(&mut self, dst: &str, from: VarType, to: VarType, x: &str) {
        let fv = self.vt(from);
        let tv = self.vt(to);
        let n = bits(to) as i32;
        // the lanes converted as they are: [lo, hi) signed, (-1, hi) unsigned (bounds powers of
        // two, exact in both float types); below and above saturate, NaN fails both compares
        let (lo, hi, below_op, min, max) = if to.is_signed() {
            let half = 2f64.powi(n - 1);
            let max = if n == 64 {
                i64::MAX.to_string()
            } else {
                i32::MAX.to_string()
            };
            let min = if n == 64 {
                i64::MIN.to_string()
            } else {
                i32::MIN.to_string()
            };
            (-half, half, "oge", min, max)
        } else {
            (-1.0, 2f64.powi(n), "ogt", "0".to_string(), "-1".to_string())
        };
        let flit = |v: f64| format!("0x{:016X}", v.to_bits());
        let (lo_v, hi_v) = (
            self.splat_const(sty(from), &flit(lo)),
            self.splat_const(sty(from), &flit(hi)),
        );
        let [above_lo, below_hi, inside, safe, plain, big, r1, small] = self.fresh_n();
        self.line(format!("{above_lo} = fcmp {below_op} {fv} {x}, {lo_v}"));
        self.line(format!("{below_hi} = fcmp olt {fv} {x}, {hi_v}"));
        let mv = self.v("i1");
        self.line(format!("{inside} = and {mv} {above_lo}, {below_hi}"));
        self.line(format!(
            "{safe} = select {mv} {inside}, {fv} {x}, {fv} zeroinitializer"
        ));
        let conv = if to.is_signed() { "fptosi" } else { "fptoui" };
        self.line(format!("{plain} = {conv} {fv} {safe} to {tv}"));
        self.line(format!("{big} = fcmp oge {fv} {x}, {hi_v}"));
        let max_v = self.splat_const(sty(to), &max);
        self.line(format!(
            "{r1} = select {mv} {big}, {tv} {max_v}, {tv} {plain}"
        ));
        let low_cmp = if to.is_signed() { "olt" } else { "ole" };
        self.line(format!("{small} = fcmp {low_cmp} {fv} {x}, {lo_v}"));
        let min_v = self.splat_const(sty(to), &min);
        self.line(format!(
            "{dst} = select {mv} {small}, {tv} {min_v}, {tv} {r1}"
        ));
    }

    pub(super) fn binary(&mut self, op: Op, dst: &str, t: VarType, x: &str, y: &str) {
        let vt = self.vt(t);
        let w = self.w;
        if t == VarType::Bool {
            let o = match op {
                Op::And | Op::Mul | Op::Min => "and",
                Op::Or | Op::Add | Op::Max => "or",
                _ => "xor",
            };
            self.line(format!("{dst} = {o} {vt} {x}, {y}"));
            return;
        }
        if t.is_float() {
            match op {
                Op::Add | Op::Sub | Op::Mul | Op::Div | Op::Rem => {
                    let o = match op {
                        Op::Add => "fadd",
                        Op::Sub => "fsub",
                        Op::Mul => "fmul",
                        Op::Div => "fdiv",
                        _ => "frem",
                    };
                    self.line(format!("{dst} = {o} {vt} {x}, {y}"));
                }
                Op::And | Op::Or | Op::Xor | Op::Shl | Op::Shr => {
                    let it = self.v(ity(t));
                    let (xi, yi, r) = (self.fresh(), self.fresh(), self.fresh());
                    self.line(format!("{xi} = bitcast {vt} {x} to {it}"));
                    self.line(format!("{yi} = bitcast {vt} {y} to {it}"));
                    let o = match op {
                        Op::And => "and",
                        Op::Or => "or",
                        _ => "xor",
                    };
                    self.line(format!("{r} = {o} {it} {xi}, {yi}"));
                    self.line(format!("{dst} = bitcast {it} {r} to {vt}"));
                }
                _ => {
                    // IEEE 754-2019 minimum/maximum: NaN if either is NaN, −0 < +0
                    let min = op == Op::Min;
                    let it = self.v(ity(t));
                    let (lt, pick, eq, xi, yi, sb, sbf, tie, nan, nanv) = (
                        self.fresh(),
                        self.fresh(),
                        self.fresh(),
                        self.fresh(),
                        self.fresh(),
                        self.fresh(),
                        self.fresh(),
                        self.fresh(),
                        self.fresh(),
                        self.fresh(),
                    );
                    let cmp = if min { "olt" } else { "ogt" };
                    self.line(format!("{lt} = fcmp {cmp} {vt} {x}, {y}"));
                    self.line(format!(
                        "{pick} = select <{w} x i1> {lt}, {vt} {x}, {vt} {y}"
                    ));
                    self.line(format!("{eq} = fcmp oeq {vt} {x}, {y}"));
                    self.line(format!("{xi} = bitcast {vt} {x} to {it}"));
                    self.line(format!("{yi} = bitcast {vt} {y} to {it}"));
                    // equal values differ at most in the sign of zero: or (min) / and (max) the bits
                    self.line(format!(
                        "{sb} = {} {it} {xi}, {yi}",
                        if min { "or" } else { "and" }
                    ));
                    self.line(format!("{sbf} = bitcast {it} {sb} to {vt}"));
                    self.line(format!(
                        "{tie} = select <{w} x i1> {eq}, {vt} {sbf}, {vt} {pick}"
                    ));
                    self.line(format!("{nan} = fcmp uno {vt} {x}, {y}"));
                    let qnan = if t == VarType::F32 {
                        f32::NAN.to_bits() as u64
                    } else {
                        f64::NAN.to_bits()
                    };
                    let c = self.splat_const(ity(t), &(qnan as i64).to_string());
                    self.line(format!("{nanv} = bitcast {it} {c} to {vt}"));
                    self.line(format!(
                        "{dst} = select <{w} x i1> {nan}, {vt} {nanv}, {vt} {tie}"
                    ));
                }
            }
            return;
        }
        // integers
        let s = t.is_signed();
        let simple = match op {
            Op::Add => Some("add"),
            Op::Sub => Some("sub"),
            Op::Mul => Some("mul"),
            Op::And => Some("and"),
            Op::Or => Some("or"),
            Op::Xor => Some("xor"),
            _ => None,
        };
        if let Some(o) = simple {
            self.line(format!("{dst} = {o} {vt} {x}, {y}"));
            return;
        }
        match op {
            Op::Min | Op::Max => {
                let name = match (op, s) {
                    (Op::Min, true) => "smin",
                    (Op::Min, false) => "umin",
                    (_, true) => "smax",
                    _ => "umax",
                };
                let f = format!("llvm.{name}.v{w}{}", mangle(sty(t)));
                self.declare(format!("declare {vt} @{f}({vt}, {vt})"));
                self.line(format!("{dst} = call {vt} @{f}({vt} {x}, {vt} {y})"));
            }
            Op::Shl | Op::Shr => {
                let m = self.splat_const(sty(t), &(bits(t) - 1).to_string());
                let amt = self.fresh();
                self.line(format!("{amt} = and {vt} {y}, {m}"));
                let o = match (op, s) {
                    (Op::Shl, _) => "shl",
                    (_, true) => "ashr",
                    _ => "lshr",
                };
                self.line(format!("{dst} = {o} {vt} {x}, {amt}"));
            }
            Op::Div | Op::Rem => {
                let one = self.splat_const(sty(t), "1");
                let minus1 = self.splat_const(sty(t), "-1");
                let (z, d, q) = (self.fresh(), self.fresh(), self.fresh());
                self.line(format!("{z} = icmp eq {vt} {y}, zeroinitializer"));
                if s {
                    let (m1, zm) = (self.fresh(), self.fresh());
                    self.line(format!("{m1} = icmp eq {vt} {y}, {minus1}"));
                    // divide by 1 where the divisor is 0 or -1; those lanes are fixed up below
                    self.line(format!("{zm} = or <{w} x i1> {z}, {m1}"));
                    self.line(format!(
                        "{d} = select <{w} x i1> {zm}, {vt} {one}, {vt} {y}"
                    ));
                    if op == Op::Div {
                        let (qq, neg) = (self.fresh(), self.fresh());
                        self.line(format!("{qq} = sdiv {vt} {x}, {d}"));
                        self.line(format!("{neg} = sub {vt} zeroinitializer, {x}"));
                        self.line(format!(
                            "{q} = select <{w} x i1> {m1}, {vt} {neg}, {vt} {qq}"
                        ));
                        self.line(format!(
                            "{dst} = select <{w} x i1> {z}, {vt} zeroinitializer, {vt} {q}"
                        ));
                    } else {
                        // y == -1 → srem by 1 gives 0, as required
                        self.line(format!("{q} = srem {vt} {x}, {d}"));
                        self.line(format!("{dst} = select <{w} x i1> {z}, {vt} {x}, {vt} {q}"));
                    }
                } else {
                    self.line(format!("{d} = select <{w} x i1> {z}, {vt} {one}, {vt} {y}"));
                    if op == Op::Div {
                        self.line(format!("{q} = udiv {vt} {x}, {d}"));
                        self.line(format!(
                            "{dst} = select <{w} x i1> {z}, {vt} zeroinitializer, {vt} {q}"
                        ));
                    } else {
                        self.line(format!("{q} = urem {vt} {x}, {d}"));
                        self.line(format!("{dst} = select <{w} x i1> {z}, {vt} {x}, {vt} {q}"));
                    }
                }
            }
            _ => unreachable!("{op:?} is not an integer binary op"),
        }
    }
}
