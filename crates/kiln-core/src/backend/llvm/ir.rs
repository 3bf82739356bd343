//! Kernel IR → LLVM IR text, vectorised by hand.
//!
//! A kernel becomes `void @name(ptr %args, i64 %start, i64 %end)` (the launch ABI shared with
//! Cranelift) that runs `W` lanes per iteration as `<W x T>` vectors, `W` chosen from the CPU. The
//! body is emitted once: the last partial vector reads zero-padded copies of its inputs and writes
//! stack vectors that are copied out for the lanes below `end`, so no lane outside `[start, end)` is
//! ever read or written through a streamed parameter. Every op follows the
//! scalar semantics in `op` exactly (integer division by zero, saturating casts, NaN-propagating
//! min/max with −0 < +0), checked against the interpreter by the differential tests.
//!
//! Regions use stack slots (`alloca`) for loop-carried values, switch outputs and active-lane masks;
//! LLVM's SROA turns them into SSA, which keeps this generator free of φ bookkeeping. Masks are
//! `<W x i1>` in registers and bytes in memory. Gathers are `llvm.masked.gather` on the lanes that
//! are active and in range; scatters call the shared `scatter_lane_extern` for each active lane,
//! so their semantics exist once.

use crate::backend::encode_reduce;
use crate::kernel::{Kernel, ParamKind, Reg};
use crate::op::{Op, ReduceOp};
use crate::ty::VarType;
use std::collections::BTreeSet;
use std::fmt::Write;

/// Symbol under which generated code calls `scatter_lane_extern`.
pub const SCATTER_SYMBOL: &str = "kiln_scatter_lane";

/// The LLVM module text for `k`, defining `name`, `w` lanes per iteration.
pub fn module(k: &Kernel, name: &str, w: usize) -> String {
    let mut g = Gen {
        k,
        w,
        decls: BTreeSet::new(),
        allocas: String::new(),
        out: String::new(),
        pfx: 'a',
        tmp: 0,
        active: None,
        regions: Vec::new(),
        uniform_loop: uniform_loops(k),
        contiguous: crate::backend::contiguous_indices(k),
        gather_dst: None,
        streaming: false,
    };
    let body = g.function(name);
    let mut m = String::new();
    for d in &g.decls {
        m.push_str(d);
        m.push('\n');
    }
    m.push_str(&body);
    // !1: "the first target is (nearly) always taken", for fast paths whose slow alternative
    // calls out lane by lane: without it the register allocator spills the loop's values around
    // the calls on every iteration, the fast path included
    m.push_str("\nattributes #0 = { nounwind }\n!0 = !{i32 1}\n");
    m.push_str("!1 = !{!\"branch_weights\", i32 1048575, i32 1}\n");
    m
}

fn sty(t: VarType) -> &'static str {
    match t {
        VarType::Bool => "i1",
        VarType::I32 | VarType::U32 => "i32",
        VarType::I64 | VarType::U64 => "i64",
        VarType::F32 => "float",
        VarType::F64 => "double",
    }
}
/// Integer type of the same width (masks stay i1).
fn ity(t: VarType) -> &'static str {
    match t {
        VarType::F32 => "i32",
        VarType::F64 => "i64",
        t => sty(t),
    }
}
/// Element type in memory (masks are bytes).
fn mty(t: VarType) -> &'static str {
    if t == VarType::Bool {
        "i8"
    } else {
        sty(t)
    }
}
/// Elements of a small scatter target kept in one register of `bytes` (`scatter_add_in_register`),
/// at most the kernel's width.
fn reg_lanes(w: usize, t: VarType, bytes: usize) -> usize {
    w.min(bytes / t.size_bytes()).max(1)
}

/// Intrinsic mangling of a scalar type name.
fn mangle(s: &str) -> &'static str {
    match s {
        "i1" => "i1",
        "i8" => "i8",
        "i32" => "i32",
        "i64" => "i64",
        "float" => "f32",
        "double" => "f64",
        _ => unreachable!("no such element type {s}"),
    }
}
fn bits(t: VarType) -> u32 {
    match t {
        VarType::Bool => 1,
        t => t.size_bytes() as u32 * 8,
    }
}
fn type_index(t: VarType) -> u32 {
    VarType::ALL
        .iter()
        .position(|&x| x == t)
        .expect("every type is in ALL") as u32
}

/// An open region while emitting.
enum Region {
    Loop {
        reg: Reg,
        /// Active lanes on entry (restored after the loop).
        saved: Option<String>,
        /// Active lanes in the body (after the condition).
        body_active: Option<String>,
        /// The condition is uniform: no per-lane masks (see `uniform_loops`).
        uniform: bool,
    },
    Switch {
        reg: Reg,
        saved: Option<String>,
        cases: usize,
    },
}

struct Gen<'a> {
    k: &'a Kernel,
    w: usize,
    decls: BTreeSet<String>,
    allocas: String,
    out: String,
    /// Prefix of every name in the pass being emitted ('a': full vectors, 'b': the tail).
    pfx: char,
    tmp: usize,
    /// The lanes that run here; None: all of them.
    active: Option<String>,
    regions: Vec<Region>,
    /// Per instruction: a loop whose condition is the same in every lane (see `uniform_loops`).
    uniform_loop: Vec<bool>,
    /// Per instruction: an index that is the lane counter plus a value uniform across lanes (a row
    /// of a stacked array: `t * width + lane`), so a gather or scatter through it touches one
    /// contiguous run and becomes a vector load or store when that run is in bounds.
    contiguous: Vec<bool>,
    /// Where the general gather writes when it is the slow side of a row read.
    gather_dst: Option<String>,
    /// Emitting the streaming-store lane loop.
    streaming: bool,
}

/// Outputs of at least this many bytes (or the last-level cache's size, if larger: see
/// [`streaming_bytes`]) are written with streaming stores by kernels that `streaming_output` picks.
pub const STREAMING_BYTES: u64 = 16 << 20;

/// The output size from which streaming stores are used: [`STREAMING_BYTES`], or this machine's
/// last-level cache if it is larger. An output that fits the cache is read back from it by the
/// next step (a stencil time loop alternates two buffers): on a host with a 32 MiB L3, a 2048²
/// f32 heat-diffusion step (16 MiB in, 16 MiB out) ran 1.24 ms with streaming stores and 0.98 ms
/// without (kernel time, medians). Past the cache they still pay: at 4096² the step ran at 0.81×
/// the copy loop's bandwidth with them, 0.72× without.
///
/// ```
/// use kiln_core::backend::llvm::ir::{streaming_bytes, STREAMING_BYTES};
/// assert!(streaming_bytes() >= STREAMING_BYTES);
/// ```
pub fn streaming_bytes() -> u64 {
    static BYTES: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *BYTES.get_or_init(|| crate::backend::last_level_cache().max(STREAMING_BYTES))
}

/// The output whose length decides between plain and streaming stores, for small straight-line
/// kernels (memory-bound ones; the second lane loop costs little compile time there). None: one loop.
fn streaming_output(k: &Kernel) -> Option<usize> {
    if k.insts.len() > 32
        || k.insts
            .iter()
            .any(|i| i.op.is_region() || matches!(i.op, Op::Scatter(_) | Op::Gather))
    {
        return None;
    }
    k.params
        .iter()
        .position(|p| p.kind == ParamKind::Output && p.ty.size_bytes() >= 4)
}

/// Loops whose condition has one value in every lane (e.g. a counter against a literal): every lane
/// that enters runs the same iterations, so they need no per-lane masks: the body runs with the
/// lanes that entered, phis update without a select, and one lane's condition decides the exit.
fn uniform_loops(k: &Kernel) -> Vec<bool> {
    let entry: Vec<bool> = k
        .insts
        .iter()
        .map(|i| {
            i.op == Op::Literal
                || (i.op == Op::Load && k.params[i.imm as usize].kind == ParamKind::Broadcast)
        })
        .collect();
    let (uniform, cond_of) = crate::backend::uniform_in_loops(k, &entry);
    let mut out = vec![false; k.insts.len()];
    for (lp, cond) in cond_of {
        out[lp] = uniform[k.insts[cond].args[0] as usize];
    }
    out
}

/// Lanes per iteration for `k` on a CPU whose vectors hold `base` 32-bit lanes: small kernels run
/// several vectors side by side (independent chains hide instruction latency, as unrolling does);
/// big ones, and ones with scatters (one call per lane), run one.
pub fn width_for(k: &Kernel, base: usize) -> usize {
    // row reads and writes (contiguous indices) are vector loads and stores: they may go wide, and
    // a stacked output written one row segment at a time wants whole cache lines per segment
    let indexed = k
        .insts
        .iter()
        .any(|i| matches!(i.op, Op::Gather | Op::Scatter(_)));
    let contiguous = if indexed {
        crate::backend::contiguous_indices(k)
    } else {
        Vec::new()
    };
    if indexed
        && k.insts.iter().any(|i| match i.op {
            Op::Gather => !contiguous[i.args[0] as usize],
            Op::Scatter(_) => !contiguous[i.args[1] as usize],
            _ => false,
        })
    {
        return base;
    }
    // compile time grows with width × size: a 300-instruction kernel at 8 lanes takes ~20 ms
    let by_size = match k.insts.len() {
        0..=160 => base * 4,
        161..=400 => base * 2,
        _ => base,
    };
    // a loop that reads rows (a fused-mode scan reading one row segment of its sequence per
    // step) keeps more of its steps' loads in flight with a smaller body: an EMA over 100 000
    // signals × 500 steps took 18-21 ms at 2 vectors per iteration, 22-30 ms at 4 (AVX-512
    // host). A loop that only writes rows (`scan` stacked) stays at 4: 8-13% faster there.
    let loop_reads_rows =
        k.insts.iter().any(|i| i.op == Op::Gather) && k.insts.iter().any(|i| i.op == Op::LoopBegin);
    if loop_reads_rows {
        return by_size.min(base * 2);
    }
    by_size
}

impl Gen<'_> {
    fn v(&self, t: &str) -> String {
        format!("<{} x {t}>", self.w)
    }
    fn vt(&self, t: VarType) -> String {
        self.v(sty(t))
    }
    fn r(&self, r: Reg) -> String {
        format!("%{}{r}", self.pfx)
    }
    fn fresh(&mut self) -> String {
        self.tmp += 1;
        format!("%{}t{}", self.pfx, self.tmp)
    }
    /// `N` fresh names at once.
    fn fresh_n<const N: usize>(&mut self) -> [String; N] {
        std::array::from_fn(|_| self.fresh())
    }
    fn line(&mut self, s: impl AsRef<str>) {
        self.out.push_str("  ");
        self.out.push_str(s.as_ref());
        self.out.push('\n');
    }
    fn label(&mut self, l: &str) {
        let _ = writeln!(self.out, "{l}:");
    }
    fn declare(&mut self, d: String) {
        self.decls.insert(d);
    }
    /// `<W x t> <t c, t c, …>`'s element list.
    fn splat_const(&self, t: &str, c: &str) -> String {
        let items: Vec<String> = (0..self.w).map(|_| format!("{t} {c}")).collect();
        format!("<{}>", items.join(", "))
    }
    fn all_true(&self) -> String {
        self.splat_const("i1", "true")
    }
    fn lane_offsets(&self) -> String {
        let items: Vec<String> = (0..self.w).map(|i| format!("i64 {i}")).collect();
        format!("<{}>", items.join(", "))
    }
    /// Broadcast scalar `x` of type `t`.
    fn splat(&mut self, t: &str, x: &str) -> String {
        let ins = self.fresh();
        let out = self.fresh();
        let vt = self.v(t);
        self.line(format!("{ins} = insertelement {vt} poison, {t} {x}, i64 0"));
        self.line(format!(
            "{out} = shufflevector {vt} {ins}, {vt} poison, <{} x i32> zeroinitializer",
            self.w
        ));
        out
    }
    /// `a & b` of two optional masks.
    fn and_mask(&mut self, a: Option<&str>, b: &str) -> String {
        match a {
            None => b.to_string(),
            Some(a) => {
                let t = self.fresh();
                let vt = self.v("i1");
                self.line(format!("{t} = and {vt} {a}, {b}"));
                t
            }
        }
    }
    /// `i1`: whether any lane of mask `m` is set.
    fn any(&mut self, m: &str) -> String {
        let bitsv = self.fresh();
        let r = self.fresh();
        let vt = self.v("i1");
        self.line(format!("{bitsv} = bitcast {vt} {m} to i{}", self.w));
        self.line(format!("{r} = icmp ne i{} {bitsv}, 0", self.w));
        r
    }
    /// `i64`: number of set lanes of mask `m`.
    fn count(&mut self, m: &str) -> String {
        let w = self.w;
        self.declare(format!("declare i{w} @llvm.ctpop.i{w}(i{w})"));
        let bitsv = self.fresh();
        let c = self.fresh();
        let r = self.fresh();
        let vt = self.v("i1");
        self.line(format!("{bitsv} = bitcast {vt} {m} to i{w}"));
        self.line(format!("{c} = call i{w} @llvm.ctpop.i{w}(i{w} {bitsv})"));
        // (64 lanes: the count is already an i64, and LLVM rejects a zext to the same width)
        match w.cmp(&64) {
            std::cmp::Ordering::Less => self.line(format!("{r} = zext i{w} {c} to i64")),
            std::cmp::Ordering::Equal => return c,
            std::cmp::Ordering::Greater => self.line(format!("{r} = trunc i{w} {c} to i64")),
        }
        r
    }
    fn call1(&mut self, dst: &str, name: &str, t: VarType, a: &str) {
        let vt = self.vt(t);
        let full = format!("llvm.{name}.v{}{}", self.w, mangle(sty(t)));
        self.declare(format!("declare {vt} @{full}({vt})"));
        self.line(format!("{dst} = call {vt} @{full}({vt} {a})"));
    }

    fn function(&mut self, name: &str) -> String {
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
    fn lane_loop(&mut self, pf: char, streaming: bool) {
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
    fn streamed_outputs(&self) -> Vec<(usize, VarType)> {
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
    fn lane_index(&mut self) -> String {
        let i = format!("%{}i", self.pfx);
        let iv = self.splat("i64", &i);
        let lanes = self.fresh();
        let lo = self.lane_offsets();
        self.line(format!("{lanes} = add <{} x i64> {iv}, {lo}", self.w));
        lanes
    }

    fn body(&mut self) {
        let k = self.k;
        for (idx, inst) in k.insts.iter().enumerate() {
            self.inst(idx as Reg, inst);
        }
        debug_assert!(self.regions.is_empty(), "verified: regions are balanced");
    }

    fn inst(&mut self, idx: Reg, inst: &crate::kernel::Inst) {
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
    fn ordinary_literal(&self, inst: &crate::kernel::Inst) -> Option<usize> {
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

    fn copy(&mut self, dst: &str, t: VarType, x: &str) {
        let vt = self.vt(t);
        self.line(format!("{dst} = select i1 true, {vt} {x}, {vt} {x}"));
    }

    fn cast(&mut self, dst: &str, from: VarType, to: VarType, x: &str) {
        use VarType::*;
        let fv = self.vt(from);
        let tv = self.vt(to);
        let w = self.w;
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
                let f = format!(
                    "llvm.{}.sat.v{w}{}.v{w}{}",
                    if to.is_signed() { "fptosi" } else { "fptoui" },
                    mangle(sty(to)),
                    mangle(sty(from))
                );
                self.declare(format!("declare {tv} @{f}({fv})"));
                self.line(format!("{dst} = call {tv} @{f}({fv} {x})"));
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

    fn binary(&mut self, op: Op, dst: &str, t: VarType, x: &str, y: &str) {
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

    /// An index vector of type `t` widened to i64 (signed types sign-extend, so negative indices
    /// become huge unsigned ones and fail the bounds check).
    fn index64(&mut self, t: VarType, x: &str) -> String {
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
    fn contiguous_run(&mut self, ix64: &str, p: usize) -> (String, String) {
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

    fn gather(&mut self, idx: Reg, inst: &crate::kernel::Inst) {
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

    fn gather_any(&mut self, idx: Reg, inst: &crate::kernel::Inst) {
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

    fn scatter(&mut self, inst: &crate::kernel::Inst) {
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

    /// `target[index] += value` for each active lane of a reduce-add scatter, inline: in range,
    /// an atomic add (`atomicrmw add`/`fadd`, in lane order); out of range, the status counter.
    ///
    /// `exclusive` (the launch gives this thread its own target: see `privatise`): a plain load,
    /// add and store instead of the atomic add — the same additions in the same lane order.
    fn scatter_add_inline(
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
            let (ins, lens, inr, ok, bits, full) = (
                self.fresh(),
                self.fresh(),
                self.fresh(),
                self.fresh(),
                self.fresh(),
                self.fresh(),
            );
            let (fast, slow, done) = (self.fresh(), self.fresh(), self.fresh());
            self.line(format!(
                "{ins} = insertelement <{w} x i64> poison, i64 %len{p}, i64 0"
            ));
            self.line(format!(
                "{lens} = shufflevector <{w} x i64> {ins}, <{w} x i64> poison, <{w} x i32> zeroinitializer"
            ));
            self.line(format!("{inr} = icmp ult <{w} x i64> {ix64}, {lens}"));
            self.line(format!("{ok} = and <{w} x i1> {inr}, {m}"));
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
    fn scatter_add_in_register(&mut self, t: VarType, p: usize, r: usize, val: &str, ix64: &str) {
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

    fn mask_or_all(&self) -> String {
        self.active.clone().unwrap_or_else(|| self.all_true())
    }

    fn loop_begin(&mut self, idx: Reg) {
        let k = self.k;
        let w = self.w;
        let pf = self.pfx;
        let uniform = self.uniform_loop[idx as usize];
        let _ = writeln!(self.allocas, "  %{pf}it{idx} = alloca i64, align 8");
        self.line(format!("store i64 0, ptr %{pf}it{idx}, align 8"));
        if !uniform {
            let _ = writeln!(self.allocas, "  %{pf}act{idx} = alloca <{w} x i1>");
            let cur = self.mask_or_all();
            self.line(format!("store <{w} x i1> {cur}, ptr %{pf}act{idx}"));
        }
        // the phis follow the loop: store their initial values before entering
        let mut j = idx as usize + 1;
        while j < k.insts.len() && k.insts[j].op == Op::Phi {
            let pt = k.insts[j].ty;
            let pvt = self.vt(pt);
            let _ = writeln!(self.allocas, "  %{pf}phi{j} = alloca {pvt}");
            let init = self.r(k.insts[j].args[0]);
            self.line(format!("store {pvt} {init}, ptr %{pf}phi{j}"));
            j += 1;
        }
        let head = format!("{pf}L{idx}h");
        self.line(format!("br label %{head}"));
        self.label(&head);
        self.regions.push(Region::Loop {
            reg: idx,
            saved: self.active.clone(),
            body_active: None,
            uniform,
        });
        if !uniform {
            let act = self.fresh();
            self.line(format!("{act} = load <{w} x i1>, ptr %{pf}act{idx}"));
            self.active = Some(act);
        }
    }

    fn loop_cond(&mut self, inst: &crate::kernel::Inst) {
        let k = self.k;
        let w = self.w;
        let pf = self.pfx;
        let Some(Region::Loop {
            reg,
            uniform,
            saved,
            ..
        }) = self.regions.last()
        else {
            unreachable!("verified: a condition sits in a loop")
        };
        let (reg, uniform, saved) = (*reg, *uniform, saved.clone());
        let max = k.insts[reg as usize].imm;
        let cond = self.r(inst.args[0]);
        // the lanes that run the body, and whether there are any
        let (ac, any) = if uniform {
            // every lane holds the same condition; it is read as "any lane", not as lane 0: an
            // `extractelement` of lane 0 lets LLVM's InstCombine (before LLVM 22, llvm-project
            // PR 169120) scalarise a state whose next value is `k - state` (or another operation
            // that does not commute) as `state - k`, and such a loop never left
            let any = self.any(&cond);
            (saved, any)
        } else {
            let act = self
                .active
                .clone()
                .expect("divergent loops set the active mask");
            let ac = self.fresh();
            self.line(format!("{ac} = and <{w} x i1> {act}, {cond}"));
            let any = self.any(&ac);
            (Some(ac), any)
        };
        let exit = format!("{pf}L{reg}x");
        let body = format!("{pf}L{reg}b");
        if max == 0 {
            self.line(format!("br i1 {any}, label %{body}, label %{exit}"));
        } else {
            let chk = format!("{pf}L{reg}c");
            let trunc = format!("{pf}L{reg}t");
            self.line(format!("br i1 {any}, label %{chk}, label %{exit}"));
            self.label(&chk);
            let (it, lim) = (self.fresh(), self.fresh());
            self.line(format!("{it} = load i64, ptr %{pf}it{reg}, align 8"));
            self.line(format!("{lim} = icmp uge i64 {it}, {max}"));
            self.line(format!("br i1 {lim}, label %{trunc}, label %{body}"));
            self.label(&trunc);
            let c = match &ac {
                Some(m) => {
                    let m = m.clone();
                    self.count(&m)
                }
                None => w.to_string(),
            };
            let (sp, old) = (self.fresh(), self.fresh());
            self.line(format!(
                "{sp} = getelementptr inbounds i64, ptr %status, i64 {}",
                crate::backend::STATUS_LOOP_TRUNCATED
            ));
            self.line(format!("{old} = atomicrmw add ptr {sp}, i64 {c} monotonic"));
            self.line(format!("br label %{exit}"));
        }
        self.label(&body);
        if let Some(Region::Loop { body_active, .. }) = self.regions.last_mut() {
            *body_active = ac.clone();
        }
        self.active = ac;
    }

    fn loop_end(&mut self) {
        let w = self.w;
        let pf = self.pfx;
        let Some(Region::Loop {
            reg,
            saved,
            body_active,
            uniform,
        }) = self.regions.pop()
        else {
            unreachable!("verified: endloop closes a loop")
        };
        if !uniform {
            let ac = body_active.expect("divergent loops have a body mask");
            self.line(format!("store <{w} x i1> {ac}, ptr %{pf}act{reg}"));
        }
        let (it, it1) = (self.fresh(), self.fresh());
        self.line(format!("{it} = load i64, ptr %{pf}it{reg}, align 8"));
        self.line(format!("{it1} = add i64 {it}, 1"));
        self.line(format!("store i64 {it1}, ptr %{pf}it{reg}, align 8"));
        self.line(format!("br label %{pf}L{reg}h"));
        self.label(&format!("{pf}L{reg}x"));
        self.active = saved;
    }

    /// The outputs `(index, type)` that switch `sw` yields.
    fn switch_slots(&self, sw: Reg) -> Vec<(u64, VarType)> {
        let k = self.k;
        let mut depth = 0usize;
        let mut slots: Vec<(u64, VarType)> = Vec::new();
        for inst in &k.insts[sw as usize + 1..] {
            match inst.op {
                Op::Switch | Op::LoopBegin => depth += 1,
                Op::LoopEnd => depth -= 1,
                Op::SwitchEnd if depth == 0 => break,
                Op::SwitchEnd => depth -= 1,
                Op::Yield if depth == 0 && !slots.iter().any(|&(j, _)| j == inst.imm) => {
                    slots.push((inst.imm, k.ty(inst.args[0])));
                }
                _ => {}
            }
        }
        slots
    }

    fn switch_begin(&mut self, idx: Reg) {
        let pf = self.pfx;
        for (j, t) in self.switch_slots(idx) {
            let vt = self.vt(t);
            let _ = writeln!(self.allocas, "  %{pf}sw{idx}_{j} = alloca {vt}");
            self.line(format!("store {vt} zeroinitializer, ptr %{pf}sw{idx}_{j}"));
        }
        self.regions.push(Region::Switch {
            reg: idx,
            saved: self.active.clone(),
            cases: 0,
        });
    }

    fn case(&mut self, inst: &crate::kernel::Inst) {
        let pf = self.pfx;
        let Some(Region::Switch { reg, saved, cases }) = self.regions.last_mut() else {
            unreachable!("verified: a case sits in a switch")
        };
        let (reg, saved, k) = (*reg, saved.clone(), *cases);
        *cases += 1;
        if k > 0 {
            self.line(format!("br label %{pf}S{reg}n{k}"));
            self.label(&format!("{pf}S{reg}n{k}"));
        }
        let mask = self.r(inst.args[0]);
        let cm = self.and_mask(saved.as_deref(), &mask);
        let any = self.any(&cm);
        let body = format!("{pf}S{reg}c{k}");
        self.line(format!(
            "br i1 {any}, label %{body}, label %{pf}S{reg}n{}",
            k + 1
        ));
        self.label(&body);
        self.active = Some(cm);
    }

    fn switch_end(&mut self) {
        let pf = self.pfx;
        let Some(Region::Switch { reg, saved, cases }) = self.regions.pop() else {
            unreachable!("verified: endswitch closes a switch")
        };
        if cases > 0 {
            self.line(format!("br label %{pf}S{reg}n{cases}"));
            self.label(&format!("{pf}S{reg}n{cases}"));
        }
        self.active = saved;
    }
}
