//! Update-in-place (issue 13) from a user's point of view.
//!
//! 1. The cases of `shared/cases/inplace.md` (IP-01 … IP-15, DAPHNE semantics) written with kiln's
//!    Rust API: "no future use" is a move (`x + 1.0`), "future use" a borrow (`&x + 1.0`) or a clone.
//!    DAPHNE's flags become which operand's buffer the result got (`Array::buffer_addr`), and every
//!    case also checks the values (expected values from the cases file or a plain Rust loop).
//! 2. Broadcast operands and aliasing (`x + x`).
//! 3. Compound assignment and scatters with and without an earlier clone (copy-on-write).
//! 4. Frozen functions: replays equal unfrozen runs and never modify the caller's inputs.
//! 5. A property test: random programs over clones, moves, borrows, compound assignments, views,
//!    scatters and drops, run with update-in-place on and off, compared element for element and
//!    against a snapshot of every still-held handle.
//! 6. The elementwise cases on every backend (the default, the interpreter, Cranelift, and LLVM
//!    where it is installed).
//! 7. In-place permutations (IP-10, IP-11) and caller-provided outputs (IP-15, `assign`).
//!
//! Buffer identity is compared only between arrays that are alive while the compared result is
//! allocated, so the allocator's cache of freed buffers cannot make a fresh buffer look reused.

mod common;
use common::leak_checked;
use kiln::prelude::*;
use kiln::{BackendKind, Scalar};
use kiln_core::with_backend;
use proptest::prelude::*;

// =============================================================================================
// Helpers
// =============================================================================================

/// Run a test alone (tests of one binary share kiln's registry) with update-in-place switched on
/// for this thread (whatever `KILN_INPLACE` says), followed by the leak check.
fn check<R>(f: impl FnOnce() -> R) -> R {
    leak_checked(|| kiln::with_inplace(true, f))
}

/// The address of `a`'s buffer (evaluating it first).
fn addr<T: Scalar>(a: &Array<T>) -> usize {
    a.eval();
    a.buffer_addr().expect("an evaluated array has a buffer")
}

/// The address of a tensor's buffer (evaluating it first).
fn taddr<T: Scalar>(t: &Tensor<T>) -> usize {
    addr(t.array())
}

/// An evaluated array holding `data` (its own buffer: never a shared literal).
fn data<T: Scalar>(v: Vec<T>) -> Array<T> {
    let a = Array::from_vec(v);
    a.eval();
    a
}

/// An evaluated row-major tensor.
fn tdata<T: Scalar>(v: Vec<T>, shape: &[usize]) -> Tensor<T> {
    let t = Tensor::from_vec(v, shape);
    t.eval();
    t
}

/// Which backend runs (for assertion messages).
fn be() -> String {
    format!("{:?}", kiln::backend())
}

/// The backends to check: `None` is the default (`KILN_BACKEND`, else LLVM when installed, else
/// Cranelift).
fn backends() -> Vec<Option<BackendKind>> {
    let mut v = vec![
        None,
        Some(BackendKind::Interp),
        Some(BackendKind::Cranelift),
    ];
    if kiln_core::backend::llvm::shared().is_ok() {
        v.push(Some(BackendKind::Llvm));
    }
    v
}

/// Run `f` under every backend.
fn each_backend(f: impl Fn()) {
    for b in backends() {
        match b {
            None => f(),
            Some(kind) => with_backend(kind, || {
                assert_eq!(kiln::backend(), kind);
                f()
            }),
        }
    }
}

/// Row-major transpose of an `r`×`c` matrix (plain loop).
fn transposed<T: Copy>(v: &[T], r: usize, c: usize) -> Vec<T> {
    let mut out = Vec::with_capacity(v.len());
    for j in 0..c {
        for i in 0..r {
            out.push(v[i * c + j]);
        }
    }
    out
}

/// Row-major reversal along axis 0 (`axis == 0`) or axis 1 of an `r`×`c` matrix (plain loop).
fn flipped<T: Copy>(v: &[T], r: usize, c: usize, axis: usize) -> Vec<T> {
    let mut out = Vec::with_capacity(v.len());
    for i in 0..r {
        for j in 0..c {
            let (si, sj) = if axis == 0 {
                (r - 1 - i, j)
            } else {
                (i, c - 1 - j)
            };
            out.push(v[si * c + sj]);
        }
    }
    out
}

fn stat_delta(before: &kiln::Stats) -> (u64, u64) {
    let now = kiln::stats();
    (
        now.inplace_reuses - before.inplace_reuses,
        now.inplace_bytes_saved - before.inplace_bytes_saved,
    )
}

// =============================================================================================
// 1. Cases IP-01 … IP-09, IP-13 (elementwise; each runs on every backend)
// =============================================================================================

/// IP-01: `X = [1]*15`, `Y = [1..15]` (i64), `Z = X + Y` for the four future-use combinations.
fn ip01() {
    let x0 = vec![1i64; 15];
    let y0: Vec<i64> = (1..=15).collect();
    let z0: Vec<i64> = (2..=16).collect();
    let b = be();

    // print(Z); print(X); print(Y): flags [true, true], both intact, a new buffer
    let (x, y) = (data(x0.clone()), data(y0.clone()));
    let (ax, ay) = (addr(&x), addr(&y));
    let z = &x + &y;
    assert_eq!(z.to_vec(), z0, "{b}");
    assert_ne!(addr(&z), ax, "{b}: X is still used");
    assert_ne!(addr(&z), ay, "{b}: Y is still used");
    assert_eq!(x.to_vec(), x0, "{b}");
    assert_eq!(y.to_vec(), y0, "{b}");
    assert_eq!((addr(&x), addr(&y)), (ax, ay), "{b}");
    drop((x, y, z));

    // print(Z); print(X): flags [true, false], Y may be overwritten
    let (x, y) = (data(x0.clone()), data(y0.clone()));
    let (ax, ay) = (addr(&x), addr(&y));
    let z = &x + y;
    assert_eq!(z.to_vec(), z0, "{b}");
    assert_eq!(addr(&z), ay, "{b}: Z should take Y's buffer");
    assert_eq!(x.to_vec(), x0, "{b}");
    assert_eq!(addr(&x), ax, "{b}");
    drop((x, z));

    // print(Z); print(Y): flags [false, true]
    let (x, y) = (data(x0.clone()), data(y0.clone()));
    let (ax, ay) = (addr(&x), addr(&y));
    let z = x + &y;
    assert_eq!(z.to_vec(), z0, "{b}");
    assert_eq!(addr(&z), ax, "{b}: Z should take X's buffer");
    assert_eq!(y.to_vec(), y0, "{b}");
    assert_eq!(addr(&y), ay, "{b}");
    drop((y, z));

    // print(Z): flags [false, false], the result reuses X's buffer (the first operand)
    let (x, y) = (data(x0.clone()), data(y0.clone()));
    let (ax, ay) = (addr(&x), addr(&y));
    let z = x + y;
    assert_eq!(z.to_vec(), z0, "{b}");
    assert_eq!(
        addr(&z),
        ax,
        "{b}: Z should take X's buffer (first operand)"
    );
    assert_ne!(addr(&z), ay, "{b}");
}

#[test]
fn ip01_future_use_flags() {
    check(|| each_backend(ip01));
}

/// IP-01 with update-in-place switched off: never reused, same values.
#[test]
fn ip01_switched_off_never_reuses() {
    leak_checked(|| {
        kiln::with_inplace(false, || {
            let x = data(vec![1i64; 15]);
            let y = data((1..=15).collect::<Vec<i64>>());
            let (ax, ay) = (addr(&x), addr(&y));
            let z = x + y;
            assert_eq!(z.to_vec(), (2..=16).collect::<Vec<i64>>());
            let az = addr(&z);
            assert!(az != ax && az != ay, "reused with in-place off");
        });
    });
}

/// IP-07 for one element type: m1 + m2 for every reuse choice.
fn ip07<T: Numeric>() {
    let conv = |v: &[u32]| -> Vec<T> { v.iter().map(|&x| T::from_f64(x as f64)).collect() };
    let m1 = conv(&[
        1, 2, 0, 0, 1, 3, 0, 1, 0, 2, 0, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    ]);
    let m2 = conv(&[
        0, 0, 0, 0, 0, 0, 1, 2, 3, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 3, 1, 0, 2,
    ]);
    let want = conv(&[
        1, 2, 0, 0, 1, 3, 1, 3, 3, 3, 0, 3, 0, 0, 0, 0, 0, 0, 0, 0, 3, 1, 0, 2,
    ]);
    let b = format!("{} {}", be(), std::any::type_name::<T>());
    // (false, true): reuse lhs
    let (a1, a2) = (data(m1.clone()), data(m2.clone()));
    let (p1, p2) = (addr(&a1), addr(&a2));
    let r = a1 + &a2;
    assert_eq!(r.to_vec(), want, "{b}");
    assert_eq!(addr(&r), p1, "{b}: (false, true) reuses lhs");
    assert_eq!(a2.to_vec(), m2, "{b}");
    assert_eq!(addr(&a2), p2, "{b}");
    drop((r, a2));
    // (true, false): reuse rhs
    let (a1, a2) = (data(m1.clone()), data(m2.clone()));
    let (p1, p2) = (addr(&a1), addr(&a2));
    let r = &a1 + a2;
    assert_eq!(r.to_vec(), want, "{b}");
    assert_eq!(addr(&r), p2, "{b}: (true, false) reuses rhs");
    assert_eq!(a1.to_vec(), m1, "{b}");
    assert_eq!(addr(&a1), p1, "{b}");
    drop((r, a1));
    // (false, false): reuse lhs
    let (a1, a2) = (data(m1.clone()), data(m2.clone()));
    let (p1, p2) = (addr(&a1), addr(&a2));
    let r = a1 + a2;
    assert_eq!(r.to_vec(), want, "{b}");
    assert_eq!(addr(&r), p1, "{b}: (false, false) reuses lhs");
    assert_ne!(addr(&r), p2, "{b}");
    drop(r);
    // (true, true): a new buffer
    let (a1, a2) = (data(m1.clone()), data(m2.clone()));
    let (p1, p2) = (addr(&a1), addr(&a2));
    let r = &a1 + &a2;
    assert_eq!(r.to_vec(), want, "{b}");
    assert!(
        addr(&r) != p1 && addr(&r) != p2,
        "{b}: (true, true) reuses nothing"
    );
    assert_eq!((a1.to_vec(), a2.to_vec()), (m1.clone(), m2.clone()), "{b}");
    // the same through tensors (4×6)
    let (t1, t2) = (tdata(m1.clone(), &[4, 6]), tdata(m2.clone(), &[4, 6]));
    let (q1, q2) = (taddr(&t1), taddr(&t2));
    let r = &t1 + t2;
    assert_eq!(r.shape(), &[4, 6]);
    assert_eq!(r.to_vec(), want, "{b}");
    assert_eq!(taddr(&r), q2, "{b}: tensor (true, false) reuses rhs");
    assert_eq!(t1.to_vec(), m1, "{b}");
    let r = t1 + r;
    assert_eq!(taddr(&r), q1, "{b}: tensor (false, false) reuses lhs");
    let twice = conv(&[
        2, 4, 0, 0, 2, 6, 1, 4, 3, 5, 0, 6, 0, 0, 0, 0, 0, 0, 0, 0, 3, 1, 0, 2,
    ]);
    assert_eq!(r.to_vec(), twice, "{b}");
}

#[test]
fn ip07_every_reuse_choice_f64_and_u32() {
    check(|| {
        each_backend(|| {
            ip07::<f64>();
            ip07::<u32>();
        })
    });
}

/// IP-08: m1 + 1 writes into m1's buffer (and `1 + m1`, scalar on the left).
fn ip08() {
    let m1: Vec<f64> = vec![
        1., 2., 0., 0., 1., 3., 0., 1., 0., 2., 0., 3., 0., 0., 0., 0., 0., 0., 0., 0., 0., 0., 0.,
        0.,
    ];
    let want: Vec<f64> = vec![
        2., 3., 1., 1., 2., 4., 1., 2., 1., 3., 1., 4., 1., 1., 1., 1., 1., 1., 1., 1., 1., 1., 1.,
        1.,
    ];
    let b = be();
    let m = data(m1.clone());
    let p = addr(&m);
    let r = m + 1.0;
    assert_eq!(r.to_vec(), want, "{b}");
    assert_eq!(addr(&r), p, "{b}: m1 + 1 is in place");
    let m = data(m1.clone());
    let p = addr(&m);
    let r = 1.0 + m;
    assert_eq!(r.to_vec(), want, "{b}");
    assert_eq!(addr(&r), p, "{b}: 1 + m1 is in place");
    // u32 tensor
    let t = tdata(m1.iter().map(|&v| v as u32).collect(), &[4, 6]);
    let p = taddr(&t);
    let r = t + 1u32;
    assert_eq!(
        r.to_vec(),
        want.iter().map(|&v| v as u32).collect::<Vec<_>>(),
        "{b}"
    );
    assert_eq!(taddr(&r), p, "{b}: u32 tensor + 1 is in place");
    // held: not in place, m1 intact
    let m = data(m1.clone());
    let p = addr(&m);
    let r = &m + 1.0;
    assert_eq!(r.to_vec(), want, "{b}");
    assert_ne!(addr(&r), p, "{b}");
    assert_eq!(m.to_vec(), m1, "{b}");
}

#[test]
fn ip08_matrix_plus_scalar() {
    check(|| each_backend(ip08));
}

/// IP-09: sqrt in place.
fn ip09() {
    let src: Vec<f64> = vec![
        1., 9., 0., 0., 1., 49., 0., 36., 0., 9., 0., 0., 0., 0., 0., 0., 16., 0., 0., 0., 25., 0.,
        0., 0.,
    ];
    let want: Vec<f64> = vec![
        1., 3., 0., 0., 1., 7., 0., 6., 0., 3., 0., 0., 0., 0., 0., 0., 4., 0., 0., 0., 5., 0., 0.,
        0.,
    ];
    let b = be();
    let m = tdata(src.clone(), &[4, 6]);
    let p = taddr(&m);
    let r = { m }.sqrt();
    assert_eq!(r.to_vec(), want, "{b}");
    assert_eq!(taddr(&r), p, "{b}: sqrt of a moved matrix is in place");
    // held: a new buffer, the input intact
    let m = tdata(src.clone(), &[4, 6]);
    let p = taddr(&m);
    let r = m.sqrt();
    assert_eq!(r.to_vec(), want, "{b}");
    assert_ne!(taddr(&r), p, "{b}");
    assert_eq!(m.to_vec(), src, "{b}");
    // every unary op of a chain on a moved f32 array
    let v: Vec<f32> = (0..37).map(|i| i as f32 - 18.0).collect();
    let a = data(v.clone());
    let p = addr(&a);
    let r = (-{ a }).abs().sqrt().floor();
    let want: Vec<f32> = v.iter().map(|x| (-x).abs().sqrt().floor()).collect();
    assert_eq!(r.to_vec(), want, "{b}");
    assert_eq!(addr(&r), p, "{b}: a unary chain is in place");
}

#[test]
fn ip09_unary_sqrt() {
    check(|| each_backend(ip09));
}

/// IP-13: `C = sqrt(A + B)`, A and B moved: one buffer (A's) for both steps.
fn ip13() {
    let n = 1000;
    let av: Vec<f64> = (0..n).map(|i| i as f64 * 0.5).collect();
    let bv: Vec<f64> = (0..n).map(|i| (n - i) as f64 * 0.25).collect();
    let want: Vec<f64> = av.iter().zip(&bv).map(|(a, b)| (a + b).sqrt()).collect();
    let b = be();
    let (a, bb) = (data(av.clone()), data(bv.clone()));
    let (pa, pb) = (addr(&a), addr(&bb));
    let s0 = kiln::stats();
    let c = (a + bb).sqrt();
    c.eval();
    let (reuses, bytes) = stat_delta(&s0);
    assert_eq!(
        addr(&c),
        pa,
        "{b}: sqrt(A + B) should write into A's buffer"
    );
    assert_ne!(addr(&c), pb, "{b}");
    assert!(reuses >= 1, "{b}: inplace_reuses did not grow");
    assert!(
        bytes >= (n * 8) as u64,
        "{b}: inplace_bytes_saved grew by {bytes}"
    );
    assert_eq!(c.to_vec(), want, "{b}");
    // out of place (both held): the same values, a third buffer
    let (a, bb) = (data(av.clone()), data(bv.clone()));
    let (pa, pb) = (addr(&a), addr(&bb));
    let c = (&a + &bb).sqrt();
    assert_eq!(c.to_vec(), want, "{b}");
    assert!(addr(&c) != pa && addr(&c) != pb, "{b}");
    assert_eq!((a.to_vec(), bb.to_vec()), (av, bv), "{b}");
    // the intermediate evaluated on its own, then moved into sqrt: still A's buffer
    let (a, bb) = (data((0..n).map(|i| i as f64).collect()), data(vec![1.0; n]));
    let pa = addr(&a);
    let t = a + bb;
    assert_eq!(addr(&t), pa, "{b}");
    let c = { t }.sqrt();
    assert_eq!(addr(&c), pa, "{b}: sqrt of the moved intermediate");
    let want: Vec<f64> = (0..n).map(|i| (i as f64 + 1.0).sqrt()).collect();
    assert_eq!(c.to_vec(), want, "{b}");
}

#[test]
fn ip13_chain_reuses_one_buffer() {
    check(|| each_backend(ip13));
}

// ---------------------------------------------------------------------------------------------
// IP-02 … IP-04: branches and loops, written with moves and borrows
// ---------------------------------------------------------------------------------------------

const N: usize = 100; // 10×10

fn fill(v: f64) -> Float64 {
    data(vec![v; N])
}

/// IP-02 if_1 … if_4.
#[test]
fn ip02_if_else_nesting() {
    check(|| {
        let d1 = data(vec![0.0f64]);
        // if_1: nothing after → [false, false]: Y takes X's buffer
        {
            let x = fill(1.0);
            let mut y = fill(0.0);
            let ax = addr(&x);
            if d1.sum().item() != 0.5 {
                let c = fill(1.0);
                if d1.sum().item() == 0.0 {
                    y = x + c;
                }
            }
            assert_eq!(y.to_vec(), vec![2.0; N]);
            assert_eq!(
                addr(&y),
                ax,
                "if_1: Y = X + C with X and C moved takes X's buffer"
            );
        }
        // if_2: print(C) after the inner if → [false, true]
        {
            let x = fill(1.0);
            let mut y = fill(0.0);
            let ax = addr(&x);
            if d1.sum().item() != 0.5 {
                let c = fill(1.0);
                let ac = addr(&c);
                if d1.sum().item() == 0.0 {
                    y = x + &c;
                }
                assert_eq!(c.to_vec(), vec![1.0; N]);
                assert_eq!(addr(&c), ac);
            }
            assert_eq!(y.to_vec(), vec![2.0; N]);
            assert_eq!(addr(&y), ax, "if_2: X moved");
        }
        // if_3: print(X) inside the outer if, after the inner one → [true, false]
        {
            let x = fill(1.0);
            let mut y = fill(0.0);
            let mut ac = 0;
            if d1.sum().item() != 0.5 {
                let c = fill(1.0);
                ac = addr(&c);
                if d1.sum().item() == 0.0 {
                    y = &x + c;
                }
                assert_eq!(x.to_vec(), vec![1.0; N]);
            }
            assert_eq!(y.to_vec(), vec![2.0; N]);
            assert_eq!(addr(&y), ac, "if_3: Y takes C's buffer");
        }
        // if_4: print(X) after the outer if → [true, false]
        {
            let x = fill(1.0);
            let ax = addr(&x);
            let mut y = fill(0.0);
            let mut ac = 0;
            if d1.sum().item() != 0.5 {
                let c = fill(1.0);
                ac = addr(&c);
                if d1.sum().item() == 0.0 {
                    y = &x + c;
                }
            }
            assert_eq!(y.to_vec(), vec![2.0; N]);
            assert_eq!(addr(&y), ac, "if_4: Y takes C's buffer");
            assert_eq!(x.to_vec(), vec![1.0; N]);
            assert_eq!(addr(&x), ax);
        }
    });
}

/// IP-03 elseif_1 … elseif_3.
#[test]
fn ip03_else_if_branches() {
    check(|| {
        // elseif_1: branch A taken (D = D - 1), branch B (Y = X + C) not; print(X); print(Y)
        {
            let x = fill(1.0);
            let mut y = fill(0.0);
            let ay = addr(&y);
            let c = fill(1.0);
            let mut d = data(vec![0.0f64]);
            if d.sum().item() == 0.0 {
                d -= 1.0;
            } else if d.sum().item() == 1.0 {
                y = &x + c;
            }
            assert_eq!(x.to_vec(), vec![1.0; N]);
            assert_eq!(y.to_vec(), vec![0.0; N]);
            assert_eq!(addr(&y), ay, "elseif_1: Y untouched");
            assert_eq!(d.to_vec(), vec![-1.0]);
        }
        // elseif_2: A (Y = X + C) taken, B (Y = X - 1) not. DAPHNE's analysis is conservative
        // ([true, false]); Rust's moves are exact across exclusive branches, so X is reusable.
        {
            let x = fill(1.0);
            let c = fill(1.0);
            let ax = addr(&x);
            let d = data(vec![0.0f64]);
            let y = if d.sum().item() == 0.0 {
                x + c
            } else {
                x - 1.0
            };
            assert_eq!(y.to_vec(), vec![2.0; N]);
            assert_eq!(addr(&y), ax, "elseif_2: X moved in both branches");
        }
        // elseif_2 as DAPHNE flags it: X used after the chain → Y takes C's buffer
        {
            let x = fill(1.0);
            let c = fill(1.0);
            let ac = addr(&c);
            let d = data(vec![0.0f64]);
            let y = if d.sum().item() == 0.0 {
                &x + c
            } else {
                &x - 1.0
            };
            assert_eq!(y.to_vec(), vec![2.0; N]);
            assert_eq!(addr(&y), ac, "elseif_2 [true, false]: C's buffer");
            assert_eq!(x.to_vec(), vec![1.0; N]);
        }
        // elseif_3: print(C) after the chain → [false, true]; branch B not taken
        {
            let x = fill(1.0);
            let mut y = fill(0.0);
            let c = fill(1.0);
            let mut d = data(vec![0.0f64]);
            if d.sum().item() == 0.0 {
                d -= 1.0;
            } else if d.sum().item() == 1.0 {
                y = x + &c;
            }
            assert_eq!(c.to_vec(), vec![1.0; N]);
            assert_eq!(y.to_vec(), vec![0.0; N]);
            assert_eq!(d.to_vec(), vec![-1.0]);
        }
    });
}

/// IP-04 for_1, nested for, for_if; plus a loop-carried `x = x * 0.5 + 1` that stays in one buffer.
#[test]
fn ip04_loops() {
    check(|| {
        // for_1: Y = X + 1 five times; X defined outside the loop must stay all 1
        {
            let x = fill(1.0);
            let ax = addr(&x);
            let mut y = fill(0.0);
            for i in 0..5 {
                y = &x + 1.0;
                assert_ne!(addr(&y), ax, "for_1 iteration {i}");
            }
            assert_eq!(y.to_vec(), vec![2.0; N]);
            assert_eq!(
                x.to_vec(),
                vec![1.0; N],
                "X must remain all 1 after the loop"
            );
        }
        // nested: for i { C = fill(1); for j { Y = X + C } } → [true, true]
        {
            let x = fill(1.0);
            let ax = addr(&x);
            let mut y = fill(0.0);
            for i in 0..3 {
                let c = fill(1.0);
                let ac = addr(&c);
                for j in 0..3 {
                    y = &x + &c;
                    let a = addr(&y);
                    assert!(a != ax && a != ac, "nested ({i}, {j}) reused an operand");
                }
                assert_eq!(c.to_vec(), vec![1.0; N]);
            }
            assert_eq!(y.to_vec(), vec![2.0; N]);
            assert_eq!(x.to_vec(), vec![1.0; N]);
        }
        // for_if: for i { C = fill(1); if (..) tmp = D - 1 else if (..) Y = X + C } → [true, false]
        for take_b in [false, true] {
            let x = fill(1.0);
            let mut y = fill(0.0);
            let d = data(vec![if take_b { 1.0f64 } else { 0.0 }]);
            let mut tmp = data(vec![0.0f64]);
            let mut c_addrs = Vec::new();
            for _ in 0..3 {
                let c = fill(1.0);
                c_addrs.push(addr(&c));
                if d.sum().item() == 0.0 {
                    tmp = &d - 1.0;
                } else if d.sum().item() == 1.0 {
                    y = &x + c;
                    y.eval();
                    // C was defined in this iteration and moved: Y takes its buffer
                    assert_eq!(
                        addr(&y),
                        *c_addrs.last().unwrap(),
                        "for_if: Y takes C's buffer"
                    );
                }
            }
            assert_eq!(x.to_vec(), vec![1.0; N]);
            if take_b {
                assert_eq!(y.to_vec(), vec![2.0; N]);
                assert_eq!(tmp.to_vec(), vec![0.0]);
            } else {
                assert_eq!(y.to_vec(), vec![0.0; N], "for_if: Y stays all 0");
                assert_eq!(tmp.to_vec(), vec![-1.0]);
            }
        }
        // a loop-carried update stays in one buffer, values as a plain loop
        {
            let n = 1000;
            let mut want: Vec<f32> = (0..n).map(|i| i as f32).collect();
            let mut x = data(want.clone());
            let a0 = addr(&x);
            for it in 0..10 {
                x = x * 0.5 + 1.0;
                assert_eq!(addr(&x), a0, "iteration {it}");
                for w in &mut want {
                    *w = *w * 0.5 + 1.0;
                }
            }
            assert_eq!(x.to_vec(), want);
        }
    });
}

// ---------------------------------------------------------------------------------------------
// IP-05, IP-06: run-time operand selection, shape and type compatibility
// ---------------------------------------------------------------------------------------------

/// Which operand a result took.
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
enum Took {
    Lhs,
    Rhs,
    Neither,
}

fn took(r: &Tensor<u32>, l: usize, rr: usize) -> Took {
    let a = taddr(r);
    if a == l {
        Took::Lhs
    } else if a == rr {
        Took::Rhs
    } else {
        Took::Neither
    }
}

/// IP-05: lhs `[[1,4,7],[2,5,8],[3,6,9]]`, rhs `[[1,5,9],[2,6,10],[3,7,11]]` (u32): which operand
/// `lhs + rhs` writes into, for the flags as moves/borrows, as extra handles (refcount 2) and as
/// live views over the whole buffer.
#[test]
fn ip05_runtime_operand_selection() {
    check(|| {
        let lv: Vec<u32> = vec![1, 4, 7, 2, 5, 8, 3, 6, 9];
        let rv: Vec<u32> = vec![1, 5, 9, 2, 6, 10, 3, 7, 11];
        let sum: Vec<u32> = lv.iter().zip(&rv).map(|(a, b)| a + b).collect();
        let mk = || (tdata(lv.clone(), &[3, 3]), tdata(rv.clone(), &[3, 3]));
        let expect = |fl: bool, fr: bool| match (fl, fr) {
            (true, true) => Took::Neither,
            (false, _) => Took::Lhs,
            (true, false) => Took::Rhs,
        };
        // flags as moves (false) and borrows (true)
        for (fl, fr) in [(true, true), (false, true), (true, false), (false, false)] {
            let (l, r) = mk();
            let (pl, pr) = (taddr(&l), taddr(&r));
            let (keep_l, keep_r, z) = match (fl, fr) {
                (true, true) => {
                    let z = &l + &r;
                    (Some(l), Some(r), z)
                }
                (false, true) => {
                    let z = l + &r;
                    (None, Some(r), z)
                }
                (true, false) => {
                    let z = &l + r;
                    (Some(l), None, z)
                }
                (false, false) => (None, None, l + r),
            };
            assert_eq!(z.to_vec(), sum, "flags ({fl}, {fr})");
            assert_eq!(took(&z, pl, pr), expect(fl, fr), "flags ({fl}, {fr})");
            if let Some(l) = keep_l {
                assert_eq!(l.to_vec(), lv);
            }
            if let Some(r) = keep_r {
                assert_eq!(r.to_vec(), rv);
            }
        }
        // both moved, but the "true" side has another handle (refcount 2)
        for (fl, fr) in [(true, true), (false, true), (true, false), (false, false)] {
            let (l, r) = mk();
            let (pl, pr) = (taddr(&l), taddr(&r));
            let cl = fl.then(|| l.clone());
            let cr = fr.then(|| r.clone());
            let z = l + r;
            assert_eq!(z.to_vec(), sum, "clones ({fl}, {fr})");
            assert_eq!(took(&z, pl, pr), expect(fl, fr), "clones ({fl}, {fr})");
            if let Some(c) = cl {
                assert_eq!((c.to_vec(), taddr(&c)), (lv.clone(), pl));
            }
            if let Some(c) = cr {
                assert_eq!((c.to_vec(), taddr(&c)), (rv.clone(), pr));
            }
        }
        // both moved, but the "true" side has a live view over its whole buffer
        for view in 0..3 {
            for (fl, fr) in [(true, true), (false, true), (true, false), (false, false)] {
                let (l, r) = mk();
                let (pl, pr) = (taddr(&l), taddr(&r));
                let mk_view = |t: &Tensor<u32>| match view {
                    0 => t.transpose(),                     // a lazy permutation
                    1 => t.reshape(&[9]),                   // another header over the same array
                    _ => t.flip(1).slice(kiln::s![.., ..]), // a lazy reversal
                };
                let vl = fl.then(|| mk_view(&l));
                let vr = fr.then(|| mk_view(&r));
                let z = l + r;
                let ctx = format!("view {view} ({fl}, {fr})");
                assert_eq!(z.to_vec(), sum, "{ctx}");
                assert_eq!(took(&z, pl, pr), expect(fl, fr), "{ctx}");
                let seen = |src: &[u32]| match view {
                    0 => transposed(src, 3, 3),
                    1 => src.to_vec(),
                    _ => flipped(src, 3, 3, 1),
                };
                if let Some(v) = vl {
                    assert_eq!(v.to_vec(), seen(&lv), "{ctx}: the view of lhs changed");
                }
                if let Some(v) = vr {
                    assert_eq!(v.to_vec(), seen(&rv), "{ctx}: the view of rhs changed");
                }
            }
        }
    });
}

/// IP-06: shape and element-width compatibility.
#[test]
fn ip06_shape_and_type_compatibility() {
    check(|| {
        let v9: Vec<u32> = (1..=9).collect();
        let v12: Vec<u32> = (1..=12).collect();
        // 3×3 u32 vs 3×3 u32: exact ✓
        let (a, b) = (tdata(v9.clone(), &[3, 3]), tdata(v9.clone(), &[3, 3]));
        let pa = taddr(&a);
        let r = a * b;
        assert_eq!(r.to_vec(), v9.iter().map(|v| v * v).collect::<Vec<_>>());
        assert_eq!(taddr(&r), pa, "3×3 vs 3×3: reused");

        // 3×3 vs 3×4: ✗ — a 9-element result read out of a moved 12-element buffer
        let a = tdata(v12.clone(), &[3, 4]);
        let b = tdata(v9.clone(), &[3, 3]);
        let (pa, pb) = (taddr(&a), taddr(&b));
        let r = { a }.slice(kiln::s![.., ..3]) + &b;
        let want: Vec<u32> = (0..9).map(|k| v12[(k / 3) * 4 + k % 3] + v9[k]).collect();
        assert_eq!(r.to_vec(), want);
        assert_ne!(taddr(&r), pa, "3×4 source of a 3×3 result reused");
        assert_ne!(taddr(&r), pb);
        assert_eq!(b.to_vec(), v9);
        // and as flat arrays: different lengths are an error, both operands intact
        let (a, b) = (data(v12.clone()), data(v9.clone()));
        assert!(UInt32::try_binary(Op::Add, &a, &b).is_err());
        assert_eq!((a.to_vec(), b.to_vec()), (v12.clone(), v9.clone()));

        // 3×4 vs 4×3: weak ✓ (same element count: the buffer is reused, not the shape)
        let a = tdata(v12.clone(), &[3, 4]);
        let b = tdata(v12.iter().map(|v| v * 10).collect(), &[4, 3]);
        let (pa, pb) = (taddr(&a), taddr(&b));
        let r = &a + { b }.reshape(&[3, 4]);
        assert_eq!(r.shape(), &[3, 4]);
        assert_eq!(r.to_vec(), v12.iter().map(|v| v * 11).collect::<Vec<_>>());
        assert_eq!(taddr(&r), pb, "the 4×3 buffer should hold the 3×4 result");
        assert_eq!(a.to_vec(), v12);
        assert_eq!(taddr(&a), pa);

        // 3×3 u32 vs 3×3 f64: ✗ (element widths 4 and 8)
        let a = tdata(v9.clone(), &[3, 3]);
        let b = tdata(vec![0.5f64; 9], &[3, 3]);
        let (pa, pb) = (taddr(&a), taddr(&b));
        let r = { a }.cast::<f64>() + &b;
        assert_eq!(
            r.to_vec(),
            v9.iter().map(|&v| v as f64 + 0.5).collect::<Vec<_>>()
        );
        assert!(
            taddr(&r) != pa && taddr(&r) != pb,
            "a u32 buffer took an f64 result"
        );
        // ... with the f64 operand moved too, the f64 one takes it
        let a = tdata(v9.clone(), &[3, 3]);
        let b = tdata(vec![0.5f64; 9], &[3, 3]);
        let (pa, pb) = (taddr(&a), taddr(&b));
        let r = { a }.cast::<f64>() + b;
        assert_eq!(taddr(&r), pb, "the f64 operand should take the f64 result");
        assert_ne!(taddr(&r), pa);
        assert_eq!(
            r.to_vec(),
            v9.iter().map(|&v| v as f64 + 0.5).collect::<Vec<_>>()
        );

        // casts between equal widths may reuse: f64 → i64, u32 → f32, i32 → u32
        let fv: Vec<f64> = (0..50).map(|i| i as f64 * 1.75 - 20.0).collect();
        let a = data(fv.clone());
        let pa = addr(&a);
        let r = { a }.cast::<i64>();
        assert_eq!(r.to_vec(), fv.iter().map(|&v| v as i64).collect::<Vec<_>>());
        assert_eq!(addr(&r), pa, "f64 → i64 of a moved array");
        let a = data((0..50u32).collect::<Vec<_>>());
        let pa = addr(&a);
        let r = { a }.cast::<f32>() * 0.5;
        assert_eq!(
            r.to_vec(),
            (0..50).map(|v| v as f32 * 0.5).collect::<Vec<_>>()
        );
        assert_eq!(addr(&r), pa, "u32 → f32 of a moved array");
        // different widths never: i32 → f64, f64 → f32
        let a = data((0..50i32).collect::<Vec<_>>());
        let pa = addr(&a);
        let r = { a }.cast::<f64>();
        assert_eq!(r.to_vec(), (0..50).map(|v| v as f64).collect::<Vec<_>>());
        assert_ne!(addr(&r), pa, "i32 → f64 reused a 4-byte buffer");
        let a = data(fv.clone());
        let pa = addr(&a);
        let r = { a }.cast::<f32>();
        assert_eq!(r.to_vec(), fv.iter().map(|&v| v as f32).collect::<Vec<_>>());
        assert_ne!(addr(&r), pa, "f64 → f32 reused an 8-byte buffer");
        // a comparison (1-byte mask) of moved f32 arrays
        let a = data((0..50).map(|v| v as f32).collect::<Vec<_>>());
        let pa = addr(&a);
        let m = { a }.lt(25.0f32);
        assert_eq!(m.to_vec(), (0..50).map(|v| v < 25).collect::<Vec<_>>());
        assert_ne!(addr(&m), pa);
    });
}

// =============================================================================================
// 2. Broadcast operands and aliasing
// =============================================================================================

fn broadcast_and_aliasing() {
    let b = be();
    let n = 9;
    let xv: Vec<f64> = (0..n).map(|i| i as f64).collect();
    // a size-1 array, moved, never takes a result
    let x = data(xv.clone());
    let s = data(vec![10.0f64]);
    let (px, ps) = (addr(&x), addr(&s));
    let r = &x + s;
    assert_eq!(
        r.to_vec(),
        xv.iter().map(|v| v + 10.0).collect::<Vec<_>>(),
        "{b}"
    );
    assert!(
        addr(&r) != px && addr(&r) != ps,
        "{b}: broadcast operand took a result"
    );
    assert_eq!(x.to_vec(), xv, "{b}");
    drop((x, r));
    // both moved, the broadcast one first: the full-size one takes it
    let x = data(xv.clone());
    let s = data(vec![10.0f64]);
    let (px, ps) = (addr(&x), addr(&s));
    let r = s - x;
    assert_eq!(
        r.to_vec(),
        xv.iter().map(|v| 10.0 - v).collect::<Vec<_>>(),
        "{b}"
    );
    assert_eq!(
        addr(&r),
        px,
        "{b}: the full-size operand should take the result"
    );
    assert_ne!(addr(&r), ps, "{b}");
    drop(r);
    // a broadcast tensor view (1×4 → 3×4), moved
    let row = tdata(vec![1.0f64, 2.0, 3.0, 4.0], &[1, 4]);
    let keep = row.clone();
    let m = tdata((0..12).map(|v| v as f64).collect(), &[3, 4]);
    let (prow, pm) = (taddr(&row), taddr(&m));
    let r = { row }.broadcast_to(&[3, 4]) + &m;
    let want: Vec<f64> = (0..12).map(|k| (k % 4 + 1) as f64 + k as f64).collect();
    assert_eq!(r.to_vec(), want, "{b}");
    assert!(taddr(&r) != prow && taddr(&r) != pm, "{b}");
    assert_eq!(keep.to_vec(), vec![1.0, 2.0, 3.0, 4.0], "{b}");
    drop((keep, r));
    // unique row, moved, with m moved too: m takes it
    let row = tdata(vec![1.0f64, 2.0, 3.0, 4.0], &[1, 4]);
    let prow = taddr(&row);
    let r = row + m; // NumPy broadcasting: row is read at other indices
    assert_eq!(r.to_vec(), want, "{b}");
    assert_eq!(taddr(&r), pm, "{b}: the 3×4 operand should take the result");
    assert_ne!(taddr(&r), prow, "{b}");
    drop(r);

    // aliasing: x + x with x moved (one variable, two reads) → in place
    let x = data(xv.clone());
    let px = addr(&x);
    let r = x.clone() + x;
    assert_eq!(
        r.to_vec(),
        xv.iter().map(|v| v + v).collect::<Vec<_>>(),
        "{b}"
    );
    assert_eq!(addr(&r), px, "{b}: x + x with x moved");
    drop(r);
    // &x * &x with x held: a new buffer, x intact
    let x = data(xv.clone());
    let px = addr(&x);
    let r = &x * &x;
    assert_eq!(
        r.to_vec(),
        xv.iter().map(|v| v * v).collect::<Vec<_>>(),
        "{b}"
    );
    assert_ne!(addr(&r), px, "{b}");
    assert_eq!(x.to_vec(), xv, "{b}");
    // ... and x dropped after tracing, before evaluation: in place
    let r = &x * &x;
    drop(x);
    assert_eq!(
        r.to_vec(),
        xv.iter().map(|v| v * v).collect::<Vec<_>>(),
        "{b}"
    );
    assert_eq!(addr(&r), px, "{b}: x * x after x was dropped");
    drop(r);
    // fma(x, x, x) and select with x moved
    let x = data(xv.clone());
    let px = addr(&x);
    let r = { x }.fma(2.0, 1.0);
    assert_eq!(
        r.to_vec(),
        xv.iter().map(|v| v * 2.0 + 1.0).collect::<Vec<_>>(),
        "{b}"
    );
    assert_eq!(addr(&r), px, "{b}: fma");
    let y = data(xv.iter().map(|v| 8.0 - v).collect::<Vec<f64>>());
    let py = addr(&y);
    let r2 = select(&r.lt(&y), r, y); // (the mask, a temporary, is gone before evaluation)
    let want: Vec<f64> = xv
        .iter()
        .map(|v| {
            let (a, c) = (v * 2.0 + 1.0, 8.0 - v);
            if a < c {
                a
            } else {
                c
            }
        })
        .collect();
    assert_eq!(r2.to_vec(), want, "{b}");
    assert_eq!(addr(&r2), px, "{b}: select takes its first value operand");
    assert_ne!(addr(&r2), py, "{b}");
    // a pending expression over x (not evaluated) keeps x's buffer out of reach
    let x = data(xv.clone());
    let px = addr(&x);
    let p = &x + 100.0;
    let r = x * 2.0;
    assert_eq!(
        r.to_vec(),
        xv.iter().map(|v| v * 2.0).collect::<Vec<_>>(),
        "{b}"
    );
    assert_ne!(addr(&r), px, "{b}: a pending expression still reads x");
    assert_eq!(
        p.to_vec(),
        xv.iter().map(|v| v + 100.0).collect::<Vec<_>>(),
        "{b}"
    );
    // a lazy gather at other indices of a moved array: never in place, values right
    let x = data(xv.clone());
    let px = addr(&x);
    let rev = UInt32::from_vec((0..n as u32).rev().collect());
    let r = kiln::gather_view(&{ x }, &rev) + 1.0;
    let want: Vec<f64> = (0..n).map(|i| xv[n - 1 - i] + 1.0).collect();
    assert_eq!(r.to_vec(), want, "{b}");
    assert_ne!(addr(&r), px, "{b}: a gathered operand took the result");
    // a moved square matrix read through a lazy transpose (other indices)
    let m0: Vec<f64> = (0..64).map(|v| v as f64).collect();
    let m = tdata(m0.clone(), &[8, 8]);
    let r = { m }.transpose() + 0.5;
    let want: Vec<f64> = transposed(&m0, 8, 8).iter().map(|v| v + 0.5).collect();
    // (values only: an engine may transpose a uniquely held square matrix in place first)
    assert_eq!(r.to_vec(), want, "{b}");
    // a moved matrix flipped along rows plus itself
    let m = tdata(m0.clone(), &[8, 8]);
    let r = m.flip(0) + m;
    let f = flipped(&m0, 8, 8, 0);
    let want: Vec<f64> = f.iter().zip(&m0).map(|(a, b)| a + b).collect();
    assert_eq!(r.to_vec(), want, "{b}: flip(m) + m");
}

#[test]
fn broadcast_operands_and_aliasing() {
    check(|| each_backend(broadcast_and_aliasing));
}

/// Several results of one evaluation, kernels of other sizes and reductions in the same
/// evaluation, stencils, and a cast chain.
fn one_evaluation_many_kernels() {
    let b = be();
    let n = 64;
    let xv: Vec<f64> = (0..n).map(|i| i as f64 - 20.0).collect();
    // two results of one kernel reading the same released operand: at most one takes it
    let x = data(xv.clone());
    let px = addr(&x);
    let y = &x + 1.0;
    let z = x * 2.0;
    kiln::eval!(y, z);
    assert_eq!(
        y.to_vec(),
        xv.iter().map(|v| v + 1.0).collect::<Vec<_>>(),
        "{b}"
    );
    assert_eq!(
        z.to_vec(),
        xv.iter().map(|v| v * 2.0).collect::<Vec<_>>(),
        "{b}"
    );
    let took = [addr(&y), addr(&z)].iter().filter(|&&a| a == px).count();
    assert!(took <= 1, "{b}: two results share one buffer");
    drop((y, z));
    // two results of different widths: each takes the operand of its width
    let a = data(xv.clone());
    let c = data(xv.iter().map(|&v| v as f32).collect::<Vec<f32>>());
    let (pa, pc) = (addr(&a), addr(&c));
    let y = a * 2.0;
    let z = c + 1.0;
    kiln::eval!(z, y);
    assert_eq!(
        y.to_vec(),
        xv.iter().map(|v| v * 2.0).collect::<Vec<_>>(),
        "{b}"
    );
    assert_eq!(
        z.to_vec(),
        xv.iter().map(|&v| v as f32 + 1.0).collect::<Vec<_>>(),
        "{b}"
    );
    assert_eq!(
        addr(&y),
        pa,
        "{b}: the f64 result should take the f64 operand"
    );
    assert_eq!(
        addr(&z),
        pc,
        "{b}: the f32 result should take the f32 operand"
    );
    drop((y, z));
    // a kernel of another size reading the moved operand in the same evaluation
    for order in 0..3 {
        let x = data(xv.clone());
        let idx = UInt32::from_vec(vec![63, 0, 31, 5]);
        let g = kiln::gather(&x, &idx);
        let gv = kiln::gather_view(&(&x * 3.0), &idx);
        let y = x + 1.0;
        match order {
            0 => kiln::eval!(y, g, gv),
            1 => kiln::eval!(g, gv, y),
            _ => kiln::eval_all().unwrap(),
        }
        let want_g = vec![xv[63], xv[0], xv[31], xv[5]];
        assert_eq!(g.to_vec(), want_g, "{b}: order {order}");
        assert_eq!(
            gv.to_vec(),
            want_g.iter().map(|v| v * 3.0).collect::<Vec<_>>(),
            "{b}: order {order}"
        );
        assert_eq!(
            y.to_vec(),
            xv.iter().map(|v| v + 1.0).collect::<Vec<_>>(),
            "{b}"
        );
    }
    // a reduction of the moved operand, pending alongside
    for together in [true, false] {
        let x = data(xv.clone());
        let s = x.sum();
        let y = x + 1.0;
        if together {
            kiln::eval!(y, s);
        } else {
            y.eval();
        }
        assert_eq!(s.item(), xv.iter().sum::<f64>(), "{b}: together {together}");
        assert_eq!(
            y.to_vec(),
            xv.iter().map(|v| v + 1.0).collect::<Vec<_>>(),
            "{b}"
        );
    }
    // a stencil over a moved tensor (read at other indices)
    let t = tdata(xv.iter().map(|v| v * v).collect::<Vec<f64>>(), &[n]);
    let pt = taddr(&t);
    let d = kiln::stencil(|a: &Rel<f64>| a.at([1]) - a.at([-1]));
    let out = d.apply(&{ t }).unwrap() + 0.0;
    let sq: Vec<f64> = xv.iter().map(|v| v * v).collect();
    let want: Vec<f64> = (0..n)
        .map(|i| {
            if i == 0 || i == n - 1 {
                0.0
            } else {
                sq[i + 1] - sq[i - 1]
            }
        })
        .collect();
    assert_eq!(out.to_vec(), want, "{b}: stencil over a moved tensor");
    assert_ne!(taddr(&out), pt, "{b}: a stencil's source took its result");
    // a cast chain f64 → f32 → f64: the f64 operand may take the f64 result
    let a = data(xv.clone());
    let pa = addr(&a);
    let r = ({ a }.cast::<f32>() * 2.0).cast::<f64>();
    assert_eq!(
        r.to_vec(),
        xv.iter()
            .map(|&v| ((v as f32) * 2.0) as f64)
            .collect::<Vec<_>>(),
        "{b}"
    );
    assert_eq!(addr(&r), pa, "{b}: f64 → f32 → f64 chain of a moved array");
}

#[test]
fn one_evaluation_many_kernels_on_every_backend() {
    check(|| each_backend(one_evaluation_many_kernels));
}

/// `KILN_INPLACE=0` turns reuse off for the whole process (checked in a child process running
/// this test with the variable set).
#[test]
fn env_switch_turns_reuse_off_process_wide() {
    const NAME: &str = "env_switch_turns_reuse_off_process_wide";
    if std::env::var_os("KILN_INPLACE_TEST_CHILD").is_some() {
        leak_checked(|| {
            let x = data(vec![1.0f64; 100]);
            let px = addr(&x);
            let y = (x + 1.0).sqrt();
            assert_eq!(y.to_vec(), vec![2f64.sqrt(); 100]);
            assert_ne!(addr(&y), px, "KILN_INPLACE=0 did not turn reuse off");
            let mut z = data(vec![1.0f64; 100]);
            let pz = addr(&z);
            let keep = z.clone();
            z += 1.0;
            assert_eq!(z.to_vec(), vec![2.0; 100]);
            assert_eq!((keep.to_vec(), addr(&keep)), (vec![1.0; 100], pz));
        });
        return;
    }
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", NAME, "--test-threads=1", "--nocapture"])
        .env("KILN_INPLACE", "0")
        .env("KILN_INPLACE_TEST_CHILD", "1")
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "the child failed:\n{text}");
    assert!(text.contains("1 passed"), "the child ran no test:\n{text}");
}

/// The loop `x = (x * 0.5 + 1.0).eval()`: after the first iteration, no buffer requests
/// at all (switched off, one per iteration), values as a plain loop.
#[test]
fn loop_update_makes_no_allocator_requests() {
    check(|| {
        each_backend(|| {
            let b = be();
            let n = 10_000;
            let iters = 50u64;
            let mut want = vec![3.0f32; n];
            let step = |w: &mut Vec<f32>| w.iter_mut().for_each(|v| *v = *v * 0.5 + 1.0);
            let mut x = data(want.clone());
            x = x * 0.5 + 1.0;
            x.eval();
            step(&mut want);
            let s0 = kiln::stats();
            for _ in 0..iters {
                x = x * 0.5 + 1.0;
                x.eval();
                step(&mut want);
            }
            let s1 = kiln::stats();
            assert_eq!(x.to_vec(), want, "{b}");
            assert_eq!(
                s1.alloc_requests - s0.alloc_requests,
                0,
                "{b}: buffer requests in {iters} in-place iterations"
            );
            let off = kiln::with_inplace(false, || {
                let s0 = kiln::stats();
                for _ in 0..iters {
                    x = x.clone() * 0.5 + 1.0;
                    x.eval();
                    step(&mut want);
                }
                kiln::stats().alloc_requests - s0.alloc_requests
            });
            assert!(off >= iters, "{b}: {off} requests switched off");
            assert_eq!(x.to_vec(), want, "{b}");
        })
    });
}

// =============================================================================================
// 3. Compound assignment and scatters
// =============================================================================================

#[test]
fn compound_assignment_and_copy_on_write() {
    check(|| {
        each_backend(|| {
            let b = be();
            let v: Vec<f64> = (0..1000).map(|i| i as f64).collect();
            // uniquely held: in place
            let mut x = data(v.clone());
            let px = addr(&x);
            x += 1.0;
            x *= 2.0;
            assert_eq!(
                x.to_vec(),
                v.iter().map(|a| (a + 1.0) * 2.0).collect::<Vec<_>>(),
                "{b}"
            );
            assert_eq!(addr(&x), px, "{b}: x += 1 with x the only holder");
            // with an earlier clone: the clone keeps the old values
            let c = x.clone();
            let old = c.to_vec();
            x += 5.0;
            assert_eq!(
                x.to_vec(),
                old.iter().map(|a| a + 5.0).collect::<Vec<_>>(),
                "{b}"
            );
            assert_eq!(c.to_vec(), old, "{b}: the clone changed");
            assert_eq!(addr(&c), px, "{b}");
            assert_ne!(addr(&x), px, "{b}: wrote into the clone's buffer");
            drop(c);
            // with a pending expression of x: it sees the old values
            let old = x.to_vec();
            let p = &x * 1.0;
            x -= 3.0;
            assert_eq!(
                x.to_vec(),
                old.iter().map(|a| a - 3.0).collect::<Vec<_>>(),
                "{b}"
            );
            assert_eq!(p.to_vec(), old, "{b}: the pending expression changed");
            // x *= &y: y intact
            let mut x = data(v.clone());
            let y = data(v.iter().map(|a| a * 0.5).collect::<Vec<f64>>());
            let (px, py) = (addr(&x), addr(&y));
            x *= &y;
            assert_eq!(
                x.to_vec(),
                v.iter().map(|a| a * (a * 0.5)).collect::<Vec<_>>(),
                "{b}"
            );
            assert_eq!(addr(&x), px, "{b}: x *= &y");
            assert_eq!(
                y.to_vec(),
                v.iter().map(|a| a * 0.5).collect::<Vec<_>>(),
                "{b}"
            );
            assert_eq!(addr(&y), py, "{b}");
            // x += x.clone(): aliasing through compound assignment
            let mut x = data(v.clone());
            let px = addr(&x);
            let c = x.clone();
            x += c;
            assert_eq!(
                x.to_vec(),
                v.iter().map(|a| a * 2.0).collect::<Vec<_>>(),
                "{b}"
            );
            assert_eq!(addr(&x), px, "{b}: x += x.clone() (the clone moved)");
            // integers
            let mut k = data((0..100u32).collect::<Vec<_>>());
            let pk = addr(&k);
            k <<= 1u32;
            k |= 1u32;
            assert_eq!(
                k.to_vec(),
                (0..100u32).map(|a| (a << 1) | 1).collect::<Vec<_>>(),
                "{b}"
            );
            assert_eq!(addr(&k), pk, "{b}");
        })
    });
}

#[test]
fn scatter_into_unique_and_shared_targets() {
    check(|| {
        let n = 16usize;
        let v: Vec<f32> = (0..n).map(|i| i as f32).collect();
        let idx = UInt32::from_vec(vec![3, 1, 15]);
        let vals = Float32::from_vec(vec![-1.0, -2.0, -3.0]);
        let mut want = v.clone();
        want[3] = -1.0;
        want[1] = -2.0;
        want[15] = -3.0;
        // unique: in place
        let mut t = data(v.clone());
        let pt = addr(&t);
        kiln::scatter(&mut t, &vals, &idx);
        assert_eq!(t.to_vec(), want);
        assert_eq!(addr(&t), pt, "scatter into a uniquely held target copies");
        // shared with a clone: the clone keeps the old values
        let mut t = data(v.clone());
        let pt = addr(&t);
        let c = t.clone();
        kiln::scatter(&mut t, &vals, &idx);
        assert_eq!(t.to_vec(), want);
        assert_eq!(c.to_vec(), v, "the clone changed");
        assert_eq!(addr(&c), pt);
        assert_ne!(addr(&t), pt);
        drop(c);
        // shared with a pending expression and a view
        let mut t = data(v.clone());
        let p = &t + 0.0;
        let view = kiln::gather_view(&t, &UInt32::from_vec((0..n as u32).rev().collect()));
        kiln::scatter(&mut t, &vals, &idx);
        assert_eq!(t.to_vec(), want);
        assert_eq!(p.to_vec(), v);
        assert_eq!(view.to_vec(), v.iter().rev().copied().collect::<Vec<_>>());
        // scatter_reduce: unique (in place), then shared
        let hidx = UInt32::from_vec(vec![0, 2, 2, 2, 5]);
        let mut want_h = vec![1u32; 8];
        for &i in &[0usize, 2, 2, 2, 5] {
            want_h[i] += 1;
        }
        let mut h = data(vec![1u32; 8]);
        let ph = addr(&h);
        kiln::scatter_reduce(ReduceOp::Add, &mut h, 1u32, &hidx);
        assert_eq!(h.to_vec(), want_h);
        assert_eq!(addr(&h), ph, "scatter_reduce into a unique target copies");
        let keep = h.clone();
        kiln::scatter_reduce(ReduceOp::Max, &mut h, 100u32, &hidx);
        let mut want2 = want_h.clone();
        for &i in &[0usize, 2, 5] {
            want2[i] = 100;
        }
        assert_eq!(h.to_vec(), want2);
        assert_eq!(keep.to_vec(), want_h, "the clone changed");
        assert_eq!(addr(&keep), ph);
        assert_ne!(addr(&h), ph);
        // a scatter into a target that was itself an in-place result
        let x = data(v.clone());
        let px = addr(&x);
        let mut t = x * 2.0;
        t.eval();
        assert_eq!(addr(&t), px);
        kiln::scatter(&mut t, &vals, &idx);
        let mut want3: Vec<f32> = v.iter().map(|a| a * 2.0).collect();
        want3[3] = -1.0;
        want3[1] = -2.0;
        want3[15] = -3.0;
        assert_eq!(t.to_vec(), want3);
        assert_eq!(addr(&t), px);
    });
}

// =============================================================================================
// 4. Frozen functions
// =============================================================================================

#[test]
fn frozen_function_never_modifies_inputs() {
    check(|| {
        let body = |x: &Float64, y: &Float64| -> Float64 {
            let t = x * 2.0 + y; // an intermediate, then moved
            t.eval();
            let u = t + 1.0;
            let w = x.clone() * 3.0; // a clone of an input, moved
            let v = (u.clone() * u).sqrt() + w; // aliasing of a moved intermediate
            v - y
        };
        let plain = |x: &[f64], y: &[f64]| -> Vec<f64> {
            x.iter()
                .zip(y)
                .map(|(&a, &b)| {
                    let u = a * 2.0 + b + 1.0;
                    (u * u).sqrt() + a * 3.0 - b
                })
                .collect()
        };
        let mut f = kiln::freeze(body);
        // every result stays held: a later replay must not write into an earlier result
        let mut kept: Vec<(Float64, Vec<f64>)> = Vec::new();
        for round in 0..5usize {
            let n = 257;
            let xv: Vec<f64> = (0..n).map(|i| (i + round) as f64 * 0.25).collect();
            let yv: Vec<f64> = (0..n).map(|i| (n - i) as f64 - round as f64).collect();
            let (x, y) = (data(xv.clone()), data(yv.clone()));
            let (px, py) = (addr(&x), addr(&y));
            let clone_x = x.clone();
            let got = f.call(&x, &y).unwrap();
            let want = plain(&xv, &yv);
            assert_eq!(got.to_vec(), want, "round {round}: frozen");
            kept.push((got.clone(), want.clone()));
            assert_eq!(body(&x, &y).to_vec(), want, "round {round}: unfrozen");
            assert_eq!(x.to_vec(), xv, "round {round}: x modified");
            assert_eq!(y.to_vec(), yv, "round {round}: y modified");
            assert_eq!(clone_x.to_vec(), xv);
            assert_eq!((addr(&x), addr(&y)), (px, py), "round {round}");
            assert!(addr(&got) != px && addr(&got) != py, "round {round}");
            // the same array for both arguments
            let got = f.call(&x, &x).unwrap();
            assert_eq!(got.to_vec(), plain(&xv, &xv), "round {round}: f(x, x)");
            assert_eq!(x.to_vec(), xv, "round {round}: x modified by f(x, x)");
        }
        for (k, (r, want)) in kept.iter().enumerate() {
            assert_eq!(&r.to_vec(), want, "the result of call {k} changed later");
        }
        let s = f.stats();
        assert!(s.replays >= 4, "{s}");
    });
}

#[test]
fn frozen_mut_argument_replays_without_clobbering() {
    check(|| {
        let mut g = kiln::freeze(|t: &mut Float64, k: &Float64| {
            *t = &*t * 2.0 + k;
        });
        let n = 64;
        let k = data(vec![1.0f64; n]);
        for round in 0..6usize {
            let tv: Vec<f64> = (0..n).map(|i| (i * (round + 1)) as f64).collect();
            let want: Vec<f64> = tv.iter().map(|v| v * 2.0 + 1.0).collect();
            let mut t = data(tv.clone());
            let pt = addr(&t);
            match round % 3 {
                // uniquely held
                0 => {
                    g.call(&mut t, &k).unwrap();
                    assert_eq!(t.to_vec(), want, "round {round}");
                }
                // a clone held by the caller keeps the old values
                1 => {
                    let keep = t.clone();
                    g.call(&mut t, &k).unwrap();
                    assert_eq!(t.to_vec(), want, "round {round}");
                    assert_eq!(
                        keep.to_vec(),
                        tv,
                        "round {round}: the caller's clone changed"
                    );
                    assert_eq!(addr(&keep), pt);
                    assert_ne!(addr(&t), pt, "round {round}: wrote into the clone's buffer");
                }
                // a pending expression of the caller keeps the old values
                _ => {
                    let p = &t + 0.0;
                    g.call(&mut t, &k).unwrap();
                    assert_eq!(t.to_vec(), want, "round {round}");
                    assert_eq!(
                        p.to_vec(),
                        tv,
                        "round {round}: the pending expression changed"
                    );
                }
            }
            assert_eq!(k.to_vec(), vec![1.0; n]);
            // the other argument is a clone of the `&mut` one: it keeps the old values
            let mut t = data(tv.clone());
            let same = t.clone();
            g.call(&mut t, &same).unwrap();
            assert_eq!(
                t.to_vec(),
                tv.iter().map(|v| v * 3.0).collect::<Vec<_>>(),
                "round {round}: t = 2t + t"
            );
            assert_eq!(
                same.to_vec(),
                tv,
                "round {round}: the other argument changed"
            );
        }
        assert!(g.stats().replays >= 3, "{}", g.stats());
    });
}

// =============================================================================================
// 5. Random programs: on and off agree, and nothing held ever changes
// =============================================================================================

#[derive(Clone, Debug)]
struct Step {
    kind: u8,
    a: u8,
    b: u8,
    c: i8,
    f1: bool,
    f2: bool,
}

fn step() -> impl Strategy<Value = Step> {
    (
        0u8..15,
        any::<u8>(),
        any::<u8>(),
        -4i8..5,
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(|(kind, a, b, c, f1, f2)| Step {
            kind,
            a,
            b,
            c,
            f1,
            f2,
        })
}

struct Slot {
    arr: Float64,
    snap: Vec<f64>,
}

fn same(a: f64, b: f64) -> bool {
    a == b || (a.is_nan() && b.is_nan())
}

fn bits(v: &[f64]) -> Vec<u64> {
    v.iter()
        .map(|x| {
            if x.is_nan() {
                f64::NAN.to_bits()
            } else {
                x.to_bits()
            }
        })
        .collect()
}

fn verify(s: &Slot, what: &str) -> Vec<f64> {
    let got = s.arr.to_vec();
    assert_eq!(got.len(), s.snap.len(), "{what}: length");
    for (i, (g, w)) in got.iter().zip(&s.snap).enumerate() {
        assert!(
            same(*g, *w),
            "{what}: element {i} is {g}, the handle's value was {w} (got {got:?}, want {:?})",
            s.snap
        );
    }
    got
}

fn binop(op: u8, x: &Float64, y: &Float64) -> Float64 {
    match op % 3 {
        0 => x + y,
        1 => x - y,
        _ => x * y,
    }
}

fn binop_f(op: u8, x: f64, y: f64) -> f64 {
    match op % 3 {
        0 => x + y,
        1 => x - y,
        _ => x * y,
    }
}

/// A permutation of 0..n: a rotation by `shift`, or the reversal.
fn perm(n: usize, shift: usize, reverse: bool) -> Vec<u32> {
    (0..n)
        .map(|i| {
            if reverse {
                (n - 1 - i) as u32
            } else {
                ((i + shift) % n) as u32
            }
        })
        .collect()
}

/// Run `steps` on arrays of `n` elements; every read is checked against the handle's snapshot.
/// Returns everything read (NaNs made canonical), for comparing runs.
fn run_program(n: usize, steps: &[Step]) -> Vec<Vec<u64>> {
    let mut slots: Vec<Slot> = Vec::new();
    let mut reads: Vec<Vec<u64>> = Vec::new();
    let fresh = |seed: u8, lazy: bool| -> Slot {
        let base: Vec<f64> = (0..n)
            .map(|i| ((i * 7 + seed as usize * 13) % 17) as f64 - 8.0)
            .collect();
        if lazy {
            // a pending expression over a moved, evaluated array
            let arr = data(base.clone()) * 0.5 + 1.0;
            Slot {
                arr,
                snap: base.iter().map(|v| v * 0.5 + 1.0).collect(),
            }
        } else {
            Slot {
                arr: data(base.clone()),
                snap: base,
            }
        }
    };
    slots.push(fresh(1, false));
    slots.push(fresh(2, true));
    for (k, s) in steps.iter().enumerate() {
        if slots.is_empty() {
            slots.push(fresh(s.b, s.f1));
            continue;
        }
        let len = slots.len();
        let a = s.a as usize % len;
        let b = s.b as usize % len;
        let what = format!("step {k} {s:?}");
        match s.kind {
            0 => slots.push(fresh(s.b, s.f1)),
            1 => {
                // clone
                let arr = slots[a].arr.clone();
                let snap = slots[a].snap.clone();
                slots.push(Slot { arr, snap });
            }
            2 => {
                // binary op, each operand moved (f1, f2) or borrowed
                let arr = binop(s.c as u8, &slots[a].arr, &slots[b].arr);
                let snap: Vec<f64> = slots[a]
                    .snap
                    .iter()
                    .zip(&slots[b].snap)
                    .map(|(&x, &y)| binop_f(s.c as u8, x, y))
                    .collect();
                let mut gone = Vec::new();
                if s.f1 {
                    gone.push(a);
                }
                if s.f2 && b != a {
                    gone.push(b);
                }
                gone.sort_unstable();
                for &g in gone.iter().rev() {
                    slots.remove(g);
                }
                slots.push(Slot { arr, snap });
            }
            3 => {
                // array (op) scalar, or scalar - array; the array moved (f1) or borrowed
                let c = s.c as f64;
                let x = &slots[a].arr;
                let (arr, snap): (Float64, Vec<f64>) = if s.f2 {
                    (c - x, slots[a].snap.iter().map(|v| c - v).collect())
                } else {
                    (
                        binop(s.b, x, &Float64::scalar(c)),
                        slots[a].snap.iter().map(|&v| binop_f(s.b, v, c)).collect(),
                    )
                };
                if s.f1 {
                    slots.remove(a);
                }
                slots.push(Slot { arr, snap });
            }
            4 => {
                // unary: neg, abs, sqrt(abs)
                let x = &slots[a].arr;
                let (arr, snap): (Float64, Vec<f64>) = match s.b % 3 {
                    0 => (-x, slots[a].snap.iter().map(|v| -v).collect()),
                    1 => (x.abs(), slots[a].snap.iter().map(|v| v.abs()).collect()),
                    _ => (
                        x.abs().sqrt(),
                        slots[a].snap.iter().map(|v| v.abs().sqrt()).collect(),
                    ),
                };
                if s.f1 {
                    slots.remove(a);
                }
                slots.push(Slot { arr, snap });
            }
            5 => {
                // a size-1 evaluated array broadcast over a, either side, each moved or held
                let c = s.c as f64;
                let sc = data(vec![c]);
                let keep_sc = (!s.f2).then(|| sc.clone());
                let x = &slots[a].arr;
                let (arr, snap): (Float64, Vec<f64>) = if s.b % 2 == 0 {
                    (x + &sc, slots[a].snap.iter().map(|v| v + c).collect())
                } else {
                    (&sc * x, slots[a].snap.iter().map(|v| c * v).collect())
                };
                drop(sc);
                if s.f1 {
                    slots.remove(a);
                }
                slots.push(Slot { arr, snap });
                if let Some(sc) = keep_sc {
                    // the size-1 array, read after the op
                    assert_eq!(sc.to_vec(), vec![c], "{what}: the broadcast scalar changed");
                }
            }
            6 => {
                // compound assignment: += scalar, or *= / -= another handle
                if s.f1 {
                    let rhs = slots[b].arr.clone();
                    let rsnap = slots[b].snap.clone();
                    let t = &mut slots[a];
                    if s.f2 {
                        t.arr *= &rhs;
                        for (v, r) in t.snap.iter_mut().zip(&rsnap) {
                            *v *= r;
                        }
                    } else {
                        t.arr -= rhs;
                        for (v, r) in t.snap.iter_mut().zip(&rsnap) {
                            *v -= r;
                        }
                    }
                } else {
                    let c = s.c as f64;
                    let t = &mut slots[a];
                    t.arr += c;
                    for v in &mut t.snap {
                        *v += c;
                    }
                }
            }
            7 => {
                if s.f1 {
                    kiln::eval_all().unwrap();
                } else {
                    slots[a].arr.eval();
                }
            }
            8 => {
                // a lazy view at shifted or reversed indices (gather or gather_view)
                let p = perm(n, s.c.unsigned_abs() as usize + 1, s.f1);
                let idx = UInt32::from_vec(p.clone());
                let arr = if s.f2 {
                    kiln::gather_view(&slots[a].arr, &idx)
                } else {
                    kiln::gather(&slots[a].arr, &idx)
                };
                let snap = p.iter().map(|&i| slots[a].snap[i as usize]).collect();
                if s.b % 4 == 0 {
                    // the source moved away after the view was taken
                    slots.remove(a);
                }
                slots.push(Slot { arr, snap });
            }
            9 => {
                // scatter (or scatter-add) of slot b into slot a at a permutation
                let p = perm(n, s.c.unsigned_abs() as usize, s.f2);
                let idx = UInt32::from_vec(p.clone());
                let value = slots[b].arr.clone();
                let vsnap = slots[b].snap.clone();
                let t = &mut slots[a];
                if s.f1 {
                    kiln::scatter_reduce(ReduceOp::Add, &mut t.arr, &value, &idx);
                    for (i, &j) in p.iter().enumerate() {
                        t.snap[j as usize] += vsnap[i];
                    }
                } else {
                    kiln::scatter(&mut t.arr, &value, &idx);
                    for (i, &j) in p.iter().enumerate() {
                        t.snap[j as usize] = vsnap[i];
                    }
                }
            }
            10 => {
                slots.remove(a);
            }
            11 => {
                reads.push(bits(&verify(&slots[a], &what)));
            }
            12 => {
                // select(a < b, a, b), operands moved or borrowed
                let mask = slots[a].arr.lt(&slots[b].arr);
                let arr = select(&mask, &slots[a].arr, &slots[b].arr);
                let snap = slots[a]
                    .snap
                    .iter()
                    .zip(&slots[b].snap)
                    .map(|(&x, &y)| if x < y { x } else { y })
                    .collect();
                drop(mask);
                let mut gone = Vec::new();
                if s.f1 {
                    gone.push(a);
                }
                if s.f2 && b != a {
                    gone.push(b);
                }
                gone.sort_unstable();
                for &g in gone.iter().rev() {
                    slots.remove(g);
                }
                slots.push(Slot { arr, snap });
            }
            14 => {
                // an in-place permutation of a moved handle seen as a matrix: transpose or flip
                let x = slots.remove(a);
                let (r, c) = match n {
                    1000 => (25, 40),
                    8 => (2, 4),
                    9 => (3, 3),
                    _ => (1, n),
                };
                let (r, c) = if s.f2 { (c, r) } else { (r, c) };
                let mut t = Tensor::from_array(x.arr, &[r, c]);
                let snap = if s.f1 {
                    t.transpose_in_place();
                    transposed(&x.snap, r, c)
                } else {
                    let axis = (s.b % 2) as usize;
                    t.flip_in_place(axis);
                    flipped(&x.snap, r, c, axis)
                };
                slots.push(Slot {
                    arr: t.into_array(),
                    snap,
                });
            }
            _ => {
                // a chain on a moved handle: sqrt(abs(x * 0.5 + c))
                let c = s.c as f64;
                let x = slots.remove(a);
                let arr = (x.arr * 0.5 + c).abs().sqrt();
                let snap = x.snap.iter().map(|v| (v * 0.5 + c).abs().sqrt()).collect();
                slots.push(Slot { arr, snap });
            }
        }
    }
    for (i, s) in slots.iter().enumerate() {
        reads.push(bits(&verify(s, &format!("final slot {i}"))));
    }
    reads
}

/// The interpreter really reaches the engine's reuse and decline paths (else the property test
/// below would compare two runs that never differ): a fixed program of moves, clones and views.
#[test]
fn program_interpreter_exercises_reuse() {
    check(|| {
        let st = |kind: u8, a: u8, b: u8, c: i8, f1: bool, f2: bool| Step {
            kind,
            a,
            b,
            c,
            f1,
            f2,
        };
        let steps = vec![
            st(1, 0, 0, 0, false, false),  // clone slot 0
            st(2, 0, 1, 0, true, true),    // move both into an add
            st(3, 0, 0, 2, true, false),   // move into `* 2`
            st(8, 0, 0, 1, false, true),   // a lazy view of slot 0
            st(13, 0, 0, 3, false, false), // a chain on a moved handle
            st(6, 0, 0, 1, false, false),  // compound assignment
            st(9, 0, 1, 2, false, false),  // scatter
            st(7, 0, 0, 0, true, false),   // eval everything
            st(14, 0, 0, 0, true, false),  // transpose in place
            st(14, 1, 1, 0, false, true),  // flip in place
        ];
        for n in [1000usize, 9] {
            let s0 = kiln::stats();
            let on = kiln::with_inplace(true, || run_program(n, &steps));
            let s1 = kiln::stats();
            let off = kiln::with_inplace(false, || run_program(n, &steps));
            let s2 = kiln::stats();
            assert_eq!(on, off, "n = {n}");
            assert!(
                s1.inplace_reuses - s0.inplace_reuses >= 2,
                "n = {n}: {s1:?}"
            );
            assert!(
                s1.inplace_declined - s0.inplace_declined >= 1,
                "n = {n}: {s1:?}"
            );
            // (switched off, only the scatter into a uniquely held target still writes in place:
            // that is a scatter's own copy-on-write rule, not update-in-place)
            assert!(
                s2.inplace_reuses - s1.inplace_reuses <= 1,
                "n = {n}: reused while off: {s2:?}"
            );
        }
    });
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 64,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    /// Random programs give the same values with update-in-place on and off, and every handle
    /// still held reads the value it had when it was taken.
    #[test]
    fn random_programs_agree_on_and_off(
        n in prop_oneof![Just(0usize), Just(1), Just(7), Just(8), Just(9), Just(1000)],
        backend in 0usize..3,
        steps in prop::collection::vec(step(), 1..24),
    ) {
        let run = || {
            let on = kiln::with_inplace(true, || run_program(n, &steps));
            let off = kiln::with_inplace(false, || run_program(n, &steps));
            (on, off)
        };
        let (on, off) = leak_checked(|| match backend {
            0 => run(),
            1 => with_backend(BackendKind::Interp, run),
            _ => with_backend(BackendKind::Cranelift, run),
        });
        prop_assert_eq!(on, off);
    }
}

// =============================================================================================
// 7. In-place permutations (IP-10, IP-11) and caller-provided outputs (IP-15)
// =============================================================================================

/// IP-10: `transpose_in_place` (square: blocked swaps; non-square: cycle-following; n×1 / 1×n:
/// reshape only), each in the tensor's own buffer when it is uniquely held; a clone or a live view
/// keeps the old contents and the tensor gets a new buffer.
#[test]
fn ip10_transpose_in_place() {
    check(|| {
        // the case file's 3×4
        let v: Vec<f64> = (1..=12).map(|v| v as f64).collect();
        let mut t = tdata(v.clone(), &[3, 4]);
        let p = taddr(&t);
        t.transpose_in_place();
        assert_eq!(t.shape(), &[4, 3]);
        assert_eq!(
            t.to_vec(),
            vec![1., 5., 9., 2., 6., 10., 3., 7., 11., 4., 8., 12.]
        );
        assert_eq!(taddr(&t), p, "3×4 transpose_in_place: same buffer");
        // square and non-square sizes around the block sizes, f64, f32 and u32
        for &(r, c) in &[
            (3, 3),
            (1, 1),
            (8, 8),
            (33, 33),
            (64, 64),
            (65, 65),
            (5, 7),
            (37, 53),
            (64, 3),
            (2, 100),
        ] {
            let v: Vec<f64> = (0..r * c).map(|k| k as f64).collect();
            let mut t = tdata(v.clone(), &[r, c]);
            let p = taddr(&t);
            t.transpose_in_place();
            assert_eq!(t.shape(), &[c, r], "{r}×{c}");
            assert_eq!(t.to_vec(), transposed(&v, r, c), "{r}×{c}");
            assert_eq!(taddr(&t), p, "{r}×{c}: same buffer");
            // twice gives back the original
            t.transpose_in_place();
            assert_eq!(
                (t.shape().to_vec(), t.to_vec()),
                (vec![r, c], v),
                "{r}×{c} twice"
            );
            assert_eq!(taddr(&t), p);
            let w: Vec<u32> = (0..(r * c) as u32).collect();
            let mut t = tdata(w.clone(), &[r, c]);
            let p = taddr(&t);
            t.transpose_in_place();
            assert_eq!(t.to_vec(), transposed(&w, r, c), "u32 {r}×{c}");
            assert_eq!(taddr(&t), p, "u32 {r}×{c}: same buffer");
            let w: Vec<f32> = (0..r * c).map(|k| k as f32).collect();
            let mut t = tdata(w.clone(), &[r, c]);
            t.transpose_in_place();
            assert_eq!(t.to_vec(), transposed(&w, r, c), "f32 {r}×{c}");
        }
        // n×1 and 1×n: a reinterpretation, same buffer, same flat contents
        for shape in [[9usize, 1], [1, 9]] {
            let v: Vec<f64> = (1..=9).map(|v| v as f64).collect();
            let mut t = tdata(v.clone(), &shape);
            let p = taddr(&t);
            t.transpose_in_place();
            assert_eq!(t.shape(), &[shape[1], shape[0]]);
            assert_eq!(t.to_vec(), v);
            assert_eq!(taddr(&t), p, "{shape:?}");
        }
        // a clone alive: untouched, and the tensor gets a new buffer
        for (r, c) in [(3usize, 4usize), (4, 4)] {
            let v: Vec<f64> = (0..r * c).map(|k| k as f64).collect();
            let mut t = tdata(v.clone(), &[r, c]);
            let p = taddr(&t);
            let keep = t.clone();
            t.transpose_in_place();
            assert_eq!(t.to_vec(), transposed(&v, r, c), "{r}×{c} with a clone");
            assert_eq!((keep.shape(), keep.to_vec()), (&[r, c][..], v.clone()));
            assert_eq!(taddr(&keep), p);
            assert_ne!(taddr(&t), p, "{r}×{c}: wrote into a shared buffer");
            // a live (lazy) view: untouched too
            let mut t = tdata(v.clone(), &[r, c]);
            let p = taddr(&t);
            let view = t.flip(1);
            let flat = t.reshape(&[r * c]).array().clone() + 0.0; // a pending expression
            t.transpose_in_place();
            assert_eq!(t.to_vec(), transposed(&v, r, c), "{r}×{c} with a view");
            assert_eq!(
                view.to_vec(),
                flipped(&v, r, c, 1),
                "{r}×{c}: the view changed"
            );
            assert_eq!(flat.to_vec(), v, "{r}×{c}: the pending expression changed");
            assert_ne!(taddr(&t), p);
        }
        // an unevaluated tensor
        let mut t = Tensor::from_array(Float64::arange(12) + 1.0, &[3, 4]);
        t.transpose_in_place();
        assert_eq!(
            t.to_vec(),
            vec![1., 5., 9., 2., 6., 10., 3., 7., 11., 4., 8., 12.]
        );
        // consuming: square in place, non-square correct
        let v: Vec<f64> = (0..16).map(|k| k as f64).collect();
        let t = tdata(v.clone(), &[4, 4]);
        let p = taddr(&t);
        let u = t.into_transposed();
        assert_eq!(u.to_vec(), transposed(&v, 4, 4));
        assert_eq!(taddr(&u), p, "into_transposed of a unique square matrix");
        let v: Vec<f64> = (1..=12).map(|v| v as f64).collect();
        let t = tdata(v.clone(), &[3, 4]);
        let u = t.into_transposed();
        assert_eq!(u.shape(), &[4, 3]);
        assert_eq!(u.to_vec(), transposed(&v, 3, 4));
        // consuming a shared square matrix: the clone keeps its values
        let v: Vec<f64> = (0..9).map(|k| k as f64).collect();
        let t = tdata(v.clone(), &[3, 3]);
        let keep = t.clone();
        let u = t.into_transposed();
        assert_eq!(u.to_vec(), transposed(&v, 3, 3));
        assert_eq!(keep.to_vec(), v);
        assert_ne!(taddr(&u), taddr(&keep));
    });
}

/// IP-11: reversal along rows (and along columns) in place.
#[test]
fn ip11_flip_in_place() {
    check(|| {
        let cases: [(usize, usize, Vec<f64>); 4] = [
            (3, 2, vec![5., 6., 3., 4., 1., 2.]),
            (3, 3, vec![7., 8., 9., 4., 5., 6., 1., 2., 3.]),
            (9, 1, vec![9., 8., 7., 6., 5., 4., 3., 2., 1.]),
            (1, 9, vec![1., 2., 3., 4., 5., 6., 7., 8., 9.]),
        ];
        for (r, c, want) in cases {
            let v: Vec<f64> = (1..=r * c).map(|v| v as f64).collect();
            let mut t = tdata(v.clone(), &[r, c]);
            let p = taddr(&t);
            t.flip_in_place(0);
            assert_eq!(t.shape(), &[r, c]);
            assert_eq!(t.to_vec(), want, "{r}×{c}");
            assert_eq!(taddr(&t), p, "{r}×{c}: same buffer");
            // consuming
            let t = tdata(v.clone(), &[r, c]);
            let p = taddr(&t);
            let u = t.into_flipped(0);
            assert_eq!(u.to_vec(), want, "{r}×{c} into_flipped");
            assert_eq!(taddr(&u), p, "{r}×{c} into_flipped: same buffer");
        }
        // along columns, larger and odd sizes, u32
        for &(r, c) in &[(4usize, 6usize), (7, 5), (33, 65), (1, 1)] {
            for axis in [0, 1] {
                let v: Vec<u32> = (0..(r * c) as u32).collect();
                let mut t = tdata(v.clone(), &[r, c]);
                let p = taddr(&t);
                t.flip_in_place(axis);
                assert_eq!(t.to_vec(), flipped(&v, r, c, axis), "{r}×{c} axis {axis}");
                assert_eq!(taddr(&t), p, "{r}×{c} axis {axis}: same buffer");
            }
        }
        // rank 3, middle axis
        let v: Vec<f64> = (0..24).map(|v| v as f64).collect();
        let mut t = tdata(v.clone(), &[2, 3, 4]);
        t.flip_in_place(1);
        let want: Vec<f64> = (0..24)
            .map(|k| {
                let (i, j, l) = (k / 12, (k / 4) % 3, k % 4);
                v[i * 12 + (2 - j) * 4 + l]
            })
            .collect();
        assert_eq!(t.to_vec(), want, "2×3×4 axis 1");
        // a clone alive: the clone keeps the old rows
        let v: Vec<f64> = (1..=6).map(|v| v as f64).collect();
        let mut t = tdata(v.clone(), &[3, 2]);
        let p = taddr(&t);
        let keep = t.clone();
        let view = t.transpose();
        t.flip_in_place(0);
        assert_eq!(t.to_vec(), vec![5., 6., 3., 4., 1., 2.]);
        assert_eq!(keep.to_vec(), v);
        assert_eq!(view.to_vec(), transposed(&v, 3, 2));
        assert_eq!(taddr(&keep), p);
        assert_ne!(taddr(&t), p);
    });
}

/// IP-15: `assign` evaluates into the caller's buffer; no operand of the expression is reused.
#[test]
fn ip15_assign_into_caller_buffer() {
    check(|| {
        let n = 100;
        let av: Vec<f64> = (0..n).map(|i| i as f64).collect();
        let bv: Vec<f64> = (0..n).map(|i| 2.0 * i as f64 + 1.0).collect();
        let sum: Vec<f64> = av.iter().zip(&bv).map(|(a, b)| a + b).collect();
        // uniquely held output, operands moved: the result goes to out's buffer
        let mut out = data(vec![0.0f64; n]);
        let po = addr(&out);
        let (a, b) = (data(av.clone()), data(bv.clone()));
        let (pa, pb) = (addr(&a), addr(&b));
        out.assign(a + b);
        assert_eq!(out.to_vec(), sum);
        assert_eq!(addr(&out), po, "assign must write into out's buffer");
        assert!(po != pa && po != pb);
        // operands held: intact
        let (a, b) = (data(av.clone()), data(bv.clone()));
        out.assign(&a * &b);
        let prod: Vec<f64> = av.iter().zip(&bv).map(|(a, b)| a * b).collect();
        assert_eq!(out.to_vec(), prod);
        assert_eq!(addr(&out), po);
        assert_eq!((a.to_vec(), b.to_vec()), (av.clone(), bv.clone()));
        // a size mismatch is an error and leaves out as it was
        assert!(out.try_assign(Float64::full(1.0, n + 1)).is_err());
        assert_eq!(out.to_vec(), prod);
        assert_eq!(addr(&out), po);
        // an expression of out itself
        let e = &out * 2.0 + &a;
        out.assign(e);
        let want: Vec<f64> = prod.iter().zip(&av).map(|(p, a)| p * 2.0 + a).collect();
        assert_eq!(out.to_vec(), want);
        assert_eq!(addr(&out), po, "out.assign(&out * 2 + a)");
        // shared output: the clone keeps the old values, out gets a new buffer
        let mut out = data(vec![3.0f64; n]);
        let po = addr(&out);
        let keep = out.clone();
        out.assign(&a + 1.0);
        assert_eq!(out.to_vec(), av.iter().map(|a| a + 1.0).collect::<Vec<_>>());
        assert_eq!(keep.to_vec(), vec![3.0; n], "the clone changed");
        assert_eq!(addr(&keep), po);
        assert_ne!(addr(&out), po);
        drop(keep);
        // a pending expression of out keeps the old values
        let before = out.to_vec();
        let p = &out - 1.0;
        out.assign(b);
        assert_eq!(out.to_vec(), bv);
        assert_eq!(
            p.to_vec(),
            before.iter().map(|v| v - 1.0).collect::<Vec<_>>()
        );
        drop(p);
        // tensors
        let mut t = tdata(vec![0.0f64; 12], &[3, 4]);
        let pt = taddr(&t);
        let m = tdata((0..12).map(|v| v as f64).collect(), &[3, 4]);
        let row = tdata(vec![10.0, 20.0, 30.0, 40.0], &[1, 4]);
        t.assign(m + &row);
        let want: Vec<f64> = (0..12)
            .map(|k| k as f64 + 10.0 * (k % 4 + 1) as f64)
            .collect();
        assert_eq!(t.to_vec(), want);
        assert_eq!(taddr(&t), pt, "Tensor::assign must write into t's buffer");
        let keep = t.clone();
        t.assign(row.broadcast_to(&[3, 4]));
        assert_eq!(
            t.to_vec(),
            (0..12)
                .map(|k| 10.0 * (k % 4 + 1) as f64)
                .collect::<Vec<_>>()
        );
        assert_eq!(keep.to_vec(), want);
        assert_ne!(taddr(&t), pt);
    });
}

/// IP-15 with values that need no kernel: a constant (a literal) and an already evaluated array
/// are still written into the caller's buffer, which keeps its address.
#[test]
fn ip15_assign_constant_or_evaluated_value() {
    check(|| {
        let n = 100;
        let mut out = data(vec![0.0f64; n]);
        let po = addr(&out);
        out.assign(Float64::full(7.0, n));
        assert_eq!(out.to_vec(), vec![7.0; n]);
        assert_eq!(
            addr(&out),
            po,
            "out.assign(Float64::full(7.0, n)) moved out to a new buffer"
        );
        // an evaluated array, held elsewhere: copied into out's buffer, the source intact
        let src = data((0..n).map(|i| i as f64).collect::<Vec<_>>());
        let ps = addr(&src);
        out.assign(&src);
        assert_eq!(out.to_vec(), (0..n).map(|i| i as f64).collect::<Vec<_>>());
        assert_eq!(
            addr(&out),
            po,
            "out.assign(&evaluated) moved out to another buffer"
        );
        assert_eq!(addr(&src), ps);
        // writing out again leaves src alone
        let e = &out + 1.0;
        out.assign(e);
        assert_eq!(src.to_vec(), (0..n).map(|i| i as f64).collect::<Vec<_>>());
        assert_eq!(
            out.to_vec(),
            (0..n).map(|i| i as f64 + 1.0).collect::<Vec<_>>()
        );
    });
}

/// Compound assignment on tensors: the right side broadcasts to the target's shape, the result is
/// written over the target's buffer when it was the only holder, and a clone keeps old values.
#[test]
fn tensor_compound_assignment() {
    check(|| {
        let mut t = Tensor::from_vec((0..12).map(|v| v as f64).collect(), &[3, 4]);
        t.eval();
        let before = addr(t.array());
        let row = Tensor::from_vec(vec![1.0, 2.0, 3.0, 4.0], &[4]);
        t += &row;
        t *= 2.0;
        t.eval();
        let want: Vec<f64> = (0..12)
            .map(|v| (v as f64 + (v % 4 + 1) as f64) * 2.0)
            .collect();
        assert_eq!(t.to_vec(), want);
        assert_eq!(
            addr(t.array()),
            before,
            "t += row; t *= 2 reuses t's buffer"
        );
        let keep = t.clone();
        t -= 1.0;
        t.eval();
        assert_ne!(
            addr(t.array()),
            addr(keep.array()),
            "a clone keeps its buffer"
        );
        assert_eq!(keep.to_vec(), want);
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let mut small = Tensor::<f64>::zeros(&[4]);
            small += &Tensor::<f64>::zeros(&[3, 4]);
        }));
        let msg = r.expect_err("a broadcast that grows the target is refused");
        let msg = msg.downcast_ref::<String>().cloned().unwrap_or_default();
        assert!(msg.contains("[3, 4]") && msg.contains("[4]"), "{msg}");
    })
}

/// A replayed launch writes in place again where the recording did (an intermediate of the
/// function that no later op and no output uses), and never with update-in-place off.
#[test]
fn frozen_replay_reuses_intermediates() {
    check(|| {
        let body = |x: &Float64| -> Float64 {
            let t = x * 2.0 + 1.0; // a fresh buffer: x is the caller's
            t.eval();
            let u = t * 3.0 - 1.0; // t moved: written over t's buffer
            u.eval();
            u
        };
        let mut f = kiln::freeze(body);
        let n = 1000;
        let xv: Vec<f64> = (0..n).map(|i| i as f64).collect();
        let want: Vec<f64> = xv.iter().map(|v| (v * 2.0 + 1.0) * 3.0 - 1.0).collect();
        let x = data(xv.clone());
        for round in 0..3 {
            let before = kiln::stats().inplace_reuses;
            let y = f.call(&x).unwrap();
            let reused = kiln::stats().inplace_reuses - before;
            assert_eq!(y.to_vec(), want, "round {round}");
            assert_eq!(x.to_vec(), xv, "round {round}: the input changed");
            assert!(reused >= 1, "round {round}: {reused} reuses");
        }
        assert!(f.stats().replays >= 2);
        let before = kiln::stats().inplace_reuses;
        let y = kiln::with_inplace(false, || f.call(&x).unwrap());
        assert_eq!(
            kiln::stats().inplace_reuses,
            before,
            "switched off: no reuse"
        );
        assert_eq!(y.to_vec(), want);
    })
}
