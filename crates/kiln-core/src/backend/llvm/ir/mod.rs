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
//!
//! This module holds the generator's state and its small helpers; the rest is split as the Cranelift
//! backend is: `function` (the skeleton and the lane loop), `lower` (per-op lowering), `memory`
//! (gathers and scatters) and `region` (loops and switches). The golden IR of
//! `tests/filetests/*.kir` (`;! llvm widths`) pins the text they generate together.

use crate::backend::encode_reduce;
use crate::kernel::{Kernel, ParamKind, Reg};
use crate::op::{Op, ReduceOp};
use crate::ty::VarType;
use std::collections::BTreeSet;
use std::fmt::Write;

mod function;
mod lower;
mod memory;
mod region;

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
}
