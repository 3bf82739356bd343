//! Memory: indices, contiguous runs, gathers (masked, in range) and scatters (inline adds, adds
//! in a register, the shared per-lane extern).

use super::*;

impl Gen<'_> {
    /// An index vector of type `t` widened to i64 (signed types sign-extend, so negative indices
    /// become huge unsigned ones and fail the bounds check).
    pub(super) fn index64(&mut self, t: VarType, x: &str) -> String {
        let w = self.w;
        let vt = self.vt(t);
        if sty(t) == "i64" {
            return x.to_string();
        }
        let r = self.fresh();
        let op = if t.is_signed() { "sext" } else { "zext" };
        self.line(format!("{r} = {op} {vt} {x} to <{w} x i64>"));
        r
    }

    /// `i1`: whether the lanes of the contiguous index `ix64` (i64) form one in-bounds run of
    /// parameter `p`, and the run's first index.
    pub(super) fn contiguous_run(&mut self, ix64: &str, p: usize) -> (String, String) {
        let w = self.w;
        let (i0, il, e, same, inb, nowrap, ok1, ok) = (
            self.fresh(),
            self.fresh(),
            self.fresh(),
            self.fresh(),
            self.fresh(),
            self.fresh(),
            self.fresh(),
            self.fresh(),
        );
        self.line(format!("{i0} = extractelement <{w} x i64> {ix64}, i64 0"));
        self.line(format!(
            "{il} = extractelement <{w} x i64> {ix64}, i64 {}",
            w - 1
        ));
        self.line(format!("{e} = add i64 {i0}, {}", w - 1));
        self.line(format!("{same} = icmp eq i64 {il}, {e}"));
        self.line(format!("{inb} = icmp ult i64 {e}, %len{p}"));
        self.line(format!("{nowrap} = icmp ule i64 {i0}, {e}"));
        self.line(format!("{ok1} = and i1 {same}, {inb}"));
        self.line(format!("{ok} = and i1 {ok1}, {nowrap}"));
        (ok, i0)
    }

    pub(super) fn gather(&mut self, idx: Reg, inst: &crate::kernel::Inst) {
        let t = inst.ty;
        if !self.contiguous[inst.args[0] as usize] || t == VarType::Bool || self.streaming {
            return self.gather_any(idx, inst);
        }
        // a row read: one masked vector load when the run is in bounds, else the general gather
        let w = self.w;
        let p = inst.imm as usize;
        let ixt = self.k.ty(inst.args[0]);
        let ix = self.r(inst.args[0]);
        let ix64 = self.index64(ixt, &ix);
        let (ok, i0) = self.contiguous_run(&ix64, p);
        let (fast, slow, join) = (self.fresh(), self.fresh(), self.fresh());
        let lb = |x: &str| x.trim_start_matches('%').to_string();
        self.line(format!("br i1 {ok}, label {fast}, label {slow}"));
        self.label(&lb(&fast));
        let mk = self.r(inst.args[1]);
        let active = self.active.clone();
        let m = self.and_mask(active.as_deref(), &mk);
        let me = mty(t);
        let mv = self.v(me);
        let (src, vf) = (self.fresh(), self.fresh());
        self.line(format!(
            "{src} = getelementptr inbounds {me}, ptr %base{p}, i64 {i0}"
        ));
        let f = format!("llvm.masked.load.v{w}{}.p0", mangle(me));
        self.declare(format!("declare {mv} @{f}(ptr, i32, <{w} x i1>, {mv})"));
        self.line(format!(
            "{vf} = call {mv} @{f}(ptr {src}, i32 {}, <{w} x i1> {m}, {mv} zeroinitializer)",
            t.size_bytes()
        ));
        let fast_end = self.fresh();
        self.line(format!("br label {fast_end}"));
        self.label(&lb(&fast_end));
        self.line(format!("br label {join}"));
        self.label(&lb(&slow));
        let dst = self.r(idx);
        let vs = self.fresh();
        let pfx_dst = self.gather_dst.replace(vs.clone());
        self.gather_any(idx, inst);
        self.gather_dst = pfx_dst;
        let slow_end = self.fresh();
        self.line(format!("br label {slow_end}"));
        self.label(&lb(&slow_end));
        self.line(format!("br label {join}"));
        self.label(&lb(&join));
        self.line(format!(
            "{dst} = phi {mv} [ {vf}, {fast_end} ], [ {vs}, {slow_end} ]"
        ));
    }

    pub(super) fn gather_any(&mut self, idx: Reg, inst: &crate::kernel::Inst) {
        let k = self.k;
        let w = self.w;
        let t = inst.ty;
        let p = inst.imm as usize;
        let dst = self.gather_dst.clone().unwrap_or_else(|| self.r(idx));
        let (ix, mk) = (self.r(inst.args[0]), self.r(inst.args[1]));
        let ixt = k.ty(inst.args[0]);
        let active = self.active.clone();
        let m = self.and_mask(active.as_deref(), &mk);
        let me = mty(t);
        let mv = self.v(me);
        let lit = &k.insts[inst.args[0] as usize];
        if lit.op == Op::Literal && lit.ty.is_int() {
            // one index for every lane (k-means reads centroid `c` this way): one scalar load
            // and a broadcast instead of a gather of the same address
            let bits = lit.imm & lit.ty.bit_mask();
            let width = 8 * lit.ty.size_bytes() as u32;
            let negative = lit.ty.is_signed() && width < 64 && bits >> (width - 1) & 1 == 1
                || lit.ty.is_signed() && width == 64 && (bits as i64) < 0;
            // (a negative index is out of range: as large as an unsigned index gets)
            let c = if negative { u64::MAX } else { bits };
            let (ok, sp, safe, one) = (self.fresh(), self.fresh(), self.fresh(), self.fresh());
            self.line(format!("{ok} = icmp ult i64 {c}, %len{p}"));
            let inb = self.splat("i1", &ok);
            let (valid, bad, badn) = (self.fresh(), self.fresh(), self.fresh());
            self.line(format!("{valid} = and <{w} x i1> {m}, {inb}"));
            let all = self.all_true();
            self.line(format!("{badn} = xor <{w} x i1> {inb}, {all}"));
            // (counted only when out of range: a branch on a value the loop does not change,
            // rather than a mask count and a store for every vector)
            let (counting, counted) = (self.fresh(), self.fresh());
            let lb = |x: &str| x.trim_start_matches('%').to_string();
            self.line(format!("br i1 {ok}, label {counted}, label {counting}"));
            self.label(&lb(&counting));
            self.line(format!("{bad} = and <{w} x i1> {m}, {badn}"));
            let cnt = self.count(&bad);
            let (old, new) = (self.fresh(), self.fresh());
            self.line(format!("{old} = load i64, ptr %oob, align 8"));
            self.line(format!("{new} = add i64 {old}, {cnt}"));
            self.line(format!("store i64 {new}, ptr %oob, align 8"));
            self.line(format!("br label {counted}"));
            self.label(&lb(&counted));
            self.line(format!(
                "{sp} = getelementptr {me}, ptr %base{p}, i64 {}",
                c as i64
            ));
            // out of range, the load reads the counter's own 8 bytes instead (never used)
            self.line(format!("{safe} = select i1 {ok}, ptr {sp}, ptr %oob"));
            self.line(format!("{one} = load {me}, ptr {safe}, align 1"));
            let all_lanes = self.splat(me, &one);
            let loaded = if t == VarType::Bool {
                self.fresh()
            } else {
                dst.clone()
            };
            self.line(format!(
                "{loaded} = select <{w} x i1> {valid}, {mv} {all_lanes}, {mv} zeroinitializer"
            ));
            if t == VarType::Bool {
                let vt = self.vt(t);
                self.line(format!("{dst} = trunc {mv} {loaded} to {vt}"));
            }
            return;
        }
        let (inb, ptrs) = if sty(ixt) == "i32" {
            // 32-bit indices stay 32-bit, so x86 gathers 8 lanes per instruction (vgatherdps)
            // rather than 4: the bounds check compares against min(len - 1, u32::MAX), and an
            // unsigned index is biased by 2^31 so that the address arithmetic's sign extension
            // gives base + index exactly.
            let umin = "llvm.umin.i64";
            self.declare(format!("declare i64 @{umin}(i64, i64)"));
            let (lm1, lim64, lim, nz) = (self.fresh(), self.fresh(), self.fresh(), self.fresh());
            self.line(format!("{lm1} = sub i64 %len{p}, 1"));
            self.line(format!(
                "{lim64} = call i64 @{umin}(i64 {lm1}, i64 4294967295)"
            ));
            self.line(format!("{lim} = trunc i64 {lim64} to i32"));
            self.line(format!("{nz} = icmp ne i64 %len{p}, 0"));
            let limv = self.splat("i32", &lim);
            let nzv = self.splat("i1", &nz);
            let (le, inb) = (self.fresh(), self.fresh());
            self.line(format!("{le} = icmp ule <{w} x i32> {ix}, {limv}"));
            self.line(format!("{inb} = and <{w} x i1> {le}, {nzv}"));
            let ptrs = self.fresh();
            if ixt.is_signed() {
                let (nn, inb2) = (self.fresh(), self.fresh());
                self.line(format!("{nn} = icmp sge <{w} x i32> {ix}, zeroinitializer"));
                self.line(format!("{inb2} = and <{w} x i1> {inb}, {nn}"));
                self.line(format!(
                    "{ptrs} = getelementptr {me}, ptr %base{p}, <{w} x i32> {ix}"
                ));
                (inb2, ptrs)
            } else {
                let (biased, ib) = (self.fresh(), self.fresh());
                let bias = self.splat_const("i32", "-2147483648");
                self.line(format!(
                    "{biased} = getelementptr i8, ptr %base{p}, i64 {}",
                    (1u64 << 31) * t.size_bytes() as u64
                ));
                self.line(format!("{ib} = xor <{w} x i32> {ix}, {bias}"));
                self.line(format!(
                    "{ptrs} = getelementptr {me}, ptr {biased}, <{w} x i32> {ib}"
                ));
                (inb, ptrs)
            }
        } else {
            let ix64 = self.index64(ixt, &ix);
            let lenv = self.splat("i64", &format!("%len{p}"));
            let (inb, ptrs) = (self.fresh(), self.fresh());
            self.line(format!("{inb} = icmp ult <{w} x i64> {ix64}, {lenv}"));
            self.line(format!(
                "{ptrs} = getelementptr {me}, ptr %base{p}, <{w} x i64> {ix64}"
            ));
            (inb, ptrs)
        };
        let (valid, bad, badn) = (self.fresh(), self.fresh(), self.fresh());
        self.line(format!("{valid} = and <{w} x i1> {m}, {inb}"));
        let all = self.all_true();
        self.line(format!("{badn} = xor <{w} x i1> {inb}, {all}"));
        self.line(format!("{bad} = and <{w} x i1> {m}, {badn}"));
        let c = self.count(&bad);
        let (old, new) = (self.fresh(), self.fresh());
        self.line(format!("{old} = load i64, ptr %oob, align 8"));
        self.line(format!("{new} = add i64 {old}, {c}"));
        self.line(format!("store i64 {new}, ptr %oob, align 8"));
        let f = format!("llvm.masked.gather.v{w}{}.v{w}p0", mangle(me));
        self.declare(format!(
            "declare {mv} @{f}(<{w} x ptr>, i32, <{w} x i1>, {mv})"
        ));
        let loaded = if t == VarType::Bool {
            self.fresh()
        } else {
            dst.clone()
        };
        self.line(format!(
            "{loaded} = call {mv} @{f}(<{w} x ptr> {ptrs}, i32 {}, <{w} x i1> {valid}, {mv} zeroinitializer)",
            t.size_bytes()
        ));
        if t == VarType::Bool {
            let vt = self.vt(t);
            self.line(format!("{dst} = trunc {mv} {loaded} to {vt}"));
        }
    }

    pub(super) fn scatter(&mut self, inst: &crate::kernel::Inst) {
        let k = self.k;
        let w = self.w;
        let t = inst.ty;
        let Op::Scatter(rop) = inst.op else {
            unreachable!()
        };
        let p = inst.param();
        let (val, ix, mk) = (
            self.r(inst.args[0]),
            self.r(inst.args[1]),
            self.r(inst.args[2]),
        );
        let ixt = k.ty(inst.args[1]);
        let active = self.active.clone();
        let m = self.and_mask(active.as_deref(), &mk);
        let ix64 = self.index64(ixt, &ix);
        let row_write = self.contiguous[inst.args[1] as usize]
            && rop == ReduceOp::None
            && t != VarType::Bool
            && !self.streaming;
        let mut done = None;
        if row_write {
            // a row write: one masked vector store when the run is in bounds, else lane by lane
            let (ok, i0) = self.contiguous_run(&ix64, p);
            let (fast, slow, join) = (self.fresh(), self.fresh(), self.fresh());
            let lb = |x: &str| x.trim_start_matches('%').to_string();
            // (the slow path's helper calls clobber every vector register: weighting the branch
            // keeps the loop's state in registers on the fast path; see `module`'s !1)
            self.line(format!("br i1 {ok}, label {fast}, label {slow}, !prof !1"));
            self.label(&lb(&fast));
            let me = mty(t);
            let dstp = self.fresh();
            self.line(format!(
                "{dstp} = getelementptr inbounds {me}, ptr %base{p}, i64 {i0}"
            ));
            // all lanes active (every full vector): a plain store; masked stores are slow on
            // some CPUs (microcoded on AMD Zen)
            let (bits, full, plain, masked) =
                (self.fresh(), self.fresh(), self.fresh(), self.fresh());
            self.line(format!("{bits} = bitcast <{w} x i1> {m} to i{w}"));
            self.line(format!("{full} = icmp eq i{w} {bits}, -1"));
            self.line(format!("br i1 {full}, label {plain}, label {masked}"));
            self.label(&lb(&plain));
            self.line(format!(
                "store <{w} x {me}> {val}, ptr {dstp}, align {}",
                t.size_bytes()
            ));
            self.line(format!("br label {join}"));
            self.label(&lb(&masked));
            let f = format!("llvm.masked.store.v{w}{}.p0", mangle(me));
            self.declare(format!(
                "declare void @{f}(<{w} x {me}>, ptr, i32, <{w} x i1>)"
            ));
            self.line(format!(
                "call void @{f}(<{w} x {me}> {val}, ptr {dstp}, i32 {}, <{w} x i1> {m})",
                t.size_bytes()
            ));
            self.line(format!("br label {join}"));
            self.label(&lb(&slow));
            done = Some(join);
        }
        if rop == ReduceOp::None && t != VarType::Bool {
            self.scatter_plain_inline(t, p, &val, &ix64, &m);
            if let Some(join) = done {
                self.line(format!("br label {join}"));
                self.label(join.trim_start_matches('%'));
            }
            return;
        }
        if rop == ReduceOp::Add && t != VarType::Bool {
            // sums (histograms, k-means) update in place with one atomic add per active lane:
            // no call (which would spill every vector register) and the same bits as the
            // helper's compare-and-swap loop, `old + value` lane after lane
            self.scatter_add_inline(t, p, &val, &ix64, &m, inst.exclusive());
            if let Some(join) = done {
                self.line(format!("br label {join}"));
                self.label(join.trim_start_matches('%'));
            }
            return;
        }
        // the value's bits, zero-extended to 64 (the helper's ABI)
        let vt = self.vt(t);
        let it = self.v(ity(t));
        let asint = if t.is_float() {
            let b = self.fresh();
            self.line(format!("{b} = bitcast {vt} {val} to {it}"));
            b
        } else {
            val
        };
        let bits64 = if ity(t) == "i64" {
            asint
        } else {
            let z = self.fresh();
            self.line(format!("{z} = zext {it} {asint} to <{w} x i64>"));
            z
        };
        let op_ty = ((encode_reduce(rop) as u32) << 8) | type_index(t);
        self.declare(format!(
            "declare void @{SCATTER_SYMBOL}(i32, ptr, i64, i64, i64, ptr)"
        ));
        for lane in 0..w {
            let (bit, go, skip) = (self.fresh(), self.fresh(), self.fresh());
            let go_l = go.trim_start_matches('%').to_string();
            let skip_l = skip.trim_start_matches('%').to_string();
            self.line(format!("{bit} = extractelement <{w} x i1> {m}, i64 {lane}"));
            self.line(format!("br i1 {bit}, label {go}, label {skip}"));
            self.label(&go_l);
            let (ie, ve) = (self.fresh(), self.fresh());
            self.line(format!(
                "{ie} = extractelement <{w} x i64> {ix64}, i64 {lane}"
            ));
            self.line(format!(
                "{ve} = extractelement <{w} x i64> {bits64}, i64 {lane}"
            ));
            self.line(format!(
                "call void @{SCATTER_SYMBOL}(i32 {op_ty}, ptr %base{p}, i64 %len{p}, i64 {ie}, i64 {ve}, ptr %status)"
            ));
            self.line(format!("br label {skip}"));
            self.label(&skip_l);
        }
        if let Some(join) = done {
            self.line(format!("br label {join}"));
            self.label(join.trim_start_matches('%'));
        }
    }

    /// The lanes of mask `m` whose 64-bit index `ix64` lies inside parameter `p`'s buffer.
    fn in_range(&mut self, p: usize, ix64: &str, m: &str) -> String {
        let w = self.w;
        let [ins, lens, inr, ok] = self.fresh_n();
        self.line(format!(
            "{ins} = insertelement <{w} x i64> poison, i64 %len{p}, i64 0"
        ));
        self.line(format!(
            "{lens} = shufflevector <{w} x i64> {ins}, <{w} x i64> poison, <{w} x i32> zeroinitializer"
        ));
        self.line(format!("{inr} = icmp ult <{w} x i64> {ix64}, {lens}"));
        self.line(format!("{ok} = and <{w} x i1> {inr}, {m}"));
        ok
    }

    /// `target[index] = value` for each active lane of a plain scatter, inline: one masked
    /// vector scatter of the lanes in range (in lane order, so the last of several lanes with one
    /// index wins, as lane after lane through the helper), the others counted as out-of-range
    /// writes. No call per lane (which spills every vector register): a stencil's border gaps
    /// run as strided scatters (`Kernel::at_strided_lanes`).
    fn scatter_plain_inline(&mut self, t: VarType, p: usize, val: &str, ix64: &str, m: &str) {
        let w = self.w;
        let me = mty(t);
        let ok = self.in_range(p, ix64, m);
        let [out, outbits, n_out, any, count, bump, done, st, ptrs] = self.fresh_n();
        // active lanes out of range: counted, not written
        self.line(format!("{out} = xor <{w} x i1> {ok}, {m}"));
        self.line(format!("{outbits} = bitcast <{w} x i1> {out} to i{w}"));
        let f = format!("llvm.ctpop.i{w}");
        self.declare(format!("declare i{w} @{f}(i{w})"));
        self.line(format!("{n_out} = call i{w} @{f}(i{w} {outbits})"));
        self.line(format!("{any} = icmp ne i{w} {n_out}, 0"));
        let lb = |x: &str| x.trim_start_matches('%').to_string();
        self.line(format!("br i1 {any}, label {bump}, label {done}, !prof !1"));
        self.label(&lb(&bump));
        self.line(format!(
            "{st} = getelementptr inbounds i64, ptr %status, i64 {}",
            crate::backend::STATUS_OOB_WRITES
        ));
        if w < 64 {
            self.line(format!("{count} = zext i{w} {n_out} to i64"));
        } else {
            self.line(format!("{count} = add i64 {n_out}, 0"));
        }
        let old = self.fresh();
        self.line(format!(
            "{old} = atomicrmw add ptr {st}, i64 {count} monotonic"
        ));
        self.line(format!("br label {done}"));
        self.label(&lb(&done));
        self.line(format!(
            "{ptrs} = getelementptr {me}, ptr %base{p}, <{w} x i64> {ix64}"
        ));
        let f = format!("llvm.masked.scatter.v{w}{}.v{w}p0", mangle(me));
        self.declare(format!(
            "declare void @{f}(<{w} x {me}>, <{w} x ptr>, i32, <{w} x i1>)"
        ));
        self.line(format!(
            "call void @{f}(<{w} x {me}> {val}, <{w} x ptr> {ptrs}, i32 {}, <{w} x i1> {ok})",
            t.size_bytes()
        ));
    }

    /// `target[index] += value` for each active lane of a reduce-add scatter, inline: in range,
    /// an atomic add (`atomicrmw add`/`fadd`, in lane order); out of range, the status counter.
    ///
    /// `exclusive` (the launch gives this thread its own target: see `privatise`): a plain load,
    /// add and store instead of the atomic add — the same additions in the same lane order.
    pub(super) fn scatter_add_inline(
        &mut self,
        t: VarType,
        p: usize,
        val: &str,
        ix64: &str,
        m: &str,
        exclusive: bool,
    ) {
        let w = self.w;
        let me = mty(t);
        let vt = self.vt(t);
        let add = if t.is_float() { "fadd" } else { "add" };
        let st = self.fresh();
        self.line(format!(
            "{st} = getelementptr inbounds i64, ptr %status, i64 {}",
            crate::backend::STATUS_OOB_WRITES
        ));
        let lb = |x: &str| x.trim_start_matches('%').to_string();
        let mut join = None;
        if exclusive {
            // every lane active and in range (the common case): the updates without a branch
            // per lane, still lane after lane
            let ok = self.in_range(p, ix64, m);
            let [bits, full] = self.fresh_n();
            let (fast, slow, done) = (self.fresh(), self.fresh(), self.fresh());
            self.line(format!("{bits} = bitcast <{w} x i1> {ok} to i{w}"));
            self.line(format!("{full} = icmp eq i{w} {bits}, -1"));
            let al = t.size_bytes();
            if matches!(me, "float" | "double" | "i32" | "i64") {
                // a target of at most one register: kept in it for the vector's lanes (the
                // narrowest register it fits, since 512-bit operations take two issue slots on
                // some CPUs)
                let whole = self.fresh();
                self.line(format!("br i1 {full}, label {whole}, label {slow}"));
                self.label(&lb(&whole));
                let mut tiers = vec![reg_lanes(w, t, 32), reg_lanes(w, t, 64)];
                tiers.dedup();
                for r in tiers {
                    let [small, regs, next] = self.fresh_n();
                    self.line(format!("{small} = icmp ule i64 %len{p}, {r}"));
                    self.line(format!("br i1 {small}, label {regs}, label {next}"));
                    self.label(&lb(&regs));
                    self.scatter_add_in_register(t, p, r, val, ix64);
                    self.line(format!("br label {done}"));
                    self.label(&lb(&next));
                }
                self.line(format!("br label {fast}"));
            } else {
                self.line(format!("br i1 {full}, label {fast}, label {slow}"));
            }
            self.label(&lb(&fast));
            for lane in 0..w {
                let (ie, ve, ptr, old, sum) = (
                    self.fresh(),
                    self.fresh(),
                    self.fresh(),
                    self.fresh(),
                    self.fresh(),
                );
                self.line(format!(
                    "{ie} = extractelement <{w} x i64> {ix64}, i64 {lane}"
                ));
                self.line(format!("{ve} = extractelement {vt} {val}, i64 {lane}"));
                self.line(format!(
                    "{ptr} = getelementptr inbounds {me}, ptr %base{p}, i64 {ie}"
                ));
                self.line(format!("{old} = load {me}, ptr {ptr}, align {al}"));
                self.line(format!("{sum} = {add} {me} {old}, {ve}"));
                self.line(format!("store {me} {sum}, ptr {ptr}, align {al}"));
            }
            self.line(format!("br label {done}"));
            self.label(&lb(&slow));
            join = Some(done);
        }
        for lane in 0..w {
            let (bit, go, skip) = (self.fresh(), self.fresh(), self.fresh());
            self.line(format!("{bit} = extractelement <{w} x i1> {m}, i64 {lane}"));
            self.line(format!("br i1 {bit}, label {go}, label {skip}"));
            self.label(&lb(&go));
            let (ie, inb, upd, oob) = (self.fresh(), self.fresh(), self.fresh(), self.fresh());
            self.line(format!(
                "{ie} = extractelement <{w} x i64> {ix64}, i64 {lane}"
            ));
            // (unsigned: a negative index is out of range, as the helper has it)
            self.line(format!("{inb} = icmp ult i64 {ie}, %len{p}"));
            self.line(format!("br i1 {inb}, label {upd}, label {oob}"));
            self.label(&lb(&upd));
            let (ve, ptr, old) = (self.fresh(), self.fresh(), self.fresh());
            self.line(format!("{ve} = extractelement {vt} {val}, i64 {lane}"));
            self.line(format!(
                "{ptr} = getelementptr inbounds {me}, ptr %base{p}, i64 {ie}"
            ));
            if exclusive {
                let sum = self.fresh();
                let al = t.size_bytes();
                self.line(format!("{old} = load {me}, ptr {ptr}, align {al}"));
                self.line(format!("{sum} = {add} {me} {old}, {ve}"));
                self.line(format!("store {me} {sum}, ptr {ptr}, align {al}"));
            } else {
                self.line(format!(
                    "{old} = atomicrmw {add} ptr {ptr}, {me} {ve} monotonic"
                ));
            }
            self.line(format!("br label {skip}"));
            self.label(&lb(&oob));
            let c = self.fresh();
            self.line(format!("{c} = atomicrmw add ptr {st}, i64 1 monotonic"));
            self.line(format!("br label {skip}"));
            self.label(&lb(&skip));
        }
        if let Some(done) = join {
            self.line(format!("br label {done}"));
            self.label(&lb(&done));
        }
    }

    /// The exclusive update of a small target (at most `r` elements: one register) whose
    /// lanes are all active and in range: the target (with the slack after it) is loaded into a
    /// register, each lane in
    /// turn adds its value to the element it names (a compare with the element numbers, an add,
    /// a select: the element gets exactly `old + value` in lane order, the others are left as
    /// they were, bit for bit) and the register is stored back. This replaces a chain of scalar
    /// load/add/store per lane, whose store-to-load round trips bound k-means' sums and counts.
    pub(super) fn scatter_add_in_register(
        &mut self,
        t: VarType,
        p: usize,
        r: usize,
        val: &str,
        ix64: &str,
    ) {
        let w = self.w;
        let me = mty(t);
        let vw = self.vt(t);
        let rt = format!("<{r} x {me}>");
        let add = if t.is_float() { "fadd" } else { "add" };
        let al = t.size_bytes();
        let (cur, ix32) = (self.fresh(), self.fresh());
        // a plain load and store of the whole register, past the target's end into the slack
        // every buffer has (`LaunchArgs`: vector code may read and write it; the bytes are
        // written back as they were read): a masked store does not forward to the next
        // vector's load, which would wait for the store to retire
        self.line(format!("{cur} = load {rt}, ptr %base{p}, align {al}"));
        self.line(format!("{ix32} = trunc <{w} x i64> {ix64} to <{w} x i32>"));
        let mut cur = cur;
        for lane in 0..w {
            let [ie, one, bits, hit, ve, sv_in, sv, sum, next] = self.fresh_n();
            // the element this lane updates, as a one-hot mask made with a scalar shift (the
            // index is below the target's length, at most `r`)
            self.line(format!(
                "{ie} = extractelement <{w} x i32> {ix32}, i64 {lane}"
            ));
            self.line(format!("{one} = shl i32 1, {ie}"));
            self.line(format!("{bits} = trunc i32 {one} to i{r}"));
            self.line(format!("{hit} = bitcast i{r} {bits} to <{r} x i1>"));
            self.line(format!("{ve} = extractelement {vw} {val}, i64 {lane}"));
            self.line(format!(
                "{sv_in} = insertelement {rt} poison, {me} {ve}, i64 0"
            ));
            self.line(format!(
                "{sv} = shufflevector {rt} {sv_in}, {rt} poison, <{r} x i32> zeroinitializer"
            ));
            self.line(format!("{sum} = {add} {rt} {cur}, {sv}"));
            self.line(format!(
                "{next} = select <{r} x i1> {hit}, {rt} {sum}, {rt} {cur}"
            ));
            cur = next;
        }
        self.line(format!("store {rt} {cur}, ptr %base{p}, align {al}"));
    }
}
