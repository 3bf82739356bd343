//! Issue 24 item 6: one API across `Array`, `Tensor` and `Vector`. Each case that failed for a new
//! user works, with its values checked against plain Rust; the `try_` twins agree with their
//! panicking forms and return the errors those panic with; `Tensor::from_ndarray` takes views of
//! any layout with one upload (item 8).

use kiln::prelude::*;
use kiln::{ReduceOp, Traverse};
use std::sync::Mutex;

/// Tests that count engine events (`kiln::stats()` is process-wide) run one at a time.
static SERIAL: Mutex<()> = Mutex::new(());
fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn data(n: usize) -> Vec<f32> {
    (0..n)
        .map(|i| ((i * 37 % 11) as f32) / 10.0 - 0.3)
        .collect()
}

// ---------------------------------------------------------------------------------------------
// scalars on tensors

#[test]
fn tensor_comparisons_with_scalars() {
    for n in [0usize, 1, 7, 16385] {
        let v = data(n);
        let t = Tensor::from_slice(&v, &[n]);
        let check = |got: Tensor<bool>, f: &dyn Fn(f32) -> bool, what: &str| {
            assert_eq!(got.shape(), &[n], "{what}");
            let want: Vec<bool> = v.iter().map(|&x| f(x)).collect();
            assert_eq!(got.to_vec(), want, "{what} n={n}");
        };
        check(t.lt(0.5), &|x| x < 0.5, "lt");
        check(t.le(0.5), &|x| x <= 0.5, "le");
        check(t.gt(0.5), &|x| x > 0.5, "gt");
        check(t.ge(0.5), &|x| x >= 0.5, "ge");
        check(t.eq(0.5), &|x| x == 0.5, "eq");
        check(t.ne(0.5), &|x| x != 0.5, "ne");
    }
}

#[test]
fn tensor_min_max_pow_with_scalars() {
    let v = data(12);
    let t = Tensor::from_slice(&v, &[3, 4]);
    let want = |f: &dyn Fn(f32) -> f32| v.iter().map(|&x| f(x)).collect::<Vec<_>>();
    assert_eq!(t.min(0.25).to_vec(), want(&|x| x.min(0.25)));
    assert_eq!(t.max(0.25).to_vec(), want(&|x| x.max(0.25)));
    let sq = t.pow(2.0).to_vec();
    for (g, w) in sq.iter().zip(want(&|x| x * x)) {
        assert!((g - w).abs() <= 1e-6 * w.abs().max(1.0), "{g} vs {w}");
    }
    assert_eq!(t.copysign(-1.0).to_vec(), want(&|x| -x.abs()));
    let at = t.atan2(2.0).to_vec();
    for (g, w) in at.iter().zip(want(&|x| x.atan2(2.0))) {
        assert!((g - w).abs() < 1e-6, "{g} vs {w}");
    }
    assert_eq!(t.min(0.25).shape(), &[3, 4]);
    // the tensor forms still broadcast against tensors
    let row = Tensor::from_vec(vec![0.0f32, 0.5, 1.0, -1.0], &[4]);
    let got = t.max(&row).to_vec();
    let want: Vec<f32> = (0..12)
        .map(|i| v[i].max([0.0, 0.5, 1.0, -1.0][i % 4]))
        .collect();
    assert_eq!(got, want);
    let lt: Vec<bool> = (0..12)
        .map(|i| v[i] < [0.0, 0.5, 1.0, -1.0][i % 4])
        .collect();
    assert_eq!(t.lt(&row).to_vec(), lt);
    // integers: the literal's type follows the tensor's
    let i = Tensor::<i32>::arange(5);
    assert_eq!(i.ge(2).to_vec(), vec![false, false, true, true, true]);
    assert_eq!(i.max(3).to_vec(), vec![3, 3, 3, 3, 4]);
}

// ---------------------------------------------------------------------------------------------
// eval! over anything Traverse

#[derive(Traverse)]
struct State {
    w: Float32,
    t: Tensor<f32>,
}

#[test]
fn eval_takes_tensors_vectors_tuples_and_structs() {
    let _s = serial();
    let x = Float32::arange(100);
    let tensor_a = Tensor::from_array(&x * 2.0, &[10, 10]);
    let vector_b = Vector2f::new(&x + 1.0, &x - 1.0);
    assert!(!tensor_a.is_evaluated() && !vector_b.is_evaluated());
    let before = kiln::stats().launches;
    kiln::eval!(tensor_a, vector_b);
    // three outputs of one size: one kernel
    assert_eq!(kiln::stats().launches - before, 1);
    assert!(tensor_a.is_evaluated() && vector_b.is_evaluated());
    assert_eq!(tensor_a.to_vec()[99], 198.0);
    assert_eq!(vector_b.y().to_vec()[0], -1.0);

    // borrowed values, tuples, derived structs
    let a = &x * 3.0;
    let r = &a;
    let pair = (&x * 4.0, Tensor::from_array(&x * 5.0, &[100]));
    let st = State {
        w: &x * 6.0,
        t: Tensor::from_array(&x * 7.0, &[4, 25]),
    };
    kiln::eval!(r, &pair, st);
    assert!(a.is_evaluated() && pair.0.is_evaluated() && pair.1.is_evaluated());
    assert!(st.w.is_evaluated() && st.t.is_evaluated());
    assert_eq!(st.t.to_vec()[3], 21.0);
    // the Result form
    let y = &x + 0.5;
    kiln::try_eval!(y).unwrap();
    assert!(y.is_evaluated());
}

// ---------------------------------------------------------------------------------------------
// labels

#[test]
fn labels_on_every_kind() {
    let t = Tensor::<f64>::ones(&[2, 3]).label("weights");
    assert_eq!(t.get_label().as_deref(), Some("weights"));
    assert_eq!(t.array().get_label().as_deref(), Some("weights"));
    // the label follows into whos()
    let table = kiln::whos().to_string();
    assert!(table.lines().any(|l| l.ends_with("weights")), "{table}");
    let v = Vector3f::from_fn(|k| Float32::full(k as f32, 4)).label("pos");
    let labels: Vec<_> = v.iter().map(|c| c.get_label().unwrap()).collect();
    assert_eq!(labels, ["pos.x", "pos.y", "pos.z"]);
}

// ---------------------------------------------------------------------------------------------
// sizes of any integer type

#[test]
fn sizes_of_any_integer_type() {
    assert_eq!(Float32::zeros(10u32).to_vec(), vec![0.0; 10]);
    assert_eq!(Float32::zeros(10u64).len(), 10);
    assert_eq!(Float32::ones(3u8).to_vec(), vec![1.0; 3]);
    assert_eq!(Int32::arange(5i64).to_vec(), (0..5).collect::<Vec<_>>());
    assert_eq!(UInt32::full(7, 2i32).to_vec(), vec![7, 7]);
    assert_eq!(
        Float64::linspace(0.0, 1.0, 3u16).to_vec(),
        vec![0.0, 0.5, 1.0]
    );
    let n: usize = 4;
    assert_eq!(Int64::arange(n).len(), n);
    // a Size still works (and follows a frozen function's inputs)
    let x = Float32::zeros(6);
    assert_eq!(UInt32::arange(x.size() / 2).to_vec(), vec![0, 1, 2]);
    // an unsuffixed literal still works
    assert_eq!(Float32::zeros(0).len(), 0);
}

#[test]
#[should_panic(expected = "-3 (i32) is not a number of elements")]
fn negative_size_panics_naming_it() {
    let _ = Float32::zeros(-3);
}

// ---------------------------------------------------------------------------------------------
// vectors from scalars

#[test]
fn vectors_from_scalars_and_arrays() {
    let v = Vector3f::new(1.0, 2.0, 3.0);
    assert_eq!([v.x().item(), v.y().item(), v.z().item()], [1.0, 2.0, 3.0]);
    assert_eq!(v.norm().item(), (1.0f32 + 4.0 + 9.0).sqrt());
    // arrays (owned or borrowed) and scalars mix; scalars broadcast
    let x = Float32::arange(4);
    let p = Vector3f::new(&x, 1.0, x.clone() * 2.0);
    let d = p.dot(&Vector3f::new(1.0, 1.0, 1.0)).to_vec();
    let want: Vec<f32> = (0..4).map(|i| i as f32 + 1.0 + 2.0 * i as f32).collect();
    assert_eq!(d, want);
    let i = Vector2i::new(7, -3);
    assert_eq!((i.x().item(), i.y().item()), (7, -3));
    let w = Vector4d::new(0.5, 1.5, 2.5, 3.5);
    assert_eq!(w.hsum().item(), 8.0);
}

// ---------------------------------------------------------------------------------------------
// indexing and concat on arrays

/// Python's `a[start:stop:step]` on a plain vector, as the reference, except that a position
/// beyond the ends is an error (`None`), as in ndarray and `Tensor::slice`, not clamped.
fn py_slice(v: &[i32], start: Option<isize>, stop: Option<isize>, step: isize) -> Option<Vec<i32>> {
    let n = v.len() as isize;
    let inside =
        |p: Option<isize>| p.is_none_or(|p| (0..=n).contains(&if p < 0 { p + n } else { p }));
    if !inside(start) || !inside(stop) {
        return None;
    }
    let norm = |p: isize, lo: isize, hi: isize| {
        let p = if p < 0 { p + n } else { p };
        p.clamp(lo, hi)
    };
    let mut out = vec![];
    if step > 0 {
        let (a, b) = (
            start.map_or(0, |p| norm(p, 0, n)),
            stop.map_or(n, |p| norm(p, 0, n)),
        );
        let mut i = a;
        while i < b {
            out.push(v[i as usize]);
            i += step;
        }
    } else {
        let (a, b) = (
            start.map_or(n - 1, |p| norm(p, -1, n - 1)),
            stop.map_or(-1, |p| norm(p, -1, n - 1)),
        );
        let mut i = a;
        while i > b {
            out.push(v[i as usize]);
            i += step;
        }
    }
    Some(out)
}

#[test]
fn slicing_matches_python() {
    use kiln::tensor::SliceArg;
    for n in [0usize, 1, 5, 16384, 16385] {
        let v: Vec<i32> = (0..n as i32).map(|i| i * 3 - 7).collect();
        let a = Int32::from_slice(&v);
        let lazy = &a + 0; // a lazy expression slices the same way
        let ni = n as isize;
        let cases: Vec<(Option<isize>, Option<isize>, isize)> = vec![
            (None, None, 1),
            (Some(1), Some(ni - 1), 1),
            (Some(-2), None, 1),
            (None, Some(-1), 2),
            (None, None, -1),
            (Some(ni / 2), None, 3),
            (Some(-1), None, -2),
            (Some(2), Some(1), 1),
        ];
        for (start, stop, step) in cases {
            let arg = SliceArg::Range { start, stop, step };
            match py_slice(&v, start, stop, step) {
                Some(want) => {
                    assert_eq!(a.slice(arg).to_vec(), want, "n={n} {arg:?}");
                    assert_eq!(lazy.slice(arg).to_vec(), want, "lazy n={n} {arg:?}");
                }
                None => {
                    let e = a.try_slice(arg).unwrap_err().to_string();
                    assert!(e.contains("out of range"), "n={n} {arg:?}: {e}");
                }
            }
        }
        if n > 0 {
            assert_eq!(a.at(0).item(), v[0]);
            assert_eq!(a.at(-1).item(), v[n - 1]);
            assert_eq!(lazy.at(n / 2).item(), v[n / 2]);
            assert_eq!(a.slice(1..).to_vec(), v[1..].to_vec());
            assert_eq!(a.slice(..=0).to_vec(), v[..=0].to_vec());
        }
        // out of range: the error names the position and the length
        let e = a.try_at(n).unwrap_err().to_string();
        assert!(
            e.contains(&n.to_string()) && e.contains("out of range"),
            "{e}"
        );
        assert!(a.try_at(-(ni + 1)).is_err());
    }
}

#[test]
#[should_panic(expected = "out of range")]
fn at_out_of_range_panics() {
    let _ = Float32::zeros(3).at(3);
}

#[test]
fn concat_matches_vec_concat() {
    for sizes in [vec![0usize, 0], vec![1], vec![3, 0, 2], vec![16383, 2, 1]] {
        let parts: Vec<Vec<f64>> = sizes
            .iter()
            .enumerate()
            .map(|(k, &n)| (0..n).map(|i| (k * 1000 + i) as f64 * 0.5).collect())
            .collect();
        let arrays: Vec<Float64> = parts
            .iter()
            .enumerate()
            // one lazy part, the others evaluated
            .map(|(k, p)| {
                let a = Float64::from_slice(p);
                if k == 0 {
                    &a * 1.0
                } else {
                    a
                }
            })
            .collect();
        let got = Float64::concat(&arrays).to_vec();
        assert_eq!(got, parts.concat(), "{sizes:?}");
    }
    assert!(Float64::try_concat(&[]).is_err());
}

// ---------------------------------------------------------------------------------------------
// one rule for try_ twins: same arguments, same order, mask as `impl IntoArray<bool>`

#[test]
fn try_twins_agree_with_panicking_forms() {
    let src = Float32::from_slice(&[10.0, 20.0, 30.0, 40.0]);
    let idx = UInt32::from_slice(&[3, 0, 9, 1]);
    let mask = Bool::from_slice(&[true, false, true, true]);
    assert_eq!(
        kiln::try_gather(&src, &idx).unwrap().to_vec(),
        gather(&src, &idx).to_vec()
    );
    assert_eq!(gather(&src, &idx).to_vec(), vec![40.0, 10.0, 0.0, 20.0]);
    assert_eq!(
        kiln::try_gather_masked(&src, &idx, &mask).unwrap().to_vec(),
        vec![40.0, 0.0, 0.0, 20.0]
    );

    let vals = Float32::from_slice(&[1.0, 2.0, 3.0, 4.0]);
    let pos = UInt32::from_slice(&[0, 2, 2, 5]);
    let run = |masked: bool, fallible: bool, reduce: bool| {
        let mut t = Float32::zeros(4);
        match (masked, fallible, reduce) {
            (false, false, false) => scatter(&mut t, &vals, &pos),
            (true, false, false) => scatter_masked(&mut t, &vals, &pos, &mask),
            (true, true, false) => kiln::try_scatter_masked(&mut t, &vals, &pos, &mask).unwrap(),
            (false, true, false) => kiln::try_scatter_masked(&mut t, &vals, &pos, true).unwrap(),
            (false, false, true) => scatter_reduce(ReduceOp::Add, &mut t, &vals, &pos),
            (false, true, true) => {
                kiln::try_scatter_reduce(ReduceOp::Add, &mut t, &vals, &pos).unwrap()
            }
            (true, false, true) => scatter_reduce_masked(ReduceOp::Add, &mut t, &vals, &pos, &mask),
            (true, true, true) => {
                kiln::try_scatter_reduce_masked(ReduceOp::Add, &mut t, &vals, &pos, mask.clone())
                    .unwrap()
            }
        }
        t.to_vec()
    };
    // plain Rust reference: lanes in order, index 5 out of range (dropped)
    let reference = |masked: bool, reduce: bool| {
        let mut t = [0.0f32; 4];
        let m = [true, false, true, true];
        for (k, (&v, &p)) in [1.0f32, 2.0, 3.0, 4.0]
            .iter()
            .zip(&[0usize, 2, 2, 5])
            .enumerate()
        {
            if (masked && !m[k]) || p >= 4 {
                continue;
            }
            if reduce {
                t[p] += v;
            } else {
                t[p] = v;
            }
        }
        t.to_vec()
    };
    for masked in [false, true] {
        for reduce in [false, true] {
            let want = reference(masked, reduce);
            for fallible in [false, true] {
                // a plain scatter with duplicate indices keeps one of the writers: only
                // positions written once are compared exactly
                let got = run(masked, fallible, reduce);
                if reduce || masked {
                    assert_eq!(
                        got, want,
                        "masked={masked} fallible={fallible} reduce={reduce}"
                    );
                } else {
                    assert_eq!((got[0], got[1], got[3]), (want[0], want[1], want[3]));
                    assert!(got[2] == 2.0 || got[2] == 3.0, "{got:?}");
                }
            }
        }
    }
    // the mask may be a literal `true` in every masked form
    let mut t = Float32::zeros(4);
    scatter_reduce_masked(ReduceOp::Add, &mut t, 1.0, &pos, true);
    assert_eq!(t.to_vec(), vec![1.0, 0.0, 2.0, 0.0]);

    // the errors the panicking forms raise come back from the twins, target unchanged
    let short = UInt32::from_slice(&[0, 1]);
    let mut t = Float32::full(5.0, 4);
    assert!(kiln::try_gather_masked(&src, &idx, Bool::from_slice(&[true, false])).is_err());
    assert!(kiln::try_scatter_reduce(ReduceOp::Add, &mut t, &vals, &short).is_err());
    assert!(kiln::try_scatter_masked(&mut t, &vals, &short, true).is_err());
    assert_eq!(t.to_vec(), vec![5.0; 4]);
}

// ---------------------------------------------------------------------------------------------
// from_ndarray takes views, with one upload

#[cfg(feature = "ndarray")]
#[test]
fn from_ndarray_takes_views_of_any_layout() {
    use ndarray::{s, Array3, Axis};
    let _s = serial();
    let base = Array3::from_shape_fn((3, 4, 5), |(i, j, k)| (i * 100 + j * 10 + k) as i64);
    let check = |view: ndarray::ArrayViewD<'_, i64>, what: &str| {
        let before = kiln::stats();
        let t = Tensor::from_ndarray(&view);
        let after = kiln::stats();
        // one device op (the upload), no kernel: the layout change is made during the copy
        assert_eq!(after.device_ops - before.device_ops, 1, "{what}");
        assert_eq!(after.launches - before.launches, 0, "{what}");
        assert!(t.is_evaluated(), "{what}");
        assert_eq!(t.shape(), view.shape(), "{what}");
        let want: Vec<i64> = view.iter().copied().collect();
        assert_eq!(t.to_vec(), want, "{what}");
    };
    check(base.view().into_dyn(), "standard");
    check(base.t().into_dyn(), "transposed");
    check(base.slice(s![.., 1..3, ..;2]).into_dyn(), "strided");
    check(base.slice(s![..;-1, .., ..;-2]).into_dyn(), "reversed");
    check(base.view().permuted_axes([1, 2, 0]).into_dyn(), "permuted");
    check(base.index_axis(Axis(1), 2).into_dyn(), "an axis taken");
    check(base.slice(s![.., 0..0, ..]).into_dyn(), "empty");
    // owned arrays of fixed rank, and Array::from_ndarray on a strided 1-d view
    let m = ndarray::arr2(&[[1.5f32, 2.5], [3.5, 4.5]]);
    assert_eq!(Tensor::from_ndarray(&m).to_vec(), vec![1.5, 2.5, 3.5, 4.5]);
    assert_eq!(
        Tensor::from_ndarray(&m.t()).to_vec(),
        vec![1.5, 3.5, 2.5, 4.5]
    );
    let col = m.column(1);
    assert_eq!(Float32::from_ndarray(&col).to_vec(), vec![2.5, 4.5]);
    let t: Tensor<f32> = m.t().into();
    assert_eq!(t.to_vec(), vec![1.5, 3.5, 2.5, 4.5]);
    // booleans take the same paths
    let b = ndarray::arr2(&[[true, false, true], [false, false, true]]);
    assert_eq!(
        Tensor::from_ndarray(&b.t()).to_vec(),
        b.t().iter().copied().collect::<Vec<_>>()
    );
}
