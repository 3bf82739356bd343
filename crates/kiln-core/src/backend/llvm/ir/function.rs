//! The function skeleton: the launch ABI's entry, parameter setup, the lane loop (plain and
//! streaming), the partial last vector and the body's order of instructions.

use super::*;

impl Gen<'_> {
    pub(super) fn function(&mut self, name: &str) -> String {
        let k = self.k;
        let mut entry = String::new();
        let _ = writeln!(
            entry,
            "define void @{name}(ptr noalias nocapture readonly %args, i64 %start, i64 %end) #0 {{"
        );
        entry.push_str("entry:\n");
        let mut setup = String::new();
        let _ = writeln!(setup, "  %ptrs = load ptr, ptr %args, align 8");
        let _ = writeln!(
            setup,
            "  %lensp = getelementptr inbounds ptr, ptr %args, i64 1"
        );
        let _ = writeln!(setup, "  %lens = load ptr, ptr %lensp, align 8");
        let _ = writeln!(
            setup,
            "  %statusp = getelementptr inbounds ptr, ptr %args, i64 2"
        );
        let _ = writeln!(setup, "  %status = load ptr, ptr %statusp, align 8");
        for (p, param) in k.params.iter().enumerate() {
            let _ = writeln!(
                setup,
                "  %pp{p} = getelementptr inbounds ptr, ptr %ptrs, i64 {p}"
            );
            let _ = writeln!(setup, "  %base{p} = load ptr, ptr %pp{p}, align 8");
            let _ = writeln!(
                setup,
                "  %lp{p} = getelementptr inbounds i64, ptr %lens, i64 {p}"
            );
            let _ = writeln!(setup, "  %len{p} = load i64, ptr %lp{p}, align 8");
            if param.kind == ParamKind::Broadcast {
                let t = param.ty;
                let _ = writeln!(
                    setup,
                    "  %bcm{p} = load {}, ptr %base{p}, align {}",
                    mty(t),
                    t.size_bytes()
                );
                if t == VarType::Bool {
                    let _ = writeln!(setup, "  %bc{p} = trunc i8 %bcm{p} to i1");
                } else {
                    let _ = writeln!(setup, "  %bc{p} = bitcast {} %bcm{p} to {}", sty(t), sty(t));
                }
            }
        }
        let _ = writeln!(setup, "  store i64 0, ptr %oob, align 8");
        self.allocas.push_str("  %oob = alloca i64, align 8\n");
        self.out.clear();
        // Big outputs of small, memory-bound kernels are written with streaming (non-temporal)
        // stores, which skip reading each output line before writing it (16 → 12 bytes of traffic
        // per element for saxpy). A kernel does not know its launch size when compiled, so such
        // kernels get a second lane loop, chosen at run time by the first output's length.
        match streaming_output(k) {
            Some(p) => {
                let bytes = k.params[p].ty.size_bytes() as u64;
                let _ = writeln!(
                    setup,
                    "  %bigout = icmp uge i64 %len{p}, {}",
                    streaming_bytes() / bytes
                );
                // Vector non-temporal stores need aligned addresses (an unaligned one is split
                // into scalar ones): the streaming loop runs only when every streamed output's
                // first lane is 32-byte aligned, and then declares it (each step of W lanes
                // keeps it when W · size is a multiple of 32).
                let mut cond = "%bigout".to_string();
                for (q, t) in self.streamed_outputs() {
                    let size = t.size_bytes();
                    let _ = writeln!(setup, "  %sa{q} = ptrtoint ptr %base{q} to i64");
                    let _ = writeln!(setup, "  %so{q} = mul i64 %start, {size}");
                    let _ = writeln!(setup, "  %sb{q} = add i64 %sa{q}, %so{q}");
                    let _ = writeln!(setup, "  %sm{q} = and i64 %sb{q}, 31");
                    let _ = writeln!(setup, "  %sz{q} = icmp eq i64 %sm{q}, 0");
                    let _ = writeln!(setup, "  %sc{q} = and i1 {cond}, %sz{q}");
                    cond = format!("%sc{q}");
                    // an output written over an input (update-in-place) has just been read:
                    // its lines are in the cache, and plain stores keep them there
                    for (i, ip) in k.params.iter().enumerate() {
                        if ip.kind == ParamKind::Input {
                            let _ =
                                writeln!(setup, "  %sx{q}_{i} = icmp ne ptr %base{q}, %base{i}");
                            let _ = writeln!(setup, "  %sy{q}_{i} = and i1 {cond}, %sx{q}_{i}");
                            cond = format!("%sy{q}_{i}");
                        }
                    }
                }
                let _ = writeln!(setup, "  br i1 {cond}, label %nhead, label %ahead");
                self.lane_loop('a', false);
                self.lane_loop('n', true);
            }
            None => {
                let _ = writeln!(setup, "  br label %ahead");
                self.lane_loop('a', false);
            }
        }
        self.label("exit");
        self.line("%oobn = load i64, ptr %oob, align 8");
        self.line("%anyoob = icmp ne i64 %oobn, 0");
        self.line("br i1 %anyoob, label %flush, label %done");
        self.label("flush");
        self.line("%st0 = getelementptr inbounds i64, ptr %status, i64 0");
        self.line("%oobold = atomicrmw add ptr %st0, i64 %oobn monotonic");
        self.line("br label %done");
        self.label("done");
        self.line("ret void");
        let mut f = entry;
        f.push_str(&self.allocas);
        f.push_str(&setup);
        f.push_str(&self.out);
        f.push_str("}\n");
        f
    }

    /// The loop over the lanes `[start, end)`, names prefixed with `pf`; `streaming` marks the
    /// variant whose full-vector stores are non-temporal.
    pub(super) fn lane_loop(&mut self, pf: char, streaming: bool) {
        let k = self.k;
        let w = self.w;
        self.pfx = pf;
        self.streaming = streaming;
        // streaming stores are weakly ordered: fence them before the launch's other threads look
        let exit = if streaming {
            format!("{pf}fence")
        } else {
            "exit".to_string()
        };
        // One body serves full vectors and the last partial one: for the latter,
        // inputs are copied into zero-padded stack vectors and outputs written to stack vectors
        // that are copied out for the lanes below `end`. Emitting the body once halves compile
        // time, and no lane outside `[start, end)` is read or written.
        self.label(&format!("{pf}head"));
        self.line(format!(
            "%{pf}i = phi i64 [ %start, %entry ], [ %{pf}inext, %{pf}latch ]"
        ));
        self.line(format!("%{pf}inext = add i64 %{pf}i, {w}"));
        self.line(format!("%{pf}full = icmp ule i64 %{pf}inext, %end"));
        self.line(format!(
            "br i1 %{pf}full, label %{pf}fullprep, label %{pf}tailcheck"
        ));
        let streamed: Vec<(usize, VarType)> = k
            .params
            .iter()
            .enumerate()
            .filter(|(_, p)| matches!(p.kind, ParamKind::Input | ParamKind::Output))
            .map(|(i, p)| (i, p.ty))
            .collect();
        self.label(&format!("{pf}fullprep"));
        for &(p, t) in &streamed {
            self.line(format!(
                "%{pf}fp{p} = getelementptr inbounds {}, ptr %base{p}, i64 %{pf}i",
                mty(t)
            ));
        }
        self.line(format!("br label %{pf}body"));
        self.label(&format!("{pf}tailcheck"));
        self.line(format!("%{pf}more = icmp ult i64 %{pf}i, %end"));
        self.line(format!(
            "br i1 %{pf}more, label %{pf}tailprep, label %{exit}"
        ));
        self.label(&format!("{pf}tailprep"));
        let iv = self.splat("i64", &format!("%{pf}i"));
        let lanes = self.fresh();
        let lo = self.lane_offsets();
        self.line(format!("{lanes} = add <{w} x i64> {iv}, {lo}"));
        let endv = self.splat("i64", "%end");
        let tm = self.fresh();
        self.line(format!("{tm} = icmp ult <{w} x i64> {lanes}, {endv}"));
        for &(p, t) in &streamed {
            // one scratch vector per parameter, shared by both lane loops (only one runs)
            if !self.allocas.contains(&format!("%scr{p} ")) {
                let _ = writeln!(
                    self.allocas,
                    "  %scr{p} = alloca [{w} x {}], align 64",
                    mty(t)
                );
            }
            if k.params[p].kind == ParamKind::Input {
                // lanes at or past `end` are neither read (masked loads do not touch them) nor
                // anything but 0
                let (m, size) = (mty(t), t.size_bytes());
                let f = format!("llvm.masked.load.v{w}{}.p0", mangle(m));
                self.declare(format!(
                    "declare <{w} x {m}> @{f}(ptr, i32, <{w} x i1>, <{w} x {m}>)"
                ));
                self.line(format!(
                    "%{pf}tsrc{p} = getelementptr inbounds {m}, ptr %base{p}, i64 %{pf}i"
                ));
                self.line(format!(
                    "%{pf}tv{p} = call <{w} x {m}> @{f}(ptr %{pf}tsrc{p}, i32 {size}, <{w} x i1> {tm}, <{w} x {m}> zeroinitializer)"
                ));
                self.line(format!(
                    "store <{w} x {m}> %{pf}tv{p}, ptr %scr{p}, align 64"
                ));
            }
        }
        self.line(format!("br label %{pf}body"));
        self.label(&format!("{pf}body"));
        self.line(format!(
            "%{pf}tail = phi i1 [ false, %{pf}fullprep ], [ true, %{pf}tailprep ]"
        ));
        let all = self.all_true();
        self.line(format!(
            "%{pf}lanemask = phi <{w} x i1> [ {all}, %{pf}fullprep ], [ {tm}, %{pf}tailprep ]"
        ));
        for &(p, _) in &streamed {
            self.line(format!(
                "%{pf}ptr{p} = phi ptr [ %{pf}fp{p}, %{pf}fullprep ], [ %scr{p}, %{pf}tailprep ]"
            ));
        }
        self.active = Some(format!("%{pf}lanemask"));
        self.body();
        self.line(format!(
            "br i1 %{pf}tail, label %{pf}tailout, label %{pf}latch"
        ));
        self.label(&format!("{pf}latch"));
        self.line(format!("br label %{pf}head"));
        self.label(&format!("{pf}tailout"));
        let tail_mask = format!("%{pf}lanemask");
        for &(p, t) in &streamed {
            // (an output the kernel never stores keeps its contents)
            let stored = k
                .insts
                .iter()
                .any(|i| i.op == Op::Store && i.imm as usize == p);
            if k.params[p].kind == ParamKind::Output && stored {
                let (m, size) = (mty(t), t.size_bytes());
                let f = format!("llvm.masked.store.v{w}{}.p0", mangle(m));
                self.declare(format!(
                    "declare void @{f}(<{w} x {m}>, ptr, i32, <{w} x i1>)"
                ));
                self.line(format!(
                    "%{pf}ov{p} = load <{w} x {m}>, ptr %scr{p}, align 64"
                ));
                self.line(format!(
                    "%{pf}odst{p} = getelementptr inbounds {m}, ptr %base{p}, i64 %{pf}i"
                ));
                self.line(format!(
                    "call void @{f}(<{w} x {m}> %{pf}ov{p}, ptr %{pf}odst{p}, i32 {size}, <{w} x i1> {tail_mask})"
                ));
            }
        }
        self.line(format!("br label %{exit}"));
        if streaming {
            self.declare("declare void @llvm.x86.sse.sfence()".into());
            self.label(&exit);
            self.line("call void @llvm.x86.sse.sfence()");
            self.line("br label %exit");
        }
        self.streaming = false;
    }

    /// The outputs a streaming loop writes non-temporally whose alignment it relies on: those
    /// stored, of at least 4 bytes, whose W-lane steps are multiples of 32 bytes.
    pub(super) fn streamed_outputs(&self) -> Vec<(usize, VarType)> {
        let k = self.k;
        k.params
            .iter()
            .enumerate()
            .filter(|(q, p)| {
                p.kind == ParamKind::Output
                    && p.ty.size_bytes() >= 4
                    && (self.w * p.ty.size_bytes()) % 32 == 0
                    && k.insts
                        .iter()
                        .any(|i| i.op == Op::Store && i.imm as usize == *q)
            })
            .map(|(q, p)| (q, p.ty))
            .collect()
    }

    /// Lane indices of this iteration as `<W x i64>`.
    pub(super) fn lane_index(&mut self) -> String {
        let i = format!("%{}i", self.pfx);
        let iv = self.splat("i64", &i);
        let lanes = self.fresh();
        let lo = self.lane_offsets();
        self.line(format!("{lanes} = add <{} x i64> {iv}, {lo}", self.w));
        lanes
    }

    pub(super) fn body(&mut self) {
        let k = self.k;
        for (idx, inst) in k.insts.iter().enumerate() {
            self.inst(idx as Reg, inst);
        }
        debug_assert!(self.regions.is_empty(), "verified: regions are balanced");
    }
}
