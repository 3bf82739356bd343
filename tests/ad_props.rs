//! Gradient oracle: property tests of forward and reverse mode over random programs.
//!
//! A program is a random expression DAG (intermediate values reused, several inputs, some of
//! size 1 and broadcast, some without gradients, literal constants among the operands) over every
//! differentiable op: arithmetic, `fma`, `select` on a comparison, `min`/`max`, `abs`, `sqrt`,
//! `rcp`, `rsqrt`, `floor`/`round`, the math library, `sum`/`prod`/`reduce_min`/`reduce_max`/`dot`.
//! Its output `y` is the sum of the values nothing else uses. For a random seed `w` and
//! direction `v`:
//!
//! * reverse mode (`backward_from(y, w)`) and forward mode (`forward_to(y)`, or one `forward` per
//!   input) must agree on `<w, J v>` to 1e-10 (no finite differences involved);
//! * forward mode must match central finite differences of the primal lane by lane, and reverse
//!   mode `<grad, v>` their weighted sum, to 1e-8 relative (`FD_RTOL`) on top of the measured
//!   noise. The differences are Richardson extrapolated from steps h, h/2, h/4 (fourth order);
//!   the gap between the two extrapolations, plus a rounding bound, is that noise, and a program
//!   whose noise exceeds 1e-6 at every step tried is skipped and counted, never loosened;
//! * the primal computed with gradients on equals the one computed without;
//! * ops computed inside `suspend_grad` differentiate as ops on detached operands, and a pass run
//!   inside `isolate_grad` leaves the gradients of a plain one;
//! * the same program in f32 has the gradients of the f64 one to f32 accuracy;
//! * on round inputs that put programs on their kinks, forward = reverse still holds.
//!
//! Inputs are kept away from domain edges by construction (`log(a² + ½)`, `asin(0.9 s(a))` with
//! `s(a) = a/√(a²+1)`, …). Non-smooth ops (`abs`, `min`/`max`, `select`, `floor`/`round`,
//! `reduce_min`/`reduce_max`) are checked by finite differences only where none of them changes
//! branch between the sample points (their branch signatures are read from the evaluated
//! program); their conventions at the kinks themselves are in `ad_cases.rs`. f64 → f32 → f64
//! casts are not smooth at the scale of finite differences, so they have their own property: a
//! program with round-trip casts has the gradients of the same program without them, up to f32
//! rounding.
//!
//! Every program runs on one backend; separate tests cover the interpreter, Cranelift and LLVM
//! (`kiln_core::with_backend`), many programs at small sizes (0 to 33 lanes), a few at
//! 16383..16385 lanes (perturbed on a few random lanes). The tests run one at a time and check
//! that nothing (variables, buffers, AD nodes) leaks. Cases are drawn from fixed seeds so that CI
//! is reproducible; `KILN_PROP_RANDOM=1` draws fresh ones and `KILN_PROP_SCALE=k` multiplies the
//! number of cases.

mod common;
use kiln::{ops::select, Array, Float, Float64};
use kiln_core::{with_backend, BackendKind};
use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestCaseError, TestRng, TestRunner};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

#[derive(Clone, Copy, Debug, PartialEq)]
enum Op {
    Lit,
    Add,
    Sub,
    Mul,
    Div,
    Neg,
    Fma,
    Select,
    Min,
    Max,
    Abs,
    Sqrt,
    Rcp,
    Rsqrt,
    Floor,
    Round,
    Exp,
    Exp2,
    Log,
    Log2,
    Sin,
    Cos,
    Tan,
    Asin,
    Acos,
    Atan,
    Atan2,
    Sinh,
    Cosh,
    Tanh,
    Erf,
    Pow,
    PowInt,
    Sum,
    Prod,
    RMin,
    RMax,
    Dot,
    /// f64 → f32 → f64 (only in the cast property).
    Cast,
}

use Op::*;
const OPS: [Op; 38] = [
    Lit, Add, Sub, Mul, Div, Neg, Fma, Select, Min, Max, Abs, Sqrt, Rcp, Rsqrt, Floor, Round, Exp,
    Exp2, Log, Log2, Sin, Cos, Tan, Asin, Acos, Atan, Atan2, Sinh, Cosh, Tanh, Erf, Pow, PowInt,
    Sum, Prod, RMin, RMax, Dot,
];
/// Literal operands: zeros and ones among them, so that folding `x*0`, `x+0`, `x*1` is exercised.
const LITS: [f64; 7] = [0.0, 1.0, -1.0, 2.0, 0.5, -3.0, 0.0];

impl Op {
    fn arity(self) -> usize {
        match self {
            Lit => 0,
            Add | Sub | Mul | Div | Min | Max | Atan2 | Pow | Dot => 2,
            Fma => 3,
            Select => 4,
            _ => 1,
        }
    }
    fn reduces(self) -> bool {
        matches!(self, Sum | Prod | RMin | RMax | Dot)
    }
}

#[derive(Clone, Copy, Debug)]
struct Node {
    op: Op,
    args: [usize; 4],
    flag: u8,
}

#[derive(Clone, Debug)]
struct Input {
    size1: bool,
    tracked: bool,
}

#[derive(Clone, Debug)]
struct Prog {
    n: usize,
    inputs: Vec<Input>,
    /// Ops; node `i` of the program is input `i` for `i < inputs.len()`, else `nodes[i - k]`.
    nodes: Vec<Node>,
    /// Seeds the input values, the direction `v` and the cotangent `w`.
    seed: u64,
}

impl Prog {
    fn k(&self) -> usize {
        self.inputs.len()
    }
    fn len_of(&self, sizes: &[usize], i: usize) -> usize {
        sizes[i]
    }
    /// Lane count of every program node (inputs first), following kiln's broadcasting.
    fn sizes(&self) -> Vec<usize> {
        let mut s: Vec<usize> = self
            .inputs
            .iter()
            .map(|i| if i.size1 { 1 } else { self.n })
            .collect();
        for nd in &self.nodes {
            let len = if nd.op == Lit || nd.op.reduces() {
                1
            } else {
                let mut l = 1;
                for &a in &nd.args[..nd.op.arity()] {
                    if s[a] != 1 {
                        l = s[a];
                    }
                }
                l
            };
            s.push(len);
        }
        s
    }
    /// Program nodes that no op reads (literals excluded): their sum is the output.
    fn sinks(&self) -> Vec<usize> {
        let k = self.k();
        let mut used = vec![false; k + self.nodes.len()];
        for nd in &self.nodes {
            for &a in &nd.args[..nd.op.arity()] {
                used[a] = true;
            }
        }
        (k..k + self.nodes.len())
            .filter(|&i| !used[i] && self.nodes[i - k].op != Lit)
            .collect()
    }
}

/// What the generator draws per op, turned into a program by [`materialize`] (so that proptest
/// shrinks programs by dropping ops and lowering indices).
type RawOp = (u8, [u16; 4], u8);

fn materialize(n: usize, inputs: Vec<Input>, raw: &[RawOp], seed: u64, casts: bool) -> Prog {
    let k = inputs.len();
    let mut nodes = Vec::new();
    for (i, &(code, picks, flag)) in raw.iter().enumerate() {
        let len = k + i;
        let op = if casts && code % 4 == 0 {
            Cast
        } else {
            OPS[code as usize % OPS.len()]
        };
        // mostly recent values (deep chains), sometimes any earlier one (wide reuse)
        let pick = |p: u16| {
            let p = p as usize;
            if p % 3 == 0 {
                (p / 3) % len
            } else {
                len - 1 - (p / 3) % len.min(4)
            }
        };
        nodes.push(Node {
            op,
            args: picks.map(pick),
            flag,
        });
    }
    Prog {
        n,
        inputs,
        nodes,
        seed,
    }
}

/// SplitMix64: input values, directions and seeds from the case's seed.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in [lo, hi).
    fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * ((self.next() >> 11) as f64 / (1u64 << 53) as f64)
    }
}

/// `v` in element type `T`.
fn k<T: Float>(v: f64) -> T {
    T::from_f64(v)
}

/// `a / √(a² + 1)`, in (-1, 1): keeps the arguments of fast-growing or bounded-domain functions
/// in range.
fn squash<T: Float>(a: &Array<T>) -> Array<T> {
    a * (a * a + k::<T>(1.0)).rsqrt()
}

/// `a² + ½`: a positive argument for `log`, `rcp`, denominators.
fn pos<T: Float>(a: &Array<T>) -> Array<T> {
    a * a + k::<T>(0.5)
}

fn scaled<T: Float>(x: Array<T>, len: usize) -> Array<T> {
    if len > 1 {
        x * k::<T>(1.0 / len as f64)
    } else {
        x
    }
}

/// How [`build`] treats the nodes picked by [`Prog::scoped`].
#[derive(Clone, Copy, PartialEq)]
enum Scope {
    /// Like every other node.
    Plain,
    /// Computed inside `suspend_grad`.
    Suspend,
    /// Computed from detached operands (what `Suspend` must be equal to).
    Detach,
}

impl Prog {
    /// Whether op `j` is one of the (about one in eight) nodes [`Scope`] applies to.
    fn scoped(&self, j: usize) -> bool {
        self.nodes[j].flag >> 5 == 7
    }
}

/// One op of the program on its operands.
fn node<T: Float>(
    p: &Prog,
    sizes: &[usize],
    nd: &Node,
    args: [&Array<T>; 4],
    round_trip: bool,
) -> Array<T> {
    let [a, b, c, d] = args;
    let f = nd.flag;
    let sgn = if f & 1 == 0 { 1.0 } else { -1.0 };
    let la = p.len_of(sizes, nd.args[0]);
    match nd.op {
        Lit => Array::scalar(k::<T>(LITS[f as usize % LITS.len()])),
        Add => a + b,
        Sub => a - b,
        Mul => a * b,
        Div => a / (pos(b) * k::<T>(sgn)),
        Neg => -a,
        Fma => a.fma(b, c),
        Select => {
            let m = match f % 4 {
                0 => a.lt(b),
                1 => a.le(b),
                2 => a.gt(b),
                _ => a.ge(b),
            };
            select(&m, c, d)
        }
        Min => a.min(b),
        Max => a.max(b),
        Abs => a.abs(),
        Sqrt => (a * a + k::<T>(0.25)).sqrt(),
        Rcp => (pos(a) * k::<T>(sgn)).rcp(),
        Rsqrt => (a * a + k::<T>(0.25)).rsqrt(),
        Floor => a.floor(),
        Round => a.round(),
        Exp => (squash(a) * k::<T>(2.0)).exp(),
        Exp2 => (squash(a) * k::<T>(3.0)).exp2(),
        Log => pos(a).log(),
        Log2 => pos(a).log2(),
        Sin => a.sin(),
        Cos => a.cos(),
        Tan => squash(a).tan(),
        Asin => (squash(a) * k::<T>(0.9)).asin(),
        Acos => (squash(a) * k::<T>(0.9)).acos(),
        Atan => a.atan(),
        Atan2 => {
            if f & 1 == 0 {
                a.atan2(pos(b))
            } else {
                pos(a).atan2(b)
            }
        }
        Sinh => (squash(a) * k::<T>(3.0)).sinh(),
        Cosh => (squash(a) * k::<T>(3.0)).cosh(),
        Tanh => a.tanh(),
        Erf => a.erf(),
        Pow => pos(a).pow(squash(b) * k::<T>(2.0)),
        PowInt => a.pow(k::<T>(if f & 1 == 0 { 2.0 } else { 3.0 })),
        Sum => scaled(a.sum(), la),
        Prod => (squash(a) * k::<T>(0.5 * (8.0 / la.max(1) as f64).min(1.0)) + k::<T>(1.0)).prod(),
        RMin | RMax if la == 0 => a.sum(),
        RMin => a.reduce_min(),
        RMax => a.reduce_max(),
        Dot => {
            let lb = p.len_of(sizes, nd.args[1]);
            let l = if la != 1 { la } else { lb };
            scaled(a.dot(b), l)
        }
        Cast => {
            if round_trip {
                a.cast::<f32>().cast::<T>()
            } else {
                a.clone()
            }
        }
    }
}

/// Build ops `from..to` of the program onto `v` (which holds the inputs and the ops before).
fn build_ops<T: Float>(
    p: &Prog,
    v: &mut Vec<Array<T>>,
    ops: std::ops::Range<usize>,
    round_trip: bool,
    scope: Scope,
) {
    let sizes = p.sizes();
    for j in ops {
        let nd = &p.nodes[j];
        let r = if scope != Scope::Plain && p.scoped(j) {
            if scope == Scope::Suspend {
                kiln::ad::suspend_grad(|| node(p, &sizes, nd, nd.args.map(|i| &v[i]), round_trip))
            } else {
                let det = nd.args.map(|i| v[i].detach());
                node(
                    p,
                    &sizes,
                    nd,
                    [&det[0], &det[1], &det[2], &det[3]],
                    round_trip,
                )
            }
        } else {
            node(p, &sizes, nd, nd.args.map(|i| &v[i]), round_trip)
        };
        v.push(r);
    }
}

/// The program's output: the sum of its sinks.
fn output<T: Float>(p: &Prog, v: &[Array<T>]) -> Array<T> {
    let sinks = p.sinks();
    match sinks.split_first() {
        None => Array::scalar(T::zero()),
        Some((&s0, rest)) => rest.iter().fold(v[s0].clone(), |acc, &s| acc + &v[s]),
    }
}

/// Build the program on `xs` with kiln; returns every program node and the output.
/// `round_trip`: whether `Cast` converts through f32 (else it is the identity).
fn build<T: Float>(p: &Prog, xs: &[Array<T>], round_trip: bool) -> (Vec<Array<T>>, Array<T>) {
    let mut v: Vec<Array<T>> = xs.to_vec();
    build_ops(p, &mut v, 0..p.nodes.len(), round_trip, Scope::Plain);
    let y = output(p, &v);
    (v, y)
}

/// Values of one lane of a node (size-1 nodes broadcast).
fn lane(vals: &[f64], i: usize) -> f64 {
    if vals.len() == 1 {
        vals[0]
    } else {
        vals[i]
    }
}

/// Every program node and the output evaluated without gradients at `xs`.
fn eval_point(p: &Prog, xs: &[Vec<f64>], round_trip: bool) -> (Vec<Vec<f64>>, Vec<f64>) {
    eval_point_t::<f64>(p, xs, round_trip)
}

/// [`eval_point`] with the program in element type `T`.
fn eval_point_t<T: Float>(
    p: &Prog,
    xs: &[Vec<f64>],
    round_trip: bool,
) -> (Vec<Vec<f64>>, Vec<f64>) {
    let arrs: Vec<Array<T>> = xs.iter().map(|x| arr::<T>(x)).collect();
    let (v, y) = build(p, &arrs, round_trip);
    let mut ids: Vec<_> = v.iter().map(|a| a.id()).collect();
    ids.push(y.id());
    kiln::eval_ids(&ids).unwrap();
    (v.iter().map(host).collect(), host(&y))
}

/// `x` as an array of `T`.
fn arr<T: Float>(x: &[f64]) -> Array<T> {
    Array::from_slice(&x.iter().map(|&v| k::<T>(v)).collect::<Vec<T>>())
}

/// The values of `a`, in f64.
fn host<T: Float>(a: &Array<T>) -> Vec<f64> {
    a.to_vec().into_iter().map(T::to_f64).collect()
}

/// Branch signature of the non-smooth ops at one point; `None` when some argument lies within
/// rounding distance of a branch point (host and kernels could disagree there).
fn signature(p: &Prog, vals: &[Vec<f64>]) -> Option<Vec<u64>> {
    let k = p.k();
    let mut sig = Vec::new();
    let near = |d: f64, scale: f64| d != 0.0 && d.abs() <= 1e-9 * (1.0 + scale);
    for (j, nd) in p.nodes.iter().enumerate() {
        let out = &vals[k + j];
        let [a, b, ..] = nd.args;
        let two = |sig: &mut Vec<u64>| -> Option<()> {
            if a == b {
                return Some(()); // min(a, a), a < a: no branch
            }
            for i in 0..out.len() {
                let (x, y) = (lane(&vals[a], i), lane(&vals[b], i));
                if near(x - y, x.abs().max(y.abs())) {
                    return None;
                }
                sig.push((x - y).signum().to_bits() * u64::from(x != y));
            }
            Some(())
        };
        match nd.op {
            Abs => {
                for &x in &vals[a] {
                    if near(x, 0.0) {
                        return None;
                    }
                    sig.push(if x == 0.0 { 0 } else { x.signum().to_bits() });
                }
            }
            Min | Max | Select => two(&mut sig)?,
            Floor | Round => {
                let shift = if nd.op == Floor { 0.0 } else { 0.5 };
                for (&x, &o) in vals[a].iter().zip(out) {
                    let t = x + shift;
                    if near(t - t.round(), x.abs()) {
                        return None;
                    }
                    sig.push(o.to_bits());
                }
            }
            RMin | RMax if !vals[a].is_empty() => {
                let ext = out[0];
                let scale = ext.abs();
                for (i, &x) in vals[a].iter().enumerate() {
                    if near(x - ext, scale) {
                        return None;
                    }
                    if x == ext {
                        sig.push(i as u64);
                    }
                }
                sig.push(u64::MAX);
            }
            _ => {}
        }
    }
    Some(sig)
}

/// What one program's AD run returns.
struct AdRun {
    y: Vec<f64>,
    /// Reverse-mode gradient of `<w, y>` per input (zeros for untracked ones).
    grads: Vec<Vec<f64>>,
    /// Forward-mode tangent `J v`.
    jv: Vec<f64>,
}

/// Reverse and forward mode on one program. Odd seeds run forward mode first, one `forward` pass
/// per input (summing the tangents), then a `backward_from` that consumes the graph; even seeds
/// run `backward_with(retain_graph)` first and then one `forward_to` from every input at once.
fn ad_run(p: &Prog, xs: &[Vec<f64>], w: &[f64], v: &[Vec<f64>], round_trip: bool) -> AdRun {
    ad_run_t::<f64>(p, xs, w, v, round_trip)
}

/// [`ad_run`] with the program in element type `T`.
fn ad_run_t<T: Float>(
    p: &Prog,
    xs: &[Vec<f64>],
    w: &[f64],
    v: &[Vec<f64>],
    round_trip: bool,
) -> AdRun {
    let mut arrs: Vec<Array<T>> = xs.iter().map(|x| arr::<T>(x)).collect();
    for (a, inp) in arrs.iter_mut().zip(&p.inputs) {
        if inp.tracked {
            a.enable_grad();
        }
    }
    let (nodes, y) = build(p, &arrs, round_trip);
    drop(nodes);
    let seed = arr::<T>(w);
    let tracked = || arrs.iter().zip(&p.inputs).zip(v).filter(|x| x.0 .1.tracked);
    if p.seed % 2 == 0 {
        kiln::ad::backward_with(&y, &seed, true).unwrap();
        let grads: Vec<Vec<f64>> = arrs.iter().map(|a| host(&a.grad())).collect();
        for ((a, _), vi) in tracked() {
            a.clear_grad();
            a.set_grad(&arr::<T>(vi));
        }
        kiln::ad::forward_to(&y).unwrap();
        AdRun {
            y: host(&y),
            jv: host(&y.grad()),
            grads,
        }
    } else {
        let mut jv = vec![0.0; y.len()];
        for ((a, _), vi) in tracked() {
            a.set_grad(&arr::<T>(vi));
            // a pass stores tangents where it arrives only: forget the previous input's
            y.clear_grad();
            kiln::ad::forward(a).unwrap();
            for (acc, t) in jv.iter_mut().zip(host(&y.grad())) {
                *acc += t;
            }
            a.clear_grad();
        }
        kiln::ad::backward_from(&y, &seed).unwrap();
        AdRun {
            y: host(&y),
            jv,
            grads: arrs.iter().map(|a| host(&a.grad())).collect(),
        }
    }
}

/// Per-test tallies (printed at the end).
#[derive(Default)]
struct Tally {
    cases: AtomicUsize,
    fd_checked: AtomicUsize,
    kinked: AtomicUsize,
    noisy: AtomicUsize,
    big_values: AtomicUsize,
    /// How often each op occurs in the programs checked by finite differences.
    ops: Vec<AtomicUsize>,
}

impl Tally {
    fn new() -> Tally {
        Tally {
            ops: (0..=OPS.len()).map(|_| AtomicUsize::new(0)).collect(),
            ..Tally::default()
        }
    }
    fn count_ops(&self, p: &Prog) {
        for nd in &p.nodes {
            let i = OPS.iter().position(|&o| o == nd.op).unwrap_or(OPS.len());
            self.ops[i].fetch_add(1, Relaxed);
        }
    }
    /// The ops no checked program contained.
    fn missing(&self) -> Vec<Op> {
        OPS.iter()
            .zip(&self.ops)
            .filter(|(_, c)| c.load(Relaxed) == 0)
            .map(|(&o, _)| o)
            .collect()
    }
}

fn add_scaled(x: &[Vec<f64>], v: &[Vec<f64>], s: f64) -> Vec<Vec<f64>> {
    x.iter()
        .zip(v)
        .map(|(x, v)| x.iter().zip(v).map(|(a, b)| a + s * b).collect())
        .collect()
}

/// `|w|₁ |v|∞`: the size of `<w, J v>` for partials of order one. A derivative that is zero by
/// cancellation of such terms comes out of either mode as a residue of this times the rounding
/// error, which the relative checks must tolerate.
fn natural_scale(w: &[f64], v: &[Vec<f64>]) -> f64 {
    let vmax = v.iter().flatten().fold(0.0f64, |m, x| m.max(x.abs()));
    w.iter().map(|x| x.abs()).sum::<f64>() * vmax
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// The direction: dense over small inputs, a few random lanes of big ones; size-1 inputs of a
/// big program are perturbed only on the first attempt (they move every lane at once).
fn direction(p: &Prog, sizes: &[usize], rng: &mut Rng, attempt: usize) -> Vec<Vec<f64>> {
    p.inputs
        .iter()
        .enumerate()
        .map(|(j, inp)| {
            let len = sizes[j];
            let mut v = vec![0.0; len];
            if !inp.tracked {
                return v;
            }
            if len <= 64 {
                if !(p.n > 64 && attempt > 0) {
                    for x in v.iter_mut() {
                        *x = rng.uniform(-1.0, 1.0);
                    }
                }
            } else {
                for _ in 0..4 {
                    let i = (rng.next() % len as u64) as usize;
                    v[i] = rng.uniform(-1.0, 1.0);
                }
            }
            v
        })
        .collect()
}

fn check(p: &Prog, tally: &Tally) -> Result<(), TestCaseError> {
    check_at(p, tally, false)
}

/// Inputs drawn from a few round values, so that programs sit on their kinks (zeros of `abs`,
/// ties of `min`/`max`/`select`/reductions, integers under `floor`/`round`).
const KINKY: [f64; 7] = [-1.0, -0.5, 0.0, 0.0, 0.5, 1.0, 2.0];

/// [`check`]; with `kinky` inputs from [`KINKY`], where only the checks that need no smoothness
/// apply (forward = reverse, the primal unchanged, finite gradients).
fn check_at(p: &Prog, tally: &Tally, kinky: bool) -> Result<(), TestCaseError> {
    tally.cases.fetch_add(1, Relaxed);
    let sizes = p.sizes();
    let mut rng = Rng(p.seed);
    let xs: Vec<Vec<f64>> = sizes[..p.k()]
        .iter()
        .map(|&l| {
            (0..l)
                .map(|_| {
                    if kinky {
                        KINKY[(rng.next() % KINKY.len() as u64) as usize]
                    } else {
                        rng.uniform(-2.0, 2.0)
                    }
                })
                .collect()
        })
        .collect();
    let (vals, y0) = eval_point(p, &xs, false);
    // a program whose values leave a sane range (x ↦ x² chains) says nothing about derivatives
    let big = vals
        .iter()
        .flatten()
        .chain(&y0)
        .any(|x| !x.is_finite() || x.abs() >= 1e6);
    if big {
        tally.big_values.fetch_add(1, Relaxed);
        return Ok(());
    }
    let w: Vec<f64> = (0..y0.len()).map(|_| rng.uniform(-1.0, 1.0)).collect();
    let mut v = direction(p, &sizes, &mut rng, 0);
    let run = ad_run(p, &xs, &w, &v, false);

    // the primal does not depend on whether gradients are recorded
    for (i, (a, b)) in run.y.iter().zip(&y0).enumerate() {
        prop_assert!(
            (a - b).abs() <= 1e-12 * (1.0 + b.abs()),
            "primal with AD {a} vs without {b} at lane {i}"
        );
    }
    for (g, &l) in run.grads.iter().zip(&sizes) {
        prop_assert_eq!(g.len(), l, "gradient size");
        prop_assert!(
            g.iter().all(|x| x.is_finite()),
            "non-finite gradient {:?}",
            g
        );
    }
    prop_assert!(run.jv.iter().all(|x| x.is_finite()), "non-finite tangent");

    // forward vs reverse: <grad, v> = <w, J v>
    let gv: f64 = run.grads.iter().zip(&v).map(|(g, v)| dot(g, v)).sum();
    let wjv = dot(&w, &run.jv);
    let mag: f64 = run
        .grads
        .iter()
        .zip(&v)
        .flat_map(|(g, v)| g.iter().zip(v).map(|(a, b)| (a * b).abs()))
        .sum::<f64>()
        + w.iter()
            .zip(&run.jv)
            .map(|(a, b)| (a * b).abs())
            .sum::<f64>();
    prop_assert!(
        (gv - wjv).abs() <= 1e-10 * mag + 1e-12 * natural_scale(&w, &v),
        "reverse <grad, v> = {gv} but forward <w, Jv> = {wjv}"
    );

    if kinky {
        tally.fd_checked.fetch_add(1, Relaxed);
        tally.count_ops(p);
        return Ok(());
    }

    // finite differences, where the program is smooth around x along v
    let Some(sig0) = signature(p, &vals) else {
        tally.kinked.fetch_add(1, Relaxed);
        return Ok(());
    };
    for attempt in 0..3 {
        if attempt > 0 {
            v = direction(p, &sizes, &mut rng, attempt);
        }
        match fd_check(p, &xs, &w, &v, &sig0, &y0, &vals)? {
            Fd::Kinked => continue,
            Fd::Noisy => {
                tally.noisy.fetch_add(1, Relaxed);
                return Ok(());
            }
            Fd::Done(fd_lanes, fd_l, noise_l, noise_lanes) => {
                let again;
                let run = if attempt == 0 {
                    &run
                } else {
                    again = ad_run(p, &xs, &w, &v, false);
                    &again
                };
                let gv: f64 = run.grads.iter().zip(&v).map(|(g, v)| dot(g, v)).sum();
                let terms: f64 = run
                    .grads
                    .iter()
                    .zip(&v)
                    .flat_map(|(g, v)| g.iter().zip(v).map(|(a, b)| (a * b).abs()))
                    .sum();
                let wfd: f64 = w.iter().zip(&fd_lanes).map(|(a, b)| (a * b).abs()).sum();
                let scale = terms.max(wfd);
                prop_assert!(
                    (gv - fd_l).abs() <= FD_RTOL * scale + noise_l + 1e-12 * natural_scale(&w, &v),
                    "reverse <grad, v> = {gv} vs finite differences {fd_l} (noise {noise_l:e}, scale {scale:e})"
                );
                let vmax = natural_scale(&[1.0], &v);
                let jmax = run
                    .jv
                    .iter()
                    .chain(&fd_lanes)
                    .fold(0.0f64, |m, x| m.max(x.abs()));
                for (i, ((&a, &b), &nz)) in
                    run.jv.iter().zip(&fd_lanes).zip(&noise_lanes).enumerate()
                {
                    prop_assert!(
                        (a - b).abs()
                            <= FD_RTOL * a.abs().max(b.abs()) + nz + 1e-10 * jmax + 1e-12 * vmax,
                        "forward tangent {a} vs finite differences {b} at lane {i} (noise {nz:e})"
                    );
                }
                tally.fd_checked.fetch_add(1, Relaxed);
                tally.count_ops(p);
                return Ok(());
            }
        }
    }
    tally.kinked.fetch_add(1, Relaxed);
    Ok(())
}

enum Fd {
    Kinked,
    Noisy,
    /// Per-lane derivative estimates, their `w`-weighted sum, its noise bound, per-lane noise.
    Done(Vec<f64>, f64, f64, Vec<f64>),
}

/// Richardson-extrapolated central differences along `v`, trying a few step sizes.
fn fd_check(
    p: &Prog,
    xs: &[Vec<f64>],
    w: &[f64],
    v: &[Vec<f64>],
    sig0: &[u64],
    y0: &[f64],
    vals0: &[Vec<f64>],
) -> Result<Fd, TestCaseError> {
    let m = y0.len();
    // magnitude of the values each output lane is computed from (rounding noise scale)
    let mut mag = vec![0.0f64; m];
    for vals in vals0 {
        for (i, mg) in mag.iter_mut().enumerate() {
            if let Some(&x) = vals.get(if vals.len() == 1 { 0 } else { i }) {
                *mg = mg.max(x.abs());
            }
        }
    }
    for &h in &[1e-3, 1e-2, 1e-4] {
        let mut ys = Vec::new();
        for s in [h, h / 2.0, h / 4.0] {
            let mut pair = Vec::new();
            for sgn in [1.0, -1.0] {
                let (vals, y) = eval_point(p, &add_scaled(xs, v, sgn * s), false);
                match signature(p, &vals) {
                    Some(sig) if sig == sig0 => {}
                    _ => return Ok(Fd::Kinked),
                }
                pair.push(y);
            }
            ys.push(pair);
        }
        let d = |k: usize, i: usize, s: f64| (ys[k][0][i] - ys[k][1][i]) / (2.0 * s);
        let mut est = vec![0.0; m];
        let mut noise = vec![0.0; m];
        for i in 0..m {
            let (d1, d2, d3) = (d(0, i, h), d(1, i, h / 2.0), d(2, i, h / 4.0));
            let r1 = (4.0 * d2 - d1) / 3.0;
            let r2 = (4.0 * d3 - d2) / 3.0;
            est[i] = r2;
            // rounding: a few ulps of the lane's largest intermediate per evaluation, except in
            // lanes the perturbation never reached (bitwise equal at every step)
            let moved = (0..3).any(|k| ys[k][0][i] != ys[k][1][i]);
            let rounding = if moved {
                32.0 * f64::EPSILON * (1.0 + mag[i]) / (h / 4.0)
            } else {
                0.0
            };
            noise[i] = 4.0 * (r1 - r2).abs() + rounding;
        }
        let fd_l = dot(w, &est);
        let noise_l: f64 = w.iter().zip(&noise).map(|(a, b)| a.abs() * b).sum();
        let scale: f64 = w.iter().zip(&est).map(|(a, b)| (a * b).abs()).sum();
        // too noisy to check 1e-6: try another step (truncation vs rounding)
        if noise_l > FD_NOISY * scale && noise_l > 1e-9 {
            continue;
        }
        return Ok(Fd::Done(est, fd_l, noise_l, noise));
    }
    Ok(Fd::Noisy)
}

/// Run `f` alone (the tests of this file share kiln's registry and AD graph), then check that it
/// left no variable, buffer or AD node behind.
fn no_leaks<R>(f: impl FnOnce() -> R) -> R {
    common::leak_checked(|| {
        let before = kiln::stats();
        let r = f();
        let after = kiln::stats();
        assert_eq!(after.ad_nodes, before.ad_nodes, "AD nodes leaked");
        assert_eq!(after.ad_edges, before.ad_edges, "AD edges leaked");
        assert_eq!(
            after.ad_grad_bytes, before.ad_grad_bytes,
            "gradients leaked"
        );
        r
    })
}

/// Programs: `n` lanes, up to three inputs, `ops` random ops.
fn progs(sizes: &'static [usize], max_ops: usize, casts: bool) -> impl Strategy<Value = Prog> {
    (
        prop::sample::select(sizes),
        prop::collection::vec((any::<bool>(), 0u8..4), 1..=3),
        prop::collection::vec(any::<RawOp>(), 1..=max_ops),
        any::<u64>(),
    )
        .prop_map(move |(n, ins, raw, seed)| {
            let mut inputs: Vec<Input> = ins
                .into_iter()
                .map(|(s1, t)| Input {
                    size1: s1 && t % 2 == 0,
                    tracked: t != 3,
                })
                .collect();
            inputs[0].tracked = true;
            materialize(n, inputs, &raw, seed, casts)
        })
}

fn scale() -> u32 {
    std::env::var("KILN_PROP_SCALE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1)
}

/// A runner drawing a fixed sequence per `stream` (so that the backends see different programs).
fn runner(cases: u32, stream: u8) -> TestRunner {
    let config = Config {
        cases: cases * scale(),
        max_shrink_iters: 2000,
        failure_persistence: None,
        ..Config::default()
    };
    if std::env::var("KILN_PROP_RANDOM").is_ok_and(|v| v == "1") {
        TestRunner::new(config)
    } else {
        let mut seed = [0x6b; 32];
        seed[0] = stream;
        TestRunner::new_with_rng(config, TestRng::from_seed(RngAlgorithm::ChaCha, &seed))
    }
}

fn llvm_available() -> bool {
    let ok = kiln_core::backend::llvm::shared().is_ok();
    if !ok {
        eprintln!("ad_props: no libLLVM here, LLVM cases skipped");
    }
    ok
}

/// Run `cases` programs from `strategy` on `backend`; at least `min_fd` of them must get a
/// finite-difference check (the rest are counted as skipped: kinks, noise, huge values).
fn run_props(
    name: &str,
    backend: BackendKind,
    strategy: impl Strategy<Value = Prog>,
    cases: u32,
    min_fd: f64,
) {
    let tally = Tally::new();
    let t = std::time::Instant::now();
    let r = no_leaks(|| {
        with_backend(backend, || {
            runner(cases, backend as u8 + 16 * (cases > 20) as u8)
                .run(&strategy, |p| check(&p, &tally))
        })
    });
    if let Err(e) = r {
        panic!("{name} on {backend:?}: {e}");
    }
    let (n, fd) = (tally.cases.load(Relaxed), tally.fd_checked.load(Relaxed));
    let least = OPS
        .iter()
        .zip(&tally.ops)
        .map(|(o, c)| (c.load(Relaxed), o))
        .min_by_key(|p| p.0);
    eprintln!(
        "{name} on {backend:?}: {n} programs, {fd} checked by finite differences (rarest op {least:?}), {} kinked, {} noisy, {} with huge values, {:.1} s",
        tally.kinked.load(Relaxed),
        tally.noisy.load(Relaxed),
        tally.big_values.load(Relaxed),
        t.elapsed().as_secs_f64()
    );
    assert!(
        fd as f64 >= min_fd * n as f64,
        "{name}: only {fd} of {n} programs were checked by finite differences"
    );
    if n >= 100 {
        assert!(
            tally.missing().is_empty(),
            "{name}: no program checked by finite differences used {:?}",
            tally.missing()
        );
    }
}

/// Relative agreement required of AD and finite differences (on top of the measured noise).
const FD_RTOL: f64 = 1e-8;
/// Noise (relative) above which a finite-difference estimate is too poor to check at all.
const FD_NOISY: f64 = 1e-6;

const SMALL: &[usize] = &[0, 1, 1, 2, 3, 4, 5, 7, 8, 16, 17, 33];
const BIG: &[usize] = &[16383, 16384, 16385];

#[test]
fn small_programs_interp() {
    run_props(
        "small",
        BackendKind::Interp,
        progs(SMALL, 14, false),
        3000,
        0.8,
    );
}

/// On the kinks themselves the conventions (`abs'(0) = 0`, ties split evenly, rounding flat)
/// must be the same in both modes, and no NaN may come out of the rules.
#[test]
fn kinks_forward_equals_reverse() {
    for (backend, cases) in [(BackendKind::Interp, 1000), (BackendKind::Cranelift, 100)] {
        let tally = Tally::new();
        let strategy = progs(SMALL, 14, false);
        let r = no_leaks(|| {
            with_backend(backend, || {
                runner(cases, 44 + backend as u8).run(&strategy, |p| check_at(&p, &tally, true))
            })
        });
        if let Err(e) = r {
            panic!("kinks on {backend:?}: {e}");
        }
        let (n, ok) = (tally.cases.load(Relaxed), tally.fd_checked.load(Relaxed));
        eprintln!("kinks on {backend:?}: {n} programs on round inputs, {ok} checked");
        assert!(ok * 10 >= n * 9, "only {ok} of {n} programs checked");
        if n >= 1000 {
            assert!(tally.missing().is_empty(), "{:?}", tally.missing());
        }
    }
}

#[test]
fn small_programs_cranelift() {
    run_props(
        "small",
        BackendKind::Cranelift,
        progs(SMALL, 14, false),
        300,
        0.8,
    );
}

#[test]
fn small_programs_llvm() {
    if llvm_available() {
        run_props("small", BackendKind::Llvm, progs(SMALL, 14, false), 40, 0.8);
    }
}

#[test]
fn big_programs() {
    let mut backends = vec![BackendKind::Interp, BackendKind::Cranelift];
    if llvm_available() {
        backends.push(BackendKind::Llvm);
    }
    for b in backends {
        // LLVM compiles slowest, the interpreter runs slowest at this size
        let cases = if b == BackendKind::Cranelift { 10 } else { 5 };
        run_props("big", b, progs(BIG, 8, false), cases, 0.5);
    }
}

/// Whether some non-smooth op's argument lies within `margin` (relative to its size, plus one)
/// of a branch point: f32 rounding could move it across.
fn near_branch(p: &Prog, vals: &[Vec<f64>], margin: f64) -> bool {
    p.nodes.iter().enumerate().any(|(j, nd)| {
        let [a, b, ..] = nd.args;
        let near = |d: f64, s: f64| d.abs() < margin * (1.0 + s.abs());
        match nd.op {
            Abs => vals[a].iter().any(|&x| near(x, 0.0) && x != 0.0),
            Min | Max | Select if a != b => (0..vals[p.k() + j].len()).any(|i| {
                let (x, y) = (lane(&vals[a], i), lane(&vals[b], i));
                near(x - y, x)
            }),
            Floor | Round => vals[a].iter().any(|&x| {
                let t = if nd.op == Floor { x } else { x + 0.5 };
                near(t - t.round(), x)
            }),
            RMin | RMax => {
                let e = vals[p.k() + j][0];
                vals[a].iter().any(|&x| near(x - e, e) && x != e)
            }
            _ => false,
        }
    })
}

/// Casts f64 → f32 → f64 pass gradients through: the same program with the casts replaced by the
/// identity has the same gradients, up to the f32 rounding of the values (and of the gradients
/// crossing the casts), wherever the rounding does not flip a branch.
fn check_casts(p: &Prog, tally: &Tally) -> Result<(), TestCaseError> {
    tally.cases.fetch_add(1, Relaxed);
    let sizes = p.sizes();
    let mut rng = Rng(p.seed);
    let xs: Vec<Vec<f64>> = sizes[..p.k()]
        .iter()
        .map(|&l| (0..l).map(|_| rng.uniform(-2.0, 2.0)).collect())
        .collect();
    let (vals_c, y_c) = eval_point(p, &xs, true);
    let (vals_i, _) = eval_point(p, &xs, false);
    if vals_i
        .iter()
        .flatten()
        .any(|x| !x.is_finite() || x.abs() >= 1e6)
    {
        tally.big_values.fetch_add(1, Relaxed);
        return Ok(());
    }
    let w: Vec<f64> = (0..y_c.len()).map(|_| rng.uniform(-1.0, 1.0)).collect();
    let v = direction(p, &sizes, &mut rng, 0);
    let rc = ad_run(p, &xs, &w, &v, true);
    let ri = ad_run(p, &xs, &w, &v, false);
    // forward and reverse agree (the f32 rounding of gradients crossing a cast differs between
    // the directions, hence 1e-6)
    let gv: f64 = rc.grads.iter().zip(&v).map(|(g, v)| dot(g, v)).sum();
    let wjv = dot(&w, &rc.jv);
    let mag: f64 = rc
        .grads
        .iter()
        .zip(&v)
        .flat_map(|(g, v)| g.iter().zip(v).map(|(a, b)| (a * b).abs()))
        .sum::<f64>()
        + w.iter()
            .zip(&rc.jv)
            .map(|(a, b)| (a * b).abs())
            .sum::<f64>();
    prop_assert!(
        (gv - wjv).abs() <= 1e-6 * (mag + natural_scale(&w, &v)),
        "with casts: reverse {gv} vs forward {wjv}"
    );
    // the rounding must not have moved a branch: compare signatures with a margin
    let (Some(sc), Some(si)) = (signature(p, &vals_c), signature(p, &vals_i)) else {
        tally.kinked.fetch_add(1, Relaxed);
        return Ok(());
    };
    let close_to_branch = near_branch(p, &vals_i, 1e-4);
    if sc != si || close_to_branch {
        tally.kinked.fetch_add(1, Relaxed);
        return Ok(());
    }
    // a gradient that cancels to zero keeps an f32-sized residue of the seed's size
    let wsum: f64 = w.iter().map(|x| x.abs()).sum();
    for (j, (gc, gi)) in rc.grads.iter().zip(&ri.grads).enumerate() {
        let gmax = gi.iter().fold(0.0f64, |m, x| m.max(x.abs()));
        for (i, (a, b)) in gc.iter().zip(gi).enumerate() {
            prop_assert!(
                (a - b).abs() <= 1e-3 * (b.abs() + gmax) + 1e-6 * wsum,
                "input {j} lane {i}: gradient with casts {a} vs without {b}"
            );
        }
    }
    tally.fd_checked.fetch_add(1, Relaxed);
    tally.count_ops(p);
    Ok(())
}

#[test]
fn casts_round_trip_keep_gradients() {
    let tally = Tally::new();
    let strategy = progs(SMALL, 10, true);
    let t = std::time::Instant::now();
    let r = no_leaks(|| {
        with_backend(BackendKind::Interp, || {
            runner(400, 99).run(&strategy, |p| check_casts(&p, &tally))
        })
    });
    if let Err(e) = r {
        panic!("casts: {e}");
    }
    let (n, ok) = (tally.cases.load(Relaxed), tally.fd_checked.load(Relaxed));
    eprintln!(
        "casts: {n} programs, {ok} compared with the cast-free program, {} near a branch, {:.1} s",
        tally.kinked.load(Relaxed),
        t.elapsed().as_secs_f64()
    );
    assert!(ok * 10 >= n * 6, "only {ok} of {n} cast programs compared");
}

/// `a` and `b` agree to rounding (NaN only with NaN).
fn same(a: &[Vec<f64>], b: &[Vec<f64>], rtol: f64) -> Result<(), String> {
    for (j, (ga, gb)) in a.iter().zip(b).enumerate() {
        if ga.len() != gb.len() {
            return Err(format!("input {j}: {} vs {} lanes", ga.len(), gb.len()));
        }
        let big = ga.iter().chain(gb).fold(0.0f64, |m, x| m.max(x.abs()));
        for (i, (&x, &y)) in ga.iter().zip(gb).enumerate() {
            let ok = (x.is_nan() && y.is_nan()) || x == y || (x - y).abs() <= rtol * big;
            if !ok {
                return Err(format!("input {j} lane {i}: {x} vs {y}"));
            }
        }
    }
    Ok(())
}

/// Scopes: ops computed inside `suspend_grad` have the gradients of the same ops on detached
/// operands, and a backward pass run inside `isolate_grad` (over the ops after a split point)
/// leaves, once the scope ends, the gradients of a plain pass.
fn check_scopes(p: &Prog, tally: &Tally) -> Result<(), TestCaseError> {
    tally.cases.fetch_add(1, Relaxed);
    let sizes = p.sizes();
    let mut rng = Rng(p.seed);
    let xs: Vec<Vec<f64>> = sizes[..p.k()]
        .iter()
        .map(|&l| (0..l).map(|_| rng.uniform(-2.0, 2.0)).collect())
        .collect();
    let out_len = p
        .sinks()
        .iter()
        .map(|&s| sizes[s])
        .fold(1, |l, s| if s != 1 { s } else { l });
    let w: Vec<f64> = (0..out_len).map(|_| rng.uniform(-1.0, 1.0)).collect();
    let m = p.nodes.len();
    let split = (rng.next() % (m as u64 + 1)) as usize;
    let grads = |scope: Scope, isolate: bool| -> Vec<Vec<f64>> {
        let mut arrs: Vec<Float64> = xs.iter().map(|x| Float64::from_slice(x)).collect();
        for (a, inp) in arrs.iter_mut().zip(&p.inputs) {
            if inp.tracked {
                a.enable_grad();
            }
        }
        let mut v = arrs.clone();
        let seed = Float64::from_slice(&w);
        if isolate {
            build_ops(p, &mut v, 0..split, false, scope);
            kiln::ad::isolate_grad(|| {
                build_ops(p, &mut v, split..m, false, scope);
                let y = output(p, &v);
                kiln::ad::backward_from(&y, &seed).unwrap();
            });
        } else {
            build_ops(p, &mut v, 0..m, false, scope);
            let y = output(p, &v);
            kiln::ad::backward_from(&y, &seed).unwrap();
        }
        arrs.iter().map(|a| a.grad().to_vec()).collect()
    };
    let plain = grads(Scope::Plain, false);
    let r = same(&grads(Scope::Plain, true), &plain, 1e-12);
    prop_assert!(
        r.is_ok(),
        "isolate_grad from op {split}: {}",
        r.unwrap_err()
    );
    if (0..m).any(|j| p.scoped(j)) {
        let (s, d) = (grads(Scope::Suspend, false), grads(Scope::Detach, false));
        let r = same(&s, &d, 0.0);
        prop_assert!(r.is_ok(), "suspend_grad vs detach: {}", r.unwrap_err());
        tally.fd_checked.fetch_add(1, Relaxed);
    }
    Ok(())
}

#[test]
fn scopes_suspend_and_isolate() {
    let tally = Tally::new();
    let strategy = progs(SMALL, 12, false);
    let t = std::time::Instant::now();
    let r = no_leaks(|| {
        with_backend(BackendKind::Interp, || {
            runner(1000, 77).run(&strategy, |p| check_scopes(&p, &tally))
        })
    });
    if let Err(e) = r {
        panic!("scopes: {e}");
    }
    let (n, s) = (tally.cases.load(Relaxed), tally.fd_checked.load(Relaxed));
    eprintln!(
        "scopes: {n} programs (isolate_grad), {s} with suspended ops, {:.1} s",
        t.elapsed().as_secs_f64()
    );
    assert!(s * 4 >= n, "only {s} of {n} programs had suspended ops");
}

/// f32 programs: every rule in f32 gives the gradients of the same program in f64 (at the same
/// f32-representable inputs) to f32 accuracy, wherever f32 rounding moves no branch; forward and
/// reverse mode agree in f32.
fn check_f32(p: &Prog, tally: &Tally) -> Result<(), TestCaseError> {
    tally.cases.fetch_add(1, Relaxed);
    let sizes = p.sizes();
    let mut rng = Rng(p.seed);
    let xs: Vec<Vec<f64>> = sizes[..p.k()]
        .iter()
        .map(|&l| {
            (0..l)
                .map(|_| rng.uniform(-2.0, 2.0) as f32 as f64)
                .collect()
        })
        .collect();
    let (vals64, y64) = eval_point(p, &xs, false);
    if vals64
        .iter()
        .flatten()
        .any(|x| !x.is_finite() || x.abs() >= 1e4)
    {
        tally.big_values.fetch_add(1, Relaxed);
        return Ok(());
    }
    let (vals32, _) = eval_point_t::<f32>(p, &xs, false);
    let (Some(s64), Some(s32)) = (signature(p, &vals64), signature(p, &vals32)) else {
        tally.kinked.fetch_add(1, Relaxed);
        return Ok(());
    };
    if s64 != s32 || near_branch(p, &vals64, 1e-3) {
        tally.kinked.fetch_add(1, Relaxed);
        return Ok(());
    }
    let w: Vec<f64> = (0..y64.len()).map(|_| rng.uniform(-1.0, 1.0)).collect();
    let v = direction(p, &sizes, &mut rng, 0);
    let r64 = ad_run(p, &xs, &w, &v, false);
    let r32 = ad_run_t::<f32>(p, &xs, &w, &v, false);
    let gv: f64 = r32.grads.iter().zip(&v).map(|(g, v)| dot(g, v)).sum();
    let wjv = dot(&w, &r32.jv);
    let mag: f64 = r32
        .grads
        .iter()
        .zip(&v)
        .flat_map(|(g, v)| g.iter().zip(v).map(|(a, b)| (a * b).abs()))
        .sum::<f64>()
        + w.iter()
            .zip(&r32.jv)
            .map(|(a, b)| (a * b).abs())
            .sum::<f64>();
    prop_assert!(
        (gv - wjv).abs() <= 1e-4 * (mag + natural_scale(&w, &v)),
        "f32: reverse {gv} vs forward {wjv}"
    );
    let wsum: f64 = w.iter().map(|x| x.abs()).sum();
    for (j, (g32, g64)) in r32.grads.iter().zip(&r64.grads).enumerate() {
        let gmax = g64.iter().fold(0.0f64, |m, x| m.max(x.abs()));
        for (i, (a, b)) in g32.iter().zip(g64).enumerate() {
            prop_assert!(
                (a - b).abs() <= 1e-3 * (b.abs() + gmax) + 1e-4 * wsum,
                "input {j} lane {i}: f32 gradient {a} vs f64 {b}"
            );
        }
    }
    tally.fd_checked.fetch_add(1, Relaxed);
    tally.count_ops(p);
    Ok(())
}

#[test]
fn f32_programs_match_f64() {
    let mut runs = vec![(BackendKind::Interp, 600), (BackendKind::Cranelift, 80)];
    if llvm_available() {
        runs.push((BackendKind::Llvm, 10));
    }
    for (backend, cases) in runs {
        let tally = Tally::new();
        let strategy = progs(SMALL, 10, false);
        let t = std::time::Instant::now();
        let r = no_leaks(|| {
            with_backend(backend, || {
                runner(cases, 55 + backend as u8).run(&strategy, |p| check_f32(&p, &tally))
            })
        });
        if let Err(e) = r {
            panic!("f32 on {backend:?}: {e}");
        }
        let (n, ok) = (tally.cases.load(Relaxed), tally.fd_checked.load(Relaxed));
        eprintln!(
            "f32 on {backend:?}: {n} programs, {ok} compared with f64, {} near a branch, {} with big values, {:.1} s",
            tally.kinked.load(Relaxed),
            tally.big_values.load(Relaxed),
            t.elapsed().as_secs_f64()
        );
        assert!(ok * 10 >= n * 6, "only {ok} of {n} f32 programs compared");
        if n >= 100 {
            let missing = tally.missing();
            assert!(missing.is_empty(), "ops never compared in f32: {missing:?}");
        }
    }
}

/// Several threads differentiating at once share the AD graph (and keep their own recording and
/// isolation state): every property still holds on each.
#[test]
fn threads_differentiate_concurrently() {
    let tally = Tally::new();
    let t = std::time::Instant::now();
    no_leaks(|| {
        std::thread::scope(|s| {
            let hs: Vec<_> = (0..4u8)
                .map(|i| {
                    let tally = &tally;
                    s.spawn(move || {
                        let strategy = progs(SMALL, 12, false);
                        with_backend(BackendKind::Interp, || {
                            runner(150, 120 + i).run(&strategy, |p| {
                                check(&p, tally)?;
                                check_scopes(&p, tally)
                            })
                        })
                    })
                })
                .collect();
            for h in hs {
                if let Err(e) = h.join().unwrap() {
                    panic!("threads: {e}");
                }
            }
        })
    });
    eprintln!(
        "threads: {} program runs on 4 threads, {:.1} s",
        tally.cases.load(Relaxed),
        t.elapsed().as_secs_f64()
    );
}
