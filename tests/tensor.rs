//! `Tensor<T>` against an oracle: shapes, views, broadcasting elementwise ops and reductions are
//! compared with `ndarray` on the same data (random shapes of rank 0 to 4 with dimensions 0 to 5),
//! slicing with a small reference implementation of Python's slice rules, plus error messages,
//! kernel fusion of a view chain, and printing.

mod common;
use common::{delta, leak_checked, panic_message};
use kiln::prelude::*;
use kiln::tensor::{broadcast_shapes, SliceArg};
use ndarray::{ArrayD, Axis, IxDyn, Zip};
use proptest::prelude::*;
use std::fmt::Debug;
use std::panic::AssertUnwindSafe;

/// Cases per property (`KILN_TENSOR_CASES` overrides, for a longer run).
fn cases() -> u32 {
    std::env::var("KILN_TENSOR_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(40)
}

// ---------------------------------------------------------------------------------------------
// element types
// ---------------------------------------------------------------------------------------------

/// The element types the property tests run on (data are small integers, so sums are exact).
trait Elem:
    kiln::Numeric
    + kiln::Signed
    + ndarray::LinalgScalar
    + ndarray::ScalarOperand
    + Debug
    + PartialOrd
    + std::ops::Neg<Output = Self>
{
    /// Identities of min and max (what kiln gives along an empty axis).
    const MIN_ID: Self;
    const MAX_ID: Self;
    fn of(v: i32) -> Self;
    /// Equal, with NaN equal to NaN.
    fn same(a: Self, b: Self) -> bool;
}

impl Elem for i32 {
    const MIN_ID: i32 = i32::MAX;
    const MAX_ID: i32 = i32::MIN;
    fn of(v: i32) -> i32 {
        v
    }
    fn same(a: i32, b: i32) -> bool {
        a == b
    }
}

impl Elem for f32 {
    const MIN_ID: f32 = f32::INFINITY;
    const MAX_ID: f32 = f32::NEG_INFINITY;
    fn of(v: i32) -> f32 {
        v as f32
    }
    fn same(a: f32, b: f32) -> bool {
        a == b || (a.is_nan() && b.is_nan())
    }
}

// ---------------------------------------------------------------------------------------------
// helpers
// ---------------------------------------------------------------------------------------------

fn numel(shape: &[usize]) -> usize {
    shape.iter().product()
}

fn row_major_strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1usize; shape.len()];
    for d in (0..shape.len().saturating_sub(1)).rev() {
        s[d] = s[d + 1] * shape[d + 1];
    }
    s
}

fn nd<T: Clone>(shape: &[usize], data: Vec<T>) -> ArrayD<T> {
    ArrayD::from_shape_vec(IxDyn(shape), data).unwrap()
}

/// The ndarray elements in logical row-major order, in a fresh standard-layout array.
fn standard<T: Clone>(a: &ArrayD<T>) -> ArrayD<T> {
    nd(a.shape(), a.iter().cloned().collect())
}

/// A tensor and the same data as an ndarray.
fn both<T: Elem>(shape: &[usize], data: &[i32]) -> (Tensor<T>, ArrayD<T>) {
    let v: Vec<T> = data.iter().map(|&x| T::of(x)).collect();
    (Tensor::from_vec(v.clone(), shape), nd(shape, v))
}

#[track_caller]
fn check<T: Elem>(got: &Tensor<T>, want: &ArrayD<T>, what: &str) {
    assert_eq!(got.shape(), want.shape(), "{what}: shape");
    assert_eq!(got.ndim(), want.ndim(), "{what}: ndim");
    assert_eq!(got.len(), want.len(), "{what}: len");
    let g = got.to_vec();
    let w: Vec<T> = want.iter().copied().collect();
    assert!(
        g.len() == w.len() && g.iter().zip(&w).all(|(a, b)| T::same(*a, *b)),
        "{what} (shape {:?}): got {g:?}, want {w:?}",
        want.shape()
    );
}

#[track_caller]
fn check_plain<T: kiln::Scalar + PartialEq + Debug>(got: &Tensor<T>, want: &ArrayD<T>, what: &str) {
    assert_eq!(got.shape(), want.shape(), "{what}: shape");
    let w: Vec<T> = want.iter().copied().collect();
    assert_eq!(got.to_vec(), w, "{what} (shape {:?})", want.shape());
}

/// NumPy's broadcast shape, or None.
fn broadcast_ref(a: &[usize], b: &[usize]) -> Option<Vec<usize>> {
    let r = a.len().max(b.len());
    let pad = |s: &[usize]| -> Vec<usize> {
        let mut v = vec![1; r - s.len()];
        v.extend_from_slice(s);
        v
    };
    let (a, b) = (pad(a), pad(b));
    a.iter()
        .zip(&b)
        .map(|(&x, &y)| match (x, y) {
            _ if x == y => Some(x),
            (1, y) => Some(y),
            (x, 1) => Some(x),
            _ => None,
        })
        .collect()
}

/// `f` applied to `a` and `b` broadcast together (ndarray's `broadcast` for each side).
fn zip_ref<A: Clone, B: Clone, C>(
    a: &ArrayD<A>,
    b: &ArrayD<B>,
    f: impl Fn(A, B) -> C,
) -> ArrayD<C> {
    let shape = broadcast_ref(a.shape(), b.shape()).expect("compatible shapes");
    let (x, y) = (
        a.broadcast(shape.clone()).unwrap(),
        b.broadcast(shape).unwrap(),
    );
    Zip::from(&x)
        .and(&y)
        .map_collect(|p, q| f(p.clone(), q.clone()))
}

/// The indices one slice argument picks along an axis of length `d` (Python's rules for in-range
/// positions; a position out of range — below `-d` or above `d`, or an index outside `-d..d` — or
/// a zero step is an error, None), and whether the axis is kept.
fn axis_indices(d: usize, arg: SliceArg) -> Option<(Vec<usize>, bool)> {
    let d = d as i64;
    let resolve = |p: isize| -> Option<i64> {
        let p = p as i64;
        let r = if p < 0 { p + d } else { p };
        (0..=d).contains(&r).then_some(r)
    };
    match arg {
        SliceArg::Index(i) => {
            let p = resolve(i)?;
            (p < d).then(|| (vec![p as usize], false))
        }
        SliceArg::Range { start, stop, step } => {
            let start = match start {
                Some(p) => Some(resolve(p)?),
                None => None,
            };
            let stop = match stop {
                Some(p) => Some(resolve(p)?),
                None => None,
            };
            let step = step as i64;
            let mut out = Vec::new();
            if step == 0 {
                return None;
            } else if step > 0 {
                // slice.indices: start and stop clamped to [0, d]
                let (mut i, end) = (start.unwrap_or(0), stop.unwrap_or(d));
                while i < end {
                    out.push(i as usize);
                    i += step;
                }
            } else {
                // slice.indices: start and stop clamped to [-1, d - 1], defaults d - 1 and "before 0"
                let mut i = start.map_or(d - 1, |s| s.min(d - 1));
                let end = stop.map_or(-1, |s| s.min(d - 1));
                while i > end {
                    out.push(i as usize);
                    i += step;
                }
            }
            Some((out, true))
        }
    }
}

/// Python/NumPy basic slicing of row-major `data`: the result's shape and elements, or None for an
/// error.
fn slice_ref<T: Copy>(
    data: &[T],
    shape: &[usize],
    args: &[SliceArg],
) -> Option<(Vec<usize>, Vec<T>)> {
    if args.len() > shape.len() {
        return None;
    }
    let per = (0..shape.len())
        .map(|k| axis_indices(shape[k], args.get(k).copied().unwrap_or(SliceArg::ALL)))
        .collect::<Option<Vec<_>>>()?;
    let st = row_major_strides(shape);
    let out_shape = per.iter().filter(|p| p.1).map(|p| p.0.len()).collect();
    let mut flat = vec![0usize];
    for (k, (idx, _)) in per.iter().enumerate() {
        let stride = st[k];
        flat = flat
            .iter()
            .flat_map(|&f| idx.iter().map(move |&i| f + i * stride))
            .collect();
    }
    Some((out_shape, flat.iter().map(|&f| data[f]).collect()))
}

// ---------------------------------------------------------------------------------------------
// strategies
// ---------------------------------------------------------------------------------------------

/// A shape and its row-major data.
type Shaped = (Vec<usize>, Vec<i32>);

fn shape_strategy() -> impl Strategy<Value = Vec<usize>> {
    prop::collection::vec(0usize..=5, 0..=4)
}

fn data_for(shape: Vec<usize>) -> impl Strategy<Value = Shaped> {
    let n = numel(&shape);
    (Just(shape), prop::collection::vec(-9i32..=9, n))
}

/// A random shape with data.
fn shaped() -> impl Strategy<Value = Shaped> {
    shape_strategy().prop_flat_map(data_for)
}

/// A shape that broadcasts to `shape`: some dimensions replaced by 1, some leading ones dropped.
fn derived(shape: Vec<usize>) -> impl Strategy<Value = Vec<usize>> {
    let r = shape.len();
    (prop::collection::vec(prop::bool::weighted(0.35), r), 0..=r).prop_map(move |(ones, drop)| {
        shape
            .iter()
            .zip(&ones)
            .skip(drop)
            .map(|(&d, &one)| if one { 1 } else { d })
            .collect()
    })
}

/// Two broadcast-compatible shapes with data (both derived from one shape; either may be it).
fn broadcast_pair() -> impl Strategy<Value = (Shaped, Shaped)> {
    shape_strategy()
        .prop_flat_map(|c| {
            let keep = Just(c.clone());
            prop_oneof![
                (derived(c.clone()), derived(c.clone())),
                (keep.clone(), derived(c.clone())),
                (derived(c), keep),
            ]
        })
        .prop_flat_map(|(a, b)| (data_for(a), data_for(b)))
}

/// A permutation of the axes of a shape.
fn with_permutation() -> impl Strategy<Value = (Vec<usize>, Vec<i32>, Vec<usize>)> {
    shaped().prop_flat_map(|(s, v)| {
        let r = s.len();
        (
            Just(s),
            Just(v),
            Just((0..r).collect::<Vec<_>>()).prop_shuffle(),
        )
    })
}

/// A slice argument for an axis of length `d`: mostly in range, sometimes out of range.
fn slice_arg(d: usize) -> BoxedStrategy<SliceArg> {
    let d = d as isize;
    let out_of_range = prop_oneof![(-d - 3)..(-d), (d + 1)..=(d + 3)];
    let pos = prop_oneof![
        2 => Just(None),
        6 => (-d..=d).prop_map(Some),
        1 => out_of_range.clone().prop_map(Some),
    ];
    let step = prop_oneof![1isize..=3, -3isize..=-1];
    let range = (pos.clone(), pos, step).prop_map(|(start, stop, step)| SliceArg::Range {
        start,
        stop,
        step,
    });
    let bad_index = prop_oneof![Just(d), Just(-d - 1), out_of_range].prop_map(SliceArg::Index);
    if d == 0 {
        prop_oneof![4 => range, 1 => bad_index].boxed()
    } else {
        prop_oneof![6 => range, 3 => (-d..d).prop_map(SliceArg::Index), 1 => bad_index].boxed()
    }
}

/// A shape with data and slice arguments for a prefix of its axes.
fn with_slice() -> impl Strategy<Value = (Vec<usize>, Vec<i32>, Vec<SliceArg>)> {
    shaped().prop_flat_map(|(s, v)| {
        let args: Vec<BoxedStrategy<SliceArg>> = s.iter().map(|&d| slice_arg(d)).collect();
        let r = s.len();
        (Just(s), Just(v), args, 0..=r).prop_map(|(s, v, mut args, n)| {
            args.truncate(n);
            (s, v, args)
        })
    })
}

/// Parts to concatenate: a shape, an axis, and the parts' lengths along it, with data.
fn concat_parts() -> impl Strategy<Value = (usize, Vec<Shaped>)> {
    prop::collection::vec(0usize..=4, 1..=4)
        .prop_flat_map(|s| {
            let r = s.len();
            (Just(s), 0..r, prop::collection::vec(0usize..=4, 1..=3))
        })
        .prop_flat_map(|(s, axis, lens)| {
            let parts: Vec<_> = lens
                .iter()
                .map(|&len| {
                    let mut p = s.clone();
                    p[axis] = len;
                    data_for(p)
                })
                .collect();
            (Just(axis), parts)
        })
}

/// Parts to stack: one shape, 1 to 3 parts, an axis in 0..=rank.
fn stack_parts() -> impl Strategy<Value = (usize, Vec<Shaped>)> {
    (shape_strategy(), 1usize..=3).prop_flat_map(|(s, k)| {
        let r = s.len();
        (0..=r, prop::collection::vec(data_for(s), k))
    })
}

/// A reshape target for a shape: its dimensions shuffled with some 1s inserted.
fn with_reshape() -> impl Strategy<Value = (Vec<usize>, Vec<i32>, Vec<usize>, Vec<usize>)> {
    with_permutation().prop_flat_map(|(s, v, p)| {
        let shuffled = Just(s.clone()).prop_shuffle();
        (
            Just(s),
            Just(v),
            Just(p),
            shuffled,
            prop::collection::vec(0usize..=4, 0..=2),
        )
            .prop_map(|(s, v, p, mut t, ones)| {
                for at in ones {
                    let at = at.min(t.len());
                    if t.len() < 8 {
                        t.insert(at, 1);
                    }
                }
                (s, v, p, t)
            })
    })
}

// ---------------------------------------------------------------------------------------------
// the property tests, for i32 and f32
// ---------------------------------------------------------------------------------------------

fn views_case<T: Elem>(shape: &[usize], data: &[i32], perm: &[usize]) {
    let (t, a) = both::<T>(shape, data);
    let r = shape.len();
    // construction and element access
    check(&t, &a, "from_vec");
    assert_eq!(t.is_empty(), a.is_empty());
    let v: Vec<T> = data.iter().map(|&x| T::of(x)).collect();
    check(&Tensor::from_slice(&v, shape), &a, "from_slice");
    check(
        &Tensor::from_array(t.array().clone(), shape),
        &a,
        "from_array",
    );
    if !a.is_empty() {
        let last: Vec<usize> = shape.iter().map(|&d| d - 1).collect();
        let mid: Vec<usize> = shape.iter().map(|&d| d / 2).collect();
        for idx in [last, mid, vec![0; r]] {
            assert!(T::same(t.get(&idx).item(), a[IxDyn(&idx)]), "get {idx:?}");
        }
    }
    // permute / transpose
    check(
        &t.permute(perm),
        &a.clone().permuted_axes(IxDyn(perm)),
        &format!("permute {perm:?}"),
    );
    check(&t.transpose(), &a.t().to_owned(), "transpose");
    // flip, index_axis
    for (k, &d) in shape.iter().enumerate() {
        let mut f = a.clone();
        f.invert_axis(Axis(k));
        check(&t.flip(k), &f, &format!("flip {k}"));
        for i in [0, d / 2, d.saturating_sub(1)] {
            if i < d {
                check(
                    &t.index_axis(k, i),
                    &a.index_axis(Axis(k), i).to_owned(),
                    &format!("index_axis({k}, {i})"),
                );
            }
        }
    }
    // squeeze / unsqueeze
    let squeezed: Vec<usize> = shape.iter().copied().filter(|&d| d != 1).collect();
    check(&t.squeeze(), &nd(&squeezed, v.clone()), "squeeze");
    for k in 0..=r {
        check(
            &t.unsqueeze(k),
            &a.clone().insert_axis(Axis(k)),
            &format!("unsqueeze {k}"),
        );
    }
    // views of views, on a lazy expression
    let lazy = &t * T::of(3) - T::of(1);
    let lazy_a = a.mapv(|x| x * T::of(3) - T::of(1));
    let mut want = lazy_a.clone().permuted_axes(IxDyn(perm));
    if r > 0 {
        want.invert_axis(Axis(0));
        check(
            &lazy.permute(perm).flip(0),
            &want,
            &format!("permute {perm:?} then flip 0"),
        );
        let unperm = {
            // the inverse permutation brings back the original
            let mut inv = vec![0; r];
            for (i, &p) in perm.iter().enumerate() {
                inv[p] = i;
            }
            inv
        };
        check(
            &lazy.permute(perm).permute(&unperm),
            &lazy_a,
            "permute then inverse",
        );
    }
}

fn reshape_case<T: Elem>(shape: &[usize], data: &[i32], perm: &[usize], target: &[usize]) {
    let (t, a) = both::<T>(shape, data);
    let flat: Vec<T> = a.iter().copied().collect();
    check(
        &t.reshape(target),
        &nd(target, flat.clone()),
        &format!("reshape {shape:?} -> {target:?}"),
    );
    check(
        &t.reshape(&[numel(shape)]),
        &nd(&[numel(shape)], flat),
        "flatten",
    );
    // reshape of a permuted view reads it in row-major order
    let p = a.clone().permuted_axes(IxDyn(perm));
    let pt: Vec<T> = p.iter().copied().collect();
    let mut target2: Vec<usize> = target.to_vec();
    target2.reverse();
    check(
        &t.permute(perm).reshape(&target2),
        &nd(&target2, pt),
        &format!("permute {perm:?} then reshape {target2:?}"),
    );
}

fn slice_case<T: Elem>(shape: &[usize], data: &[i32], args: &[SliceArg]) {
    let (t, _) = both::<T>(shape, data);
    let v: Vec<T> = data.iter().map(|&x| T::of(x)).collect();
    match (t.try_slice(args), slice_ref(&v, shape, args)) {
        (Ok(got), Some((ws, wv))) => {
            check(&got, &nd(&ws, wv), &format!("slice {args:?} of {shape:?}"))
        }
        (Err(e), None) => {
            let m = e.to_string();
            assert!(m.contains("slice"), "slice error message: {m}");
        }
        (Ok(got), None) => panic!(
            "slice {args:?} of {shape:?}: expected an error, got shape {:?} {:?}",
            got.shape(),
            got.to_vec()
        ),
        (Err(e), Some((ws, wv))) => {
            panic!("slice {args:?} of {shape:?}: expected shape {ws:?} {wv:?}, got error {e}")
        }
    }
    // slicing a lazy expression and slicing again
    if let Some((ws, wv)) = slice_ref(&v, shape, args) {
        let lazy = (&t + T::of(2)).slice(args);
        let w2: Vec<T> = wv.iter().map(|&x| x + T::of(2)).collect();
        check(&lazy, &nd(&ws, w2.clone()), "slice of a lazy expression");
        // and a reversal of the result along its first axis
        if !ws.is_empty() {
            let rev = lazy.slice(&[SliceArg::Range {
                start: None,
                stop: None,
                step: -1,
            }]);
            let mut want = nd(&ws, w2);
            want.invert_axis(Axis(0));
            check(&rev, &want, "slice of a slice");
        }
    }
}

fn broadcast_to_case<T: Elem>(target: &[usize], src: &[usize], data: &[i32]) {
    let (t, a) = both::<T>(src, data);
    check(
        &t.broadcast_to(target),
        &standard(&a.broadcast(IxDyn(target)).unwrap().to_owned()),
        &format!("broadcast_to {src:?} -> {target:?}"),
    );
    // a broadcast of a lazy expression
    check(
        &(&t * T::of(2)).broadcast_to(target),
        &a.mapv(|x| x * T::of(2))
            .broadcast(IxDyn(target))
            .unwrap()
            .to_owned(),
        "broadcast of a lazy expression",
    );
    // views and reductions of a broadcast (stride-0 axes)
    let bt = t.broadcast_to(target);
    let ba = a.broadcast(IxDyn(target)).unwrap().to_owned();
    check(
        &bt.transpose(),
        &ba.t().to_owned(),
        "transpose of a broadcast",
    );
    if !target.is_empty() {
        check(
            &bt.flip(0),
            &ba.slice_each_axis(|ax| {
                if ax.axis.index() == 0 {
                    ndarray::Slice::new(0, None, -1)
                } else {
                    ndarray::Slice::from(..)
                }
            })
            .to_owned(),
            "flip of a broadcast",
        );
        check(
            &bt.sum_axis(0),
            &ba.sum_axis(Axis(0)),
            "sum_axis(0) of a broadcast",
        );
        let last = target.len() - 1;
        check(
            &bt.max_axis(last),
            &ba.fold_axis(Axis(last), T::MAX_ID, |&m, &x| if x > m { x } else { m }),
            "max_axis(last) of a broadcast",
        );
    }
    // an incompatible source: one aligned dimension neither 1 nor the target's
    let off = target.len() - src.len();
    if let Some(k) = src.len().checked_sub(1) {
        let tgt = target[off + k];
        let mut bad = src.to_vec();
        bad[k] = if tgt == 0 { 2 } else { tgt + 1 };
        let b = Tensor::<T>::zeros(&bad);
        let e = b.try_broadcast_to(target).unwrap_err().to_string();
        assert!(
            e.contains(&format!("{bad:?}")) && e.contains(&format!("{target:?}")),
            "{e}"
        );
    }
    // a source of higher rank than the target
    let mut longer = vec![2];
    longer.extend_from_slice(target);
    assert!(Tensor::<T>::zeros(&longer)
        .try_broadcast_to(target)
        .is_err());
}

fn concat_case<T: Elem>(axis: usize, parts: &[Shaped]) {
    let (ts, arrs): (Vec<Tensor<T>>, Vec<ArrayD<T>>) =
        parts.iter().map(|(s, v)| both::<T>(s, v)).unzip();
    let views: Vec<_> = arrs.iter().map(|a| a.view()).collect();
    let want = ndarray::concatenate(Axis(axis), &views).unwrap();
    check(
        &Tensor::concat(&ts, axis),
        &standard(&want),
        &format!(
            "concat of {:?} along {axis}",
            parts.iter().map(|p| &p.0).collect::<Vec<_>>()
        ),
    );
    // parts that are lazy views themselves
    let flipped: Vec<Tensor<T>> = ts.iter().map(|t| (t * T::of(2)).flip(axis)).collect();
    let flipped_a: Vec<ArrayD<T>> = arrs
        .iter()
        .map(|a| {
            let mut f = a.mapv(|x| x * T::of(2));
            f.invert_axis(Axis(axis));
            f
        })
        .collect();
    let views: Vec<_> = flipped_a.iter().map(|a| a.view()).collect();
    check(
        &Tensor::concat(&flipped, axis),
        &standard(&ndarray::concatenate(Axis(axis), &views).unwrap()),
        "concat of lazy views",
    );
}

fn stack_case<T: Elem>(axis: usize, parts: &[Shaped]) {
    let (ts, arrs): (Vec<Tensor<T>>, Vec<ArrayD<T>>) =
        parts.iter().map(|(s, v)| both::<T>(s, v)).unzip();
    let views: Vec<_> = arrs.iter().map(|a| a.view()).collect();
    let want = ndarray::stack(Axis(axis), &views).unwrap();
    check(
        &Tensor::stack(&ts, axis),
        &standard(&want),
        &format!("stack of {} x {:?} along {axis}", parts.len(), parts[0].0),
    );
}

fn binary_case<T: Elem>((sa, da): &Shaped, (sb, db): &Shaped) {
    let (a, na) = both::<T>(sa, da);
    let (b, nb) = both::<T>(sb, db);
    let what = |op: &str| format!("{sa:?} {op} {sb:?}");
    let want_shape = broadcast_ref(sa, sb).unwrap();
    assert_eq!(broadcast_shapes(sa, sb).unwrap(), want_shape);
    check(&(&a + &b), &(&na + &nb), &what("+"));
    check(&(&a - &b), &(&na - &nb), &what("-"));
    check(&(&a * &b), &(&na * &nb), &what("*"));
    check(
        &(&b - &a),
        &zip_ref(&nb, &na, |x, y| x - y),
        &what("- (swapped)"),
    );
    // division by a divisor without zeros
    let nz: Vec<i32> = db.iter().map(|&x| if x == 0 { 7 } else { x }).collect();
    let (bz, nbz) = both::<T>(sb, &nz);
    check(&(&a / &bz), &zip_ref(&na, &nbz, |x, y| x / y), &what("/"));
    // owned operands and scalars
    check(&(a.clone() + b.clone()), &(&na + &nb), &what("+ (owned)"));
    check(&(&a * T::of(3)), &na.mapv(|x| x * T::of(3)), "* scalar");
    check(&(&a + T::of(-4)), &na.mapv(|x| x + T::of(-4)), "+ scalar");
    check(&(&a - T::of(2)), &na.mapv(|x| x - T::of(2)), "- scalar");
    check(&(&a / T::of(2)), &na.mapv(|x| x / T::of(2)), "/ scalar");
    check(&-&a, &na.mapv(|x| -x), "neg");
    // a chain: (a * b + a) / 2 - b, broadcasting at each step
    let chain = (&(&a * &b) + &a) / T::of(2) - &b;
    let want = &zip_ref(&na, &nb, |x, y| x * y + x).mapv(|x| x / T::of(2)) - &nb;
    check(&chain, &want, &what("chain"));
    // comparisons
    type Cmp<T> = (&'static str, Tensor<bool>, fn(T, T) -> bool);
    let cmps: [Cmp<T>; 6] = [
        ("lt", a.lt(&b), |x, y| x < y),
        ("le", a.le(&b), |x, y| x <= y),
        ("gt", a.gt(&b), |x, y| x > y),
        ("ge", a.ge(&b), |x, y| x >= y),
        ("eq", a.eq(&b), |x, y| x == y),
        ("ne", a.ne(&b), |x, y| x != y),
    ];
    for (name, got, f) in cmps {
        check_plain(&got, &zip_ref(&na, &nb, f), &what(name));
    }
    // select with a mask of a third compatible shape
    let mask = a.gt(&Tensor::scalar(T::of(0)));
    let mask_a = na.mapv(|x| x > T::of(0));
    let sel = Tensor::select(&mask, &b, &(&a * T::of(10)));
    let a10 = na.mapv(|x| x * T::of(10));
    let shape = broadcast_ref(sa, sb).unwrap();
    let m = mask_a.broadcast(shape.clone()).unwrap();
    let x = nb.broadcast(shape.clone()).unwrap();
    let y = a10.broadcast(shape).unwrap();
    let want = Zip::from(&m)
        .and(&x)
        .and(&y)
        .map_collect(|&m, &x, &y| if m { x } else { y });
    check(&sel, &want, &what("select"));
}

fn reduce_case<T: Elem>(shape: &[usize], data: &[i32]) {
    let (t, a) = both::<T>(shape, data);
    for k in 0..shape.len() {
        let ax = Axis(k);
        let w = |x: &str| format!("{x}({k}) of {shape:?}");
        let sum = a.sum_axis(ax);
        let prod = a.fold_axis(ax, <T as Elem>::of(1), |&p, &x| p * x);
        let min = a.fold_axis(ax, T::MIN_ID, |&m, &x| if x < m { x } else { m });
        let max = a.fold_axis(ax, T::MAX_ID, |&m, &x| if x > m { x } else { m });
        let argmax = a.map_axis(ax, |lane| {
            let mut best = 0;
            for (i, &x) in lane.iter().enumerate() {
                if x > lane[best] {
                    best = i;
                }
            }
            best as u64
        });
        check(&t.sum_axis(k), &sum, &w("sum_axis"));
        check(&t.prod_axis(k), &prod, &w("prod_axis"));
        check(&t.min_axis(k), &min, &w("min_axis"));
        check(&t.max_axis(k), &max, &w("max_axis"));
        // argmax along an empty axis has no index to give: an error, as in NumPy
        let empty_axis = shape[k] == 0;
        if empty_axis {
            let e = t.try_argmax_axis(k).expect_err("an error").to_string();
            assert!(e.contains("empty"), "{}: {e}", w("argmax_axis"));
            assert!(t.try_argmax_axis_keepdim(k).is_err());
        } else {
            check_plain(&t.argmax_axis(k), &argmax, &w("argmax_axis"));
        }
        check(
            &t.sum_axis_keepdim(k),
            &sum.insert_axis(ax),
            &w("sum_axis_keepdim"),
        );
        check(
            &t.prod_axis_keepdim(k),
            &prod.insert_axis(ax),
            &w("prod_axis_keepdim"),
        );
        check(
            &t.min_axis_keepdim(k),
            &min.insert_axis(ax),
            &w("min_axis_keepdim"),
        );
        check(
            &t.max_axis_keepdim(k),
            &max.insert_axis(ax),
            &w("max_axis_keepdim"),
        );
        if !empty_axis {
            check_plain(
                &t.argmax_axis_keepdim(k),
                &argmax.insert_axis(ax),
                &w("argmax_axis_keepdim"),
            );
        }
        // a reduction of a lazy view
        let flipped = (&t - T::of(1)).flip(k);
        let mut fa = a.mapv(|x| x - T::of(1));
        fa.invert_axis(ax);
        check(
            &flipped.sum_axis(k),
            &fa.sum_axis(ax),
            &w("sum_axis of a flipped view"),
        );
        if k + 1 < shape.len() {
            check(
                &flipped.max_axis(k + 1),
                &fa.fold_axis(Axis(k + 1), T::MAX_ID, |&m, &x| if x > m { x } else { m }),
                &w("max_axis(k + 1) of a flipped view"),
            );
        }
    }
    // of all elements
    let n = a.len();
    let sum = a.sum();
    assert!(T::same(t.sum().item(), sum), "sum of {shape:?}");
    let min = a.fold(T::MIN_ID, |m, &x| if x < m { x } else { m });
    let max = a.fold(T::MAX_ID, |m, &x| if x > m { x } else { m });
    assert!(
        T::same(t.reduce_min().item(), min),
        "reduce_min of {shape:?}"
    );
    assert!(
        T::same(t.reduce_max().item(), max),
        "reduce_max of {shape:?}"
    );
    // products of values in -2..=2 (exact; at most 2^100)
    if n <= 100 {
        let small: Vec<i32> = data.iter().map(|&x| x % 3).collect();
        let (ts, as_) = both::<T>(shape, &small);
        assert!(
            T::same(ts.prod().item(), as_.product()),
            "prod of {shape:?}"
        );
    }
}

macro_rules! typed_tests {
    ($m:ident, $T:ty) => {
        mod $m {
            use super::*;
            type T = $T;

            proptest! {
                #![proptest_config(ProptestConfig::with_cases(cases()))]

                #[test]
                fn views((s, v, p) in with_permutation()) {
                    leak_checked(|| views_case::<T>(&s, &v, &p));
                }

                #[test]
                fn reshape((s, v, p, target) in with_reshape()) {
                    leak_checked(|| reshape_case::<T>(&s, &v, &p, &target));
                }

                #[test]
                fn slices((s, v, args) in with_slice()) {
                    leak_checked(|| slice_case::<T>(&s, &v, &args));
                }

                #[test]
                fn broadcast_to(
                    (target, (src, v)) in shape_strategy()
                        .prop_flat_map(|t| (Just(t.clone()), derived(t).prop_flat_map(data_for)))
                ) {
                    leak_checked(|| broadcast_to_case::<T>(&target, &src, &v));
                }

                #[test]
                fn concat((axis, parts) in concat_parts()) {
                    leak_checked(|| concat_case::<T>(axis, &parts));
                }

                #[test]
                fn stack((axis, parts) in stack_parts()) {
                    leak_checked(|| stack_case::<T>(axis, &parts));
                }

                #[test]
                fn elementwise((a, b) in broadcast_pair()) {
                    leak_checked(|| binary_case::<T>(&a, &b));
                }

                #[test]
                fn reductions((s, v) in shaped()) {
                    leak_checked(|| reduce_case::<T>(&s, &v));
                }
            }
        }
    };
}

typed_tests!(i32_data, i32);
typed_tests!(f32_data, f32);

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases()))]

    /// `%` with broadcasting: Rust's truncated remainder, for i32 and f32.
    #[test]
    fn remainder((a, b) in broadcast_pair()) {
        leak_checked(|| {
            let nz: Vec<i32> = b.1.iter().map(|&x| if x == 0 { -4 } else { x }).collect();
            let (x, nx) = both::<i32>(&a.0, &a.1);
            let (y, ny) = both::<i32>(&b.0, &nz);
            check(&(&x % &y), &zip_ref(&nx, &ny, |p, q| p % q), "%");
            check(&(&x % 4), &nx.mapv(|p| p % 4), "% scalar");
            // floats: Rust's `%` (fmod), exact on integral values
            let (x, nx) = both::<f32>(&a.0, &a.1);
            let (y, ny) = both::<f32>(&b.0, &nz);
            check(&(&x % &y), &zip_ref(&nx, &ny, |p, q| p % q), "% (f32)");
            check(&(&x % 4.0), &nx.mapv(|p| p % 4.0), "% scalar (f32)");
        });
    }

    /// Float-only operations: means, `map`, casts.
    #[test]
    fn float_ops((s, v) in shaped()) {
        leak_checked(|| {
            let (t, a) = both::<f32>(&s, &v);
            for k in 0..s.len() {
                let want = a.mean_axis(Axis(k)).unwrap_or_else(|| {
                    let mut out = s.clone();
                    out.remove(k);
                    ArrayD::from_elem(IxDyn(&out), f32::NAN)
                });
                check(&t.mean_axis(k), &want, &format!("mean_axis({k}) of {s:?}"));
                check(
                    &t.mean_axis_keepdim(k),
                    &want.insert_axis(Axis(k)),
                    &format!("mean_axis_keepdim({k}) of {s:?}"),
                );
            }
            let mean = a.mean().unwrap_or(f32::NAN);
            assert!(f32::same(t.mean().item(), mean), "mean of {s:?}");
            check(
                &t.map(|x| (x * x + 1.0).sqrt()),
                &a.mapv(|x| (x * x + 1.0).sqrt()),
                "map sqrt",
            );
            check(&t.cast::<i32>(), &a.mapv(|x| x as i32), "cast f32 -> i32");
            let back = t.cast::<i32>().cast::<f32>();
            check(&back, &a, "cast round trip");
            check_plain(&t.cast::<u64>(), &a.mapv(|x| x as u64), "cast f32 -> u64");
        });
    }

    /// Display agrees with ndarray's for small integer tensors (no elision below 500 elements).
    #[test]
    fn display_like_ndarray((s, v) in prop::collection::vec(1usize..=5, 0..=4).prop_flat_map(data_for)) {
        leak_checked(|| {
            let (t, a) = both::<i32>(&s, &v);
            assert_eq!(format!("{t}"), format!("{a}"), "shape {s:?}");
            assert_eq!(format!("{t:?}"), format!("{a}, shape={s:?}"));
        });
    }
}

// ---------------------------------------------------------------------------------------------
// fixed cases
// ---------------------------------------------------------------------------------------------

#[test]
fn constructors() {
    leak_checked(|| {
        assert_eq!(Tensor::<f32>::zeros(&[2, 3]).to_vec(), vec![0.0; 6]);
        assert_eq!(Tensor::<i32>::ones(&[3]).to_vec(), vec![1; 3]);
        let f = Tensor::<i32>::full(7, &[2, 0, 3]);
        assert_eq!(
            (f.shape(), f.len(), f.is_empty()),
            (&[2, 0, 3][..], 0, true)
        );
        assert_eq!(f.to_vec(), Vec::<i32>::new());
        let r0 = Tensor::<f64>::scalar(2.5);
        assert_eq!((r0.ndim(), r0.len(), r0.to_vec()), (0, 1, vec![2.5]));
        assert_eq!(r0.get(&[]).item(), 2.5);
        assert_eq!(Tensor::<i32>::arange(5).to_vec(), vec![0, 1, 2, 3, 4]);
        let eye = Tensor::<f32>::eye(3);
        let want = ndarray::Array2::<f32>::eye(3);
        assert_eq!(eye.shape(), &[3, 3]);
        assert_eq!(eye.to_vec(), want.iter().copied().collect::<Vec<_>>());
        assert_eq!(Tensor::<i32>::eye(0).shape(), &[0, 0]);
        let t = Tensor::from_array(Int32::arange(6), &[3, 2]);
        assert_eq!(t.get(&[2, 1]).item(), 5);
        assert_eq!(t.into_array().to_vec(), (0..6).collect::<Vec<_>>());
    });
}

// `s![3..0;-1]` is NumPy's `[3:0:-1]`; clippy reads `3..0` as an empty Rust range.
#[allow(clippy::reversed_empty_ranges)]
#[test]
fn python_slicing_examples() {
    leak_checked(|| {
        let v = Tensor::<i32>::arange(6);
        let cases: Vec<(Vec<SliceArg>, Vec<i32>)> = vec![
            (kiln::s![..;-1].to_vec(), vec![5, 4, 3, 2, 1, 0]),
            (kiln::s![3..0;-1].to_vec(), vec![3, 2, 1]),
            (kiln::s![3..;-1].to_vec(), vec![3, 2, 1, 0]),
            (kiln::s![..2;-1].to_vec(), vec![5, 4, 3]),
            (kiln::s![-1..-4;-1].to_vec(), vec![5, 4, 3]),
            (kiln::s![-2..].to_vec(), vec![4, 5]),
            (kiln::s![1..-1;2].to_vec(), vec![1, 3]),
            (kiln::s![6..;-2].to_vec(), vec![5, 3, 1]),
            (kiln::s![0..6;-1].to_vec(), vec![]),
            (kiln::s![4..2].to_vec(), vec![]),
            (kiln::s![..=2].to_vec(), vec![0, 1, 2]),
        ];
        for (args, want) in cases {
            assert_eq!(v.slice(&args).to_vec(), want, "{args:?}");
            let raw: Vec<i32> = (0..6).collect();
            assert_eq!(
                slice_ref(&raw, &[6], &args).unwrap().1,
                want,
                "reference {args:?}"
            );
        }
        // an index drops its axis
        let m = Tensor::<i32>::arange(12).reshape(&[3, 4]);
        let r = m.slice(kiln::s![-1, ..;-1]);
        assert_eq!((r.shape(), r.to_vec()), (&[4][..], vec![11, 10, 9, 8]));
        let r = m.slice(kiln::s![1..3, ..;2]);
        assert_eq!((r.shape(), r.to_vec()), (&[2, 2][..], vec![4, 6, 8, 10]));
        let e = m.slice(kiln::s![1, 2]);
        assert_eq!((e.shape(), e.to_vec()), (&[][..], vec![6]));
    });
}

#[test]
fn broadcasting_table() {
    leak_checked(|| {
        let table: [(&[usize], &[usize], &[usize]); 6] = [
            (&[3, 4], &[4], &[3, 4]),
            (&[3, 1], &[1, 4], &[3, 4]),
            (&[], &[2, 3], &[2, 3]),
            (&[2, 1, 3], &[4, 1], &[2, 4, 3]),
            (&[0, 1], &[1, 5], &[0, 5]),
            (&[1], &[], &[1]),
        ];
        for (sa, sb, want) in table {
            assert_eq!(broadcast_shapes(sa, sb).unwrap(), want);
            assert_eq!(broadcast_shapes(sb, sa).unwrap(), want);
            let da: Vec<i32> = (0..numel(sa) as i32).collect();
            let db: Vec<i32> = (0..numel(sb) as i32).map(|x| 10 * x).collect();
            let (a, na) = both::<i32>(sa, &da);
            let (b, nb) = both::<i32>(sb, &db);
            let got = &a + &b;
            assert_eq!(got.shape(), want, "{sa:?} + {sb:?}");
            check(&got, &(&na + &nb), &format!("{sa:?} + {sb:?}"));
            check(&(&b * &a), &(&nb * &na), &format!("{sb:?} * {sa:?}"));
        }
        // incompatible shapes: an error (or a panic) naming both
        let e = broadcast_shapes(&[3, 4], &[2, 4]).unwrap_err().to_string();
        assert!(e.contains("[3, 4]") && e.contains("[2, 4]"), "{e}");
        let a = Tensor::<f32>::zeros(&[3, 4]);
        let b = Tensor::<f32>::ones(&[2, 4]);
        let e = a
            .zip_with(&b, |x, y| x + y)
            .expect_err("an error")
            .to_string();
        assert!(e.contains("[3, 4]") && e.contains("[2, 4]"), "{e}");
        let m = panic_message(AssertUnwindSafe(|| {
            let _ = &a + &b;
        }));
        assert!(m.contains("[3, 4]") && m.contains("[2, 4]"), "{m}");
        let m = panic_message(AssertUnwindSafe(|| {
            let _ = a.lt(&b);
        }));
        assert!(m.contains("[3, 4]") && m.contains("[2, 4]"), "{m}");
        let m = panic_message(AssertUnwindSafe(|| {
            let _ = Tensor::select(&a.lt(&a), &a, &b);
        }));
        assert!(m.contains("[3, 4]") && m.contains("[2, 4]"), "{m}");
    });
}

#[test]
fn error_messages() {
    leak_checked(|| {
        // element count vs shape
        let e = Tensor::<f32>::try_from_vec(vec![0.0; 11], &[3, 4])
            .expect_err("an error")
            .to_string();
        assert!(e.contains("11") && e.contains("[3, 4]"), "{e}");
        let m = panic_message(|| {
            let _ = Tensor::<f32>::from_vec(vec![0.0; 11], &[3, 4]);
        });
        assert!(m.contains("11") && m.contains("[3, 4]"), "{m}");
        let m = panic_message(|| {
            let _ = Tensor::from_array(Float32::arange(5), &[2, 3]);
        });
        assert!(m.contains('5') && m.contains("[2, 3]"), "{m}");
        let t = Tensor::<f32>::zeros(&[3, 4]);
        // reshape
        let e = t.try_reshape(&[5, 3]).expect_err("an error").to_string();
        assert!(
            e.contains("[3, 4]") && e.contains("[5, 3]") && e.contains("12") && e.contains("15"),
            "{e}"
        );
        let m = panic_message(AssertUnwindSafe(|| {
            let _ = t.reshape(&[5, 3]);
        }));
        assert!(m.contains("[5, 3]"), "{m}");
        // permute
        for bad in [&[0usize, 0][..], &[1], &[0, 2], &[0, 1, 2]] {
            let e = t.try_permute(bad).expect_err("an error").to_string();
            assert!(
                e.contains(&format!("{bad:?}")) && e.contains("rank 2"),
                "{bad:?}: {e}"
            );
        }
        // axes out of range
        type Check = (&'static str, Box<dyn Fn(&Tensor<f32>)>);
        let checks: [Check; 6] = [
            ("sum_axis", Box::new(|t: &Tensor<f32>| drop(t.sum_axis(2)))),
            (
                "max_axis_keepdim",
                Box::new(|t: &Tensor<f32>| drop(t.max_axis_keepdim(5))),
            ),
            (
                "argmax_axis",
                Box::new(|t: &Tensor<f32>| drop(t.argmax_axis(2))),
            ),
            (
                "mean_axis",
                Box::new(|t: &Tensor<f32>| drop(t.mean_axis(3))),
            ),
            ("flip", Box::new(|t: &Tensor<f32>| drop(t.flip(2)))),
            (
                "index_axis",
                Box::new(|t: &Tensor<f32>| drop(t.index_axis(2, 0))),
            ),
        ];
        for (what, f) in checks {
            let m = panic_message(AssertUnwindSafe(|| f(&t)));
            assert!(m.contains("axis") && m.contains("rank 2"), "{what}: {m}");
        }
        let m = panic_message(AssertUnwindSafe(|| drop(t.unsqueeze(3))));
        assert!(m.contains("axis 3"), "{m}");
        // slices out of range name the axis
        let e = t
            .try_slice(kiln::s![.., 5..])
            .expect_err("an error")
            .to_string();
        assert!(e.contains("axis 1") && e.contains('5'), "{e}");
        let e = t.try_slice(kiln::s![3]).expect_err("an error").to_string();
        assert!(e.contains("axis 0") && e.contains('3'), "{e}");
        let e = t.try_slice(kiln::s![-4]).expect_err("an error").to_string();
        assert!(e.contains("axis 0"), "{e}");
        let e = t
            .try_slice(kiln::s![..;0])
            .expect_err("an error")
            .to_string();
        assert!(e.contains("step 0") && e.contains("axis 0"), "{e}");
        let e = t
            .try_slice(kiln::s![.., .., ..])
            .expect_err("an error")
            .to_string();
        assert!(e.contains("rank 2"), "{e}");
        let m = panic_message(AssertUnwindSafe(|| drop(t.slice(kiln::s![.., -5..]))));
        assert!(m.contains("axis 1"), "{m}");
        // get
        let e = t.try_get(&[3, 0]).expect_err("an error").to_string();
        assert!(e.contains("axis 0") && e.contains('3'), "{e}");
        assert!(t.try_get(&[0]).is_err());
        // broadcast_to, concat
        let e = t
            .try_broadcast_to(&[4, 3])
            .expect_err("an error")
            .to_string();
        assert!(e.contains("[3, 4]") && e.contains("[4, 3]"), "{e}");
        let e = Tensor::try_concat(&[t.clone(), Tensor::zeros(&[2, 3])], 0)
            .expect_err("an error")
            .to_string();
        assert!(e.contains("[2, 3]") && e.contains("[3, 4]"), "{e}");
        assert!(Tensor::<f32>::try_concat(&[], 0).is_err());
        assert!(Tensor::try_concat(&[t.clone(), Tensor::zeros(&[3])], 0).is_err());
        assert!(Tensor::try_concat(std::slice::from_ref(&t), 2).is_err());
        // rank over 8
        assert!(Tensor::<f32>::try_from_vec(vec![0.0], &[1; 9]).is_err());
    });
}

#[test]
fn view_chain_is_one_kernel() {
    leak_checked(|| {
        let x = Tensor::<f32>::arange(12).reshape(&[3, 4]);
        let y = (&x * 2.0 + 1.0)
            .transpose()
            .slice(kiln::s![1.., ..;-1])
            .map(|a| a.sqrt());
        let (_, d) = delta(|| y.eval().clone());
        assert_eq!(d.launches, 1, "{d:?}");
        let want: Vec<f32> = [19.0f32, 11.0, 3.0, 21.0, 13.0, 5.0, 23.0, 15.0, 7.0]
            .iter()
            .map(|v| v.sqrt())
            .collect();
        assert_eq!(y.shape(), &[3, 3]);
        assert_eq!(y.to_vec(), want);
        // the oracle agrees
        let a =
            ndarray::Array::from_shape_vec((3, 4), (0..12).map(|v| v as f32).collect()).unwrap();
        let mut o = (&a * 2.0 + 1.0).t().slice(ndarray::s![1.., ..]).to_owned();
        o.invert_axis(Axis(1));
        let o = o.mapv(f32::sqrt);
        assert_eq!(y.to_vec(), o.iter().copied().collect::<Vec<_>>());
    });
}

#[test]
fn display() {
    leak_checked(|| {
        let t = Tensor::<i32>::arange(6).reshape(&[2, 3]);
        assert_eq!(format!("{t}"), "[[0, 1, 2],\n [3, 4, 5]]");
        assert_eq!(format!("{t:?}"), "[[0, 1, 2],\n [3, 4, 5]], shape=[2, 3]");
        let f = Tensor::<f32>::arange(4).reshape(&[2, 2]) * 0.5;
        // elements print with `Display`, as in ndarray
        assert_eq!(format!("{f}"), "[[0, 0.5],\n [1, 1.5]]");
        // like ndarray, only tensors of more than 500 elements are shortened
        let ten = Tensor::<i32>::arange(10);
        assert_eq!(format!("{ten}"), "[0, 1, 2, 3, 4, 5, 6, 7, 8, 9]");
        assert_eq!(
            format!("{ten:?}"),
            "[0, 1, 2, 3, 4, 5, 6, 7, 8, 9], shape=[10]"
        );
        let nd = ndarray::Array1::from((0..10).collect::<Vec<i32>>());
        assert_eq!(format!("{ten}"), format!("{nd}"));
        let long = Tensor::<i32>::arange(1000);
        let nd = ndarray::Array1::from((0..1000).collect::<Vec<i32>>());
        assert_eq!(format!("{long}"), format!("{nd}"));
        let three = Tensor::<i32>::arange(8).reshape(&[2, 2, 2]);
        assert_eq!(
            format!("{three}"),
            "[[[0, 1],\n  [2, 3]],\n\n [[4, 5],\n  [6, 7]]]"
        );
        assert_eq!(format!("{}", Tensor::<i32>::scalar(5)), "5");
        // empty tensors print their nesting like ndarray
        for shape in [vec![2usize, 0], vec![0, 3], vec![1, 0, 2], vec![0]] {
            let t = Tensor::<i32>::zeros(&shape);
            let a = ndarray::ArrayD::<i32>::zeros(ndarray::IxDyn(&shape));
            assert_eq!(format!("{t}"), format!("{a}"), "shape {shape:?}");
        }
    });
}

/// Large tensors are shortened exactly as ndarray shortens them.
#[test]
fn display_of_large_tensors_matches_ndarray() {
    leak_checked(|| {
        for shape in [
            vec![1000usize],
            vec![30, 40],
            vec![8, 9, 10],
            vec![2, 600],
            vec![600, 2],
        ] {
            let n: usize = shape.iter().product();
            let data: Vec<i32> = (0..n as i32).collect();
            let t = Tensor::from_slice(&data, &shape);
            let a = ndarray::ArrayD::from_shape_vec(ndarray::IxDyn(&shape), data).unwrap();
            assert_eq!(format!("{t}"), format!("{a}"), "shape {shape:?}");
        }
    });
}
