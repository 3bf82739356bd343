//! Lane blocking (`backend::blocked`) against the reference interpreter.
//!
//! Random kernels of the shape blocking is for — a counted loop over the rows of stacked arrays,
//! with extra loop state of several types, values computed before the loop that the loop and the
//! code after it read (cheap ones recomputed, others kept in scratch), forward and backward row
//! walks, row reads and writes partly out of range — run blocked (blocks as small as 64 lanes, so
//! that a launch range spans several) on Cranelift (host ISA and SSE only) and LLVM (host width and
//! every width another host may pick), and unblocked on the interpreter; every buffer and the
//! status counters must agree bit for bit. Hand-written kernels pin where `split` must refuse, and
//! that overlapping buffers fall back to the kernel unsplit.

mod common;
use common::{same_bits, Buf};
use kiln_core::backend::blocked::{compile_split, split_with, Policy};
use kiln_core::backend::cranelift::CraneliftBackend;
use kiln_core::backend::interp::Interp;
use kiln_core::backend::llvm::LlvmBackend;
use kiln_core::backend::{Backend, CompiledKernel, LaunchArgs, STATUS_LEN};
use kiln_core::kernel::{Inst, Kernel, Param, ParamKind, Reg};
use kiln_core::{Op, ReduceOp, VarType};
use proptest::prelude::*;
use proptest::test_runner::Config;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

/// Runs `compiled` over `[start, end)`; `alias` binds parameter `.1` to parameter `.0`'s buffer.
fn run(
    compiled: &dyn CompiledKernel,
    bufs: &[Buf],
    start: u64,
    end: u64,
    alias: Option<(usize, usize)>,
) -> [u64; STATUS_LEN] {
    let mut ptrs: Vec<*mut u8> = bufs.iter().map(|b| b.ptr()).collect();
    let mut lens: Vec<u64> = bufs.iter().map(|b| b.len as u64).collect();
    if let Some((a, b)) = alias {
        ptrs[b] = ptrs[a];
        lens[b] = lens[a];
    }
    let status: [AtomicU64; STATUS_LEN] = Default::default();
    let args = LaunchArgs {
        ptrs: ptrs.as_ptr(),
        lens: lens.as_ptr(),
        status: status.as_ptr(),
    };
    // SAFETY: one buffer per parameter, of its type; inputs and outputs hold at least `end`
    // elements (plus slack), broadcast ones at least 1, indexed ones `len`.
    unsafe { compiled.run(&args, start, end) };
    std::array::from_fn(|i| status[i].load(Ordering::Relaxed))
}

/// The backends blocked kernels are compiled by: Cranelift for this host and for SSE only, LLVM
/// (when this machine has it) at this host's width and at every width any host's may pick.
fn backends() -> &'static [(String, Arc<dyn Backend>)] {
    static BE: OnceLock<Vec<(String, Arc<dyn Backend>)>> = OnceLock::new();
    BE.get_or_init(|| {
        let mut v: Vec<(String, Arc<dyn Backend>)> = vec![
            (
                "cranelift".into(),
                Arc::new(CraneliftBackend::new().expect("cranelift")),
            ),
            (
                "cranelift sse".into(),
                Arc::new(
                    CraneliftBackend::with_settings(&[
                        ("has_avx", "false"),
                        ("has_avx2", "false"),
                        ("has_fma", "false"),
                        ("has_avx512f", "false"),
                        ("enable_verifier", "true"),
                    ])
                    .expect("cranelift (SSE only)"),
                ),
            ),
        ];
        match LlvmBackend::create(false) {
            Ok(b) => {
                v.push(("llvm".into(), Arc::new(b.strict())));
                for w in [4usize, 8, 16, 32, 64] {
                    if let Ok(b) = LlvmBackend::create_with(false, w) {
                        v.push((format!("llvm w{w}"), Arc::new(b.strict())));
                    }
                }
            }
            Err(reason) => eprintln!("LLVM lane-blocking tests SKIPPED: {reason}"),
        }
        v
    })
}

/// Runs `kernel` unblocked on the interpreter and blocked (blocks of at most `want` lanes) on
/// `backend`, on copies of `bufs`; compares every buffer and the status.
fn check(
    kernel: &Kernel,
    bufs: &[Buf],
    start: u64,
    end: u64,
    want: usize,
    (name, backend): &(String, Arc<dyn Backend>),
) -> Result<(), String> {
    let split = split_with(kernel, blocks(want)).ok_or_else(|| format!("not split:\n{kernel}"))?;
    for k in [kernel, &split.pre, &split.step, &split.post] {
        // (the text form parses back: these kernels use `u32` region markers, not the default)
        if Kernel::parse(&k.to_string()).as_ref() != Ok(k) {
            return Err(format!("text does not parse back to the kernel:\n{k}"));
        }
    }
    for part in [&split.pre, &split.step, &split.post] {
        part.verify()
            .map_err(|e| format!("invalid part {}:\n{part}\nof\n{kernel}", e.join("\n")))?;
    }
    let blocked = compile_split(backend, kernel, split).map_err(|e| format!("{name}: {e}"))?;
    let oracle = Interp.compile(kernel).map_err(|e| e.to_string())?;
    let (a, b): (Vec<Buf>, Vec<Buf>) = bufs.iter().map(|x| (x.copy(), x.copy())).unzip();
    let sa = run(oracle.as_ref(), &a, start, end, None);
    let sb = run(blocked.as_ref(), &b, start, end, None);
    if sa != sb {
        return Err(format!(
            "{name}: status {sb:?}, interpreter {sa:?} (lanes {start}..{end}, blocks of {want})\n{kernel}"
        ));
    }
    for (p, (x, y)) in a.iter().zip(&b).enumerate() {
        let is_out = matches!(kernel.params[p].kind, ParamKind::Output);
        for i in 0..x.len {
            // outputs are defined on the launch range only
            if is_out && !(start as usize..end as usize).contains(&i) {
                continue;
            }
            if !same_bits(x.ty, x.get(i), y.get(i)) {
                return Err(format!(
                    "{name}: p{p}[{i}] = {:#x}, interpreter {:#x} (lanes {start}..{end}, blocks of {want})\n{kernel}",
                    y.get(i),
                    x.get(i)
                ));
            }
        }
    }
    Ok(())
}

/// Blocks of at most `lanes` lanes, whatever the rows' span (the kernels here are small).
fn blocks(lanes: usize) -> Policy {
    Policy { lanes, min_span: 0 }
}

/// A small kernel builder.
#[derive(Default)]
struct B {
    k: Kernel,
}

impl B {
    fn param(&mut self, ty: VarType, kind: ParamKind) -> u64 {
        self.k.params.push(Param { ty, kind });
        (self.k.params.len() - 1) as u64
    }
    fn i(&mut self, op: Op, ty: VarType, args: &[Reg], imm: u64) -> Reg {
        self.k.insts.push(Inst::new(op, ty, args, imm));
        (self.k.insts.len() - 1) as Reg
    }
    fn lit(&mut self, ty: VarType, v: i64) -> Reg {
        self.i(Op::Literal, ty, &[], v as u64 & ty.bit_mask())
    }
    fn f32(&mut self, v: f32) -> Reg {
        self.i(Op::Literal, VarType::F32, &[], v.to_bits() as u64)
    }
}

/// What a random blocked kernel looks like.
#[derive(Clone, Debug)]
struct Shape {
    /// Type of the loop counter and of every index.
    ity: VarType,
    first: i64,
    stride: i64,
    trips: i64,
    /// Row width (lanes per row of the stacked arrays).
    width: i64,
    /// Walk the rows last to first.
    backward: bool,
    /// Row offset of the write relative to the read.
    write_row: i64,
    /// Elements added to the read's index (another column, or another row).
    read_shift: i64,
    scatter: bool,
    /// Elements missing from the end of the read and written arrays (reads and writes past them
    /// are dropped and counted).
    short: (usize, usize),
    bool_state: bool,
    /// A second scatter into the rows written, one row on and one lane left (lanes meet).
    twice: bool,
    /// Each state's next value also reads the other's old value (the blocked step reads and
    /// rewrites its state in place: every old value must be read before any new one is written).
    cross: bool,
}

fn shape() -> impl Strategy<Value = Shape> {
    (
        prop::sample::select(vec![VarType::U32, VarType::I32, VarType::I64, VarType::U64]),
        0i64..4,
        1i64..4,
        0i64..7,
        prop::sample::select(vec![256i64, 300, 1000, 1024, 4099]),
        any::<bool>(),
        0i64..2,
        prop::bool::weighted(0.8),
        (0usize..3, 0usize..3),
        any::<bool>(),
        0i64..3,
        any::<bool>(),
    )
        .prop_map(
            |(
                ity,
                first,
                stride,
                trips,
                width,
                backward,
                write_row,
                scatter,
                short,
                bool_state,
                read_shift,
                cross,
            )| {
                Shape {
                    read_shift,
                    ity,
                    first,
                    stride,
                    trips,
                    width,
                    backward,
                    write_row,
                    scatter,
                    short: (short.0 * 37, short.1 * 41),
                    bool_state,
                    twice: false,
                    cross,
                }
            },
        )
}

/// The parameters of [`build`]'s kernels, in order.
const XS: u64 = 0; // indexed f32: the rows read
const YS: u64 = 1; // indexed f32: the rows written
const INIT: u64 = 2; // input f64: the second state's initial value
const TABLE: u64 = 4; // indexed i32: gathered before the loop (a value kept in scratch)
const SCALE: u64 = 5; // broadcast f32

/// A counted loop over rows: `s0 = s0·0.5 + x·scale`, `s1 += x·√init`, an optional flag flipped
/// where `x > s0`, a row write of `s0` (rows `write_row` after the read), the final state and a
/// kept value stored after the loop.
fn build(s: &Shape) -> Kernel {
    use VarType::*;
    let ity = s.ity;
    let mut b = B::default();
    b.param(F32, ParamKind::Indexed);
    b.param(F32, ParamKind::Indexed);
    b.param(F64, ParamKind::Input);
    b.param(ity, ParamKind::Output); // 3: final counter
    b.param(I32, ParamKind::Indexed);
    b.param(F32, ParamKind::Broadcast);
    let out_s0 = b.param(F32, ParamKind::Output);
    let out_s1 = b.param(F64, ParamKind::Output);
    let out_kept = b.param(I32, ParamKind::Output);
    let out_flag = b.param(Bool, ParamKind::Output);
    let lane = b.i(Op::Counter, ity, &[], 0);
    let yes = b.i(Op::Literal, Bool, &[], 1);
    // kept in scratch: a gather, and a square root
    let seven = b.lit(ity, 7);
    let slot = b.i(Op::And, ity, &[lane, seven], 0);
    let kept = b.i(Op::Gather, I32, &[slot, yes], TABLE);
    let init = b.i(Op::Load, F64, &[], INIT);
    let root = b.i(Op::Sqrt, F64, &[init], 0);
    let scale = b.i(Op::Load, F32, &[], SCALE);
    let s0_init = b.i(Op::Cast, F32, &[kept], 0);
    let first = b.lit(ity, s.first);
    let limit = b.lit(ity, s.first + s.trips * s.stride);
    let stride = b.lit(ity, s.stride);
    let width = b.lit(ity, s.width);
    let last_row = b.lit(ity, s.first + (s.trips.max(1) - 1) * s.stride);
    let no = b.i(Op::Literal, Bool, &[], 0);
    let lp = b.i(Op::LoopBegin, U32, &[], 0);
    let ctr = b.i(Op::Phi, ity, &[first], 0);
    let s0 = b.i(Op::Phi, F32, &[s0_init], 0);
    let s1 = b.i(Op::Phi, F64, &[init], 0);
    let flag = s.bool_state.then(|| b.i(Op::Phi, Bool, &[no], 0));
    let c = b.i(Op::Lt, Bool, &[ctr, limit], 0);
    b.i(Op::LoopCond, Bool, &[c], 0);
    let row = if s.backward {
        b.i(Op::Sub, ity, &[last_row, ctr], 0)
    } else {
        ctr
    };
    // (a power-of-two width as the scheduler writes it: a shift)
    let off = if s.width > 0 && (s.width as u64).is_power_of_two() {
        let log = b.lit(ity, s.width.trailing_zeros() as i64);
        b.i(Op::Shl, ity, &[row, log], 0)
    } else {
        b.i(Op::Mul, ity, &[row, width], 0)
    };
    let shift = b.lit(ity, s.read_shift);
    let roff = b.i(Op::Add, ity, &[off, shift], 0);
    let ix = b.i(Op::Add, ity, &[lane, roff], 0);
    let x = b.i(Op::Gather, F32, &[ix, yes], XS);
    let half = b.f32(0.5);
    let a = b.i(Op::Mul, F32, &[s0, half], 0);
    let bx = b.i(Op::Mul, F32, &[x, scale], 0);
    let mut s0n = b.i(Op::Add, F32, &[a, bx], 0);
    let xd = b.i(Op::Cast, F64, &[x], 0);
    let xr = b.i(Op::Mul, F64, &[xd, root], 0);
    let mut s1n = b.i(Op::Add, F64, &[s1, xr], 0);
    if s.cross {
        let old1 = b.i(Op::Cast, F32, &[s1], 0);
        let eighth = b.f32(0.125);
        let part = b.i(Op::Mul, F32, &[old1, eighth], 0);
        s0n = b.i(Op::Add, F32, &[s0n, part], 0);
        let old0 = b.i(Op::Cast, F64, &[s0], 0);
        s1n = b.i(Op::Sub, F64, &[s1n, old0], 0);
    }
    if s.scatter {
        let shift = b.lit(ity, s.write_row * s.width);
        let wo = b.i(Op::Add, ity, &[off, shift], 0);
        let wix = b.i(Op::Add, ity, &[wo, lane], 0);
        b.i(Op::Scatter(ReduceOp::None), F32, &[s0n, wix, yes], YS);
        if s.twice {
            let next = b.lit(ity, 2 * s.width - 1);
            let wo = b.i(Op::Add, ity, &[off, next], 0);
            let wix = b.i(Op::Add, ity, &[lane, wo], 0);
            let neg = b.i(Op::Neg, F32, &[s0n], 0);
            b.i(Op::Scatter(ReduceOp::None), F32, &[neg, wix, yes], YS);
        }
    }
    let flagn = flag.map(|f| {
        let gt = b.i(Op::Gt, Bool, &[x, s0], 0);
        b.i(Op::Xor, Bool, &[f, gt], 0)
    });
    let cn = b.i(Op::Add, ity, &[ctr, stride], 0);
    b.i(Op::LoopNext, U32, &[ctr, cn], 0);
    b.i(Op::LoopNext, U32, &[s0, s0n], 0);
    b.i(Op::LoopNext, U32, &[s1, s1n], 0);
    if let (Some(f), Some(fnx)) = (flag, flagn) {
        b.i(Op::LoopNext, U32, &[f, fnx], 0);
    }
    b.i(Op::LoopEnd, U32, &[lp], 0);
    b.i(Op::Store, ity, &[ctr], 3);
    b.i(Op::Store, F32, &[s0], out_s0);
    b.i(Op::Store, F64, &[s1], out_s1);
    let lane32 = b.i(Op::Cast, I32, &[lane], 0);
    let k2 = b.i(Op::Add, I32, &[kept, lane32], 0);
    b.i(Op::Store, I32, &[k2], out_kept);
    let f = flag.unwrap_or(yes);
    b.i(Op::Store, Bool, &[f], out_flag);
    let k = b.k;
    k.verify()
        .unwrap_or_else(|e| panic!("test kernel invalid: {}\n{k}", e.join("\n")));
    k
}

/// Buffers for [`build`]'s kernel over `lanes` lanes.
fn buffers(k: &Kernel, s: &Shape, lanes: usize, seed: u64) -> Vec<Buf> {
    let rows = (s.first + s.trips.max(1) * s.stride + 2) as usize;
    let cells = rows * s.width as usize;
    k.params
        .iter()
        .enumerate()
        .map(|(p, prm)| {
            let len = match p as u64 {
                XS => cells - s.short.0,
                YS => cells - s.short.1,
                TABLE => 8,
                SCALE => 1,
                _ => lanes.max(1),
            };
            Buf::pattern(prm.ty, len, seed.wrapping_add(p as u64 * 7919))
        })
        .collect()
}

fn config(cases: u32) -> Config {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(cases);
    Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    }
}

proptest! {
    #![proptest_config(config(48))]
    /// Random row loops, blocked on every backend, against the interpreter unblocked: launch
    /// ranges of every size class up to a row (0, 1, a vector ± 1, a block ± 1, several blocks)
    /// starting on or off a block boundary.
    #[test]
    fn blocked_row_loops_match_the_interpreter(
        s in shape(),
        lanes in prop::sample::select(vec![0usize, 1, 15, 16, 17, 63, 64, 65, 129, 255, 256]),
        start in prop::sample::select(vec![0usize, 16, 64, 100]),
        want in prop::sample::select(vec![64usize, 80, 128, 4096]),
        seed in any::<u64>(),
    ) {
        let k = build(&s);
        // a launch range inside the first row (rows never overlap across lanes, see `split`)
        let start = start.min(s.width as usize - lanes);
        let end = start + lanes;
        let bufs = buffers(&k, &s, end, seed);
        for be in backends() {
            check(&k, &bufs, start as u64, end as u64, want, be).map_err(TestCaseError::fail)?;
        }
    }
}

/// Whole rows of the widest shape, launched in one range: many blocks of 4096 lanes and a partial
/// one, every backend.
#[test]
fn a_whole_wide_row_in_one_launch() {
    let s = Shape {
        ity: VarType::U32,
        first: 0,
        stride: 1,
        trips: 5,
        width: 10_007,
        backward: false,
        write_row: 1,
        read_shift: 0,
        scatter: true,
        short: (3, 5),
        bool_state: true,
        twice: false,
        cross: true,
    };
    let k = build(&s);
    let bufs = buffers(&k, &s, 10_007, 42);
    for be in backends() {
        check(&k, &bufs, 0, 10_007, 4096, be).unwrap();
        check(&k, &bufs, 16, 9_000, 1000, be).unwrap();
    }
}

/// Blocks hold as many lanes as the state budget allows (`STATE_BUDGET` bytes of per-lane
/// scratch: the loop state and the values kept for the step), in whole 16-lane steps, unless the
/// policy's cap or the rows' distance is smaller.
#[test]
fn blocks_hold_what_the_state_budget_allows() {
    use kiln_core::backend::blocked::STATE_BUDGET;
    let wide = |width| Shape {
        ity: VarType::U64,
        first: 0,
        stride: 1,
        trips: 4,
        width,
        backward: false,
        write_row: 0,
        read_shift: 0,
        scatter: true,
        short: (0, 0),
        bool_state: false,
        twice: false,
        cross: false,
    };
    let k = build(&wide(1_000_000));
    let lanes = |cap| split_with(&k, blocks(cap)).map(|s| s.lanes);
    // the scratch a lane needs: `pre`'s extra outputs, the state and the values kept for `step`
    let split = split_with(&k, blocks(1 << 20)).expect("splits");
    let per_lane: usize = split.pre.params[k.params.len()..]
        .iter()
        .map(|p| p.ty.size_bytes())
        .sum();
    assert!(per_lane >= 12, "an f32 and an f64 state at least");
    assert_eq!(lanes(1 << 20), Some(STATE_BUDGET / per_lane / 16 * 16));
    assert_eq!(lanes(1024), Some(1024));
    // rows closer than the budget's block: the rows' distance bounds it
    let k = build(&wide(5000));
    assert_eq!(split_with(&k, blocks(1 << 20)).map(|s| s.lanes), Some(4992));
}

/// The loop of [`build`] with one instruction replaced: `split` must refuse each.
#[test]
fn split_refuses_what_could_show_the_order() {
    let base = Shape {
        ity: VarType::U32,
        first: 0,
        stride: 1,
        trips: 4,
        width: 1000,
        backward: false,
        write_row: 0,
        read_shift: 0,
        scatter: true,
        short: (0, 0),
        bool_state: false,
        twice: false,
        cross: true,
    };
    let k = build(&base);
    assert!(
        split_with(&k, blocks(4096)).is_some(),
        "the base kernel splits:\n{k}"
    );
    let find = |k: &Kernel, pred: &dyn Fn(&Inst) -> bool| {
        k.insts.iter().position(pred).expect("instruction")
    };
    let scatter = find(&k, &|i| matches!(i.op, Op::Scatter(_)));
    let mut cases: Vec<(&str, Kernel)> = Vec::new();
    // a reducing scatter: the order of its additions would change
    let mut m = k.clone();
    m.insts[scatter].op = Op::Scatter(ReduceOp::Add);
    cases.push(("reduce-scatter in the loop", m));
    // the scatter writes what the loop gathers
    let mut m = k.clone();
    m.insts[scatter].imm = XS;
    cases.push(("scatter into the gathered buffer", m));
    // rows only 16 lanes apart: no row walk worth blocking, and blocks would collide
    let small = build(&Shape {
        width: 16,
        ..base.clone()
    });
    cases.push(("narrow rows", small));
    // the bound is not a literal
    let mut m = k.clone();
    let lt = find(&m, &|i| i.op == Op::Lt);
    let bound = m.insts[lt].args[1] as usize;
    m.insts[bound] = Inst::new(Op::Counter, VarType::U32, &[], 0);
    cases.push(("a bound that differs per lane", m));
    // the iteration limit cuts the loop short
    let mut m = k.clone();
    let lp = find(&m, &|i| i.op == Op::LoopBegin);
    m.insts[lp].imm = 2;
    cases.push(("an iteration limit below the trip count", m));
    // a scatter whose index is not `lane + f(step)`
    let mut m = k.clone();
    let gather = find(&m, &|i| i.op == Op::Gather && i.imm == TABLE);
    let kept_ix = m.insts[gather].args[0];
    m.insts[scatter].args[1] = kept_ix;
    cases.push(("a scatter at a gathered index", m));
    // a row index that wraps: rows a billion apart, 6 steps, in u32
    let wide = build(&Shape {
        width: 1 << 30,
        trips: 6,
        ..base.clone()
    });
    cases.push(("rows that wrap the index type", wide));
    // two row writes into one target, the second one row on and one lane left
    let twice = build(&Shape {
        twice: true,
        ..base.clone()
    });
    cases.push(("two scatters into one target", twice));
    // rows 6 700 417 apart, the counter stepping by 641: 641 · 6 700 417 = 2^32 + 1, so in u32
    // consecutive steps' rows are one lane apart
    let stride_wrap = build(&Shape {
        stride: 641,
        trips: 2,
        width: 6_700_417,
        ..base.clone()
    });
    cases.push(("rows that meet through the counter's stride", stride_wrap));
    // a nested loop before the `while` (it runs once more than the body in the original)
    let mut m = k.clone();
    let cond = find(&m, &|i| i.op == Op::LoopCond);
    let lt = find(&m, &|i| i.op == Op::Lt);
    let ctr = m.insts[lt].args[0];
    let nested = [
        Inst::new(Op::LoopBegin, VarType::U32, &[], 1),
        Inst::new(Op::Phi, VarType::U32, &[ctr], 0),
        Inst::new(Op::Lt, VarType::Bool, &[0, 0], 0), // operands patched below
        Inst::new(Op::LoopCond, VarType::Bool, &[0], 0),
        Inst::new(Op::LoopNext, VarType::U32, &[0, 0], 0),
        Inst::new(Op::LoopEnd, VarType::U32, &[0], 0),
    ];
    // shift every register at or after the `while` by the inserted instructions
    let at = cond as u32;
    let n = nested.len() as u32;
    for inst in &mut m.insts {
        for a in inst.args.iter_mut().take(inst.op.arity()) {
            if *a >= at {
                *a += n;
            }
        }
    }
    let mut nested = nested;
    nested[2].args = [at + 1, m.insts[lt].args[1], 0];
    nested[3].args[0] = at + 2;
    nested[4].args = [at + 1, at + 1, 0];
    nested[5].args[0] = at;
    m.insts.splice(cond..cond, nested);
    cases.push(("a loop before the while", m));
    for (what, m) in cases {
        assert!(m.verify().is_ok(), "{what}: invalid test kernel\n{m}");
        assert!(
            split_with(&m, blocks(4096)).is_none(),
            "{what}: split anyway\n{m}"
        );
    }
    // rows that span less than the policy asks (1000 f32 × 4 steps = 16 000 bytes) stay unblocked
    let span = |min_span| Policy {
        lanes: 4096,
        min_span,
    };
    assert!(split_with(&k, span(16_001)).is_none());
    assert!(split_with(&k, span(16_000)).is_some());
    // and at most 64 lanes per block is the floor
    assert!(split_with(&k, blocks(63)).is_none());
    assert_eq!(split_with(&k, blocks(4096)).map(|s| s.lanes), Some(992));
}

/// The rows read and the rows written bound to one buffer (through two parameters, which the
/// kernel cannot see), each lane reading what its right neighbour wrote a step before (lane-major,
/// the neighbour has not run yet; step-major, it has): the blocked kernel must notice the overlap
/// at run time and run unsplit, matching the same backend's unblocked kernel.
#[test]
fn overlapping_buffers_run_the_kernel_unsplit() {
    let s = Shape {
        ity: VarType::U32,
        first: 0,
        stride: 1,
        trips: 6,
        width: 512,
        backward: false,
        write_row: 0,
        read_shift: 1 - 512,
        scatter: true,
        short: (0, 0),
        bool_state: false,
        twice: false,
        cross: true,
    };
    let k = build(&s);
    for (name, be) in backends() {
        let split = split_with(&k, blocks(64)).expect("splits");
        let blocked = compile_split(be, &k, split).unwrap();
        let plain = be.compile(&k).unwrap();
        let bufs = buffers(&k, &s, 512, 7);
        let (a, b): (Vec<Buf>, Vec<Buf>) = bufs.iter().map(|x| (x.copy(), x.copy())).unzip();
        let sa = run(plain.as_ref(), &a, 0, 512, Some((XS as usize, YS as usize)));
        let sb = run(
            blocked.as_ref(),
            &b,
            0,
            512,
            Some((XS as usize, YS as usize)),
        );
        assert_eq!(sa, sb, "{name}");
        for p in 0..bufs.len() {
            let (x, y) = (&a[p], &b[p]);
            for i in 0..x.len {
                assert!(same_bits(x.ty, x.get(i), y.get(i)), "{name}: p{p}[{i}]");
            }
        }
    }
}

/// A counted loop accumulating `gather(rows, lane + t·1024) · x` where `x = load(p0)`, with
/// `2·x` stored into p1 before the loop and `acc + x` into p3 after it.
fn in_place_kernel() -> Kernel {
    use VarType::*;
    let mut b = B::default();
    b.param(F32, ParamKind::Input);
    b.param(F32, ParamKind::Output);
    b.param(F32, ParamKind::Indexed);
    b.param(F32, ParamKind::Output);
    let lane = b.i(Op::Counter, U32, &[], 0);
    let yes = b.i(Op::Literal, Bool, &[], 1);
    let x = b.i(Op::Load, F32, &[], 0);
    let two = b.f32(2.0);
    let x2 = b.i(Op::Mul, F32, &[x, two], 0);
    b.i(Op::Store, F32, &[x2], 1);
    let (zero, three, one, width) = (
        b.lit(U32, 0),
        b.lit(U32, 3),
        b.lit(U32, 1),
        b.lit(U32, 1024),
    );
    let fzero = b.f32(0.0);
    let lp = b.i(Op::LoopBegin, U32, &[], 0);
    let t = b.i(Op::Phi, U32, &[zero], 0);
    let acc = b.i(Op::Phi, F32, &[fzero], 0);
    let c = b.i(Op::Lt, Bool, &[t, three], 0);
    b.i(Op::LoopCond, Bool, &[c], 0);
    let off = b.i(Op::Mul, U32, &[t, width], 0);
    let ix = b.i(Op::Add, U32, &[lane, off], 0);
    let g = b.i(Op::Gather, F32, &[ix, yes], 2);
    let gx = b.i(Op::Mul, F32, &[g, x], 0);
    let accn = b.i(Op::Add, F32, &[acc, gx], 0);
    let tn = b.i(Op::Add, U32, &[t, one], 0);
    b.i(Op::LoopNext, U32, &[t, tn], 0);
    b.i(Op::LoopNext, U32, &[acc, accn], 0);
    b.i(Op::LoopEnd, U32, &[lp], 0);
    let r = b.i(Op::Add, F32, &[acc, x], 0);
    b.i(Op::Store, F32, &[r], 3);
    let k = b.k;
    k.verify()
        .unwrap_or_else(|e| panic!("{}\n{k}", e.join("\n")));
    k
}

/// An input updated in place (the output stored before the loop shares its buffer, as
/// `Kernel::may_alias` allows): the loop and the code after it must read the value loaded before
/// the store — kept in scratch, not loaded again.
#[test]
fn an_input_updated_in_place_is_kept_not_loaded_again() {
    let k = in_place_kernel();
    assert!(k.may_alias(0, 1), "the scheduler may bind p1 over p0:\n{k}");
    for (name, be) in backends() {
        let split = split_with(&k, blocks(64)).expect("splits");
        let blocked = compile_split(be, &k, split).unwrap();
        let oracle = Interp.compile(&k).unwrap();
        let lanes = 300;
        let bufs: Vec<Buf> = k
            .params
            .iter()
            .enumerate()
            .map(|(p, prm)| Buf::pattern(prm.ty, if p == 2 { 4096 } else { lanes }, p as u64 + 3))
            .collect();
        let (a, b): (Vec<Buf>, Vec<Buf>) = bufs.iter().map(|x| (x.copy(), x.copy())).unzip();
        let sa = run(oracle.as_ref(), &a, 0, lanes as u64, Some((0, 1)));
        let sb = run(blocked.as_ref(), &b, 0, lanes as u64, Some((0, 1)));
        assert_eq!(sa, sb, "{name}");
        for p in [0usize, 3] {
            for i in 0..lanes {
                assert_eq!(a[p].get(i), b[p].get(i), "{name}: p{p}[{i}]");
            }
        }
    }
}

/// A 64-bit row index whose slope overflows any fixed-width arithmetic but is 1 modulo 2^64
/// (`lane + (t·2^63)·2^63 + t`): consecutive steps' rows are one lane apart, so `split` must
/// refuse (and not overflow while deciding).
#[test]
fn slopes_are_taken_modulo_the_index_type() {
    use VarType::*;
    let mut b = B::default();
    b.param(F32, ParamKind::Indexed);
    b.param(F32, ParamKind::Indexed);
    let lane = b.i(Op::Counter, U64, &[], 0);
    let yes = b.i(Op::Literal, Bool, &[], 1);
    let (zero, five, one) = (b.lit(U64, 0), b.lit(U64, 5), b.lit(U64, 1));
    let (big, width) = (b.lit(U64, i64::MIN), b.lit(U64, 1024));
    let lp = b.i(Op::LoopBegin, U32, &[], 0);
    let t = b.i(Op::Phi, U64, &[zero], 0);
    let c = b.i(Op::Lt, Bool, &[t, five], 0);
    b.i(Op::LoopCond, Bool, &[c], 0);
    let far = b.i(Op::Mul, U64, &[t, width], 0);
    let rix = b.i(Op::Add, U64, &[lane, far], 0);
    let x = b.i(Op::Gather, F32, &[rix, yes], 0);
    let m1 = b.i(Op::Mul, U64, &[t, big], 0);
    let m2 = b.i(Op::Mul, U64, &[m1, big], 0);
    let m3 = b.i(Op::Add, U64, &[m2, t], 0);
    let wix = b.i(Op::Add, U64, &[lane, m3], 0);
    b.i(Op::Scatter(ReduceOp::None), F32, &[x, wix, yes], 1);
    let tn = b.i(Op::Add, U64, &[t, one], 0);
    b.i(Op::LoopNext, U32, &[t, tn], 0);
    b.i(Op::LoopEnd, U32, &[lp], 0);
    let k = b.k;
    k.verify()
        .unwrap_or_else(|e| panic!("{}\n{k}", e.join("\n")));
    assert!(split_with(&k, blocks(4096)).is_none(), "split:\n{k}");
    // the same rows 1024 apart (drop the `+ t`) do split
    let mut wide = k.clone();
    wide.insts[wix as usize].args[1] = far;
    assert!(
        split_with(&wide, blocks(4096)).is_some(),
        "not split:\n{wide}"
    );
}
